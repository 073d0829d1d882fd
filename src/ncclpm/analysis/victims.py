"""Who waited on whom: victim lines and ranks, the collective timeouts, ranks that entered late, the ranks known.

A *victim* line is one a rank prints because someone else failed: a collective timeout, the watchdog's
status/teardown, a peer that closed the connection, an aborted communicator, torchrun's SIGTERM. A rank whose
only errors are victim lines did not cause the failure.
"""

from __future__ import annotations

import polars as pl

from ncclpm.tables import Tables
from ncclpm.tables.kinds import K
from ncclpm.tables.schema import empty
from ncclpm.util.clamp import MAX_LISTED_RANKS
from ncclpm.util.frames import filtered, ordered

VICTIM_KINDS = list(K.victims)  # declared `victim = true` in parsers/kinds.toml
# A collective shaped like a barrier: NCCL implements `barrier()` as a 1-element ALLREDUCE (also what scalar
# syncs look like); gloo names it.
BARRIER_SHAPED = ((pl.col("op") == "ALLREDUCE") & (pl.col("numel_in") == 1)) | (pl.col("op") == "BARRIER")


def victim_lines(t: Tables) -> pl.DataFrame:
    """Events that show a rank waiting on, or torn down because of, another rank (the `victim` column: victim
    kinds, and exceptions whose message reads like one). Lines of a victim kind come first: they name the
    collective."""
    victims = filtered(t.events, pl.col("victim") & pl.col("rank").is_not_null())
    return ordered(victims, ~pl.col("kind").is_in(VICTIM_KINDS), maintain_order=True)


def timeouts(t: Tables) -> pl.DataFrame:
    return t.events.filter((pl.col("kind") == K.collective_timeout) & pl.col("rank").is_not_null())


def desync_ranks(t: Tables, kind: str) -> frozenset[int]:
    """The ranks torch's desync report lists under `kind` (desync_joined / desync_not_joined), from every report."""
    lists = t.kinds(kind)["detail"].drop_nulls()
    found = lists.str.extract_all(r"\d+").explode().drop_nulls().cast(pl.Int64, strict=False).drop_nulls()
    return frozenset(int(r) for r in found.to_list() if r <= 1_000_000)


def idle_at_timeout(t: Tables, timeouts: pl.DataFrame) -> pl.DataFrame:
    """The watchdog status lines of ranks that had not entered the collective their peers timed out in: every
    collective the rank had issued was complete, and the last one came before it (torch >= 2.3, when a peer timed
    out: `Received a dump signal due to a collective timeout from rank 5 ... Last enqueued NCCL work: 4410, last
    completed NCCL work: 4410` while rank 5 waited in #4411) - torch's desync report's "not joined", from the
    rank's own line. Sequence numbers count per process group: a status is compared with a timeout of its own
    group (a timeout line that names none is the default group's, as its rank's own status line says)."""
    nothing = t.events.clear()
    if timeouts.is_empty():
        return nothing
    status = t.kinds(K.watchdog_status).filter(
        pl.col("rank").is_not_null() & pl.col("last_enqueued").is_not_null() & pl.col("last_completed").is_not_null()
    )
    waited = set(timeouts["rank"].to_list())
    stuck: dict[str, int] = {}  # process group -> the lowest sequence number a rank timed out in
    known = timeouts.select("pg", "seq").vstack(status.filter(pl.col("rank").is_in(waited)).select("pg", "seq"))
    for pg, seq in known.filter(pl.col("seq").is_not_null()).iter_rows():
        group = pg or "0"
        stuck[group] = min(seq, stuck.get(group, seq))
    if not stuck:
        return nothing
    idle = status.filter(
        ~pl.col("rank").is_in(waited) & (pl.col("last_completed") >= pl.col("last_enqueued"))
    ).with_columns(pl.col("pg").fill_null("0").replace_strict(stuck, default=None, return_dtype=pl.Int64).alias("_at"))
    return idle.filter(pl.col("last_enqueued") < pl.col("_at")).drop("_at")


def call_sites(t: Tables) -> pl.DataFrame:
    """Where each waiting rank's program issued the collective the watchdog found failed (torch 2.5+ prints its
    Python stack: `#0 all_reduce from .../distributed_c10d.py:2501`, `#2 log_metrics from /workspace/train.py:152`):
    one row per rank, its first such stack - `op` the torch call (frame #0), `func`/`site` the first frame outside
    torch (the program's own call; a library's, like transformers' Trainer, when the program calls through one)."""
    frames = filtered(t.kinds(K.collective_frame), pl.col("rank").is_not_null() & pl.col("count").is_not_null())
    if frames.is_empty():
        return empty({"rank": pl.Int32(), "op": pl.String(), "func": pl.String(), "site": pl.String()})
    # each stack starts again at #0: number the stacks of a source in order, keep each rank's first
    stacks = frames.sort("source", "line").with_columns((pl.col("count") == 0).cum_sum().over("source").alias("_stack"))
    first = stacks.filter(pl.col("_stack") == pl.col("_stack").min().over("rank"))
    op = first.filter(pl.col("count") == 0).group_by("rank").agg(pl.col("detail").first().alias("op"))
    own = (
        first.filter(~pl.col("value").str.contains("/torch/", literal=True))
        .sort("count")
        .group_by("rank")
        .agg(pl.col("detail").first().alias("func"), pl.col("value").first().alias("site"))
    )
    return op.join(own, on="rank", how="left").sort("rank")


