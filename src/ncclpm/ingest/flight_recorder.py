"""Load PyTorch flight-recorder (FR) dumps, pickle or JSON, into three polars tables.

Safety: pickles are read by `_NoGlobalsUnpickler`, whose ``find_class`` refuses every global — real
dumps hold only dict/list/tuple/str/int/float/bool/None, which need none — so a dump cannot run code.
Any failure (refused global, truncated or corrupt data, wrong types, deep recursion, > 512 MiB, a top
level that is not a dict with an ``entries`` list) becomes a warning naming the file; the file is skipped.

Normalisation (pickle and JSON give the same rows): JSON's ``process_group`` list, ``0`` for unset
``time_discovered_*`` and string ``pg_status`` values are mapped to the pickle forms; missing optional
keys become nulls; ``nccl_version`` (old) and ``comm_lib_version`` (new) both fill ``comm_lib_version``.

Rank: dumps carry no rank field, so the rank is the LAST integer in the file name (``_dump_12`` -> 12,
``trace_rank_node02_7`` -> 7, ``fr_trace_rank_1.json`` -> 1); no integer -> warning, skipped.  Several
dumps of one rank (raw/, fixed/, json/, periodic/ copies): the one whose newest entry (max
``time_created_ns``, then ``record_id``) is latest is used; ties prefer pickle (frames) and then a
pg_config with real names/ranks.  The others get ``used=False`` and a note in ``dumps``.

Speed: decoding is done with GC off; each dump is turned into column lists at once (its dicts are
dropped), nested values (sizes, dtypes, stacks) are interned so polars converts each distinct one once,
and polars chunks are built every 64k entries.  By default (``frames="tail"``) stacks are kept for each
dump's newest 64 entries and for every entry not retired/completed — the ones analysis shows.

Group key: the pg name (``process_group[0]``) when non-empty, else ``"pg_id:<pg_id>"`` — under
``TORCH_DISTRIBUTED_DEBUG=DETAIL`` every entry is ``('', '')`` and pg_id 0 (data PG) and 1 (the
wrapper's fingerprint PG) must stay apart.  Membership comes from ``pg_config`` when it names the group
with a non-empty ranks list (``membership_source="pg_config"``), else it is derived: the ranks whose
dumps hold entries of the group, or every dumped rank for ``default_pg`` (``"derived"``).
"""

from __future__ import annotations

import gc
import io
import json
import marshal
import pickle
import re
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import chain
from operator import itemgetter

import polars as pl

MAX_DUMP_BYTES = 512 * 1024 * 1024
STATES = ["scheduled", "started", "completed"]
_FRAME = pl.Struct({"name": pl.String, "filename": pl.String, "line": pl.Int64})
FR_ENTRIES_SCHEMA = pl.Schema({
    "rank": pl.Int32, "source": pl.String, "record_id": pl.Int64, "pg_id": pl.Int64,
    "pg_name": pl.String, "pg_desc": pl.String, "group_key": pl.String,
    "collective_seq_id": pl.Int64, "p2p_seq_id": pl.Int64, "op_id": pl.Int64, "op": pl.String,
    "profiling_name": pl.String, "is_p2p": pl.Boolean,
    "input_sizes": pl.List(pl.List(pl.Int64)), "output_sizes": pl.List(pl.List(pl.Int64)),
    "input_dtypes": pl.List(pl.String), "output_dtypes": pl.List(pl.String),
    "state": pl.Enum(STATES), "retired": pl.Boolean, "time_created_ns": pl.Int64,
    "time_started_ns": pl.Int64, "time_completed_ns": pl.Int64, "timeout_ms": pl.Int64,
    "duration_ms": pl.Float64, "frames": pl.List(_FRAME), "thread_name": pl.String,
})
FR_GROUPS_SCHEMA = pl.Schema({
    "group_key": pl.String, "pg_name": pl.String, "pg_desc": pl.String, "ranks": pl.List(pl.Int32),
    "size": pl.Int32, "membership_source": pl.String,
})
FR_STATUS_SCHEMA = pl.Schema({
    "rank": pl.Int32, "pg_id": pl.Int64, "group_key": pl.String, "last_enqueued": pl.Int64,
    "last_started": pl.Int64, "last_completed": pl.Int64,
})
FR_DUMPS_SCHEMA = pl.Schema({
    "source": pl.String, "rank": pl.Int32, "format": pl.String, "version": pl.String,
    "comm_lib_version": pl.String, "n_entries": pl.Int64, "newest_created_ns": pl.Int64,
    "used": pl.Boolean, "note": pl.String,
})
# raw entry keys read as they are -> output column (frames/process_group/time_discovered handled apart)
_RAW_KEYS = ("record_id", "pg_id", "collective_seq_id", "p2p_seq_id", "op_id", "profiling_name", "is_p2p",
             "input_sizes", "output_sizes", "input_dtypes", "output_dtypes", "state", "retired",
             "time_created_ns", "timeout_ms", "duration_ms", "thread_name")
