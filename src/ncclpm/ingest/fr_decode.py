"""Flight-recorder dumps -> compact polars columns, one dump at a time.

Used by `ncclpm.ingest.flight_recorder` (see its docstring for the normalisation rules).  Each dump is
read, checked, decoded and turned into column lists on its own; its Python objects are dropped before the
next one is read, and every ~64k entries the lists become one polars chunk.  So memory holds the columns
plus one dump's objects, whatever the number of ranks.

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
import marshal
import pickle
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import chain
from operator import itemgetter

import polars as pl

from ncclpm.ingest.fr_meta import Meta, parse_meta
from ncclpm.ingest.fr_scan import Refused, scan

MAX_DUMP_BYTES = 512 * 1024 * 1024
MAX_NESTED = 65_536  # real sizes/dtypes/stacks hold a few to a few hundred elements
STATES = ["scheduled", "started", "completed"]
_FRAME = pl.Struct({"name": pl.String, "filename": pl.String, "line": pl.Int64})
FR_ENTRIES_SCHEMA = pl.Schema(
    {
        "rank": pl.Int32,
        "source": pl.String,
        "record_id": pl.Int64,
        "pg_id": pl.Int64,
        "pg_name": pl.String,
        "pg_desc": pl.String,
        "group_key": pl.String,
        "collective_seq_id": pl.Int64,
        "p2p_seq_id": pl.Int64,
        "op_id": pl.Int64,
        "op": pl.String,
        "profiling_name": pl.String,
        "is_p2p": pl.Boolean,
        "input_sizes": pl.List(pl.List(pl.Int64)),
        "output_sizes": pl.List(pl.List(pl.Int64)),
        "input_dtypes": pl.List(pl.String),
        "output_dtypes": pl.List(pl.String),
        "state": pl.Enum(STATES),
        "retired": pl.Boolean,
        "time_created_ns": pl.Int64,
        "time_started_ns": pl.Int64,
        "time_completed_ns": pl.Int64,
        "timeout_ms": pl.Int64,
        "duration_ms": pl.Float64,
        "frames": pl.List(_FRAME),
        "thread_name": pl.String,
    }
)
# What the analysis, the rules and the report read: the default load keeps only these.
ANALYSIS_COLUMNS = (
    "rank",
    "source",
    "record_id",
    "pg_id",
    "pg_name",
    "pg_desc",
    "group_key",
    "collective_seq_id",
    "op",
    "is_p2p",
    "input_sizes",
    "input_dtypes",
    "state",
    "retired",
    "time_created_ns",
    "frames",
)
FR_ANALYSIS_SCHEMA = pl.Schema({k: v for k, v in FR_ENTRIES_SCHEMA.items() if k in ANALYSIS_COLUMNS})

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
_NESTED_ALL = ("input_sizes", "output_sizes", "input_dtypes", "output_dtypes", "frames")
_NESTED_ANALYSIS = ("input_sizes", "input_dtypes", "frames")
_CHUNK_ROWS = 16384  # ~8 dumps: their objects (pinned by the column lists) stay a few MB
_I64 = (-(2**63), 2**63 - 1)


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


# ---- nested values: checked once per distinct value, then interned -------------------------------------


def _ok_int(v: object) -> bool:
    return type(v) is int and _I64[0] <= v <= _I64[1]


def _ok_sizes(v: object) -> bool:
    if not isinstance(v, list | tuple) or len(v) > MAX_NESTED:
        return False
    total = 0
    for dims in v:
        if not isinstance(dims, list | tuple) or not all(map(_ok_int, dims)):
            return False
        total += len(dims)
    return total <= MAX_NESTED


def _ok_strings(v: object) -> bool:
    return isinstance(v, list | tuple) and len(v) <= MAX_NESTED and all(type(s) is str for s in v)


def _ok_frames(v: object) -> bool:
    if not isinstance(v, list | tuple) or len(v) > MAX_NESTED:
        return False
    for f in v:
        if not isinstance(f, dict):
            return False
        name, filename, line = f.get("name"), f.get("filename"), f.get("line")
        if not (name is None or type(name) is str) or not (filename is None or type(filename) is str):
            return False
        if not (line is None or _ok_int(line)):
            return False
    return True


_CHECKS = {
    "input_sizes": _ok_sizes,
    "output_sizes": _ok_sizes,
    "input_dtypes": _ok_strings,
    "output_dtypes": _ok_strings,
    "frames": _ok_frames,
}


def _keys(values: list) -> list:
    """Exact keys for plain nested values (marshal is written here, never read)."""
    try:
        return list(map(marshal.dumps, values))
    except ValueError:  # an unmarshallable object (cannot come from a scanned pickle or JSON): repr
        return list(map(repr, values))


class _Interner:
    """Distinct nested values of a chunk, each checked once; polars converts each distinct value once."""

    def __init__(self, name: str) -> None:
        self.name, self.check = name, _CHECKS[name]
        self.dtype = FR_ENTRIES_SCHEMA[name]
        self.index: dict = {}
        self.uniq: list = []
        self.bad: set[int] = set()

    def add(self, values: list) -> list[int]:
        keys = _keys(values)
        index, uniq = self.index, self.uniq
        for k, v in dict(zip(keys, values, strict=True)).items():
            if k not in index:
                index[k] = len(uniq)
                if v is not None and not self.check(v):
                    self.bad.add(len(uniq))
                    v = None
                uniq.append(v)
        return list(map(index.__getitem__, keys))

    def series(self, idx: list[int]) -> pl.Series:
        base = pl.Series(self.name, self.uniq or [None], dtype=self.dtype, strict=False)
        return base.gather(idx) if idx else pl.Series(self.name, [], dtype=self.dtype)


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
    meta, problems = parse_meta(obj, shared)
    warnings = [f"{name}: ignored malformed {', '.join(problems)} (wrong type or out of range)"] if problems else []
    ver = version_tuple(meta.version)
    if ver and ver[0] != 2:
        warnings.append(f"{name}: unknown FR format version {meta.version!r}; read as 2.x")
    scalars = tuple(_SCALAR_TYPES) if full else _ANALYSIS_SCALARS
    nested = _NESTED_ALL if full else _NESTED_ANALYSIS
    dump = Dump(name, rank, fmt, meta)
    dump.cols = _columns(entries, keep_frames, scalars, nested)
    dump.n = len(entries)
    return dump, warnings


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
    """Column lists of a few dumps -> one polars chunk every ~_CHUNK_ROWS entries (normalised columns)."""

    def __init__(self, full: bool) -> None:
        self.full = full
        self.schema = FR_ENTRIES_SCHEMA if full else FR_ANALYSIS_SCHEMA
        self.scalars = {k: t for k, t in _SCALAR_TYPES.items() if full or k in _ANALYSIS_SCALARS}
        self.nested = _NESTED_ALL if full else _NESTED_ANALYSIS
        self.pending: list[Dump] = []
        self.rows = 0
        self.frames: list[pl.DataFrame] = []

    def add(self, d: Dump, warnings: list[str]) -> None:
        d.newest = _newest(d.cols.get("time_created_ns") or [], d.cols.get("record_id") or [])
        self.pending.append(d)
        self.rows += d.n
        if self.rows >= _CHUNK_ROWS:
            self.flush(warnings)

    def flush(self, warnings: list[str]) -> None:
        good = self.pending
        if good:
            try:
                frame = self._build(good, warnings)
            except Exception:  # find the dumps with unexpected scalar types, skip them, build again
                good = [d for d in good if self._check(d, warnings)]
                frame = self._build(good, warnings) if good else None
            if frame is not None and frame.height:
                self.frames.append(frame)
        for d in self.pending:
            d.cols = {}
        self.pending, self.rows = [], 0

    def _build(self, dumps: list[Dump], warnings: list[str] | None) -> pl.DataFrame:
        flat = chain.from_iterable
        data = {}
        for k, t in self.scalars.items():
            data[k] = pl.Series(k, list(flat(d.cols[k] for d in dumps)), dtype=t, strict=True)
        for k in ("pg_name", "pg_desc"):
            data[k] = pl.Series(k, list(flat(d.cols[k] for d in dumps)), dtype=pl.String, strict=True)
        hit: dict[int, list[str]] = {}
        for k in self.nested:
            interner = _Interner(k)
            ids = [interner.add(d.cols[k]) for d in dumps]
            data[k] = interner.series(list(flat(ids)))
            if interner.bad and warnings is not None:
                for i, d_ids in enumerate(ids):
                    if interner.bad.intersection(d_ids):
                        hit.setdefault(i, []).append(k)
        for i, keys in hit.items():
            warnings.append(f"{dumps[i].source}: malformed {', '.join(keys)} in some entries; shown as missing")
        n = [d.n for d in dumps]
        idx = list(chain.from_iterable([i] * c for i, c in enumerate(n)))
        data["rank"] = pl.Series("rank", [d.rank for d in dumps], dtype=pl.Int32).gather(idx)
        data["source"] = pl.Series("source", [d.source for d in dumps], dtype=pl.String).gather(idx)
        data["_id"] = pl.Series("_id", [d.uid for d in dumps], dtype=pl.Int64).gather(idx)
        return _normalise(pl.DataFrame(data), self.schema)

    def _check(self, d: Dump, warnings: list[str]) -> bool:
        try:
            self._build([d], None)
            return True
        except Exception as exc:  # a malformed dump is skipped, not fatal
            warnings.append(f"{d.source}: skipped, entries have unexpected types ({str(exc)[:120]})")
            d.bad, d.used, d.note = True, False, "entries have unexpected types"
            return False


def _normalise(raw: pl.DataFrame, schema: pl.Schema) -> pl.DataFrame:
    name = pl.col("pg_name").fill_null("")
    cols = [
        pl.when(name != "").then(name).otherwise(pl.format("pg_id:{}", pl.col("pg_id"))).alias("group_key"),
        _op(pl.col("profiling_name")).alias("op"),
        pl.col("state").cast(pl.Enum(STATES), strict=False),
    ]
    if "time_started_ns" in schema:
        cols += [
            pl.when(pl.col(c) > 0).then(pl.col(c)).alias(t)
            for c, t in (
                ("time_discovered_started_ns", "time_started_ns"),
                ("time_discovered_completed_ns", "time_completed_ns"),
            )
        ]
    out = raw.with_columns(cols)
    return out.select(*schema.names(), "_id").cast({**dict(schema), "_id": pl.Int64})


def empty_entries(full: bool) -> pl.DataFrame:
    return pl.DataFrame(schema=FR_ENTRIES_SCHEMA if full else FR_ANALYSIS_SCHEMA)


@dataclass
class Decoded:
    dumps: list[Dump]
    warnings: list[str]
    frames: list[pl.DataFrame]


def decode_all(items: list[tuple[str, bytes | Callable[[], bytes]]], keep_frames: int, full: bool = False) -> Decoded:
    """Every dump in turn (GC off: millions of short-lived containers), its objects dropped right after."""
    gc_was_on = gc.isenabled()
    gc.disable()
    warnings: list[str] = []
    dumps: list[Dump] = []
    chunks = Chunks(full)
    shared: dict = {}  # member lists seen so far, shared between dumps
    try:
        for uid, (name, data) in enumerate(items):
            try:
                raw = data() if callable(data) else data
            except (OSError, ValueError) as exc:
                warnings.append(f"{name}: flight-recorder dump unreadable ({exc}) - skipped")
                continue
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
        chunks.flush(warnings)
        return Decoded(dumps, warnings, chunks.frames)
    finally:
        if gc_was_on:
            gc.enable()
