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

Speed: the items are cut into ~8 MB batches, each decoded with GC off and turned into column lists at
once (its dicts are dropped), nested values (sizes, dtypes, stacks) interned so polars converts each
distinct one once; above ~48 MB the batches are shared between this process and ``cores - 1`` worker
processes (`ncclpm.ingest.fr_decode`, same restricted unpickler, rows sent back as polars IPC; results put
back in item order, so the load is the same either way).  By default (``frames="tail"``) stacks are kept
for each dump's newest 64 entries and for every entry not retired/completed — the ones analysis shows.

Group key: the pg name (``process_group[0]``) when non-empty, else ``"pg_id:<pg_id>"`` — under
``TORCH_DISTRIBUTED_DEBUG=DETAIL`` every entry is ``('', '')`` and pg_id 0 (data PG) and 1 (the
wrapper's fingerprint PG) must stay apart.  Membership comes from ``pg_config`` when it names the group
with a non-empty ranks list (``membership_source="pg_config"``), else it is derived: the ranks whose
dumps hold entries of the group, or every dumped rank for ``default_pg`` (``"derived"``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

import polars as pl

from ncclpm.ingest.fr_decode import (  # noqa: F401  (re-exported: public schemas, bench and tests)
    FR_ENTRIES_SCHEMA,
    MAX_DUMP_BYTES,
    STATES,
    _Dump,
    _NoGlobalsUnpickler,
    _rank_from_name,
    _ranks,
    empty_raw,
    run_batches,
    version_tuple,
)

FR_GROUPS_SCHEMA = pl.Schema(
    {
        "group_key": pl.String,
        "pg_name": pl.String,
        "pg_desc": pl.String,
        "ranks": pl.List(pl.Int32),
        "size": pl.Int32,
        "membership_source": pl.String,
    }
)
FR_STATUS_SCHEMA = pl.Schema(
    {
        "rank": pl.Int32,
        "pg_id": pl.Int64,
        "group_key": pl.String,
        "last_enqueued": pl.Int64,
        "last_started": pl.Int64,
        "last_completed": pl.Int64,
    }
)
FR_DUMPS_SCHEMA = pl.Schema(
    {
        "source": pl.String,
        "rank": pl.Int32,
        "format": pl.String,
        "version": pl.String,
        "comm_lib_version": pl.String,
        "n_entries": pl.Int64,
        "newest_created_ns": pl.Int64,
        "used": pl.Boolean,
        "note": pl.String,
    }
)
_HEAD_KEYS = (b"version", b"pg_config", b"entries")
_JSON_META = (b'"pg_config"', b'"version"', b'"comm_lib_version"', b'"nccl_version"')
_NAME_HINT = re.compile(r"(nccl_trace_rank|_dump_|comm_lib_trace_rank|trace_rank|fr_trace)", re.I)


@dataclass(frozen=True)
class FRLoad:
    entries: pl.DataFrame
    groups: pl.DataFrame
    status: pl.DataFrame
    dumps: pl.DataFrame
    warnings: tuple[str, ...]


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
        return [f"{superseded} duplicate dump(s) superseded by a newer/richer dump of the same rank (see dumps.note)"]
    return []


def _normalise(raw: pl.DataFrame) -> pl.DataFrame:
    name = pl.col("pg_name").fill_null("")
    zero_null = [
        pl.when(pl.col(c) > 0).then(pl.col(c)).alias(t)
        for c, t in (
            ("time_discovered_started_ns", "time_started_ns"),
            ("time_discovered_completed_ns", "time_completed_ns"),
        )
    ]
    out = raw.with_columns(
        pl.when(name != "").then(name).otherwise(pl.format("pg_id:{}", pl.col("pg_id"))).alias("group_key"),
        pl.col("profiling_name").str.replace(r"^[A-Za-z_]+:", "").str.replace(r"\s.*$", "").alias("op"),
        pl.col("state").cast(pl.Enum(STATES), strict=False),
        *zero_null,
    )
    return out.select(FR_ENTRIES_SCHEMA.names()).cast(dict(FR_ENTRIES_SCHEMA))


def _groups_table(used: list[_Dump], entries: pl.DataFrame) -> pl.DataFrame:
    seen = entries.group_by("group_key").agg(
        pl.col("pg_name").first(), pl.col("pg_desc").first(), pl.col("rank").unique().sort().alias("held")
    )
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
    return pl.DataFrame(rows, schema=FR_GROUPS_SCHEMA).sort("group_key")  # deterministic order


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
        for pg_id, v in st.items() if isinstance(st, dict) else ():
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
        for k, v in (
            ("source", d.source),
            ("rank", d.rank),
            ("format", d.fmt),
            ("version", str(d.data.get("version", ""))),
            ("comm_lib_version", str(ver or "")),
            ("n_entries", d.n),
            ("newest_created_ns", d.newest[0] if d.newest[0] >= 0 else None),
            ("used", d.used),
            ("note", d.note),
        ):
            rows[k].append(v)
    return pl.DataFrame(rows, schema=FR_DUMPS_SCHEMA)


def load_fr_dumps(items: Iterable[tuple[str, bytes]], *, frames: str = "tail") -> FRLoad:
    """Load (name, bytes) dumps; never raises for bad input, reports it in `warnings`.

    frames: "all" keeps every entry's stack; "tail" (default) keeps the stacks of each dump's newest
    64 entries and of every entry not retired/completed (older finished entries get null frames:
    converting 2000 stacks per rank costs more than decoding them); "none" drops stacks.
    """
    keep_frames = {"all": -1, "tail": 64, "none": 0}[frames]
    warnings: list[str] = []
    dumps: list[_Dump] = []
    parts: list[pl.DataFrame] = []
    for batch in run_batches(items, keep_frames):
        warnings.extend(batch.warnings)
        dumps.extend(batch.dumps)
        if batch.frame is not None:
            parts.append(batch.frame)
    warnings.extend(_choose([d for d in dumps if not d.bad]))
    used = sorted((d for d in dumps if d.used), key=lambda d: d.rank)
    raw = pl.concat(parts) if parts else empty_raw()
    raw = raw.filter(pl.col("_id").is_in([d.uid for d in used])).sort("rank", maintain_order=True)
    entries = _normalise(raw)
    table = _dumps_table(sorted(dumps, key=lambda d: (d.rank, d.source)))
    return FRLoad(
        entries=entries,
        groups=_groups_table(used, entries),
        status=_status_table(used, entries),
        dumps=table,
        warnings=tuple(warnings),
    )
