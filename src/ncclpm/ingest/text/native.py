"""Native backtraces read across lines: a SIGABRT whose backtrace runs through torch's NCCL watchdog is the process
group ending its own process after a collective failed or timed out (torch calls `std::abort` there). Such a crash
line is the teardown, not a cause: its event is marked a victim's, as the watchdog's own teardown lines are."""

from __future__ import annotations

from functools import cache

import polars as pl

from ncclpm.tables.kinds import K
from ncclpm.util.resources import data_dir, read_toml

NEAR = 60  # lines around a crash line where its backtrace's frames are looked for (before: c10's handler; after)
_ABORT = r"SIGABRT|^Abort|Fatal Python error: Abort"


@cache
def _watchdog_symbols() -> tuple[str, ...]:
    return tuple(read_toml(data_dir("parsers") / "stack_frames.toml").get("native", {}).get("watchdog_symbols", []))


def watchdog_aborts(events: pl.DataFrame) -> pl.DataFrame:
    """`events` with the SIGABRT crash lines whose nearby native frames are the NCCL watchdog's marked victims."""
    symbols = list(_watchdog_symbols())
    frames = events.filter((pl.col("kind") == K.native_frame) & pl.col("text").str.contains_any(symbols))
    if frames.is_empty() or not symbols:
        return events
    aborts = events.filter(
        (pl.col("kind") == K.crash_signal)
        & (pl.col("signal").fill_null("").str.contains(_ABORT) | pl.col("detail").fill_null("").str.contains(_ABORT))
    )
    if aborts.is_empty():
        return events
    near = (
        aborts.select("source", "line")
        .join(frames.select("source", pl.col("line").alias("_frame")), on="source")
        .filter((pl.col("_frame") - pl.col("line")).abs() <= NEAR)
        .select("source", "line")
        .unique()
        .with_columns(pl.lit(True).alias("_watchdog"))
    )
    if near.is_empty():
        return events
    marked = events.join(near, on=["source", "line"], how="left")
    is_abort = pl.col("_watchdog").fill_null(False) & (pl.col("kind") == K.crash_signal)
    return marked.with_columns(pl.when(is_abort).then(True).otherwise(pl.col("victim")).alias("victim")).drop(
        "_watchdog"
    )