_EXTRA_KEYS = ("process_group", "time_discovered_started_ns", "time_discovered_completed_ns", "frames")
_ALL_KEYS = _RAW_KEYS + _EXTRA_KEYS
_CHUNK_ROWS = 65536
_NESTED_KEYS = ("input_sizes", "output_sizes", "input_dtypes", "output_dtypes", "frames")
_HEAD_KEYS = (b"version", b"pg_config", b"entries")
_JSON_META = (b'"pg_config"', b'"version"', b'"comm_lib_version"', b'"nccl_version"')
_NAME_HINT = re.compile(r"(nccl_trace_rank|_dump_|comm_lib_trace_rank|trace_rank|fr_trace)", re.I)


class _NoGlobalsUnpickler(pickle.Unpickler):
    """Unpickler that refuses every global (class, function) reference."""

    def find_class(self, module: str, name: str) -> object:
        raise pickle.UnpicklingError(f"refused global {module}.{name}")


@dataclass(frozen=True)
class FRLoad:
    entries: pl.DataFrame
    groups: pl.DataFrame
    status: pl.DataFrame
    dumps: pl.DataFrame
    warnings: tuple[str, ...]


@dataclass
class _Dump:
    source: str
    rank: int
    fmt: str
    data: dict  # the dump without its entries
    newest: tuple[int, int]
    cols: _Cols | None
    n: int
    uid: int = 0
    used: bool = True
    bad: bool = False
    note: str = ""

    @property
    def good_config(self) -> bool:
        cfg = self.data.get("pg_config")
        return isinstance(cfg, dict) and any(k and _ranks(v) for k, v in cfg.items())


def looks_like_fr_dump(name: str, head: bytes) -> bool:
    """Content sniffing on the first bytes of a file; the name is only a hint for JSON."""
    head = head[:256]
    if head[:1] == b"\x80":
        return any(k in head for k in _HEAD_KEYS)
    text = head.lstrip()
    if text[:1] != b"{":
        return False
    has_entries = b'"entries"' in text
    has_meta = any(k in text for k in _JSON_META)
    hint = bool(_NAME_HINT.search(name))
    return (has_entries and (has_meta or hint)) or (has_meta and hint)


def _rank_from_name(name: str) -> int | None:
    base = re.split(r"[\\/]", name)[-1]
    base = re.sub(r"\.(json|pkl|pickle)$", "", base, flags=re.I)
    nums = re.findall(r"\d+", base)
    return int(nums[-1]) if nums else None


def _ranks(cfg: object) -> list[int]:
    """Parse pg_config ``ranks`` ('[0, 1, 2]' string or list) without eval."""
    if not isinstance(cfg, dict):
        return []
    raw = cfg.get("ranks")
    if isinstance(raw, list):
        return [int(x) for x in raw if isinstance(x, int)]
    return [int(x) for x in re.findall(r"\d+", raw)] if isinstance(raw, str) else []


