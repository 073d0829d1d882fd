"""Flight-recorder dumps -> compact polars columns, one dump at a time.

Used by `ncclpm.ingest.flight_recorder.load` (see its docstring for the normalisation rules).  Each dump is
read, checked and decoded on its own: by the C decoder when it is built (`fr_native`: fixed-width buffers, no
Python object per value), else (and for anything it leaves, JSON included) here, into column lists whose Python
objects are dropped before the next dump is read; every ~16k entries the dumps' rows become one compact polars
chunk.  So memory holds the columns plus one dump, whatever the number of ranks.

Safety, by construction: a pickle is first scanned opcode by opcode (`fr_scan`: no globals, a bounded
expansion counting references, bounded depth and memo indices, no cycles) and only then decoded, by
`_NoGlobalsUnpickler` (which refuses globals too).  JSON has no references; its nesting is bounded by the
parser's recursion limit.  Then every value is checked against the schema before polars sees it: a
nested value of the wrong shape becomes null (the dump is named in a warning), an entry with wrongly
typed scalars skips its dump, wrongly typed metadata (``pg_config``, ``pg_status``, versions) is
ignored with a warning naming the dump and the field, and the rest of the dump is used.
"""

from __future__ import annotations

import gc
import io
import json
import pickle
import re
import sys
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import chain
from operator import itemgetter

import polars as pl

from ncclpm.ingest.flight_recorder import native as fr_native
from ncclpm.ingest.flight_recorder.meta import Meta, parse_meta
from ncclpm.ingest.flight_recorder.scan import Refused, scan
from ncclpm.ingest.flight_recorder.values import _Interner, _ok_int
from ncclpm.tables.fr import (  # noqa: F401  (re-exported: the loader, bench and tests read them here)
    COMPACT_ANALYSIS_SCHEMA,
    COMPACT_ENTRIES_SCHEMA,
    FR_ANALYSIS_SCHEMA,
    FR_ENTRIES_SCHEMA,
    NESTED,
    STATES,
    compact_schema,
)
from ncclpm.tables.schema import empty

MAX_DUMP_BYTES = 512 * 1024 * 1024
_SCALAR_TYPES = {
    "record_id": pl.Int64,
    "pg_id": pl.Int64,
    "collective_seq_id": pl.Int64,
    "p2p_seq_id": pl.Int64,
    "op_id": pl.Int64,
    "profiling_name": pl.String,
    "is_p2p": pl.Boolean,
    "state": pl.String,
    "retired": pl.Boolean,
    "time_created_ns": pl.Int64,
    "time_discovered_started_ns": pl.Int64,
    "time_discovered_completed_ns": pl.Int64,
    "timeout_ms": pl.Int64,
    "duration_ms": pl.Float64,
    "thread_name": pl.String,
}
_ANALYSIS_SCALARS = ("record_id", "pg_id", "collective_seq_id", "profiling_name", "is_p2p", "state", "retired")
_ANALYSIS_SCALARS += ("time_created_ns",)
_NESTED_ALL = NESTED
_NESTED_ANALYSIS = ("input_sizes", "input_dtypes", "frames")
_CHUNK_ROWS = 16384  # ~8 dumps: their objects (pinned by the column lists) stay a few MB
# Counters and ids that fit 32 bits in any real job (per-process and per-group counts of collectives, group ids), and
# ids into the load's distinct nested values, which number far fewer than 65536 in most jobs: a chunk holds them in
# these narrower types (-2 MB per column at 512k entries) unless one of its values does not fit; the load's column is
# then the wide type (the chunks are concatenated with supercasting), and `FRLoad.expand` gives them back as their
# schema has them either way.
NARROW = {"record_id": pl.Int32, "pg_id": pl.Int32, "collective_seq_id": pl.Int32} | {
    f"{k}_id": pl.UInt16 for k in NESTED
}
_RANGE = {pl.Int32: (-(2**31), 2**31 - 1), pl.UInt16: (0, 2**16 - 1)}


