"""Process exits as the launcher reports them: which ones a process did not choose."""

from __future__ import annotations

import polars as pl

from ncclpm.rules._facts import victim_ranks
from ncclpm.rules._memo import per_job
from ncclpm.rules.base import Fix
from ncclpm.tables import Tables
from ncclpm.util.signals import EXIT_SIGNALS, NATIVE_CRASHES

FATAL_SIGNALS = ["SIGKILL", *NATIVE_CRASHES]

# SIGBUS in a training process is memory it mapped that could not be backed, almost always /dev/shm.
BUS_ERROR = Fix(
    "SIGBUS: a page of mapped memory could not be backed - almost always a full `/dev/shm` (Docker's 64 MB "
    "default; DataLoader workers and NCCL both use it): run the container with `--shm-size=16g` or `--ipc=host`, "
    "check `df -h /dev/shm` on the node.",
    when="a process ended with SIGBUS",
)

OWN_ERROR = 1  # a Python process's exit code after an uncaught exception (a timeout's included)
TORN_DOWN = -15  # SIGTERM: the launcher ending a worker that was still running
WATCHDOG_ABORT = -6  # SIGABRT: how NCCL's watchdog ends a rank whose collective timed out or failed


def fatal_exit() -> pl.Expr:
    """An exit a process did not choose: a fatal signal, or a code other than 0, 1 (its own error) and -15 (torn
    down by its launcher)."""
    chosen = pl.col("exit_code").is_in([0, OWN_ERROR, TORN_DOWN])
    return pl.col("signal").is_in(FATAL_SIGNALS) | (pl.col("signal").is_null() & ~chosen)


@per_job
def unchosen_exits(t: Tables) -> pl.DataFrame:
    """The launcher's rows of ranks that ended by a fatal signal or an odd exit code (a SIGABRT only when the rank
    was not a victim: the watchdog aborts a rank whose collective timed out)."""
    victims = list(victim_ranks(t))
    named = pl.col("exit_code").replace_strict(EXIT_SIGNALS, default=None, return_dtype=pl.String)
    el = t.elastic.filter(pl.col("rank").is_not_null()).with_columns(pl.col("signal").fill_null(named))
    # Several ranks aborting at the same second are the watchdog's teardown after a collective, not crashes.
    at = pl.col("ts").cast(pl.String).fill_null("")
    aborts = el.filter(pl.col("signal") == "SIGABRT").with_columns(at.alias("_at"))
    wave = aborts.group_by("_at").len().filter(pl.col("len") >= 2)["_at"].to_list()
    sigabrt_ok = (pl.col("signal") != "SIGABRT") | ~(pl.col("rank").is_in(victims) | at.is_in(wave))
    rows = el.filter(fatal_exit().fill_null(False) & sigabrt_ok.fill_null(True))
    return rows.with_columns(
        pl.format("rank {} exited with code {} {}", "rank", "exit_code", pl.col("signal").fill_null(""))
        .str.strip_chars()
        .alias("text")
    )
