"""ST03 work-outlasted-timeout."""

from __future__ import annotations

from typing import ClassVar

import polars as pl

from ncclpm.model import said
from ncclpm.rules.base import Finding, Fix, Rule, quotes, ranks_text
from ncclpm.tables import Tables
from ncclpm.tables.kinds import K
from ncclpm.tables.schema import Category
from ncclpm.util.durations import duration_text

# What a process that gave up waiting leaves: its error, a traceback (cut or not), its timeout, its exit.
FAILURES = [
    K.exception,
    K.collective_timeout,
    K.store_timeout,
    K.nccl_error,
    K.worker_exit,
    K.teardown,
    K.watchdog_status,
]


class WorkOutlastedTimeout(Rule):
    """A process's rank-local work had run about as long as the timeout when another process failed: it kept them
    waiting past it.

    ## What it detects
    A tqdm bar of rank-local work - tokenising (`Running tokenizer on dataset`), a datasets `map`, loading a model -
    whose elapsed time is within 5% of a timeout that applies (the one the logs show, the one the code sets, else
    torch's defaults: 10 min for NCCL, 30 min for gloo, the store and Trainer's `ddp_timeout`), with another
    process's failure on the same line or after it: its traceback (even one the paste cuts before the exception
    line), a collective or store timeout, a failed exit.

    ## Why it matters
    The waiting processes fail at their barrier or first collective exactly one timeout after the work began; their
    tracebacks (`trainer.train`, `barrier`) point away from the process that was still busy. A bar that stops at
    `[29:55<...]` or `[30:09<...]` is that process, and the elapsed time matching the timeout is the proof.

    ## Example
    `Running tokenizer on dataset:  47%|████▊     | 1695000/3634744 [30:09<33:25, 967.30 examples/s]Traceback (most
    recent call last):` then another process's frames into `trainer.train(...)`.
    """

    id = "ST03"
    name = "work-outlasted-timeout"
    category = Category.SLOW_RANK_WORK
    base_confidence = 0.6  # the elapsed time matches a timeout; which process waited is in the failure's text
    explains = ("CT01", "CR02", "IN01")
    FIXES: ClassVar[dict[str, Fix]] = {
        "outside": Fix(
            "Do the work once before the distributed run (preprocess and save the dataset, then load it), or on "
            "every rank in parallel, so no rank waits for one process's long step."
        ),
        "timeout": Fix(
            "Or give the waiting ranks a timeout longer than the work: Trainer's `ddp_timeout` (seconds), "
            "`init_process_group(timeout=timedelta(hours=2))`, accelerate's `InitProcessGroupKwargs(timeout=...)`."
        ),
    }

    def evidence(self, t: Tables) -> pl.DataFrame:
        bars = self.facts.outlasting_work
        if bars.is_empty():
            return bars
        failed = pl.concat(
            [
                t.kinds(*FAILURES).select("source", "line", "text"),
                self.facts.cut_tracebacks.filter(~pl.col("launcher")).select("source", "line", "text"),
            ]
        )
        if failed.is_empty():
            return bars.clear()
        first_bar = bars["line"].min()
        # the failure is another process's, printed when or after the bar was (a traceback glued to the bar's line)
        later = failed.filter((pl.col("source") != bars["source"][0]) | (pl.col("line") >= first_bar))
        return bars if not later.is_empty() else bars.clear()

    def assess(self, t: Tables, ev: pl.DataFrame) -> Finding | None:
        bar = ev.sort("ran_ms", descending=True).row(0, named=True)
        culprits = tuple(sorted(set(ev["rank"].drop_nulls().to_list())))
        who = ranks_text(culprits).capitalize() if culprits else "The process printing it"
        failed = pl.concat(
            [
                t.kinds(*FAILURES).select("source", "line", "rank", "text"),
                # quoted at the innermost frame's own line: `text` is that frame, not the traceback's first line
                self.facts.cut_tracebacks.filter(~pl.col("launcher")).select(
                    "source", pl.col("frame_line").alias("line"), "rank", "text"
                ),
            ]
        ).sort("source", "line")
        first = failed.row(0, named=True)
        return self.finding(
            confidence=self.base_confidence,
            culprit_ranks=culprits,
            summary=f"{bar['work']} had been running {duration_text(bar['ran_ms'])} - about the "
            f"{duration_text(bar['matched_ms'])} timeout - when another process failed "
            f"(`{said(first['text'], t.line_prefix, 100)}`): {who.lower() if not culprits else who} kept the others "
            "waiting past their timeout.",
            explanation="Ranks that wait at a barrier or in their first collective for a process still doing rank-"
            "local work give up one timeout after the wait began; that the bar's elapsed time equals a timeout "
            "that applies here says the wait began with the work. Their errors are symptoms.",
            evidence=quotes(ev, 2) + quotes(failed, 2),
            fixes=self.fixes(),
            dont=("`NCCL_TIMEOUT` is read by nothing; NCCL settings do not change how long a rank may be busy.",),
            verify=(
                "The work's duration, timed on its own, exceeds the timeout; with it done beforehand the job "
                "passes that point.",
            ),
        )