def _decode(name: str, data: bytes) -> tuple[dict | None, str, str | None]:
    """Return (dump dict, format, warning)."""
    if len(data) > MAX_DUMP_BYTES:
        return None, "?", f"{name}: skipped, {len(data)} bytes is over the {MAX_DUMP_BYTES} byte cap"
    if not data.strip():
        return None, "?", f"{name}: skipped, empty file"
    fmt = "pickle" if data[:1] == b"\x80" else "json"
    try:
        obj = _NoGlobalsUnpickler(io.BytesIO(data)).load() if fmt == "pickle" else json.loads(data)
    except pickle.UnpicklingError as exc:
        return None, fmt, f"{name}: refused/corrupt pickle ({exc})"
    except RecursionError:
        return None, fmt, f"{name}: skipped, nesting too deep"
    except Exception as exc:  # any decode failure only skips this file
        return None, fmt, f"{name}: unreadable {fmt} ({type(exc).__name__}: {str(exc)[:120]})"
    if not isinstance(obj, dict) or not isinstance(obj.get("entries"), list):
        return None, fmt, f"{name}: not a flight-recorder dump (no 'entries' list at top level)"
    if not all(isinstance(e, dict) for e in obj["entries"]):
        return None, fmt, f"{name}: skipped, 'entries' holds non-dict items"
    return obj, fmt, None


def _newest(entries: list[dict]) -> tuple[int, int]:
    best = (-1, -1)
    for e in entries[-64:] if len(entries) > 64 else entries:
        t, r = e.get("time_created_ns"), e.get("record_id")
        key = (t if isinstance(t, int) else -1, r if isinstance(r, int) else -1)
        best = max(best, key)
    return best


def _choose(dumps: list[_Dump]) -> list[str]:
    """Keep one dump per rank; return warnings."""
    by_rank: dict[int, list[_Dump]] = {}
    for d in dumps:
        by_rank.setdefault(d.rank, []).append(d)
    superseded = 0
    for group in by_rank.values():
        group.sort(key=lambda d: (d.newest, d.fmt == "pickle", d.good_config, d.source), reverse=True)
        for d in group[1:]:
            d.used, d.note = False, f"superseded by {group[0].source} (newer or richer dump of rank {d.rank})"
            superseded += 1
    if superseded:
        return [f"{superseded} duplicate dump(s) superseded by a newer/richer dump of the same rank "
                "(see dumps.note)"]
    return []


_SCALARS = {k: FR_ENTRIES_SCHEMA.get(k, pl.String) for k in _RAW_KEYS if k not in _NESTED_KEYS}
_SCALARS.update({"state": pl.String, "time_discovered_started_ns": pl.Int64,
                 "time_discovered_completed_ns": pl.Int64, "pg_name": pl.String, "pg_desc": pl.String})


def _str_list_keys(values: list) -> list:
    try:
        return list(map(tuple, values))
    except TypeError:  # None or a non-iterable somewhere
        return list(map(repr, values))


def _marshal_keys(values: list) -> list:
    """Fast exact keys for plain nested lists (marshal is only written here, never read)."""
    try:
        return list(map(marshal.dumps, values))
    except ValueError:  # an unmarshallable object: fall back to repr
        return list(map(repr, values))


class _Interner:
    """Deduplicate nested values (stacks, size lists) so polars converts each distinct one once."""

    def __init__(self, dtype: pl.DataType) -> None:
        self.dtype, self.index, self.uniq = dtype, {}, []
        self.keys = _str_list_keys if dtype == pl.List(pl.String) else _marshal_keys

    def add(self, values: list) -> list[int]:
        keys = self.keys(values)
        local = dict(zip(keys, values, strict=True))  # C-level: one value per distinct key
        index, uniq = self.index, self.uniq
        for k, v in local.items():
            if k not in index:
                index[k] = len(uniq)
                uniq.append(v)
        return list(map(index.__getitem__, keys))

    def series(self, name: str, idx: list[int]) -> pl.Series:
        base = pl.Series(name, self.uniq or [None], dtype=self.dtype, strict=True)
        return base.gather(idx) if idx else pl.Series(name, [], dtype=self.dtype)


@dataclass
class _Cols:
    """Column-wise entries of one dump (the dump's dicts are dropped right after extraction)."""

    n: int
    scalars: dict[str, list]
    nested: dict[str, list[int]]


