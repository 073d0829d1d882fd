"""Each rank's lines in time order across every file, its last line, and its last activity.

A rank's lines are spread over files - a console interleaving every rank, torchrun's per-rank `stdout.log` and
`stderr.log` (print() goes to one, logging to the other) - and often carry no timestamp. They are put in one order:
- the file holding most of the rank's lines (a console that interleaves both streams) gives the order;
- a line of another file that is a copy of one of those (`--tee` writes each line twice) takes its copy's place (the
  k-th copy of a text, the k-th occurrence);
- any other line is placed by its time (a line without one inherits the last stamp above it in its file) when the
  ordering file is dated, else it cannot be placed.
The rank's last line is the last in that order; it is `proven` the last when no line of the rank stayed unplaced: only
then may a report say the rank logged "nothing more". Its last activity is its last `activity`/`progress` event in
the same order. Only the lines ingest kept are seen (those holding a catalog anchor: progress, activity, errors...).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import polars as pl

from ncclpm.tables import Tables
from ncclpm.tables.kinds import K
from ncclpm.tables.schema import empty
from ncclpm.util.frames import filtered, ordered

ACTIVITY_KINDS = (K.activity, K.progress)
ORDER_SCHEMA = {
    "rank": pl.Int32(),
    "source": pl.String(),
    "line": pl.Int64(),
    "ts": pl.Datetime("us"),
    "text": pl.String(),
    "pos": pl.Float64(),
}
LAST_SCHEMA = {
    "rank": pl.Int32(),
    "last_line_ref": pl.String(),
    "last_line": pl.String(),
    "last_line_ts": pl.Datetime("us"),
    "last_line_proven": pl.Boolean(),
}


def rank_line_order(t: Tables) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(placed, unplaced): every kept line of a ranked process with its `pos` in the rank's time order (copies of a
    line share its place), and the lines no order could place."""
    # torchrun's failure summary names each rank's exit below its entry: the launcher's words, not the rank's lines
    ranked = t.lines.filter(pl.col("rank").is_not_null())
    if not t.elastic.is_empty():
        summary = t.elastic.group_by("source").agg(pl.col("line").min().alias("_summary"))
        ranked = ranked.join(summary, on="source", how="left").filter(
            pl.col("_summary").is_null() | (pl.col("line") < pl.col("_summary"))
        )
    ranked = ranked.select("rank", "source", "line", "ts", pl.col("message").fill_null("").alias("text")).sort(
        "source", "line"
    )
    if ranked.is_empty():
        return empty(ORDER_SCHEMA), empty(ORDER_SCHEMA)
    cols = list(ORDER_SCHEMA)
    if ranked.select((pl.col("source").n_unique().over("rank") == 1).all()).item():
        # each rank's lines in one file (most jobs): its order is the file's, nothing to place, no query more
        pos = pl.int_range(pl.len()).over("rank").cast(pl.Float64).alias("pos")
        placed = ranked.with_columns(pos).select(cols)
        return placed.sort("rank", "pos", "source", "line"), placed.clear()
    ranked = ranked.with_columns(pl.col("ts").forward_fill().over("source").alias("_ts")).with_columns(
        pl.int_range(pl.len()).over("rank", "source", "text").alias("_k")
    )
    counts = ranked.group_by("rank", "source").len().sort("rank", "len", "source", descending=[False, True, False])
    primary = counts.group_by("rank", maintain_order=True).first().select("rank", pl.col("source").alias("_primary"))
    ranked = ranked.join(primary, on="rank")
    main = ranked.filter(pl.col("source") == pl.col("_primary")).with_columns(
        pl.int_range(pl.len()).over("rank").cast(pl.Float64).alias("pos")
    )
    others = ranked.filter(pl.col("source") != pl.col("_primary"))
    copies = others.join(main.select("rank", "text", "_k", "pos"), on=["rank", "text", "_k"], how="inner")
    extras = others.join(main.select("rank", "text", "_k"), on=["rank", "text", "_k"], how="anti")
    # a line of another file is placed by its time when the rank's ordering file is dated throughout
    dated = main.group_by("rank").agg(pl.col("_ts").is_not_null().all().alias("_dated"))
    extras = extras.join(dated, on="rank", how="left")
    timed = extras.filter(pl.col("_dated") & pl.col("_ts").is_not_null())
    anchors = main.select("rank", "_ts", "pos").sort("_ts")
    placed_extras = (
        timed.sort("_ts")
        .join_asof(anchors.rename({"pos": "_before"}), on="_ts", by="rank", strategy="backward", check_sortedness=False)
        .with_columns((pl.col("_before").fill_null(-1.0) + 0.5).alias("pos"))
    )
    unplaced = extras.join(timed.select("rank", "source", "line"), on=["rank", "source", "line"], how="anti")
    unplaced = unplaced.with_columns(pl.lit(None, pl.Float64).alias("pos"))
    placed = pl.concat([main.select(cols), copies.select(cols), placed_extras.select(cols)])
    return placed.sort("rank", "pos", "source", "line"), unplaced.select(cols)


