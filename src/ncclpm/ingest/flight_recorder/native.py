"""Pickle dumps read by the C decoder (`_frdecode`) straight into the compact columns of a whole load.

`NativeLoad` holds one `_frdecode.Job`: `decode` reads a dump without the GIL (so `decode.decode_all` runs it on
several threads), `add` (in dump order) appends its rows to the load's, and `frame` turns the rows added since the
last call into one compact polars frame.  Text is decoded once per distinct string of the load (the dictionary
becomes Categorical; `op`, `state` are derived once per new string with the Python path's `derive`), nested values
are made into Python objects once per distinct value (keyed by their `repr`, the keys `_Interner` uses), and no
Python object is made per entry.  The decoder reads only what it can read exactly as the scan + restricted
unpickler + `decode` do; anything else (JSON, `columns="all"`, other opcodes or types, a file name without a rank,
what the scan refuses) goes to the Python path, which gives the same table, dictionaries and warnings (the tests
compare both on every dump they have).  ``NCCLPM_FR_PYTHON=1`` in the environment forces the Python path.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import polars as pl

from ncclpm.ingest.flight_recorder.values import _Interner

try:  # built by hatch_build.py when a C compiler is there
    from ncclpm.ingest.flight_recorder import _frdecode  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - depends on the install
    _frdecode = None

_INTS = ("record_id", "pg_id", "collective_seq_id", "time_created_ns")
_BOOLS = ("is_p2p", "retired")
_NESTED = ("input_sizes", "input_dtypes", "frames")
_KEPT_AS_GIVEN = ("rank", "_id", "time_created_ns")  # the decoder's columns no cast or gather below copies
_UINT_TOP = {pl.UInt16: 2**16 - 1}  # the narrow types of ids (`NativeLoad.narrow`) and their largest value


def enabled(full: bool) -> bool:
    """Whether this load may use the C decoder (the analysis columns only; env var NCCLPM_FR_PYTHON=1: never)."""
    return _frdecode is not None and hasattr(_frdecode, "Job") and not full and not os.environ.get("NCCLPM_FR_PYTHON")


def release() -> None:
    """Hand the heap's free pages back (after the last dump)."""
    if _frdecode is not None:
        _frdecode.release()


class NativeLoad:
    """The C decoder's side of one load: its dictionaries of distinct values and the rows not yet framed."""

    def __init__(
        self,
        keep_frames: int,
        interners: dict[str, _Interner],
        names: list[str],
        derive: Callable[[pl.DataFrame], pl.DataFrame],
        schema: pl.Schema,
        rows_hint: int = 0,
        narrow: dict[str, pl.DataType] | None = None,
    ) -> None:
        self.job = _frdecode.Job(keep_frames, rows_hint)
        self.interners, self.derive, self.schema = interners, derive, schema
        self.narrow = narrow or {}  # column -> the narrower type the load's chunks hold it in where it fits
        self.sources = pl.Series("source", names, dtype=pl.Categorical)  # by uid: the item's position
        self.words = self._derived([])  # the load's distinct strings, by code
        self.named: list[bool] = []
        self.ids: dict[str, list[int | None]] = {k: [] for k in _NESTED}  # the load's code -> the interner's id

    def decode(self, data: bytes) -> tuple | str:
        """(entries, newest time, newest record id, metadata, the decoded rows) or why the dump is for the Python
        path. Runs without the GIL: threads may decode dumps at once."""
        if data[:1] != b"\x80":
            return "not a pickle"
        return self.job.decode(data)

    def add(self, dumped: object, rank: int, uid: int) -> None:
        self.job.add(dumped, rank, uid)

    @property
    def rows(self) -> int:
        return self.job.rows

    def release(self) -> None:
        self.job.release()

    def frame(self) -> pl.DataFrame:
        """The rows added since the last call, in the compact schema's types (with ``_id``)."""
        got = self.job.take()
        self._learn(got["strings"])
        # the decoder's Columns are imported without a copy (the Arrow C data interface)
        cols: dict[str, pl.Series] = {k: pl.Series(got[k]).alias(k) for k in ("rank", "_id", *_INTS)}
        for k in _KEPT_AS_GIVEN:  # copied into polars' memory: the C heap's buffers, kept for the whole load beside
            cols[k] = cols[k] + 0  # the freed ones, had cost ~20 MB more peak RSS at 1024 ranks than this copy
        for k in _BOOLS:
            cols[k] = pl.Series(got[k]).cast(pl.Boolean).alias(k)
        if got["valid"] is not None:  # some values are None (rare): null them
            for k, mask in got["valid"].items():
                keep = pl.Series(mask).cast(pl.Boolean)
                if not keep.all():
                    cols[k] = pl.select(pl.when(keep).then(cols[k])).to_series().alias(k)
        cols["source"] = self.sources.gather(cols["_id"])
        words = pl.concat([self.words, self.words.clear(1)])
        at = {k: pl.Series(got[k]) for k in ("profiling_name", "state", "pg_name", "pg_desc")}
        names = words["pg_name"].cast(pl.Categorical)
        cols["pg_name"] = names.gather(at["pg_name"]).alias("pg_name")
        cols["pg_desc"] = names.gather(at["pg_desc"]).alias("pg_desc")
        cols["op"] = words["op"].cast(pl.Categorical).gather(at["profiling_name"]).alias("op")
        cols["state"] = words["state"].gather(at["state"]).alias("state")
        if pl.Series([*self.named, False]).gather(at["pg_name"]).all():
            cols["group_key"] = cols["pg_name"].alias("group_key")
        else:  # an entry without a pg name (TORCH_DISTRIBUTED_DEBUG=DETAIL): the key needs its pg_id
            rows = pl.DataFrame({"pg_name": words["pg_name"].gather(at["pg_name"]), "pg_id": cols["pg_id"]})
            cols["group_key"] = self.derive(rows)["group_key"].cast(pl.Categorical)
        for k in _NESTED:
            codes, keys, values = got[k]
            ids = self.ids[k]
            if keys:
                # the decoder reads only the shapes the interner accepts, so none of these is malformed
                ids.extend(self.interners[k].add_distinct(keys, values)[0])
            small = self.narrow.get(f"{k}_id")
            fits = max((i for i in ids if i is not None), default=0) <= _UINT_TOP.get(small, -1)
            cols[f"{k}_id"] = pl.Series([*ids, None], dtype=small if fits else pl.UInt32).gather(pl.Series(codes))
        # the counters (the decoder gives them as Int32 where they fit) and ids already in their narrow types stay so
        # (`fr_decode._slim` would cast them to these): a cast to the wide type and back cost ~0.1 s of CPU at 2M
        # entries
        keep = {k for k, t in self.narrow.items() if k in cols and cols[k].dtype == t}
        types = {k: t for k, t in {**dict(self.schema), "_id": pl.Int64}.items() if k not in keep}
        return pl.DataFrame(cols).select(*self.schema.names(), "_id").cast(types)

    def _derived(self, strings: list[str]) -> pl.DataFrame:
        frame = pl.DataFrame(
            {k: strings for k in ("profiling_name", "state", "pg_name")},
            schema=dict.fromkeys(("profiling_name", "state", "pg_name"), pl.String),
        )
        return self.derive(frame).select("pg_name", "op", "state")

    def _learn(self, strings: list[str]) -> None:
        """The load's new distinct strings: their `op` and `state` derived once each."""
        if strings:
            self.words = pl.concat([self.words, self._derived(strings)])
            self.named.extend(bool(w) for w in strings)