def _tail_frames(cols: dict, n: int, keep: int) -> list:
    """Stacks of the newest `keep` entries and of every entry not retired/completed; None elsewhere."""
    frames = cols.get("frames")
    if frames is None or keep == 0:
        return [None] * n
    if keep < 0 or n <= keep:
        return frames
    retired, state = cols.get("retired") or [None] * n, cols.get("state") or [None] * n
    cut = n - keep
    return [f if i >= cut or not (r is True or s == "completed") else None
            for i, (f, r, s) in enumerate(zip(frames, retired, state, strict=True))]


def _pg_names(pg: list | tuple) -> tuple[list, list]:
    """(names, descs) from process_group tuples/lists; malformed values become None."""
    try:
        return list(map(itemgetter(0), pg)), list(map(itemgetter(1), pg))
    except (TypeError, IndexError, KeyError):
        ok = [p if isinstance(p, list | tuple) else () for p in pg]
        return [p[0] if p else None for p in ok], [p[1] if len(p) > 1 else None for p in ok]


def _extract(entries: list[dict], interners: dict[str, _Interner], keep_frames: int) -> _Cols:
    ends = (entries[0], entries[-1]) if entries else ()
    present = [k for k in _ALL_KEYS if any(k in e for e in ends)]  # KeyError below -> per-entry .get
    try:
        if len(present) > 1:
            cols = dict(zip(present, zip(*map(itemgetter(*present), entries), strict=True), strict=True))
        else:
            cols = {k: [e[k] for e in entries] for k in present}
    except (KeyError, TypeError):
        cols = {k: [e.get(k) for e in entries] for k in present}
    n, none = len(entries), [None] * len(entries)
    pg = cols.get("process_group", none)
    scalars = {k: cols.get(k, none) for k in _SCALARS if k not in ("pg_name", "pg_desc")}
    scalars["pg_name"], scalars["pg_desc"] = _pg_names(pg)
    cols["frames"] = _tail_frames(cols, n, keep_frames)
    nested = {k: interners[k].add(cols.get(k, none)) for k in _NESTED_KEYS}
    return _Cols(n, scalars, nested)


def _repeat_index(counts: list[int]) -> list[int]:
    return list(chain.from_iterable([i] * c for i, c in enumerate(counts)))


def _build(cols: list[_Cols], ranks: list[int], sources: list[str], ids: list[int],
           interners: dict[str, _Interner]) -> pl.DataFrame:
    flat = chain.from_iterable
    data = {k: pl.Series(k, list(flat(c.scalars[k] for c in cols)), dtype=t, strict=True)
            for k, t in _SCALARS.items()}
    for k in _NESTED_KEYS:
        data[k] = interners[k].series(k, list(flat(c.nested[k] for c in cols)))
    n = [c.n for c in cols]
    data["rank"] = pl.Series("rank", ranks, dtype=pl.Int32).gather(_repeat_index(n))
    data["source"] = pl.Series("source", sources, dtype=pl.String).gather(_repeat_index(n))
    data["_id"] = pl.Series("_id", ids, dtype=pl.Int64).gather(_repeat_index(n))
    return pl.DataFrame(data)


class _Chunks:
    """Turn extracted dumps into polars chunks every ~_CHUNK_ROWS entries so Python lists stay small."""

    def __init__(self) -> None:
        self.pending: list[_Dump] = []
        self.rows = 0
        self.frames: list[pl.DataFrame] = []
        self.interners = _new_interners()

    def add(self, d: _Dump, warnings: list[str]) -> None:
        self.pending.append(d)
        self.rows += d.n
        if self.rows >= _CHUNK_ROWS:
            self.flush(warnings)

    def flush(self, warnings: list[str]) -> None:
        good = self.pending
        try:
            self.frames.append(self._build(good))
        except Exception:  # find the dumps with unexpected types, skip them, build again
            good = [d for d in good if self._check(d, warnings)]
            self.frames.append(self._build(good))
        for d in self.pending:
            d.cols = None
        self.pending, self.rows, self.interners = [], 0, _new_interners()

    def _build(self, dumps: list[_Dump]) -> pl.DataFrame:
        return _build([d.cols for d in dumps], [d.rank for d in dumps], [d.source for d in dumps],
                      [d.uid for d in dumps], self.interners)

    def _check(self, d: _Dump, warnings: list[str]) -> bool:
        try:
            self._build([d])
            return True
        except Exception as exc:  # a malformed dump is skipped, not fatal
            warnings.append(f"{d.source}: skipped, entries have unexpected types ({str(exc)[:120]})")
            d.bad, d.used, d.note = True, False, "entries have unexpected types"
            return False