def cut_at_end(t: Tables, timeouts: pl.DataFrame) -> bool:
    """A paste that ends inside a rank's timeout line (`... Watchdog caught collective oper`, `OpType=ALLREDUC`): the
    last line ncclpm kept of its file lost the end every timeout line has, so the excerpt goes on past what was
    copied, and a rank absent from it may be in the part cut off."""
    if timeouts.is_empty():
        return False
    last = t.lines.group_by("source").agg(pl.col("line").max())
    cut = timeouts.filter(pl.col("ran_ms").is_null() & pl.col("timeout_ms").is_null())
    return not cut.join(last, on=["source", "line"]).is_empty()


def late_timeouts(timeouts: pl.DataFrame) -> frozenset[int]:
    """Ranks whose own timeout fired long after the first one: they entered the collective late.

    If every rank of a group enqueued the collective together, their watchdogs fire within seconds of
    each other; a rank whose timeout comes a large part of the timeout later started waiting that much
    later - it was busy elsewhere while the others were already waiting.
    """
    to = timeouts.filter(pl.col("ts").is_not_null())
    if to.height < 2:
        return frozenset()
    first = to.group_by("rank").agg(pl.col("ts").min(), pl.col("timeout_ms").max())
    start = first["ts"].min()
    slack_ms = max(30_000, int((first["timeout_ms"].max() or 0) * 0.25))
    late = first.filter((pl.col("ts") - start) > pl.duration(milliseconds=slack_ms))
    return frozenset(late["rank"].to_list())


def known_ranks(t: Tables) -> frozenset[int]:
    """Ranks seen in the job, plus every rank below the world size when there are at most MAX_LISTED_RANKS:
    a world size is a number from a log, and `WORLD_SIZE=999999999` must not become a billion-element set."""
    ranks = set(t.ranks["rank"].drop_nulls().to_list())
    if t.world_size and t.world_size <= MAX_LISTED_RANKS:
        ranks |= set(range(t.world_size))
    return frozenset(ranks)


def same_line(events: pl.DataFrame, kinds: list[str]) -> pl.DataFrame:
    """(source, line) keys that carry an event of one of `kinds` (to avoid double counting a line)."""
    return filtered(events, pl.col("kind").is_in(kinds)).select("source", "line").unique()


def exceptions_not_victim(t: Tables, exclude_kinds: list[str]) -> pl.DataFrame:
    """Exception lines (logs and error files) that are neither a victim symptom nor another rule's kind."""
    exc = filtered(t.kinds(K.exception, K.dataloader_reraise), pl.col("rank").is_not_null() & ~pl.col("victim"))
    if exc.is_empty():  # (no ranked exception: no line to take away)
        return exc
    taken = same_line(t.events, [*VICTIM_KINDS, *exclude_kinds])
    return _relayed_to_their_ranks(t, _without_reraise(exc.join(taken, on=["source", "line"], how="anti")))


REWRAPPED_WITHIN = 80  # lines from a re-raise to the original error its `Original Traceback` ends in


def _without_reraise(exc: pl.DataFrame) -> pl.DataFrame:
    """A DataLoader worker's exception reaches its rank as `ValueError: Caught ValueError in DataLoader worker
    process 1.`, followed by the worker's `Original Traceback` ending in the real error: that one is quoted, the
    re-raise dropped (when the original follows it in the same file, for the same rank)."""
    if not (exc["kind"] == K.dataloader_reraise).any():  # (most jobs: nothing to drop, no query)
        return exc
    rewrap = pl.col("kind") == K.dataloader_reraise
    own = exc.filter(~rewrap).select("source", "rank", pl.col("line").alias("_own"))
    shadowed = (
        exc.filter(rewrap)
        .join(own, on=["source", "rank"])
        .filter((pl.col("_own") > pl.col("line")) & (pl.col("_own") - pl.col("line") <= REWRAPPED_WITHIN))
        .select("source", "line")
        .unique()
    )
    return exc.join(shadowed, on=["source", "line"], how="anti")


def _same_printer(header_rank: str) -> pl.Expr:
    """The row and a relayed traceback's header were printed by one process (either one's rank unknown: maybe)."""
    return pl.col(header_rank).is_null() | pl.col("rank").is_null() | (pl.col(header_rank) == pl.col("rank"))


