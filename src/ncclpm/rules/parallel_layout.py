"""CF06 parallel-layout."""

from __future__ import annotations

from typing import ClassVar

import polars as pl

from ncclpm.rules.base import Finding, Fix, Rule, quotes, ranks_text
from ncclpm.tables import Tables
from ncclpm.tables.kinds import K
from ncclpm.tables.schema import Category


class ParallelLayoutRefused(Rule):
    """The framework refused the job's parallel layout at start-up: a size does not divide another.

    ## What it detects
    A framework's check of its parallel sizes, raised as an exception: Megatron-LM's `world size (16) is not
    divisible by total_model_size (...)`, vLLM's `Total number of attention heads (40) must be divisible by tensor
    parallel size (3)`, DeepSpeed's `train_batch_size is not equal to micro_batch_per_gpu * gradient_acc_step *
    world_size`, torch's pipelining and DTensor checks (`num_stages 6 must be evenly divisible by pp_size 4`) - any
    `...Error:` line saying a size is not (or must be) divisible by a parallel, world or mesh size.

    ## Why it matters
    Every rank runs the same check on the same arguments and fails the same way on every run: the crash quoted is
    the setting, not a rank that failed, and no node, network or NCCL setting has anything to do with it.

    ## Example
    `[rank0]: AssertionError: world size (16) is not divisible by total_model_size (tensor_model_parallel_size *
    pipeline_model_parallel_size * context_parallel_size = 24)`.
    """

    id = "CF06"
    name = "parallel-layout"
    category = Category.CONFIG_VERSION
    base_confidence = 0.85
    explains = ("CR01", "CR02", "CF04")
    fires_on = frozenset({K.parallel_layout})
    FIXES: ClassVar[dict[str, Fix]] = {
        "divide": Fix(
            "Choose parallel sizes that divide what the message names: the world size must be a multiple of "
            "tensor x pipeline x context parallel (the rest is data parallel); attention heads, KV heads and layers "
            "must be multiples of the tensor- and pipeline-parallel sizes."
        ),
        "batch": Fix(
            "Make DeepSpeed's batch sizes multiply out: train_batch_size = train_micro_batch_size_per_gpu x "
            "gradient_accumulation_steps x data-parallel ranks (under the HF Trainer or accelerate, set them to "
            '"auto").',
            "DeepSpeed's batch sizes did not multiply to the world size",
        ),
    }

    def evidence(self, t: Tables) -> pl.DataFrame:
        return t.kinds(K.parallel_layout).sort("ts", "source", "line", nulls_last=True)

    def assess(self, t: Tables, ev: pl.DataFrame) -> Finding | None:
        first = ev.row(0, named=True)
        ranks = sorted(set(ev["rank"].drop_nulls().to_list()))
        where = f" on {ranks_text(ranks)}" if ranks else ""
        batch = ev["event"].eq("deepspeed.batch_size_product").any()
        return self.finding(
            culprit_ranks=(),  # every rank runs the same check: none is the odd one
            summary=f"The framework refused the job's parallel layout at start-up{where}: `{first['detail']}` - "
            "a setting to change, the same on every rank and every run.",
            explanation="The sizes are checked before any collective runs: the ranks that raised did not fail on "
            "their own, and the others stop or wait for them. Retrying, other nodes or NCCL settings change nothing.",
            evidence=quotes(ev, 3),
            fixes=self.fixes("batch" if batch else "divide"),
            dont=("Do not look for a crashed node or a network fault: the arguments were refused.",),
            verify=("The job starts with the new sizes: its parallel-state set-up lines print, then the first step.",),
        )
