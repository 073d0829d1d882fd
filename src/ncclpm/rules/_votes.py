"""Who is the odd one out when ranks disagree on a collective: outvoted, or, on a tie, the one whose call came
from rank-local work."""

from __future__ import annotations

import polars as pl

from ncclpm.rules.base import ranks_text
from ncclpm.tables import Tables
from ncclpm.tables.kinds import K

# Frames of rank-local work: a collective called from inside them is one the other ranks did not call.
WORK_FRAMES = [K.frame_checkpoint, K.frame_evaluation]


def minority(votes: pl.DataFrame, key: str) -> tuple[int, ...]:
    """Ranks whose `key` value is held by fewer ranks than the most common one (all ranks on a tie)."""
    counts = votes.group_by(key).agg(pl.col("rank").unique().alias("ranks"), pl.col("rank").n_unique().alias("n"))
    if counts.height < 2:
        return ()
    top = counts["n"].max()
    losers = counts.filter(pl.col("n") < top)
    if losers.is_empty():  # tie: nobody can be outvoted
        return tuple(sorted(votes["rank"].unique().to_list()))
    return tuple(sorted({r for rs in losers["ranks"].to_list() for r in rs}))


def odd_by_work(t: Tables, fps: pl.DataFrame, tied: tuple[int, ...], how: str) -> tuple[tuple[int, ...], str]:
    """Break a tie with where each call came from: the training step's collectives are what every rank runs; one
    called from rank-local work (saving a checkpoint, evaluating) is the one a rank added."""
    frames = t.kinds(*WORK_FRAMES).select(
        "source",
        pl.col("line").alias("_frame_line"),
        pl.col("rank").alias("_frame_rank"),
        pl.coalesce("detail", "value").alias("_function"),
    )
    if frames.is_empty():
        return tied, how
    same_rank = pl.col("_frame_rank").is_null() | pl.col("rank").is_null() | (pl.col("_frame_rank") == pl.col("rank"))
    near = fps.join(frames, on="source").filter(
        (pl.col("_frame_line") < pl.col("line")) & (pl.col("_frame_line") >= pl.col("line") - 80) & same_rank
    )
    busy = sorted(set(near["subject_rank"].cast(pl.Int32).to_list()))
    if not busy or len(busy) == len(tied):
        return tied, how
    called = near.sort("_frame_line")["_function"].drop_nulls()
    where = f" (`{called[-1]}`)" if called.len() else ""
    return tuple(busy), f"{how}; {ranks_text(busy)}'s call came from rank-local work{where}"