class _NoGlobalsUnpickler(pickle.Unpickler):
    """Unpickler that refuses every global (class, function) reference."""

    def find_class(self, module: str, name: str) -> object:
        raise pickle.UnpicklingError(f"refused global {module}.{name}")


def _safe_loads(data: bytes) -> object:
    scan(data)
    return _NoGlobalsUnpickler(io.BytesIO(data)).load()


def rank_from_name(name: str) -> int | None:
    base = re.split(r"[\\/]", name)[-1]
    base = re.sub(r"\.(json|pkl|pickle)$", "", base, flags=re.I)
    nums = re.findall(r"\d+", base)
    if not nums or len(nums[-1]) > 10:
        return None
    rank = int(nums[-1])
    return rank if rank < 2**31 else None  # a rank past Int32 is no rank


def version_tuple(version: str) -> tuple[int, ...]:
    """'2.10' -> (2, 10): compare FR format versions numerically."""
    return tuple(int(x) for x in re.findall(r"\d{1,9}", str(version)[:100]))


# ---- one dump -------------------------------------------------------------------------------------------


@dataclass
class Dump:
    source: str
    rank: int
    fmt: str
    meta: Meta
    n: int = 0
    newest: tuple[int, int] = (-1, -1)
    uid: int = 0
    used: bool = True
    bad: bool = False
    note: str = ""
    cols: dict = field(default_factory=dict, repr=False)  # column lists until its chunk is built


def _decode(name: str, data: bytes) -> tuple[object, str, str | None]:
    """Return (decoded object, format, warning)."""
    if len(data) > MAX_DUMP_BYTES:
        return None, "?", f"{name}: skipped, {len(data)} bytes is over the {MAX_DUMP_BYTES} byte cap"
    if not data.strip():
        return None, "?", f"{name}: skipped, empty file"
    fmt = "pickle" if data[:1] == b"\x80" else "json"
    try:
        obj = _safe_loads(data) if fmt == "pickle" else json.loads(data)
    except (Refused, pickle.UnpicklingError) as exc:
        return None, fmt, f"{name}: refused/corrupt pickle ({exc})"
    except RecursionError:
        return None, fmt, f"{name}: skipped, nesting too deep"
    except Exception as exc:  # any decode failure only skips this file
        return None, fmt, f"{name}: unreadable {fmt} ({type(exc).__name__}: {str(exc)[:120]})"
    return obj, fmt, None


def _pg_names(pg: list) -> tuple[list, list]:
    """(names, descs) from process_group tuples/lists; malformed values become None."""
    try:
        names, descs = list(map(itemgetter(0), pg)), list(map(itemgetter(1), pg))
    except (TypeError, IndexError, KeyError):
        ok = [p if isinstance(p, list | tuple) else () for p in pg]
        names, descs = [p[0] if p else None for p in ok], [p[1] if len(p) > 1 else None for p in ok]
    if not all(type(x) is str or x is None for x in chain(names, descs)):
        names = [x if type(x) is str else None for x in names]
        descs = [x if type(x) is str else None for x in descs]
    return names, descs


def _tail_frames(frames: list, retired: list, state: list, keep: int) -> list:
    """Stacks of the newest `keep` entries and of every entry not retired/completed; None elsewhere."""
    n = len(frames)
    if keep == 0:
        return [None] * n
    if keep < 0 or n <= keep:
        return frames
    cut = n - keep
    return [
        f if i >= cut or not (r is True or s == "completed") else None
        for i, (f, r, s) in enumerate(zip(frames, retired, state, strict=True))
    ]