def last_lines(placed: pl.DataFrame, unplaced: pl.DataFrame) -> pl.DataFrame:
    """Per rank: its last line (text, file:line, time) in time order, and whether it is proven the last."""
    if placed.is_empty():
        return empty(LAST_SCHEMA)
    ordered = placed.sort("rank", "pos", "source", "line")
    last = ordered.group_by("rank", maintain_order=True).last()
    loose = unplaced.group_by("rank").len()
    return (
        last.join(loose, on="rank", how="left")
        .select(
            "rank",
            pl.format("{}:{}", "source", "line").alias("last_line_ref"),
            pl.col("text").alias("last_line"),
            pl.col("ts").alias("last_line_ts"),
            pl.col("len").is_null().alias("last_line_proven"),
        )
        .cast(LAST_SCHEMA)  # type: ignore[arg-type]
    )


def last_activity(t: Tables, placed: pl.DataFrame) -> pl.DataFrame:
    """Per rank: its last activity or progress event in time order (`last_activity`, `_ts`, `_ref`, with `pos`)."""
    act = t.kinds(*ACTIVITY_KINDS).filter(pl.col("rank").is_not_null()).select("rank", "source", "line", "ts", "text")
    if act.is_empty() or placed.is_empty():
        return pl.DataFrame(
            schema={
                "rank": pl.Int32(),
                "last_activity": pl.String(),
                "last_activity_ts": pl.Datetime("us"),
                "last_activity_ref": pl.String(),
                "last_activity_pos": pl.Float64(),
            }
        )
    where = placed.select("rank", "source", "line", "pos")
    act = act.cast({"rank": pl.Int32}).join(where, on=["rank", "source", "line"], how="inner")
    last = act.sort("rank", "pos", "source", "line").group_by("rank", maintain_order=True).last()
    return last.select(
        "rank",
        pl.col("text").str.slice(0, 300).alias("last_activity"),
        pl.col("ts").alias("last_activity_ts"),
        pl.format("{}:{}", "source", "line").alias("last_activity_ref"),
        pl.col("pos").alias("last_activity_pos"),
    )


@dataclass(frozen=True)
class FinishedWork:
    """The job's work was done before it failed: ranks that logged the end of training (`job_done`), where, and the
    last step reached before it (its progress line)."""

    ranks: tuple[int, ...]  # the ranks that said so (empty: an unranked console line said it)
    text: str  # the first such line
    ref: str
    ts: datetime | None
    last_step: str | None  # the last progress line before it, as written
    last_step_ref: str | None


def finished_work(t: Tables, placed: pl.DataFrame) -> FinishedWork | None:
    """Whether the work was done before the job failed: a `job_done` line (`training done`, the trainer's or the
    agent's end) earlier than every error and exit of the job; with the last step logged before it."""
    done = ordered(t.kinds(K.job_done), "ts", "source", "line", nulls_last=True)
    if done.is_empty():
        return None
    first = done.row(0, named=True)
    failures = pl.concat(
        [
            t.events.filter(pl.col("severity") == "error").select("source", "line", "ts"),
            t.elastic.filter(pl.col("exit_code").fill_null(0) != 0).select("source", "line", "ts"),
        ]
    )
    if failures.is_empty():
        return None  # nothing failed: the job finished, said elsewhere (`no_failure`)
    # a whole-second stamp (torchrun's summary, error files) means "within that second"
    whole = pl.col("ts").dt.microsecond() == 0
    stamped = failures.select(pl.when(whole).then(pl.col("ts").dt.offset_by("999999us")).otherwise("ts"))
    earliest = stamped.to_series().drop_nulls().min()
    if first["ts"] is not None and earliest is not None and earliest < first["ts"]:  # type: ignore[operator]
        return None  # something failed before the work was done
    same_file = failures.filter(pl.col("source") == first["source"])
    if first["ts"] is None and not same_file.filter(pl.col("line") < first["line"]).is_empty():
        return None
    ranks = tuple(sorted({int(r) for r in done["rank"].drop_nulls().to_list()}))
    steps = t.kinds(K.progress).filter(
        (pl.col("source") == first["source"]) & (pl.col("line") < first["line"])
        & ((pl.col("rank") == first["rank"]) if first["rank"] is not None else pl.col("rank").is_null())
    )  # fmt: skip
    step = steps.sort("line").row(-1, named=True) if not steps.is_empty() else None
    return FinishedWork(
        ranks=ranks,
        text=str(first["text"] or ""),
        ref=f"{first['source']}:{first['line']}",
        ts=first["ts"],
        last_step=str(step["text"]) if step else None,
        last_step_ref=f"{step['source']}:{step['line']}" if step else None,
    )


def task_hosts(t: Tables) -> pl.DataFrame:
    """(rank, host) from srun's task lines (`srun: error: HOST: task N: ...`: `value` the host, `detail` the task)
    when srun launched the ranks themselves - no torchrun summary in the job, whose agents would be srun's tasks."""
    nothing = empty({"rank": pl.Int32(), "host": pl.String()})
    if not t.elastic.is_empty():
        return nothing
    tasks = pl.col("value").is_not_null() & pl.col("detail").str.contains(r"^\d+$")
    rows = filtered(t.kinds(K.scheduler_task_exit), tasks)
    if rows.is_empty():
        return nothing
    return (
        rows.select(pl.col("detail").cast(pl.Int32).alias("rank"), pl.col("value").alias("host"))
        .unique("rank", keep="first", maintain_order=True)
        .sort("rank")
    )
