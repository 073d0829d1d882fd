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

Memory and speed (`fr_decode`): one dump at a time is scanned, decoded (GC off) and turned into column
lists, and its objects are dropped before the next is read; every ~64k entries the lists become a polars
chunk, already normalised.  Dumps are read in rank order (the rank is in the name), so the chunks need no
sort; ``data`` may be a callable that reads the bytes when their turn comes, so only one dump's bytes are
held at a time.  By default only the columns the analysis, the rules and the report read are kept
(`FR_ANALYSIS_SCHEMA`); ``columns="all"`` keeps every column (`FR_ENTRIES_SCHEMA`, for ``ncclpm tables``).
By default (``frames="tail"``) stacks are kept for each dump's newest 64 entries and for every entry not
retired/completed — the ones analysis shows.

Group key: the pg name (``process_group[0]``) when non-empty, else ``"pg_id:<pg_id>"`` — under
``TORCH_DISTRIBUTED_DEBUG=DETAIL`` every entry is ``('', '')`` and pg_id 0 (data PG) and 1 (the
wrapper's fingerprint PG) must stay apart.  Membership comes from ``pg_config`` when it names the group
with a non-empty ranks list (``membership_source="pg_config"``), else it is derived: the ranks whose
dumps hold entries of the group, or every dumped rank for ``default_pg`` (``"derived"``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import polars as pl

from ncclpm.ingest.flight_recorder.decode import (  # noqa: F401  (re-exported: public schemas, bench and tests)
    COMPACT_ANALYSIS_SCHEMA,
    COMPACT_ENTRIES_SCHEMA,
    FR_ANALYSIS_SCHEMA,
    FR_ENTRIES_SCHEMA,
    MAX_DUMP_BYTES,
    STATES,
    Dump,
    _NoGlobalsUnpickler,
    decode_all,
    empty_entries,
    rank_from_name,
    version_tuple,
)
from ncclpm.tables.fr import FR_DUMPS_SCHEMA, FR_GROUPS_SCHEMA, FR_STATUS_SCHEMA, FRLoad
from ncclpm.tables.schema import empty

DumpData = bytes | Callable[[], bytes]


def _choose(dumps: list[Dump]) -> list[str]:
    """Keep one dump per rank; return warnings."""
    by_rank: dict[int, list[Dump]] = {}
    for d in dumps:
        by_rank.setdefault(d.rank, []).append(d)
    superseded = 0
    for group in by_rank.values():
        group.sort(key=lambda d: (d.newest, d.fmt == "pickle", d.meta.good_config, d.source), reverse=True)
        for d in group[1:]:
            d.used, d.note = False, f"superseded by {group[0].source} (newer or richer dump of rank {d.rank})"
            superseded += 1
    if superseded:
        return [
            f"{superseded} older or duplicate flight-recorder dump(s) set aside: for each rank the newest, richest "
            "dump is read (`ncclpm tables JOB -t fr_dumps` lists every dump, with why in its `note` column)"
        ]
    return []


def _firsts(chunks: list[pl.DataFrame], used: list[Dump]) -> pl.DataFrame:
    """Per (dump, pg_id, group): its rank and first pg_name/pg_desc, groups in the order their first entry comes:
    one per-chunk partial aggregate (a group_by over the whole multi-chunk table would copy it) that both
    `_seen_groups` and `_pg_keys` read (they had each made a pass over every entry)."""
    parts = [  # (lazy: the same query's eager form took 2.5x the CPU, 0.19 against 0.08 s at 2M entries)
        c.lazy()
        .group_by("_id", "pg_id", "group_key", maintain_order=True)
        .agg(pl.col("pg_name").first(), pl.col("pg_desc").first(), pl.col("rank").first())
        .collect()
        for c in chunks
    ]
    if not parts:
        schema = {"_id": pl.Int64, "pg_id": pl.Int64, "group_key": pl.String, "pg_name": pl.String}
        return empty({**schema, "pg_desc": pl.String, "rank": pl.Int32})
    return pl.concat(parts, how="vertical_relaxed").filter(pl.col("_id").is_in([d.uid for d in used]))


def _seen_groups(firsts: pl.DataFrame) -> pl.DataFrame:
    """Per group: its first pg_name/pg_desc and the ranks holding entries (from `_firsts`: the first row of a
    (dump, group) is the first of its (dump, pg_id, group) rows, which come in the order of their first entry)."""
    return (
        firsts.group_by("group_key", maintain_order=True)
        .agg(pl.col("pg_name").first(), pl.col("pg_desc").first(), pl.col("rank").unique().sort().alias("held"))
        .cast({"group_key": pl.String, "pg_name": pl.String, "pg_desc": pl.String})
    )


def _groups_table(used: list[Dump], seen: pl.DataFrame) -> pl.DataFrame:
    cfg: dict[str, tuple[str, set[int]]] = {}
    added: set[tuple[str, int]] = set()  # (group, member list): every dump repeats them (N dumps x N ranks otherwise)
    for d in used:
        for key, (desc, members) in d.meta.config.items():
            if key and members and (key, id(members)) not in added:
                added.add((key, id(members)))  # (the load shares one tuple per distinct list: `meta._members`)
                cfg.setdefault(key, (desc, set()))[1].update(members)
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


def _pg_keys(firsts: pl.DataFrame) -> pl.DataFrame:
    """(rank, pg_id) -> the group_key of its first entry (from `_firsts`, in the order of their first entry)."""
    keys = firsts.unique(["rank", "pg_id"], keep="first", maintain_order=True)
    return keys.select("rank", "pg_id", pl.col("group_key").cast(pl.String))


def _status_table(used: list[Dump], pg_map: pl.DataFrame) -> pl.DataFrame:
    rows: dict[str, list] = {k: [] for k in FR_STATUS_SCHEMA.names() if k != "group_key"}
    for d in used:
        for pg_id, enq, started, completed in d.meta.status:
            rows["rank"].append(d.rank)
            rows["pg_id"].append(pg_id)
            rows["last_enqueued"].append(enq)
            rows["last_started"].append(started)
            rows["last_completed"].append(completed)
    sub = {k: v for k, v in FR_STATUS_SCHEMA.items() if k != "group_key"}
    status = pl.DataFrame(rows, schema=pl.Schema(sub))
    return status.join(pg_map, on=["rank", "pg_id"], how="left").select(FR_STATUS_SCHEMA.names())


def _dumps_table(dumps: list[Dump]) -> pl.DataFrame:
    rows: dict[str, list] = {k: [] for k in FR_DUMPS_SCHEMA.names()}
    for d in dumps:
        for k, v in (
            ("source", d.source),
            ("rank", d.rank),
            ("format", d.fmt),
            ("version", d.meta.version),
            ("comm_lib_version", d.meta.comm_lib_version),
            ("n_entries", d.n),
            ("newest_created_ns", d.newest[0] if d.newest[0] >= 0 else None),
            ("used", d.used),
            ("note", d.note),
        ):
            rows[k].append(v)
    return pl.DataFrame(rows, schema=FR_DUMPS_SCHEMA)


def _in_rank_order(items: Iterable[tuple[str, DumpData]]) -> list[tuple[str, DumpData]]:
    """Rank order from the names (stable), so the chunks come out sorted; unnamed ranks last (skipped later)."""
    listed = list(items)
    order = sorted(
        range(len(listed)), key=lambda i: (rank_from_name(listed[i][0]) is None, rank_from_name(listed[i][0]) or 0, i)
    )
    return [listed[i] for i in order]


def load_fr_dumps(items: Iterable[tuple[str, DumpData]], *, frames: str = "tail", columns: str = "analysis") -> FRLoad:
    """Load (name, bytes) dumps; never raises for bad input, reports it in `warnings`.

    ``data`` may also be a callable returning the bytes (read when its turn comes: one dump in memory at a
    time). frames: "all" keeps every entry's stack; "tail" (default) keeps the stacks of each dump's newest
    64 entries and of every entry not retired/completed (older finished entries get null frames: converting
    2000 stacks per rank costs more than decoding them); "none" drops stacks. columns: "analysis" (default)
    keeps the columns of `FR_ANALYSIS_SCHEMA`, "all" those of `FR_ENTRIES_SCHEMA`.
    """
    keep_frames = {"all": -1, "tail": 64, "none": 0}[frames]
    full = {"analysis": False, "all": True}[columns]
    out = decode_all(_in_rank_order(items), keep_frames, full)
    warnings = list(out.warnings)
    dumps = out.dumps
    warnings.extend(_choose([d for d in dumps if not d.bad]))
    used = sorted((d for d in dumps if d.used), key=lambda d: d.rank)
    firsts = _firsts(out.frames, used)
    seen = _seen_groups(firsts)
    entries = (
        pl.concat(out.frames, rechunk=False, how="vertical_relaxed")  # a chunk's Int64 counters widen the others
        if out.frames
        else empty_entries(full).with_columns(pl.lit(None, pl.Int64).alias("_id"))
    )
    if len(used) < len(dumps):
        entries = entries.filter(pl.col("_id").is_in([d.uid for d in used]))
    entries = entries.drop("_id")
    table = _dumps_table(sorted(dumps, key=lambda d: (d.rank, d.source)))
    return FRLoad(
        compact=entries,
        groups=_groups_table(used, seen),
        status=_status_table(used, _pg_keys(firsts)),
        dumps=table,
        warnings=tuple(warnings),
        values=out.values,
    )
