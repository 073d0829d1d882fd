"""One pickle dump read by the C decoder (`_frdecode`) straight into the frame `fr_decode.Chunks` expects.

The decoder walks the opcodes into fixed-width buffers: Int64 values, Booleans, codes into the dump's distinct
strings and codes into its distinct nested values (with their `repr` keys, the keys `_Interner` uses), so no Python
object is made per value.  It reads only what it can read exactly as the restricted unpickler + `fr_decode` do;
anything else (JSON, `columns="all"`, other opcodes or types, a file name without a rank, a dump the scan refuses)
goes to the Python path, which gives the same table, dictionaries and warnings (the tests compare both on every
dump they have).  ``NCCLPM_FR_PYTHON=1`` in the environment forces the Python path.
"""

from __future__ import annotations

import os

import polars as pl

from ncclpm.ingest.fr_scan import Refused, scan

try:  # built by hatch_build.py when a C compiler is there
    from ncclpm.ingest import _frdecode  # type: ignore[attr-defined]
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
    """Free the decoder's working arrays (kept between dumps)."""
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


def frame(got: tuple, interners: dict) -> tuple[dict[str, pl.Series], list[str]]:
    """The dump's columns as `Chunks._raw` builds them (text as String), and the nested columns with a value of the
    wrong shape (the interner's verdict, as for the Python path)."""
    n, _, _, _, ints, bools, valid, strings, codes, nested = got
    data: dict[str, pl.Series] = {}
    whole = pl.Series(memoryview(ints).cast("q"), dtype=pl.Int64)
    for j, k in enumerate(_INTS):
        data[k] = whole.slice(j * n, n).alias(k)
    flags = pl.Series(memoryview(bools).cast("B")).cast(pl.Boolean)
    for j, k in enumerate(_BOOLS):
        data[k] = flags.slice(j * n, n).alias(k)
    if valid is not None:  # some values are None (rare): null them
        mask = pl.Series(memoryview(valid).cast("B")).cast(pl.Boolean)
        for j, k in enumerate((*_INTS, *_BOOLS)):
            keep = mask.slice(j * n, n)
            if not keep.all():
                data[k] = pl.select(pl.when(keep).then(data[k])).to_series().alias(k)
    words = pl.Series([*strings, None], dtype=pl.String)  # code len(strings) = None
    text = pl.Series(memoryview(codes).cast("I"))
    for j, k in enumerate(_TEXTS):
        data[k] = words.gather(text.slice(j * n, n)).alias(k)
    bad = []
    for k, (keys, values, ids) in zip(_NESTED, nested, strict=True):
        remap, malformed = interners[k].add_distinct(keys, values)
        data[f"{k}_id"] = pl.Series([*remap, None], dtype=pl.UInt32).gather(pl.Series(memoryview(ids).cast("I")))
        data[f"{k}_id"] = data[f"{k}_id"].alias(f"{k}_id")
        if malformed:
            bad.append(k)
    return data, bad
