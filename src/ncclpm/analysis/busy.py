"""What a rank was busy with outside collectives, and whether the others waited at a barrier.

Rank-local work shows as `activity` lines (checkpoint, evaluation, generation, data preparation) and tqdm
bars (`progress_bar`: percentage and elapsed time). In a shared console many scripts print such lines on the
main process only and without a rank prefix; when exactly one rank is unaccounted for, an unranked activity
line printed before the others gave up is attributed to it (and said to be attributed).
"""

from __future__ import annotations

from datetime import datetime

import polars as pl

from ncclpm.analysis.victims import BARRIER_SHAPED
from ncclpm.tables import Tables
from ncclpm.tables.kinds import K
from ncclpm.util.frames import filtered


def first_symptom(timeouts: pl.DataFrame, victim_lines: pl.DataFrame) -> datetime | None:
    """When the first rank gave up waiting: its first timeout, else its first victim line."""
    return timeouts["ts"].drop_nulls().min() or victim_lines["ts"].drop_nulls().min()  # type: ignore[return-value]


def _with_elapsed(t: Tables, act: pl.DataFrame) -> pl.DataFrame:
    """The elapsed time of the tqdm bar printed on the same line, if any (`ran_ms`)."""
    bars = t.kinds(K.progress_bar).select(
        "source", "line", pl.col("ran_ms").alias("bar_ms"), pl.col("count").alias("bar_pct")
    )
    return act.join(bars, on=["source", "line"], how="left")


