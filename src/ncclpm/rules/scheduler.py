"""SL01 job-cancelled-by-scheduler."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import ClassVar

import polars as pl

from ncclpm.rules._hosts import ranks_on, where
from ncclpm.rules.base import Finding, Fix, Rule, quotes
from ncclpm.tables import Tables
from ncclpm.tables.kinds import K
from ncclpm.tables.schema import Category
from ncclpm.util.frames import filtered, ordered


class JobCancelledByScheduler(Rule):
    """The scheduler ended the job: Slurm cancelled the step at its time limit (or a node failed).

    ## What it detects
    `slurmstepd: error: *** STEP 771204.0 ON nid00123 CANCELLED AT ... DUE TO TIME LIMIT ***` (and `DUE TO NODE
    FAILURE`, `DUE TO PREEMPTION`).

    ## Why it matters
    Collective timeouts or SIGTERMs that follow a scheduler cancel are not an NCCL failure at all: the job ran
    out of wall-clock time (a limit too short for the work) or lost a node. Debugging NCCL here wastes days.
    The verdict is conclusive when the job was still logging progress just before the cancel; a job that had
    hung long before its time limit points at the hang instead (other rules), and a cancel without a reason
    (a user killing a hung job) is never taken as the cause.

    ## Example
    `*** STEP 771204.0 ON nid00123 CANCELLED AT 2025-11-03T12:00:14 DUE TO TIME LIMIT ***`
    """

    id = "SL01"
    name = "job-cancelled-by-scheduler"
    category = Category.TIMEOUT_TOO_SHORT
    base_confidence = 0.7
    explains = ("CT01", "CR01", "ST01", "TO01", "NW01")
    FIXES: ClassVar[dict[str, Fix]] = {
        "more_time": Fix(
            "Ask for more time (`#SBATCH --time=...`) or checkpoint regularly and requeue "
            "(`#SBATCH --requeue`, resume from the last checkpoint).",
            when="time limit",
        ),
        "compare_steps": Fix(
            "Compare step times before the cancel with earlier runs: if the job got slower, find out why.",
            when="time limit",
        ),
        "exclude_node": Fix(
            "Resubmit excluding the failed node (`--exclude=<node>`) and report it to the admins.",
            when="node failure",
        ),
    }

    def evidence(self, t: Tables) -> pl.DataFrame:
        # A cancel without a reason is a user or admin killing the job - usually because it hung: a consequence.
        return ordered(
            filtered(t.kinds(K.scheduler_cancel), pl.col("error_type").is_not_null()),
            "ts",
            "source",
            "line",
            nulls_last=True,
        )

    @staticmethod
    def _still_progressing(t: Tables, cancel_at: str | None) -> bool:
        """Did the job log progress in the 10 minutes before the cancel (it was working, not hung)?"""
        progress = t.kinds(K.progress, K.activity)["ts"].drop_nulls()
        if cancel_at is None or progress.is_empty():
            return False
        try:
            at = datetime.fromisoformat(cancel_at)
        except ValueError:
            return False
        return at - timedelta(minutes=10) <= progress.max() <= at

    def assess(self, t: Tables, ev: pl.DataFrame) -> Finding | None:
        r = ev.row(0, named=True)
        reason = (r["error_type"] or "a user or admin").strip()
        node_failure = "NODE FAILURE" in reason
        alive = self._still_progressing(t, r["version"])
        # `*** STEP ... ON <node>` names the node that reports the cancel; srun's `Node failure on <node>` the lost one.
        lost = t.kinds(K.node_failure)
        lost_nodes = sorted(set(lost["value"].drop_nulls().to_list())) if node_failure else []
        culprits = tuple(ranks_on(t, lost_nodes))
        return self.finding(
            category=Category.RANK_CRASH if node_failure else Category.TIMEOUT_TOO_SHORT,
            confidence=0.9 if (alive or node_failure) else self.base_confidence,
            culprit_ranks=culprits,
            summary=(
                f"Node {where(t, lost_nodes)} failed and the scheduler cancelled step {r['detail']}: this is not "
                "an NCCL failure."
                if lost_nodes
                else f"The scheduler cancelled step {r['detail']} on {r['value']} due to {reason.lower()}: "
                "this is not an NCCL failure."
            ),
            explanation=(
                "A node of the job failed; every rank on it died."
                if node_failure
                else "The job's wall-clock limit, not a collective timeout, ended it: the work needs more time "
                "than the job asked for (or it got slower)."
            ),
            evidence=quotes(lost) + quotes(ev),
            fixes=self.fixes("exclude_node") if node_failure else self.fixes("more_time", "compare_steps"),
            dont=("Do not change NCCL settings or the collective timeout: NCCL did not fail.",),
            verify=("The next run finishes (or checkpoints) before its time limit.",),
        )
