"""Cross-rank matching of flight-recorder entries: who never joined, who disagreed, who stopped.

Alignment: within a group (``group_key``, see `ingest.flight_recorder`) non-P2P entries are aligned on
``collective_seq_id`` — never on ``record_id`` (a per-process counter).  P2P entries are left out of the
alignment: their ``p2p_seq_id`` counts each rank's own sends/recvs (in the Megatron dumps the four
pipeline stages sit at 11981 / 13696 / 13694 / 11977 at the same moment), so it does not line up.

Per group *g* and member *r* (members = group membership ∩ ranks with a dump), ``L(r)`` is the last seq
*r* reached: its highest held seq in *g*, else its ``pg_status.last_enqueued`` for the pg_id the group's
other members use (dumps holding only ACTIVE entries may hold nothing of *g*).  Then:

* **missing / never joined** — peers hold (g, s) and ``L(r) < s``: r never issued s.  One row per
  (g, r) at the first such s; ``behind_by = s - L(r)``.  A rank lacking s with ``L(r) >= s`` is not
  missing (retired, or its ring buffer starts later).
* **stopped completing** — r holds (g, s) neither retired nor completed although a peer q has finished
  it: ``L(q) > s`` (q moved on) and q holds s retired/completed or no longer holds it.  A collective
  cannot finish on q unless every member launched it, so r's own progress tracking is stuck (GPU error,
  blocked watchdog/GIL).  Requiring that q moved on keeps gloo's "retired because it failed" out.
* **mismatch** — at a (g, s) held by >= 2 ranks: op, dtypes, and input sizes (only for ops whose input
  sizes must agree; all_to_all, gather, scatter... are exempt) are voted on; the culprits are the
  minority.  A tie at the top (e.g. 1 vs 1 in a 2-rank group) is undecidable: every rank involved is
  reported.  Only the first divergent seq per group is reported, with the count of later ones (cascade).

Culprits (the rule used for ``culprit_ranks``):
1. mismatches exist -> kind "mismatch", culprits = minority ranks of the earliest (by entry time)
   first-divergence; root group = its group.
2. else build a wait-for graph: every holder of (g, s) waits for every rank missing at (g, s).  Ranks in
   sink strongly-connected components (waiting for nobody outside themselves) are the ones that never
   joined; ranks that are missing only because they wait on someone else are victims.  Add the ranks
   that stopped completing.  Kind = "never_joined" if there is a sink, else "stopped_completing".
   Root group = the group where a culprit is missing whose waiting peers' entry is oldest (ties: larger
   group); for stopped-completing only, the group of its oldest stuck entry.
Members without a dump are noted, never blamed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import polars as pl

from ncclpm.tables.schema import FRCulprit, empty

if TYPE_CHECKING:  # (the dump reader's modules load only for a job with dumps)
    from ncclpm.tables.fr import FRLoad

SIZE_CHECKED_OPS = frozenset(
    {
        "all_reduce",
        "allreduce",
        "reduce",
        "broadcast",
        "_allgather_base",
        "_all_gather_base",
        "all_gather",
        "allgather",
        "all_gather_into_tensor",
        "_reduce_scatter_base",
        "reduce_scatter",
        "reduce_scatter_tensor",
        "allreduce_coalesced",
        "all_reduce_coalesced",
        "barrier",
        "_broadcast_oop",
        "_reduce_oop",
        "all_gather_single",
        "reduce_scatter_single",
        "all_reduce_barrier",
    }
)
_I = pl.Int64
_Expand = Callable[[pl.DataFrame], pl.DataFrame]  # FRLoad.expand: ids -> values for a few rows


@dataclass(frozen=True)
class FRAnalysis:
    missing: pl.DataFrame
    mismatches: pl.DataFrame
    stuck: pl.DataFrame
    rank_facts: pl.DataFrame
    root_group: str | None
    culprit_ranks: tuple[int, ...]
    culprit_kind: FRCulprit | None
    summary: str
    culprit_frames: pl.DataFrame
    notes: tuple[str, ...]  # caveats the report shows (dumps missing from ranks, ...)


def _collectives(load: FRLoad) -> pl.DataFrame:
    """The aligned entries (no P2P, a positive seq): a projection of the compact table (`FRLoad.compact`: text is
    Categorical, sizes and dtypes are ids of the load's distinct values, so equal ids are equal values).  When
    every entry is aligned, as in most jobs, the columns are shared with the table, not copied; the table stays in
    its load chunks (the group_bys below take as long on them as on one chunk)."""
    keep = ~pl.col("is_p2p").fill_null(False) & (pl.col("collective_seq_id") > 0).fill_null(False)
    e = load.compact
    if not e.select(keep.all()).item():
        e = e.filter(keep)
    done = pl.col("retired").fill_null(False) | (pl.col("state") == "completed").fill_null(False)
    return e.select(
        "group_key",
        "pg_desc",
        "pg_id",
        "rank",
        pl.col("collective_seq_id").alias("seq"),
        "op",
        "input_sizes_id",
        "input_dtypes_id",
        "state",
        "time_created_ns",
        done.alias("done"),
    )


def _streamed(query: pl.LazyFrame) -> pl.DataFrame:
    """A group_by over all entries, run by polars' streaming engine: in batches, so it needs a few MB where the
    in-memory engine takes ~90 bytes per entry (45 MB at 512k entries) for one query."""
    return query.collect(engine="streaming")


def _text(frame: pl.DataFrame) -> pl.DataFrame:
    """Categorical columns of an analysis result back to String (the results' schemas are String)."""
    return frame.with_columns(pl.col(pl.Categorical).cast(pl.String))


def _frontier(load: FRLoad, coll: pl.DataFrame, dump_ranks: pl.Series) -> pl.DataFrame:
    """One row per (group, member with dump): L = last seq reached (null if unknown), min held seq."""
    members = (
        load.groups.select(pl.col("group_key").cast(pl.Categorical), pl.col("ranks").alias("rank"))
        .explode("rank")
        .drop_nulls("rank")
        .filter(pl.col("rank").is_in(dump_ranks.implode()))
        .unique()
    )
    held = _streamed(
        coll.lazy()
        .group_by("group_key", "rank")
        .agg(pl.col("seq").max().alias("held_max"), pl.col("seq").min().alias("held_min"))
    )
    members = members.join(held.select("group_key").unique(), on="group_key")  # groups with collectives
    pg_of = (
        _streamed(coll.lazy().group_by("group_key").agg(pl.col("pg_id").unique()))
        .filter(pl.col("pg_id").list.len() == 1)
        .with_columns(pl.col("pg_id").list.first())
    )
    status = load.status.select(
        "rank", "pg_id", pl.col("group_key").cast(pl.Categorical).alias("st_key"), "last_enqueued"
    )
    out = (
        members.join(held, on=["group_key", "rank"], how="left")
        .join(pg_of, on="group_key", how="left")
        .join(status, on=["rank", "pg_id"], how="left")
    )
    st_ok = pl.col("st_key").is_null() | (pl.col("st_key") == pl.col("group_key"))
    last = pl.coalesce("held_max", pl.when(st_ok).then(pl.col("last_enqueued")))
    return out.select("group_key", "rank", last.cast(_I).alias("L"), "held_min")


def _held(coll: pl.DataFrame) -> pl.DataFrame:
    """One row per (group, seq) held by someone: its first time and the counts of holders and of distinct ops,
    sizes and dtypes that `_mismatch_candidates` needs (scalar aggregations only, so the query streams)."""
    return _streamed(
        coll.lazy()
        .group_by("group_key", "seq")
        .agg(
            pl.col("pg_desc").first(),
            pl.col("time_created_ns").min().alias("t"),
            pl.len().alias("n"),
            _differ(pl.col("op").to_physical()).alias("n_op"),
            pl.col("op").first().alias("op_first"),
            _differ(pl.col("input_sizes_id")).alias("n_sizes"),
            _differ(pl.col("input_dtypes_id")).alias("n_dtypes"),
        )
    ).sort("group_key", "seq")


def _differ(col: pl.Expr) -> pl.Expr:
    """1 where every holder recorded the same value (null included), 2 where they differ: what `n_unique` > 1
    told, from a min, a max and a null count (no per-group set of values)."""
    nulls = col.null_count()
    mixed = (nulls > 0) & (nulls < pl.len())
    return pl.when((col.min() != col.max()).fill_null(False) | mixed).then(2).otherwise(1).cast(pl.UInt32)


def _holders(coll: pl.DataFrame, pairs: pl.DataFrame) -> pl.DataFrame:
    """Who holds each (group, seq) of `pairs` and the op most of them recorded (lists: only for these pairs)."""
    keys = pairs.select("group_key", "seq").unique().lazy()
    at = _streamed(coll.lazy().join(keys, on=["group_key", "seq"], how="semi"))
    return at.group_by("group_key", "seq").agg(
        pl.col("rank").unique().sort().alias("present_ranks"), pl.col("op").mode().sort().first()
    )


def _missing(coll: pl.DataFrame, front: pl.DataFrame, held: pl.DataFrame) -> pl.DataFrame:
    nxt = (
        front.with_columns((pl.col("L").fill_null(-1) + 1).alias("probe"))
        .sort("group_key", "probe")
        .join_asof(
            held.select("group_key", "seq").sort("group_key", "seq"),
            left_on="probe",
            right_on="seq",
            by="group_key",
            strategy="forward",
            check_sortedness=False,
        )
    )
    nxt = nxt.filter(pl.col("seq").is_not_null())
    nxt = nxt.join(_holders(coll, nxt), on=["group_key", "seq"]).join(
        held.select("group_key", "seq", "pg_desc", "t"), on=["group_key", "seq"]
    )
    nxt = nxt.filter(~pl.col("present_ranks").list.contains(pl.col("rank")))
    return (
        _text(nxt)
        .select(
            "group_key",
            "pg_desc",
            pl.col("seq").cast(_I).alias("collective_seq_id"),
            "op",
            pl.col("rank").alias("missing_rank"),
            "present_ranks",
            pl.col("L").alias("missing_last_seq"),
            (pl.col("seq") - pl.col("L")).alias("behind_by"),
            "t",
        )
        .sort("t", "group_key", "missing_rank")
    )


def _stuck(coll: pl.DataFrame, front: pl.DataFrame, skip: pl.DataFrame) -> pl.DataFrame:
    nd = coll.filter(~pl.col("done")).join(skip, on=["group_key", "seq"], how="anti")
    pairs = nd.select("group_key", "seq").unique()
    beyond = (
        pairs.join(front.select("group_key", "L"), on="group_key")
        .filter(pl.col("L") > pl.col("seq"))
        .group_by("group_key", "seq")
        .len("n_beyond")
    )
    nd_beyond = (
        nd.join(front.select("group_key", "rank", "L"), on=["group_key", "rank"])
        .filter(pl.col("L") > pl.col("seq"))
        .group_by("group_key", "seq")
        .len("n_nd")
    )
    counts = beyond.join(nd_beyond, on=["group_key", "seq"], how="left").with_columns(
        (pl.col("n_beyond") - pl.col("n_nd").fill_null(0)).alias("peers_done")
    )
    return (
        _text(nd.join(counts.filter(pl.col("peers_done") > 0), on=["group_key", "seq"]))
        .select(
            "group_key",
            "pg_desc",
            pl.col("seq").cast(_I).alias("collective_seq_id"),
            "op",
            "rank",
            pl.col("state").cast(pl.String),
            "peers_done",
            pl.col("time_created_ns").alias("t"),
        )
        .sort("rank", "t")
    )


def _votes(coll: pl.DataFrame, kind: str, value: str, text: pl.Expr, at: pl.DataFrame, expand: _Expand) -> pl.DataFrame:
    """At the (group, seq) pairs `at` (where >= 2 ranks hold >= 2 distinct values of column `value`, ids or
    Categorical codes): one row per value with the ranks holding it.  Only these few rows are copied and get their
    values (`expand`) and text."""
    if at.is_empty():
        return pl.DataFrame()
    c = coll.join(at.select("group_key", "seq"), on=["group_key", "seq"], how="semi")
    return (
        expand(c.select("group_key", "seq", "rank", "time_created_ns", "pg_desc", value, pl.col(value).alias("h")))
        .with_columns(text.alias("vs"))
        .group_by("group_key", "seq", "h")
        .agg(
            pl.col("rank").sort().alias("ranks"),
            pl.len().alias("n"),
            pl.col("time_created_ns").min().alias("t"),
            pl.col("pg_desc").first(),
            pl.col("vs").first(),
        )
        .with_columns(pl.lit(kind).alias("kind"))
    )


_INNER = pl.concat_str(pl.lit("["), pl.element().cast(pl.List(pl.String)).list.join(", "), pl.lit("]"))
_SIZES_TEXT = pl.concat_str(pl.lit("["), pl.col("input_sizes").list.eval(_INNER).list.join(", "), pl.lit("]"))


def _mismatch_candidates(coll: pl.DataFrame, held: pl.DataFrame, expand: _Expand) -> list[pl.DataFrame]:
    shared = held.filter(pl.col("n") > 1)
    same_op = shared.filter(pl.col("n_op") == 1)  # sizes and dtypes are compared only where the op agrees
    parts = [
        _votes(coll, "op", "op", pl.col("op"), shared.filter(pl.col("n_op") > 1), expand),
        _votes(
            coll,
            "size",
            "input_sizes_id",
            _SIZES_TEXT,
            same_op.filter(pl.col("op_first").is_in(list(SIZE_CHECKED_OPS)) & (pl.col("n_sizes") > 1)),
            expand,
        ),
        _votes(
            coll,
            "dtype",
            "input_dtypes_id",
            pl.col("input_dtypes").list.join(","),
            same_op.filter(pl.col("n_dtypes") > 1),
            expand,
        ),
    ]
    return [p.select("group_key", "pg_desc", "seq", "kind", "vs", "ranks", "n", "t") for p in parts if not p.is_empty()]


def _mismatch_row(vals: list[dict]) -> dict:
    """vals: one dict per distinct value at a (group, seq, kind), most common first."""
    top = vals[0]
    decided = len(vals) == 1 or top["n"] > vals[1]["n"]
    minority = vals[1:] if decided else vals
    return {
        "group_key": top["group_key"],
        "pg_desc": top["pg_desc"],
        "collective_seq_id": top["seq"],
        "kind": top["kind"],
        "culprit_ranks": sorted({r for m in minority for r in m["ranks"]}),
        "majority_value": top["vs"] if decided else None,
        "minority_value": " | ".join(m["vs"] for m in minority),
        "ranks_by_value": "; ".join(f"{m['vs']}: {m['ranks']}" for m in vals),
        "decided": decided,
        "cascade": int(top["n_bad"]) - 1,
        "t": min(m["t"] for m in vals),
    }


def _mismatches(coll: pl.DataFrame, held: pl.DataFrame, expand: _Expand) -> pl.DataFrame:
    parts = _mismatch_candidates(coll, held, expand)
    schema = {
        "group_key": pl.String,
        "pg_desc": pl.String,
        "collective_seq_id": _I,
        "kind": pl.String,
        "culprit_ranks": pl.List(pl.Int32),
        "majority_value": pl.String,
        "minority_value": pl.String,
        "ranks_by_value": pl.String,
        "decided": pl.Boolean,
        "cascade": _I,
        "t": _I,
    }
    if not parts:
        return empty(schema)
    votes = pl.concat(parts)
    first = votes.group_by("group_key").agg(pl.col("seq").min().alias("first"), pl.col("seq").n_unique().alias("n_bad"))
    top = votes.join(first, left_on=["group_key", "seq"], right_on=["group_key", "first"])
    rows = [
        _mismatch_row(grp.to_dicts())
        for _, grp in top.sort("n", "vs", descending=[True, False]).group_by(
            ["group_key", "seq", "kind"], maintain_order=True
        )
    ]
    return pl.DataFrame(rows, schema=schema).sort("t", "group_key", "kind")


def _sink_ranks(missing: pl.DataFrame) -> set[int]:
    """Ranks in sink SCCs of the wait-for graph (holder -> missing rank)."""
    edges = (
        missing.select(pl.col("present_ranks").alias("src"), pl.col("missing_rank").alias("dst"))
        .explode("src")
        .filter(pl.col("src") != pl.col("dst"))
        .unique()
    )
    graph: dict[int, set[int]] = {}
    for src, dst in edges.iter_rows():
        graph.setdefault(src, set()).add(dst)
        graph.setdefault(dst, set())
    comp = _scc(graph)
    groups: dict[int, list[int]] = {}  # component -> its ranks, in one pass (one pass per component was N^2)
    for n in graph:
        groups.setdefault(comp[n], []).append(n)
    sinks: set[int] = set()
    for members in groups.values():
        if all(comp[d] == comp[members[0]] for n in members for d in graph[n]):
            sinks.update(members)
    return sinks & set(missing["missing_rank"].to_list())


def _scc(graph: dict[int, set[int]]) -> dict[int, int]:
    """Tarjan's strongly-connected components, iterative."""
    index: dict[int, int] = {}
    low: dict[int, int] = {}
    comp: dict[int, int] = {}
    stack: list[int] = []
    on: set[int] = set()
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            node, it = work[-1]
            nxt = next(it, None)
            if nxt is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    while True:
                        m = stack.pop()
                        on.discard(m)
                        comp[m] = node
                        if m == node:
                            break
            elif nxt not in index:
                index[nxt] = low[nxt] = counter
                counter += 1
                stack.append(nxt)
                on.add(nxt)
                work.append((nxt, iter(sorted(graph[nxt]))))
            elif nxt in on:
                low[node] = min(low[node], index[nxt])
    return comp


@dataclass(frozen=True)
class _Verdict:
    culprits: tuple[int, ...]
    kind: FRCulprit | None
    root: str | None
    kinds: dict[int, FRCulprit]


def _verdict(missing: pl.DataFrame, mismatches: pl.DataFrame, stuck: pl.DataFrame, sizes: dict[str, int]) -> _Verdict:
    if not mismatches.is_empty():
        first = mismatches.row(0, named=True)
        culprits = tuple(sorted(first["culprit_ranks"]))
        return _Verdict(culprits, FRCulprit.MISMATCH, first["group_key"], dict.fromkeys(culprits, FRCulprit.MISMATCH))
    sinks = _sink_ranks(missing) if not missing.is_empty() else set()
    stuck_ranks = set(stuck["rank"].to_list())
    kinds = {**dict.fromkeys(stuck_ranks, FRCulprit.STOPPED_COMPLETING), **dict.fromkeys(sinks, FRCulprit.NEVER_JOINED)}
    if sinks:
        rows = missing.filter(pl.col("missing_rank").is_in(sorted(sinks))).with_columns(
            pl.col("group_key").replace_strict(sizes, default=0).alias("size")
        )
        root = rows.sort(["t", "size"], descending=[False, True]).row(0, named=True)["group_key"]
        return _Verdict(tuple(sorted(kinds)), FRCulprit.NEVER_JOINED, root, kinds)
    if stuck_ranks:
        return _Verdict(
            tuple(sorted(kinds)), FRCulprit.STOPPED_COMPLETING, stuck.sort("t").row(0, named=True)["group_key"], kinds
        )
    return _Verdict((), None, None, {})


def _frames_str(col: str, depth: int = 4) -> pl.Expr:
    """'name (file:line) < caller (file:line) ...' for the innermost `depth` frames."""
    f = pl.element().struct
    one = pl.format("{} ({}:{})", f.field("name"), f.field("filename").str.extract(r"([^/\\]*)$"), f.field("line"))
    return pl.col(col).list.head(depth).list.eval(one).list.join(" < ")


def _last_rows(e: pl.DataFrame, step: int = 65536) -> pl.DataFrame:
    """Per rank: its number of entries and the row of its last entry, the highest record_id (nulls lowest), the later
    row on ties - as a stable sort would.  Slice by slice (a rank may span two) and then merged: one query over the
    whole table hashed every row (+6 MB at 512k entries, the analysis' peak).  A table in rank order whose record
    ids never go down within a rank (dumps of ring buffers numbering their entries in order: most jobs) is read from
    its runs of ranks instead (`_last_rows_in_order`)."""
    fast = _last_rows_in_order(e)
    if fast is not None:
        return fast
    k, i = pl.col("_k"), pl.col("_i")
    parts = [
        e.slice(at, step)
        .select("rank", pl.col("record_id").cast(_I).fill_null(-(2**63)).alias("_k"))
        .with_row_index("_i", offset=at)
        .group_by("rank")
        .agg(pl.len().alias("n"), k.max(), i.filter(k == k.max()).max())
        for at in range(0, e.height, step)
    ]
    schema = {"rank": pl.Int32, "n": pl.UInt32, "_k": _I, "_i": pl.UInt32}
    merged = pl.concat(parts) if parts else empty(schema)
    return merged.group_by("rank").agg(pl.col("n").sum().alias("n_entries"), i.filter(k == k.max()).max())


def _last_rows_in_order(e: pl.DataFrame) -> pl.DataFrame | None:
    """`_last_rows` when each rank's rows are one run and its record ids (none null) never go down there: its last row
    is then the one, with no group_by (an elementwise pass; the group_bys cost ~0.15 s of CPU at 2M entries).
    None otherwise."""
    rank = e.get_column("rank")
    if e.is_empty() or not rank.is_sorted() or e.get_column("record_id").null_count():
        return None
    k, rank_col = pl.col("record_id"), pl.col("rank")  # (each compared with the row before it)
    in_order = ((rank_col != rank_col.shift(1)) | (k >= k.shift(1))).fill_null(True).all()
    if not e.select(in_order).item():
        return None
    runs = rank.rle().struct.unnest()
    return runs.select(
        pl.col("value").alias("rank"),
        pl.col("len").alias("n_entries"),
        (pl.col("len").cum_sum() - 1).cast(pl.UInt32).alias("_i"),
    )


def _rank_facts(load: FRLoad, coll: pl.DataFrame, v: _Verdict) -> pl.DataFrame:
    e = load.compact
    pick = _last_rows(e)
    rows = load.expand(e[pick["_i"].to_list()].select("rank", "op", "state", "group_key", "frames_id")).select(
        "rank",
        pl.col("op").alias("last_op"),
        pl.col("state").cast(pl.String).alias("last_state"),
        pl.col("group_key").alias("last_group"),
        pl.col("frames").alias("last_frames"),
    )
    last = pick.select("rank", "n_entries").join(rows.unique("rank", keep="last"), on="rank", how="left")
    root_seq = _streamed(  # streamed and projected: an eager filter copied every column of the group's entries
        coll.lazy()
        .filter(pl.col("group_key") == (v.root or ""))
        .group_by("rank")
        .agg(pl.col("seq").max().cast(_I).alias("last_seq_root_group"))
    )
    dumped = load.dumps.filter(pl.col("used")).select("rank").unique()
    members = load.groups.select(pl.col("ranks").alias("rank")).explode("rank").drop_nulls().unique()
    ranks = pl.concat([dumped, members.cast({"rank": pl.Int32})]).unique().sort("rank")
    out = (
        ranks.join(last, on="rank", how="left")
        .join(root_seq, on="rank", how="left")
        .with_columns(
            pl.col("rank").is_in(dumped["rank"].implode()).alias("dump_present"),
            pl.col("rank").is_in(list(v.culprits)).alias("culprit"),
            pl.col("rank").replace_strict(v.kinds, default=None, return_dtype=pl.String).alias("culprit_kind"),
            _frames_str("last_frames").alias("last_frames"),
        )
    )
    return out.with_columns(pl.col("n_entries").fill_null(0))


def _culprit_frames(load: FRLoad, culprits: tuple[int, ...], per_rank: int = 3) -> pl.DataFrame:
    stacks = load.values.get("frames", pl.Series([], dtype=pl.List(pl.Null)))
    with_stack = pl.Series(stacks.list.len().gt(0).fill_null(False).arg_true(), dtype=pl.UInt32)
    e = load.compact.filter(pl.col("rank").is_in(list(culprits)) & pl.col("frames_id").is_in(with_stack.implode()))
    picked = (
        e.sort("record_id", descending=True)
        .group_by("rank", maintain_order=True)
        .head(per_rank)
        .select("rank", "group_key", "collective_seq_id", "op", "frames_id")
    )
    return load.expand(picked).with_columns(_frames_str("frames").alias("summary")).sort("rank", "collective_seq_id")


def _notes(load: FRLoad, held: pl.DataFrame) -> list[str]:
    notes = []
    dumped = set(load.dumps.filter(pl.col("used"))["rank"].to_list())
    active = set(held["group_key"].unique().cast(pl.String).to_list())  # the groups of the aligned entries
    absent: dict[int, list[str]] = {}
    for g, desc, ranks in load.groups.select("group_key", "pg_desc", "ranks").iter_rows():
        if g in active:
            for r in set(ranks or []) - dumped:
                absent.setdefault(r, []).append(f"{desc or g} ({g})")
    if absent:
        groups = sorted({x for v in absent.values() for x in v})
        more = " ..." if len(groups) > 5 else ""
        notes.append(
            f"dumps from ranks {sorted(absent)} are missing: expected members of "
            f"{', '.join(groups[:5])}{more}; they cannot be checked or blamed"
        )
    n_p2p = load.compact.select(pl.col("is_p2p").fill_null(False).sum()).item()  # a count: no filtered copy
    if n_p2p:
        notes.append(f"{n_p2p} P2P entries not aligned across ranks (p2p_seq_id counts per rank)")
    if any(g.startswith("pg_id:") for g in active):
        notes.append(
            "entries without a pg name (TORCH_DISTRIBUTED_DEBUG=DETAIL?) are grouped by pg_id; "
            "the wrapper's fingerprint PG may hide the real mismatch"
        )
    return notes


def _peers(n: int) -> str:
    return "1 peer was" if n == 1 else f"{n} peers were"


def _summary(v: _Verdict, missing: pl.DataFrame, mismatches: pl.DataFrame, stuck: pl.DataFrame) -> str:
    if v.kind is None:
        return "flight recorder: no missing, mismatched or stuck collective found"
    if v.kind == FRCulprit.MISMATCH:
        m = mismatches.row(0, named=True)
        who = (
            f"rank(s) {m['culprit_ranks']} differ from the majority" if m["decided"] else "ranks disagree (no majority)"
        )
        return (
            f"{m['kind']} mismatch at collective #{m['collective_seq_id']} of {m['pg_desc'] or ''} "
            f"(pg {m['group_key']}): {who} ({m['ranks_by_value']})"
        )
    parts = []
    for r in v.culprits:
        if v.kinds[r] == FRCulprit.NEVER_JOINED:
            mine = missing.filter(pl.col("missing_rank") == r)
            row = mine.filter(pl.col("group_key") == v.root).vstack(mine).row(0, named=True)
            parts.append(
                f"rank {r} never joined {row['op']} #{row['collective_seq_id']} of {row['pg_desc']} "
                f"(pg {row['group_key']}); {_peers(len(row['present_ranks']))} waiting"
            )
        else:
            n = stuck.filter(pl.col("rank") == r).height
            parts.append(f"rank {r} stopped completing work ({n} collectives its peers already finished)")
    return "; ".join(parts)


def analyze_fr(load: FRLoad) -> FRAnalysis:
    """Match entries across ranks and name the culprit ranks (rules in the module docstring)."""
    coll = _collectives(load)
    dump_ranks = load.dumps.filter(pl.col("used"))["rank"].unique()
    front = _frontier(load, coll, dump_ranks)
    held = _held(coll)
    missing = _missing(coll, front, held)
    mismatches = _mismatches(coll, held, load.expand)
    skip = mismatches.select(pl.col("group_key").cast(pl.Categorical), pl.col("collective_seq_id").alias("seq"))
    stuck = _stuck(coll, front, skip)
    sizes = dict(load.groups.select("group_key", "size").iter_rows())
    v = _verdict(missing, mismatches, stuck, sizes)
    return FRAnalysis(
        missing=missing.drop("t"),
        mismatches=mismatches.drop("t"),
        stuck=stuck.drop("t"),
        rank_facts=_rank_facts(load, coll, v),
        root_group=v.root,
        culprit_ranks=v.culprits,
        culprit_kind=v.kind,
        summary=_summary(v, missing, mismatches, stuck),
        culprit_frames=_culprit_frames(load, v.culprits),
        notes=tuple(_notes(load, held)),
    )
