"""MP01 main-process-first-outlasted-timeout."""

from __future__ import annotations

from typing import ClassVar

import polars as pl

from ncclpm.rules.base import Finding, Fix, Rule, quotes, ranks_text
from ncclpm.tables import Tables
from ncclpm.tables.kinds import K
from ncclpm.tables.schema import Category

MAIN_PROCESS = 0
FAILURES = [K.exception, K.dataloader_reraise, K.store_timeout, K.collective_timeout, K.nccl_error, K.worker_exit]


class MainProcessFirstOutlastedTimeout(Rule):
    """Ranks failed while waiting in a `main_process_first()` section: the main process's work there took longer
    than the timeout.

    ## What it detects
    Tracebacks through transformers/accelerate `main_process_first(desc="dataset map tokenization")` (or
    `local_main_process_first`) on the ranks that failed, with an error or a failed exit status of a non-main
    rank. Inside that section the main process runs the work first - dataset `map`, tokenisation, a download -
    while every other rank waits in a barrier.

    ## Why it matters
    The waiting ranks fail when the barrier times out (a store `Socket Timeout` or a watchdog timeout): their
    errors, and torchrun's "Root Cause" naming one of them, are symptoms. The cause is the main process's
    preprocessing outlasting the timeout (Trainer's `ddp_timeout`, 30 min by default).

    ## Example
    Several ranks' tracebacks end in `with training_args.main_process_first(desc="dataset map tokenization"):`;
    torchrun's summary: `rank : 1 (local_rank: 1)`, `exitcode : 1`.

    """

    id = "MP01"
    name = "main-process-first-outlasted-timeout"
    category = Category.SLOW_RANK_WORK
    base_confidence = 0.65
    explains = ("CT01", "CR01")
    FIXES: ClassVar[dict[str, Fix]] = {
        "preprocess_once": Fix("Preprocess the dataset once outside the distributed run and load the cached result."),
        "raise_timeout": Fix(
            "Or raise the timeout that applies: Trainer's `ddp_timeout` (seconds; default 1800), accelerate's "
            "`InitProcessGroupKwargs(timeout=timedelta(hours=2))`, `init_process_group(timeout=...)`."
        ),
    }

    def evidence(self, t: Tables) -> pl.DataFrame:
        sections = t.kinds(K.main_first_wait)
        if sections.is_empty():
            return sections
        failed = t.kinds(*FAILURES).filter(pl.col("rank").fill_null(-1) != MAIN_PROCESS)
        exits = t.elastic.filter((pl.col("exit_code").fill_null(0) != 0) & (pl.col("rank") != MAIN_PROCESS))
        return sections if not failed.is_empty() or not exits.is_empty() else sections.clear()

    def assess(self, t: Tables, ev: pl.DataFrame) -> Finding | None:
        work = ev["detail"].drop_nulls()
        what = f" ({work[0]})" if work.len() else ""
        exits = t.elastic.filter((pl.col("exit_code").fill_null(0) != 0) & (pl.col("rank") != MAIN_PROCESS))
        waiting = sorted(set(ev["rank"].drop_nulls().to_list()) | set(exits["rank"].drop_nulls().to_list()))
        waiting = [r for r in waiting if r != MAIN_PROCESS]
        named = f"; torchrun's summary names {ranks_text(waiting)}, a waiting rank" if not exits.is_empty() else ""
        return self.finding(
            culprit_ranks=(MAIN_PROCESS,),
            summary=f"The main process (rank {MAIN_PROCESS}) was still doing the work of a `main_process_first` "
            f"section{what} when the ranks waiting for it at the barrier gave up{named}.",
            explanation="Inside `main_process_first()` the main process works alone while the other ranks wait in "
            "a barrier; if the work outlasts the timeout, the waiting ranks fail. Their errors are symptoms.",
            evidence=quotes(ev, 3),
            fixes=self.fixes(),
            dont=("`NCCL_TIMEOUT` is read by nothing; `NCCL_BLOCKING_WAIT` does not lengthen the wait.",),
            verify=("The main process's log shows the section's work finishing after the others' failure time.",),
            facts={"victim_ranks": waiting},
        )