def _new_interners() -> dict[str, _Interner]:
    return {k: _Interner(FR_ENTRIES_SCHEMA[k]) for k in _NESTED_KEYS}


def _normalise(raw: pl.DataFrame) -> pl.DataFrame:
    name = pl.col("pg_name").fill_null("")
    zero_null = [pl.when(pl.col(c) > 0).then(pl.col(c)).alias(t) for c, t in
                 (("time_discovered_started_ns", "time_started_ns"),
                  ("time_discovered_completed_ns", "time_completed_ns"))]
    out = raw.with_columns(
        pl.when(name != "").then(name).otherwise(pl.format("pg_id:{}", pl.col("pg_id"))).alias("group_key"),
        pl.col("profiling_name").str.replace(r"^[A-Za-z_]+:", "").str.replace(r"\s.*$", "").alias("op"),
        pl.col("state").cast(pl.Enum(STATES), strict=False),
        *zero_null,
    )
    return out.select(FR_ENTRIES_SCHEMA.names()).cast(dict(FR_ENTRIES_SCHEMA))


def _groups_table(used: list[_Dump], entries: pl.DataFrame) -> pl.DataFrame:
    seen = entries.group_by("group_key").agg(
        pl.col("pg_name").first(), pl.col("pg_desc").first(), pl.col("rank").unique().sort().alias("held"))
    cfg: dict[str, tuple[str, set[int]]] = {}
    for d in used:
        pg_config = d.data.get("pg_config")
        for key, v in pg_config.items() if isinstance(pg_config, dict) else ():
            members = _ranks(v)
            if key and members:
                desc = v.get("desc", "") if isinstance(v, dict) else ""
                cfg.setdefault(str(key), (str(desc), set()))[1].update(members)
    all_ranks = sorted({d.rank for d in used})
    rows: dict[str, list] = {k: [] for k in FR_GROUPS_SCHEMA.names()}
    keys = dict.fromkeys([*seen["group_key"].to_list(), *cfg])
    seen_map = {r["group_key"]: r for r in seen.iter_rows(named=True)}
    for key in keys:
        s = seen_map.get(key)
        if key in cfg:
            ranks, src, desc = sorted(cfg[key][1]), "pg_config", (s["pg_desc"] if s else None) or cfg[key][0]
        elif s and s["pg_desc"] == "default_pg":
            ranks, src, desc = all_ranks, "derived", s["pg_desc"]
        else:
            ranks, src, desc = list(s["held"]), "derived", s["pg_desc"]
        rows["group_key"].append(key)
        rows["pg_name"].append(s["pg_name"] if s else key)
        rows["pg_desc"].append(desc)
        rows["ranks"].append(ranks)
        rows["size"].append(len(ranks))
        rows["membership_source"].append(src)
    return pl.DataFrame(rows, schema=FR_GROUPS_SCHEMA)


def _as_int(v: object) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, str) and re.fullmatch(r"-?\d+", v.strip()):
        return int(v)
    return None