def _columns(entries: list[dict], keep_frames: int, scalars: tuple[str, ...], nested: tuple[str, ...]) -> dict:
    wanted = (*scalars, "process_group", *nested)
    ends = (entries[0], entries[-1]) if entries else ()
    present = [k for k in wanted if any(k in e for e in ends)]
    try:
        if len(present) > 1:
            got = dict(zip(present, zip(*map(itemgetter(*present), entries), strict=True), strict=True))
        else:
            got = {k: [e[k] for e in entries] for k in present}
    except (KeyError, TypeError):  # some entries lack a key: per-entry .get
        got = {k: [e.get(k) for e in entries] for k in present}
    n, none = len(entries), [None] * len(entries)
    cols = {k: got.get(k, none) for k in (*scalars, *nested)}
    cols["pg_name"], cols["pg_desc"] = _pg_names(got.get("process_group", none))
    if "frames" in cols:
        cols["frames"] = _tail_frames(cols["frames"], cols["retired"], cols["state"], keep_frames)
    cols["_n"] = n
    return cols


def read_dump(
    name: str, data: bytes, keep_frames: int, full: bool, shared: dict | None = None
) -> tuple[Dump | None, list[str]]:
    """Decode and check one dump; its entries become column lists (its objects are dropped by the caller)."""
    obj, fmt, warn = _decode(name, data)
    if warn:
        return None, [warn]
    if not isinstance(obj, dict) or not isinstance(obj.get("entries"), list):
        return None, [f"{name}: not a flight-recorder dump (no 'entries' list at top level)"]
    entries = obj["entries"]
    if not all(isinstance(e, dict) for e in entries):
        return None, [f"{name}: skipped, 'entries' holds non-dict items"]
    rank = rank_from_name(name)
    if rank is None:
        return None, [f"{name}: skipped, no rank number in the file name"]
    meta, warnings = _meta(name, obj, shared)
    scalars = tuple(_SCALAR_TYPES) if full else _ANALYSIS_SCALARS
    nested = _NESTED_ALL if full else _NESTED_ANALYSIS
    dump = Dump(name, rank, fmt, meta)
    dump.cols = _columns(entries, keep_frames, scalars, nested)
    if fmt == "json" and (bad := _containers_in(dump.cols, scalars)):
        # a pickle nests at most fr_scan.MAX_DEPTH deep; JSON up to the parser's limit, and polars takes minutes
        # to refuse a 900-deep list where it wants an int (found by the dump_depth fuzz target)
        return None, [*warnings, f"{name}: skipped, entries have unexpected types (a list or dict as {bad})"]
    dump.n = len(entries)
    return dump, warnings


def _meta(name: str, obj: dict, shared: dict | None) -> tuple[Meta, list[str]]:
    meta, problems = parse_meta(obj, shared)
    warnings = [f"{name}: ignored malformed {', '.join(problems)} (wrong type or out of range)"] if problems else []
    ver = version_tuple(meta.version)
    if ver and ver[0] != 2:
        warnings.append(f"{name}: unknown FR format version {meta.version!r}; read as 2.x")
    return meta, warnings


_PLAIN = frozenset({int, float, str, bool, type(None)})


def _containers_in(cols: dict, scalars: tuple[str, ...]) -> str | None:
    """The first scalar column holding something else than a plain value (a list, a dict), else None."""
    return next((k for k in scalars if not set(map(type, cols[k])) <= _PLAIN), None)


@contextmanager
def _no_unraisable_prints() -> Iterator[None]:
    """polars formats a wrong value into its error; an int past Python's 4300-digit str limit (a 2 kB pickle int)
    made that print an 'Exception ignored' traceback on stderr (found by the dump_wrong_metadata fuzz target). The
    build still raises and the dump is still skipped with a warning; only the stray traceback is dropped."""
    hook = sys.unraisablehook
    sys.unraisablehook = lambda _unraisable: None
    try:
        yield
    finally:
        sys.unraisablehook = hook


def _newest(times: list, ids: list) -> tuple[int, int]:
    best = (-1, -1)
    for t, r in zip(times[-64:], ids[-64:], strict=True):
        key = (t if _ok_int(t) else -1, r if _ok_int(r) else -1)
        best = max(best, key)
    return best


# ---- chunks -------------------------------------------------------------------------------------------


def _op(profiling: pl.Expr) -> pl.Expr:
    return profiling.str.replace(r"^[A-Za-z_]+:", "").str.replace(r"\s.*$", "")