def _relayed_to_their_ranks(t: Tables, exc: pl.DataFrame) -> pl.DataFrame:
    """A distributed checkpoint that failed on some ranks raises on every rank `CheckpointException ranks:[1]`,
    then each failed rank's traceback under `Traceback (most recent call last): (RANK 1)`: the error ending such a
    traceback is that rank's, whoever printed it; the wrapper is dropped when a relayed traceback follows it, else
    it stands for the ranks it lists (a printing rank that is not listed only relays their failure)."""
    if exc.is_empty() or not t.has_kinds(K.relayed_failure):  # (most jobs: no relay, no query)
        return exc
    headers = t.kinds(K.relayed_traceback).select(
        "source",
        pl.col("line").alias("_hdr"),
        pl.col("rank").alias("_by"),
        pl.col("subject_rank").cast(pl.Int32).alias("_subject"),
    )
    near = pl.col("_hdr").is_not_null() & (pl.col("line") - pl.col("_hdr") <= REWRAPPED_WITHIN) & _same_printer("_by")
    out = exc.with_row_index("_row").with_columns(pl.col("rank").alias("_printer"))
    if not headers.is_empty():
        under = out.sort("line").join_asof(
            headers.sort("_hdr"),
            left_on="line",
            right_on="_hdr",
            by="source",
            strategy="backward",
            check_sortedness=False,
        )
        # only the first error line after a header ends its traceback
        first = near & (pl.col("line") == pl.col("line").min().over("source", "_hdr"))
        under = under.with_columns(first.fill_null(False).alias("_relayed"))
        under = under.with_columns(
            pl.when(pl.col("_relayed")).then(pl.col("_subject")).otherwise(pl.col("rank")).alias("rank")
        )
        out = under.sort("_row").drop("_hdr", "_by", "_subject", "_relayed")
    wrappers = t.kinds(K.relayed_failure).select("source", "line", pl.col("detail").alias("_listed"))
    wrapped = out.join(wrappers, on=["source", "line"], how="left")
    followed = wrapped.filter(pl.col("_listed").is_not_null()).join(
        headers.rename({"_by": "_hdr_by"}), on="source", how="inner"
    )
    followed = followed.filter(
        (pl.col("_hdr") > pl.col("line"))
        & (pl.col("_hdr") - pl.col("line") <= REWRAPPED_WITHIN)
        & _same_printer("_hdr_by")
    )
    wrapped = wrapped.join(followed.select("_row").unique(), on="_row", how="anti")
    listed = pl.col("_listed").str.extract_all(r"\d+").list.eval(pl.element().cast(pl.Int32, strict=False))
    stands_for = (
        pl.when(pl.col("_listed").is_null() | listed.list.contains(pl.col("rank")))
        .then(pl.concat_list(pl.col("rank")))
        .otherwise(listed)
    )
    # a rank's own copy of its error before the copies other ranks relayed (quoted first where both are kept)
    relayed = (pl.col("rank") != pl.col("_printer")).fill_null(False)
    out = wrapped.with_columns(stands_for.alias("rank")).explode("rank").with_columns(relayed.alias("_relay"))
    return out.sort("_relay", "_row").drop("_row", "_listed", "_printer", "_relay")


def in_context(t: Tables, ev: pl.DataFrame, kinds: list[str], before: int = 80) -> pl.DataFrame:
    """Rows of `ev` that have an event of `kinds` in the lines just above them (same file, compatible rank):
    the frames of the traceback an error ends, the work a rank announced before it failed."""
    if ev.is_empty():
        return ev
    ctx = t.kinds(*kinds).select("source", pl.col("line").alias("_ctx_line"), pl.col("rank").alias("_ctx_rank"))
    if ctx.is_empty():
        return ev.clear()
    hit = (
        ev.join(ctx, on="source")
        .filter(
            (pl.col("_ctx_line") <= pl.col("line"))
            & (pl.col("_ctx_line") >= pl.col("line") - before)
            & (pl.col("_ctx_rank").is_null() | pl.col("rank").is_null() | (pl.col("_ctx_rank") == pl.col("rank")))
        )
        .select("source", "line")
        .unique()
    )
    return ev.join(hit, on=["source", "line"], how="semi")


def progress_before(t: Tables, ev: pl.DataFrame) -> pl.DataFrame:
    """Rows of `ev` preceded, in the same file, by a training-progress line: the job had started."""
    if ev.is_empty() or not t.has_kinds(K.progress, K.nccl_comm_init):
        return ev.clear()
    prog = t.kinds(K.progress, K.nccl_comm_init).group_by("source").agg(pl.col("line").min().alias("_first"))
    return ev.join(prog, on="source").filter(pl.col("_first") < pl.col("line")).drop("_first")
