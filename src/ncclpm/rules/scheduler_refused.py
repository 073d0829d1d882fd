"""SL02 scheduler-refused."""

from __future__ import annotations

from typing import ClassVar

import polars as pl

from ncclpm.rules._pending import log_ends_pending
from ncclpm.rules.base import Finding, Fix, Rule, quotes
from ncclpm.tables import Tables
from ncclpm.tables.kinds import K
from ncclpm.tables.schema import Category


class SchedulerRefusedRequest(Rule):
    """The cluster's scheduler refused the job's resource request: no process of the job started.

    ## What it detects
    Slurm's `srun: error: Unable to create step for job N: <reason>` (sbatch's `Batch job submission failed:`,
    salloc's `Job submit/allocate failed:`) with a reason about the request: `Memory required by task is not
    available`, `More processors requested than permitted`, `Requested node configuration is not available`, an
    invalid GRES, partition, account or QOS. At warn level, Kubernetes' `FailedScheduling ... 0/4 nodes are
    available: 4 Insufficient nvidia.com/gpu` when the log ends with the pod still waiting.

    ## Why it matters
    Nothing ran: no rank, no collective, no GPU. The request (GPUs, memory, tasks per node, partition) does not fit
    what the cluster or the allocation offers, and resubmitting it unchanged fails the same way.

    ## Example
    `srun: error: Unable to create step for job 881234: Memory required by task is not available`.
    """

    id = "SL02"
    name = "scheduler-refused"
    category = Category.CONFIG_VERSION
    base_confidence = 0.85
    explains = ("CR02",)
    fires_on = frozenset({K.scheduler_refused})
    FIXES: ClassVar[dict[str, Fix]] = {
        "fit_request": Fix(
            "Ask for what the allocation or the nodes have: `--mem` / `--mem-per-gpu` within the node's memory, "
            "`--ntasks-per-node` x `--cpus-per-task` within its cores, `--gres=gpu:N` within its GPUs, a partition, "
            "account and QOS you may use (`sinfo -o '%P %G %m %c'`, `sacctmgr show assoc user=$USER`); an `srun` "
            "inside `sbatch` cannot ask for more than the batch job's own allocation."
        ),
        "k8s_gpus": Fix(
            "Ask for what a node offers (`resources.limits: nvidia.com/gpu` per pod within one node's GPUs), or free "
            "or add nodes: `kubectl describe nodes | grep -A5 Allocated` shows what is taken.",
            "Kubernetes could not place the pod",
        ),
    }

    def evidence(self, t: Tables) -> pl.DataFrame:
        return t.kinds(K.scheduler_refused).sort("ts", "source", "line", nulls_last=True)

    def assess(self, t: Tables, ev: pl.DataFrame) -> Finding | None:
        errors = ev.filter(pl.col("severity") == "error")
        decisive = not errors.is_empty()
        if not decisive and not log_ends_pending(t, ev):
            return None  # the pod was placed later (its containers started, or failed): the wait passed
        row = (errors if decisive else ev).row(0, named=True)
        how = (
            "refused the job's resource request, so no process of the job started"
            if decisive
            else "had not placed the job when the log ends"
        )
        return self.finding(
            confidence=self.base_confidence if decisive else 0.6,
            culprit_ranks=(),
            summary=f"The cluster's scheduler {how}: `{row['detail']}` - the request does not fit what the "
            "cluster or its allocation offers.",
            explanation="The scheduler checks the request before any task starts: no rank ran and no collective or "
            "GPU was involved, so resubmitting the same request fails the same way.",
            evidence=quotes(pl.concat([errors, ev.filter(pl.col("severity") != "error")]), 3),
            fixes=self.fixes("fit_request" if decisive else "k8s_gpus"),
            dont=("Do not debug NCCL, the network or the code: nothing of the job ran.",),
            verify=("The scheduler starts the job's tasks (`squeue` shows it RUNNING, the pods Running).",),
        )
