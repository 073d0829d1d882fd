"""One pickle dump read by the C decoder (`_frdecode`) straight into the compact columns `fr_decode.Chunks` holds.

The decoder walks the opcodes into fixed-width buffers: Int64 values, Booleans, codes into the dump's distinct
strings and codes into its distinct nested values (with their `repr` keys, the keys `_Interner` uses), so no Python
object is made per value.  It reads only what it can read exactly as the restricted unpickler + `fr_decode` do;
anything else (JSON, `columns="all"`, other opcodes or types, a file name without a rank, a dump the scan refuses)
goes to the Python path, which gives the same table, dictionaries and warnings (the tests compare both on every
dump they have).  ``NCCLPM_FR_PYTHON=1`` in the environment forces the Python path.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import polars as pl

from ncclpm.ingest.flight_recorder.scan import Refused, scan

try:  # built by hatch_build.py when a C compiler is there
    from ncclpm.ingest.flight_recorder import _frdecode  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - depends on the install
    _frdecode = None

_INTS = ("record_id", "pg_id", "collective_seq_id", "time_created_ns")
_BOOLS = ("is_p2p", "retired")
_TEXTS = ("profiling_name", "state", "pg_name", "pg_desc")
_NESTED = ("input_sizes", "input_dtypes", "frames")


def enabled(full: bool) -> bool:
    """Whether this load may use the C decoder (the analysis columns only; env var NCCLPM_FR_PYTHON=1: never)."""
    return _frdecode is not None and not full and not os.environ.get("NCCLPM_FR_PYTHON")


def release() -> None:
    """Free the decoder's working arrays (kept between dumps) and the heap's free pages (after the last dump)."""
    if _frdecode is not None:
        _frdecode.release()


def decode(data: bytes, keep_frames: int) -> tuple | str:
    """The decoder's buffers for one dump, or why it is left to the Python path (`scan` proves it plain first)."""
    if _frdecode is None or data[:1] != b"\x80":
        return "not a pickle"
    try:
        scan(data)
    except Refused as exc:
        return str(exc)
    return _frdecode.decode(data, keep_frames)


def frame(got: tuple, interners: dict, derive: Callable[[pl.DataFrame], pl.DataFrame]) -> tuple:
    """(the dump's columns in their compact types, but for rank/source/_id; the nested columns with a value of the
    wrong shape: the interner's verdict, as for the Python path).  Text is decoded once per distinct string: the
    dump's dictionary becomes Categorical (`op`, `state` are derived on it by the Python path's `derive`) and is
    gathered by the codes, so no String column of the dump's length is built."""
    n, _, _, _, ints, bools, valid, strings, codes, nested = got
    cols: dict[str, pl.Series] = {}
    whole = pl.Series(memoryview(ints).cast("q"), dtype=pl.Int64)
    for j, k in enumerate(_INTS):
        cols[k] = whole.slice(j * n, n).alias(k)
    flags = pl.Series(memoryview(bools).cast("B")).cast(pl.Boolean)
    for j, k in enumerate(_BOOLS):
        cols[k] = flags.slice(j * n, n).alias(k)
    if valid is not None:  # some values are None (rare): null them
        mask = pl.Series(memoryview(valid).cast("B")).cast(pl.Boolean)
        for j, k in enumerate((*_INTS, *_BOOLS)):
            keep = mask.slice(j * n, n)
            if not keep.all():
                cols[k] = pl.select(pl.when(keep).then(cols[k])).to_series().alias(k)
    text = pl.Series(memoryview(codes).cast("I"))
    at = {k: text.slice(j * n, n) for j, k in enumerate(_TEXTS)}  # code len(strings) = None
    words = derive(pl.DataFrame({k: [*strings, None] for k in ("profiling_name", "state", "pg_name")}, strict=False))
    for k in ("pg_name", "pg_desc"):
        cols[k] = words["pg_name"].cast(pl.Categorical).gather(at[k]).alias(k)
    cols["op"] = words["op"].cast(pl.Categorical).gather(at["profiling_name"]).alias("op")
    cols["state"] = words["state"].gather(at["state"]).alias("state")
    named = pl.Series([bool(w) for w in strings] + [False]).gather(at["pg_name"])
    if named.all():
        cols["group_key"] = cols["pg_name"].alias("group_key")
    else:  # an entry without a pg name (TORCH_DISTRIBUTED_DEBUG=DETAIL): the key needs its pg_id
        rows = pl.DataFrame({"pg_name": words["pg_name"].gather(at["pg_name"]), "pg_id": cols["pg_id"]})
        cols["group_key"] = derive(rows)["group_key"].cast(pl.Categorical)
    bad = []
    for k, (keys, values, ids) in zip(_NESTED, nested, strict=True):
        remap, malformed = interners[k].add_distinct(keys, values)
        cols[f"{k}_id"] = pl.Series(f"{k}_id", [*remap, None], dtype=pl.UInt32).gather(
            pl.Series(memoryview(ids).cast("I"))
        )
        if malformed:
            bad.append(k)
    return cols, bad
