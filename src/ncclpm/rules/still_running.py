"""ST02 still-running-when-others-failed."""

from __future__ import annotations

from typing import ClassVar

import polars as pl

from ncclpm.analysis.crashes import OWN_ERROR, TORN_DOWN, WATCHDOG_ABORT
from ncclpm.rules.base import Finding, Fix, Rule, quotes, ranks_text
from ncclpm.tables import Tables
from ncclpm.tables.schema import Category

# How ranks that gave up waiting end: an uncaught timeout exception (1), or the NCCL watchdog's abort (-6)
GAVE_UP = (pl.col("exit_code") == OWN_ERROR) & pl.col("signal").is_null() | (pl.col("exit_code") == WATCHDOG_ABORT)


class StillRunningWhenOthersFailed(Rule):
    """Several ranks failed at the same second and one was still running: they were most likely waiting for it.

    ## What it detects
    torchrun's failure summary alone (no tracebacks, no rank's log): two or more ranks exited with code 1 (or
    -6, SIGABRT: NCCL's watchdog aborting them) at the same time, and fewer ranks were still running and ended by
    the launcher (`exitcode: -15 (SIGTERM)`), with no line showing any rank's own error or wait.

    ## Why it matters
    The summary says who exited first, which in a hang is a waiting rank; ranks failing together are what a
    collective timeout looks like from the outside, and the rank still running when they gave up is the one
    that never joined (busy with a checkpoint, evaluation or data preparation). Two ranks failing on their own
    at the same second is the less likely story, so this is a lead (possible), not a verdict: their errors are in
    their own output.

    ## Example
    `Failures: rank 2 exitcode 1 ... rank 1 exitcode -15 (SIGTERM)` / `Root Cause: rank 0 exitcode 1`, all at
    `2026-11-23_21:05:52`, `traceback : To enable traceback see: ...`.
    """

    id = "ST02"
    name = "still-running-when-others-failed"
    category = Category.SLOW_RANK_WORK
    base_confidence = 0.4
    explains = ("CT01", "IN01")
    needs = frozenset({"elastic"})  # the launcher's summary is all it reads
    FIXES: ClassVar[dict[str, Fix]] = {
        "their_errors": Fix(
            "Read the failed ranks' own output (`torchrun --log-dir DIR --tee 3` keeps it per rank), or decorate the "
            "entry point with `@torch.distributed.elastic.multiprocessing.errors.record` so the summary carries "
            "each rank's traceback: a collective timeout there confirms they waited for the rank still running."
        ),
        "stack": Fix(
            "Next time it hangs, `py-spy dump --pid <pid>` the rank that keeps running before the timeout fires: "
            "its stack shows the work that kept it from the collective."
        ),
    }

    def evidence(self, t: Tables) -> pl.DataFrame:
        el = t.elastic.filter(pl.col("rank").is_not_null() & pl.col("ts").is_not_null())
        failed = el.filter(GAVE_UP)
        if failed["rank"].n_unique() < 2 or failed["ts"].n_unique() != 1:
            return pl.DataFrame()  # one rank's exit, or exits at different times: a crash reads the same
        running = el.filter((pl.col("exit_code") == TORN_DOWN) & (pl.col("ts") >= failed["ts"][0]))
        if running.is_empty() or running["rank"].n_unique() >= failed["rank"].n_unique():
            return pl.DataFrame()
        if self.facts.victim_ranks or not self.facts.own_errors.is_empty():
            return pl.DataFrame()  # the logs say more: the rules that read them decide
        rows = pl.concat([failed, running]).sort("rank")
        # quoted as the summary says it (its `rank :` and `exitcode :` lines)
        return rows.with_columns(pl.coalesce("exit_line", "line").alias("line"), pl.col("exit_text").alias("text"))

    def assess(self, t: Tables, ev: pl.DataFrame) -> Finding | None:
        gave_up = ev.filter(GAVE_UP)
        failed = sorted(set(gave_up["rank"].to_list()))
        running = sorted(set(ev.filter(pl.col("exit_code") == TORN_DOWN)["rank"].to_list()))
        at = gave_up["ts"][0]
        codes = sorted(set(gave_up["exit_code"].to_list()), reverse=True)
        how = ", ".join("exit code 1" if c == OWN_ERROR else "SIGABRT: NCCL's watchdog abort" for c in codes)
        verb = "was" if len(running) == 1 else "were"
        return self.finding(
            culprit_ranks=tuple(running),
            summary=f"{ranks_text(failed).capitalize()} failed at the same second ({at:%H:%M:%S}, {how}) "
            f"while {ranks_text(running)} {verb} still running (ended by the launcher with SIGTERM): most likely "
            f"they timed out waiting for {ranks_text(running)}. Their own errors are not in these files.",
            explanation="torchrun's summary gives each rank's exit, not why. Ranks that fail together are what a "
            "collective timeout looks like from the outside; the rank still running then is the one they waited "
            "for. Their tracebacks would confirm it (a timeout) or overturn it (an error of their own).",
            evidence=quotes(ev, 6),
            fixes=self.fixes(),
            dont=("Do not chase the SIGTERM: the launcher sends it to every rank still running once one fails.",),
            verify=("The failed ranks' tracebacks end in a collective timeout naming the same collective.",),
            facts={"victim_ranks": failed},
        )