class Chunks:
    """Each dump's column lists -> a small polars frame at once (so no Python object outlives its dump); every
    ~_CHUNK_ROWS entries the frames become one normalised, compact chunk."""

    def __init__(self, full: bool) -> None:
        self.full = full
        self.schema = COMPACT_ENTRIES_SCHEMA if full else COMPACT_ANALYSIS_SCHEMA
        self.scalars = {k: t for k, t in _SCALAR_TYPES.items() if full or k in _ANALYSIS_SCALARS}
        self.nested = _NESTED_ALL if full else _NESTED_ANALYSIS
        self.interners = {k: _Interner(k, FR_ENTRIES_SCHEMA[k]) for k in self.nested}
        self.pending: list[pl.DataFrame] = []
        self.rows = 0
        self.frames: list[pl.DataFrame] = []

    def add(self, d: Dump, warnings: list[str]) -> None:
        d.newest = _newest(d.cols.get("time_created_ns") or [], d.cols.get("record_id") or [])
        try:
            with _no_unraisable_prints():
                raw = self._raw(d, warnings)
        except Exception as exc:  # a malformed dump is skipped, not fatal
            warnings.append(f"{d.source}: skipped, entries have unexpected types ({str(exc)[:120]})")
            d.bad, d.used, d.note = True, False, "entries have unexpected types"
            raw = None
        d.cols = {}
        if raw is not None and raw.height:
            self.pending.append(raw)
            self.rows += raw.height
        if self.rows >= _CHUNK_ROWS:
            self.flush()

    def add_frame(self, rows: pl.DataFrame) -> None:
        """Rows the C decoder read, already compact (`fr_native.NativeLoad.frame`)."""
        if rows.height:
            self.pending.append(rows)
            self.rows += rows.height
        if self.rows >= _CHUNK_ROWS:
            self.flush()

    def flush(self) -> None:
        """Raw frames (the Python path's) are normalised a run at a time; compact ones (the C decoder's) are kept;
        the chunk holds the rows in dump order either way."""
        parts: list[pl.DataFrame] = []
        raw: list[pl.DataFrame] = []
        for f in [*self.pending, None]:
            if (f is None or "_raw" not in f.columns) and raw:
                parts.append(_normalise(pl.concat(raw, rechunk=False), self.schema))
                raw = []
            if f is not None:
                (raw if "_raw" in f.columns else parts).append(f)
        if parts:
            # (a frame of the C decoder may hold counters and ids narrower than the Python path's: `_slim` decides)
            self.frames.append(_slim(pl.concat(parts, rechunk=True, how="vertical_relaxed")))
        self.pending, self.rows = [], 0

    def _raw(self, d: Dump, warnings: list[str]) -> pl.DataFrame:
        """One dump's columns as polars (text still String; raises on a wrongly typed scalar)."""
        data = {k: pl.Series(k, d.cols[k], dtype=t, strict=True) for k, t in self.scalars.items()}
        for k in ("pg_name", "pg_desc"):
            data[k] = pl.Series(k, d.cols[k], dtype=pl.String, strict=True)
        bad = []
        for k in self.nested:
            ids, malformed = self.interners[k].add(d.cols[k])
            data[f"{k}_id"] = pl.Series(f"{k}_id", ids, dtype=pl.UInt32)
            if malformed:
                bad.append(k)
        if bad:
            warnings.append(f"{d.source}: malformed {', '.join(bad)} in some entries; shown as missing")
        data = {k: data[k] for k in (*self.scalars, "pg_name", "pg_desc", *(f"{k}_id" for k in self.nested))}
        n = d.n
        data["rank"] = pl.repeat(d.rank, n, dtype=pl.Int32, eager=True).alias("rank")
        data["source"] = pl.repeat(d.source, n, dtype=pl.String, eager=True).alias("source")
        data["_id"] = pl.repeat(d.uid, n, dtype=pl.Int64, eager=True).alias("_id")
        data["_raw"] = pl.repeat(True, n, eager=True).alias("_raw")  # marks it for `_normalise` in `flush`
        return pl.DataFrame(data)