def rank_local_work(
    t: Tables,
    ranks: list[int],
    victim_lines: pl.DataFrame,
    first: datetime | None,
    attribute_unranked: bool = False,
    order: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """One activity row per rank of `ranks` (where it started, with `bar_ms`/`bar_pct` and `attributed`); only work
    started by `first` (the first symptom) counts."""
    act = t.kinds(K.activity)
    mine = act.filter(pl.col("rank").is_in(ranks)).with_columns(pl.lit(False).alias("attributed"))
    # A console's unprefixed progress line is the one candidate's, or else rank 0's: scripts (Hugging Face,
    # Lightning, most others) log their progress on the main process only.
    owner = ranks[0] if len(ranks) == 1 else 0 if 0 in ranks else None
    if attribute_unranked and owner is not None:
        victim_sources = victim_lines["source"].unique().to_list()
        loose = act.filter(pl.col("rank").is_null() & pl.col("source").is_in(victim_sources))
        mine = pl.concat(
            [mine, loose.with_columns(pl.lit(owner, pl.Int32).alias("rank"), pl.lit(True).alias("attributed"))]
        )
    if mine.is_empty():  # no work line: a stalled DataLoader is still read from the rank's last progress line
        return data_stalls(t, ranks, order) if order is not None and not order.is_empty() else _with_elapsed(t, mine)
    # Only work that started before the others gave up counts (it is what they were waiting for).
    if first is not None:
        mine = mine.filter(pl.col("ts").is_null() | (pl.col("ts") <= first))
    # The work that kept a rank away started after its last progress line - in the rank's time order across its
    # files (a validation logged to stderr, the next steps printed to stdout): quote where it started ("Saving
    # checkpoint ..."), not where it ended ("Checkpoint saved in 270 s"), and never work the rank went on from.
    progress = t.kinds(K.progress).filter(pl.col("rank").is_in(ranks)).select("rank", "source", "line")
    if order is not None and not order.is_empty():
        where = order.select("rank", "source", "line", "pos")
        last_progress = (
            progress.cast({"rank": pl.Int32}).join(where, on=["rank", "source", "line"]).group_by("rank")
            .agg(pl.col("pos").max().alias("_last_progress"))
        )  # fmt: skip
        in_file = progress.group_by("rank", "source").agg(pl.col("line").max().alias("_file_progress"))
        mine = mine.cast({"rank": pl.Int32}).join(where, on=["rank", "source", "line"], how="left")
        mine = mine.join(in_file.cast({"rank": pl.Int32}), on=["rank", "source"], how="left")
        mine = _with_elapsed(t, mine.join(last_progress, on="rank", how="left"))
        # A line no order could place (a dated log beside undated progress lines) may have come before or after the
        # rank's last progress: it is the work only where no placed progress line could have followed it, and
        # nothing of its own file's progress did.
        unplaced = (
            pl.col("pos").is_null()
            & pl.col("_last_progress").is_null()
            & (pl.col("_file_progress").is_null() | (pl.col("line") > pl.col("_file_progress")))
        )
        placed = pl.col("pos").is_not_null() & (
            pl.col("_last_progress").is_null() | (pl.col("pos") >= pl.col("_last_progress"))
        )
        after = mine.filter(placed | unplaced).drop("pos", "_file_progress")
        mine = mine.drop("pos", "_file_progress")
    else:
        by_file = progress.group_by("rank", "source").agg(pl.col("line").max().alias("_last_progress"))
        mine = _with_elapsed(t, mine.join(by_file, on=["rank", "source"], how="left"))
        after = mine.filter(pl.col("_last_progress").is_null() | (pl.col("line") > pl.col("_last_progress")))
    # Of several bars of the same work, the one that had run longest says most.
    after = after.sort("rank", pl.col("bar_ms").fill_null(-1), "source", "line", descending=[False, True, False, False])
    started = after.group_by("rank", maintain_order=True).first()
    if order is not None and not order.is_empty():  # work a rank went on from is not what it was busy with
        started = started.drop("_last_progress")
        stalls = data_stalls(t, [r for r in ranks if r not in set(started["rank"].to_list())], order)
        return pl.concat([started, stalls], how="diagonal_relaxed").sort("rank")
    rest = mine.join(started.select("rank"), on="rank", how="anti").group_by("rank", maintain_order=True).last()
    return pl.concat([started, rest]).drop("_last_progress").sort("rank")


STALL_SECONDS = 1.0  # a step that waited this long for its batch ...
STALL_RATIO = 4.0  # ... and this many times its running average: the input pipeline stalled


def data_stalls(t: Tables, ranks: list[int], order: pl.DataFrame) -> pl.DataFrame:
    """Ranks whose last line is a progress line showing the step waited long for its batch (`data_wait`: far above
    its average): what they were busy with is their DataLoader, as a work row (`detail` says it in words)."""
    waits = filtered(t.kinds(K.data_wait), pl.col("rank").is_in(ranks) & pl.col("detail").is_not_null())
    if waits.is_empty():
        return _with_elapsed(t, t.kinds(K.activity).clear().with_columns(pl.lit(False).alias("attributed")))
    where = order.select("rank", "source", "line", "pos")
    last = where.group_by("rank").agg(pl.col("pos").max().alias("_last"))
    at_end = (
        waits.cast({"rank": pl.Int32}).join(where, on=["rank", "source", "line"]).join(last, on="rank")
        .filter(pl.col("pos") == pl.col("_last"))
        .with_columns(
            pl.col("detail").cast(pl.Float64, strict=False).alias("_s"),
            pl.col("value").cast(pl.Float64, strict=False).alias("_avg"),
        )
        .filter(
            (pl.col("_s") >= STALL_SECONDS)
            & (pl.col("_avg").is_null() | (pl.col("_s") >= STALL_RATIO * pl.col("_avg")))
        )
        .unique("rank", keep="first")
    )  # fmt: skip
    words = pl.format("waiting for its DataLoader: {} s for one batch", "detail")
    words = (
        pl.when(pl.col("value").is_not_null()).then(pl.format("{}, {} s on average", words, "value")).otherwise(words)
    )
    rows = at_end.with_columns(words.alias("detail"), pl.lit(False).alias("attributed")).drop(
        "pos", "_last", "_s", "_avg"
    )
    return _with_elapsed(t, rows)


def waiting_in_barrier(t: Tables, timeouts: pl.DataFrame, call_sites: pl.DataFrame) -> bool:
    """The waiting ranks sat in a barrier: a barrier-shaped collective timed out, tracebacks show `barrier`
    frames, or a `main_process_first` section was waited on. When torch printed the failed collective's own stack,
    its call decides (a 1-element all_reduce of a metric is shaped like a barrier but is not one)."""
    if not t.kinds(K.main_first_wait).is_empty():
        return True
    if not call_sites.is_empty():
        return call_sites["op"].fill_null("").str.contains("barrier").any()
    tiny = timeouts.filter(BARRIER_SHAPED)
    frames = t.tracebacks.filter(pl.col("frames").list.eval(pl.element().str.starts_with("barrier")).list.any())
    return not tiny.is_empty() or frames.height > 0
