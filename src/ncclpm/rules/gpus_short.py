"""CF05 gpus-short."""

from __future__ import annotations

from typing import ClassVar

import polars as pl

from ncclpm.rules._pending import log_ends_pending
from ncclpm.rules.base import Finding, Fix, Rule, quotes
from ncclpm.tables import Tables
from ncclpm.tables.kinds import K
from ncclpm.tables.schema import Category


class GpusShort(Rule):
    """A serving or RL framework was asked for more GPUs than the node or the Ray cluster offers it.

    ## What it detects
    vLLM's `Tensor parallel size (N) cannot be larger than the number of available GPUs (M)`, `World size (N) is
    larger than the number of available GPUs (M) in this node`, `Cannot provide a placement group ... within 1800
    seconds`, `The number of required GPUs exceeds the total number of available GPUs in the placement group`,
    `Not enough resources to allocate N DP ranks`; verl's `Total available GPUs N is less than total desired GPUs
    M`; SGLang's `Custom placement group has N GPU bundles, but needs M`. At warn level only (vLLM's `Tensor
    parallel size (16) exceeds available GPUs (8)`, `Waiting for creating a placement group of specs for N
    seconds`), a lead: the start-up was still waiting for GPUs when the log ends.

    ## Why it matters
    The framework checks the GPUs it may use before starting any worker and stops, or waits for Ray to find them:
    no process crashed and no collective ran. Retrying changes nothing; the request or the cluster must change.

    ## Example
    `WARNING ... Tensor parallel size (16) exceeds available GPUs (8).` then `ValueError: Cannot provide a placement
    group of placement_group_specs=[...] within 1800 seconds.`
    """

    id = "CF05"
    name = "gpus-short"
    category = Category.CONFIG_VERSION
    base_confidence = 0.85
    explains = ("CR01", "CR02", "CF04")
    fires_on = frozenset({K.gpus_short})
    FIXES: ClassVar[dict[str, Fix]] = {
        "ask_less": Fix(
            "Ask for what the cluster has: lower the tensor-, pipeline- or data-parallel size, or the GPUs per "
            "actor and rollout of an RL job."
        ),
        "show_gpus": Fix(
            "Or make the GPUs visible: `ray status` lists what the cluster offers; every node must have joined it "
            "with the GPUs the job expects (`CUDA_VISIBLE_DEVICES`, `--num-gpus` of `ray start`)."
        ),
    }

    def evidence(self, t: Tables) -> pl.DataFrame:
        return t.kinds(K.gpus_short).sort("ts", "source", "line", nulls_last=True)

    def assess(self, t: Tables, ev: pl.DataFrame) -> Finding | None:
        errors = ev.filter(pl.col("severity") == "error")
        decisive = not errors.is_empty()
        if not decisive and not log_ends_pending(t, ev):
            return None  # the job went on past the warning or the wait (its workers started, or failed): the GPUs came
        said_row = (errors if decisive else ev).row(0, named=True)
        how = "stopped before starting its workers" if decisive else "was still waiting for them when the log ends"
        # vLLM's placement-group timeout is quoted by its wait (its specs, a long list, are in the evidence)
        what = said_row["detail"] or f"Cannot provide a placement group within {said_row['count']} seconds"
        return self.finding(
            confidence=self.base_confidence if decisive else 0.6,
            culprit_ranks=(),
            summary=f"The job asked for more GPUs than the node or the Ray cluster offers it, and {how} (`{what}`).",
            explanation="The framework checks the GPUs it may use before it starts any worker: nothing crashed and "
            "no collective ran, so retrying the same request on the same cluster fails the same way.",
            evidence=quotes(pl.concat([errors, ev.filter(pl.col("severity") != "error")])),
            fixes=self.fixes(),
            dont=("Do not look for a crashed rank or a network fault: no worker started.",),
            verify=("`ray status` shows at least the GPUs the job asks for before it starts.",),
        )