def _status_table(used: list[_Dump], entries: pl.DataFrame) -> pl.DataFrame:
    rows: dict[str, list] = {k: [] for k in FR_STATUS_SCHEMA.names() if k != "group_key"}
    for d in used:
        st = d.data.get("pg_status")
        for pg_id, v in (st.items() if isinstance(st, dict) else ()):
            if _as_int(pg_id) is None or not isinstance(v, dict):
                continue
            rows["rank"].append(d.rank)
            rows["pg_id"].append(_as_int(pg_id))
            for col in ("enqueued", "started", "completed"):
                rows[f"last_{col}"].append(_as_int(v.get(f"last_{col}_collective")))
    sub = {k: v for k, v in FR_STATUS_SCHEMA.items() if k != "group_key"}
    status = pl.DataFrame(rows, schema=pl.Schema(sub))
    pg_map = entries.select("rank", "pg_id", "group_key").unique(["rank", "pg_id"], keep="first")
    return status.join(pg_map, on=["rank", "pg_id"], how="left").select(FR_STATUS_SCHEMA.names())


def _dumps_table(dumps: list[_Dump]) -> pl.DataFrame:
    rows = {k: [] for k in FR_DUMPS_SCHEMA.names()}
    for d in dumps:
        ver = d.data.get("comm_lib_version", d.data.get("nccl_version"))
        for k, v in (("source", d.source), ("rank", d.rank), ("format", d.fmt),
                     ("version", str(d.data.get("version", ""))), ("comm_lib_version", str(ver or "")),
                     ("n_entries", d.n),
                     ("newest_created_ns", d.newest[0] if d.newest[0] >= 0 else None),
                     ("used", d.used), ("note", d.note)):
            rows[k].append(v)
    return pl.DataFrame(rows, schema=FR_DUMPS_SCHEMA)


def version_tuple(version: str) -> tuple[int, ...]:
    """'2.10' -> (2, 10): compare FR format versions numerically."""
    return tuple(int(x) for x in re.findall(r"\d+", str(version)))


def _read_one(name: str, data: bytes, interners: dict[str, _Interner],
              keep_frames: int) -> tuple[_Dump | None, str | None]:
    obj, fmt, warn = _decode(name, data)
    if warn:
        return None, warn
    rank = _rank_from_name(name)
    if rank is None:
        return None, f"{name}: skipped, no rank number in the file name"
    entries = obj.pop("entries")
    head = {k: v for k, v in obj.items()}
    ver = version_tuple(head.get("version", ""))
    note = ""
    if ver and ver[0] != 2:
        note = f"{name}: unknown FR format version {head.get('version')!r}; read as 2.x"
    cols = _extract(entries, interners, keep_frames)
    return _Dump(name, rank, fmt, head, _newest(entries), cols, cols.n), note or None


def load_fr_dumps(items: Iterable[tuple[str, bytes]], *, frames: str = "tail") -> FRLoad:
    """Load (name, bytes) dumps; never raises for bad input, reports it in `warnings`.

    frames: "all" keeps every entry's stack; "tail" (default) keeps the stacks of each dump's newest
    64 entries and of every entry not retired/completed (older finished entries get null frames:
    converting 2000 stacks per rank costs more than decoding them); "none" drops stacks.
    """
    keep_frames = {"all": -1, "tail": 64, "none": 0}[frames]
    warnings: list[str] = []
    dumps: list[_Dump] = []
    chunks = _Chunks()
    gc_was_on = gc.isenabled()
    gc.disable()  # millions of small containers: generational GC passes would dominate the load time
    try:
        for name, data in items:
            dump, warn = _read_one(name, data, chunks.interners, keep_frames)
            if warn:
                warnings.append(warn)
            if dump is not None:
                dump.uid = len(dumps)
                dumps.append(dump)
                chunks.add(dump, warnings)
        chunks.flush(warnings)
    finally:
        if gc_was_on:
            gc.enable()
    warnings.extend(_choose([d for d in dumps if not d.bad]))
    used = sorted((d for d in dumps if d.used), key=lambda d: d.rank)
    raw = pl.concat(chunks.frames) if chunks.frames else _build([], [], [], [], _new_interners())
    raw = raw.filter(pl.col("_id").is_in([d.uid for d in used])).sort("rank", maintain_order=True)
    entries = _normalise(raw)
    table = _dumps_table(sorted(dumps, key=lambda d: (d.rank, d.source)))
    return FRLoad(entries=entries, groups=_groups_table(used, entries), status=_status_table(used, entries),
                  dumps=table, warnings=tuple(warnings))