def _slim(chunk: pl.DataFrame) -> pl.DataFrame:
    """The chunk with its `NARROW` columns narrowed where every value fits, and ``group_key`` sharing ``pg_name``'s
    buffer where they are equal (every entry has a pg name: most jobs), instead of a copy of it."""
    narrow = {k: t for k, t in NARROW.items() if k in chunk.columns}
    fits = chunk.select(pl.col(k).is_between(*_RANGE[t]).all() for k, t in narrow.items()).row(0)
    chunk = chunk.cast({k: t for (k, t), ok in zip(narrow.items(), fits, strict=True) if ok})
    if chunk.select(pl.col("group_key").eq_missing(pl.col("pg_name")).all()).item():
        chunk = chunk.with_columns(pl.col("pg_name").alias("group_key"))
    return chunk


def _derive(raw: pl.DataFrame) -> pl.DataFrame:
    """group_key (needs pg_name and pg_id), op (from profiling_name) and state as Enum, where their inputs are."""
    cols = []
    if "pg_id" in raw.columns:
        name = pl.col("pg_name").fill_null("")
        cols.append(pl.when(name != "").then(name).otherwise(pl.format("pg_id:{}", pl.col("pg_id"))).alias("group_key"))
    if "profiling_name" in raw.columns:
        cols.append(_op(pl.col("profiling_name")).alias("op"))
    if "state" in raw.columns:
        cols.append(pl.col("state").cast(pl.Enum(STATES), strict=False))
    return raw.with_columns(cols)


def _normalise(raw: pl.DataFrame, schema: pl.Schema) -> pl.DataFrame:
    out = _derive(raw)
    if "time_started_ns" in schema:
        out = out.with_columns(
            pl.when(pl.col(c) > 0).then(pl.col(c)).alias(t)
            for c, t in (
                ("time_discovered_started_ns", "time_started_ns"),
                ("time_discovered_completed_ns", "time_completed_ns"),
            )
        )
    return out.select(*schema.names(), "_id").cast({**dict(schema), "_id": pl.Int64})


def empty_entries(full: bool) -> pl.DataFrame:
    return empty(COMPACT_ENTRIES_SCHEMA if full else COMPACT_ANALYSIS_SCHEMA)


@dataclass
class Decoded:
    dumps: list[Dump]
    warnings: list[str]
    frames: list[pl.DataFrame]
    values: dict[str, pl.Series]  # nested column name -> its distinct values (index = id)


NATIVE_ROWS = 1 << 17  # rows the C decoder gathers before they become one compact frame (~64 dumps of 2000)
_ROOM_ROWS = 1 << 14  # the C decoder makes room for NATIVE_ROWS + this at once: growing its buffers by copies cost
# more than the rest of adding a dump's rows (0.27 -> 0.15 ms a dump)
_MIN_THREADED = 8  # dumps: below this one thread decodes them (a pool's start costs more)


def _threads(n_items: int) -> int:
    """Threads decoding dumps at once: polars' pool size (`POLARS_MAX_THREADS`, which `triage` sets per worker
    process and a small job sets to 1), at most 4."""
    return 1 if n_items < _MIN_THREADED else max(1, min(4, pl.thread_pool_size()))


def _native_ok(name: str, data: bytes) -> bool:
    return data[:1] == b"\x80" and len(data) <= MAX_DUMP_BYTES and rank_from_name(name) is not None


Item = tuple[str, bytes | Callable[[], bytes]]


def _read(name: str, data: bytes | Callable[[], bytes]) -> bytes | str:
    """The dump's bytes, or a warning when they cannot be read."""
    try:
        return data() if callable(data) else data
    except (OSError, ValueError) as exc:
        return f"{name}: flight-recorder dump unreadable ({exc}) - skipped"


