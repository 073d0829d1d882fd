"""Process exits as the launcher reports them: which ones a process did not choose."""

from __future__ import annotations

import polars as pl

from ncclpm.ingest.tables import Tables
from ncclpm.rules._facts import victim_ranks

FATAL_SIGNALS = ["SIGKILL", "SIGSEGV", "SIGBUS", "SIGILL", "SIGFPE", "SIGABRT"]
OWN_ERROR = 1  # a Python process's exit code after an uncaught exception (a timeout's included)
TORN_DOWN = -15  # SIGTERM: the launcher ending a worker that was still running


def fatal_exit() -> pl.Expr:
    """An exit a process did not choose: a fatal signal, or a code other than 0, 1 (its own error) and -15 (torn
    down by its launcher)."""
    chosen = pl.col("exit_code").is_in([0, OWN_ERROR, TORN_DOWN])
    return pl.col("signal").is_in(FATAL_SIGNALS) | (pl.col("signal").is_null() & ~chosen)


def unchosen_exits(t: Tables) -> pl.DataFrame:
    """The launcher's rows of ranks that ended by a fatal signal or an odd exit code (a SIGABRT only when the rank
    was not a victim: the watchdog aborts a rank whose collective timed out)."""
    victims = list(victim_ranks(t))
    el = t.elastic.filter(pl.col("rank").is_not_null())
    fatal = fatal_exit()
    sigabrt_ok = (pl.col("signal") != "SIGABRT") | ~pl.col("rank").is_in(victims)
    rows = el.filter(fatal.fill_null(False) & sigabrt_ok.fill_null(True))
    return rows.with_columns(
        pl.format("rank {} exited with code {} {}", "rank", "exit_code", pl.col("signal").fill_null(""))
        .str.strip_chars()
        .alias("text")
    )