def _in_order(items: list[Item], load: fr_native.NativeLoad | None) -> Iterator[tuple[int, str, bytes | str, object]]:
    """(uid, name, bytes or a read warning, what the C decoder made of it or None) for each item, in order. The bytes
    are read here, in order; the decoding (no GIL) runs a few dumps ahead on `_threads` threads, so both cores work
    while this thread adds the dumps before."""
    workers = _threads(len(items)) if load is not None else 1

    def decode(name: str, raw: bytes | str) -> object:
        return load.decode(raw) if load is not None and isinstance(raw, bytes) and _native_ok(name, raw) else None

    if workers == 1:
        for uid, (name, data) in enumerate(items):
            raw = _read(name, data)
            yield uid, name, raw, decode(name, raw)
        return
    ahead: deque[tuple[int, str, bytes | str, Future]] = deque()
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="ncclpm-fr") as pool:
        for uid, (name, data) in enumerate(items):
            raw = _read(name, data)
            ahead.append((uid, name, raw, pool.submit(decode, name, raw)))
            if len(ahead) > 2 * workers:
                uid0, name0, raw0, fut = ahead.popleft()
                yield uid0, name0, raw0, fut.result()
        while ahead:
            uid0, name0, raw0, fut = ahead.popleft()
            yield uid0, name0, raw0, fut.result()


def decode_all(items: list[Item], keep_frames: int, full: bool = False, native: bool = True) -> Decoded:
    """Every dump in turn (GC off: millions of short-lived containers), its objects dropped right after. Pickles go
    to the C decoder when it is built (`fr_native`; ``native=False`` or NCCLPM_FR_PYTHON=1: never), on several
    threads; what it leaves goes to the Python path, in the same order."""
    native = native and fr_native.enabled(full)
    gc_was_on = gc.isenabled()
    gc.disable()
    warnings: list[str] = []
    dumps: list[Dump] = []
    chunks = Chunks(full)
    load = (
        fr_native.NativeLoad(
            keep_frames,
            chunks.interners,
            [n for n, _ in items],
            _derive,
            chunks.schema,
            NATIVE_ROWS + _ROOM_ROWS,
            NARROW,
        )
        if native
        else None
    )
    held: list[Dump] = []  # the dumps whose rows the C decoder holds
    shared: dict = {}  # member lists seen so far, shared between dumps

    def frame_native() -> None:
        if load is None or not held:
            return
        try:
            chunks.add_frame(load.frame())
        except Exception as exc:  # not expected: the decoder's buffers are checked in C; never fatal either
            for d in held:
                warnings.append(f"{d.source}: skipped, unreadable columns ({type(exc).__name__}: {str(exc)[:120]})")
                d.bad, d.used, d.note = True, False, "unreadable columns"
        held.clear()

    try:
        for uid, name, raw, got in _in_order(items, load):
            if isinstance(raw, str):
                warnings.append(raw)
                continue
            if isinstance(got, tuple) and load is not None:
                n, newest_t, newest_r, meta_obj, rows = got
                meta, warns = _meta(name, meta_obj, shared)
                rank = rank_from_name(name)
                assert rank is not None  # `_native_ok` checked it
                dump = Dump(name, rank, "pickle", meta, n=n, newest=(newest_t, newest_r), uid=uid)
                load.add(rows, rank, uid)
                warnings.extend(warns)
                dumps.append(dump)
                held.append(dump)
                if load.rows >= NATIVE_ROWS:
                    frame_native()
                continue
            frame_native()  # the rows before this dump's, in order
            try:
                dump, warns = read_dump(name, raw, keep_frames, full, shared)
            except Exception as exc:  # never fatal: an odd dump only skips this file
                dump, warns = None, [f"{name}: unreadable dump ({type(exc).__name__}: {str(exc)[:120]})"]
            del raw
            warnings.extend(warns)
            if dump is not None:
                dump.uid = uid
                dumps.append(dump)
                chunks.add(dump, warnings)
        frame_native()
        chunks.flush()
        values = {k: i.values() for k, i in chunks.interners.items()}
        return Decoded(dumps, warnings, chunks.frames, values)
    finally:
        if load is not None:
            load.release()
        fr_native.release()
        if gc_was_on:
            gc.enable()
