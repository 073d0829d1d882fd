"""OM01 cuda-out-of-memory."""

from __future__ import annotations

from typing import ClassVar

import polars as pl

from ncclpm.rules.base import Finding, Fix, Rule, quotes, ranks_text
from ncclpm.tables import Tables
from ncclpm.tables.kinds import K
from ncclpm.tables.schema import Category
from ncclpm.util.frames import ordered


class CudaOutOfMemory(Rule):
    """A rank ran out of GPU memory; the others then waited for it.

    ## What it detects
    `torch.OutOfMemoryError: CUDA out of memory. Tried to allocate ...` on one or more ranks.

    ## Why it matters
    The OOM kills (or derails) one rank mid-step; the rest block in the next collective until the timeout.
    Uneven memory (rank 0 holding extra state, a longer sequence on one rank, evaluation on rank 0 only)
    is the usual reason only some ranks OOM.

    ## Example
    `[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.` and
    `Watchdog caught collective operation timeout` on ranks 0-2.
    """

    id = "OM01"
    name = "cuda-out-of-memory"
    category = Category.CUDA_OOM
    base_confidence = 0.9
    explains = ("CT01", "CR01")
    FIXES: ClassVar[dict[str, Fix]] = {
        "less_memory": Fix("Lower the per-rank micro-batch or sequence length, or enable activation checkpointing."),
        "fragmentation": Fix(
            "Set `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` when the message shows a large "
            "reserved-but-unallocated amount (fragmentation)."
        ),
        "uneven_rank": Fix("Check what is special about the OOM rank (rank-0-only evaluation/logging, longest batch)."),
    }

    def evidence(self, t: Tables) -> pl.DataFrame:
        return ordered(t.kinds(K.cuda_oom), "ts", "source", "line", nulls_last=True)

    def assess(self, t: Tables, ev: pl.DataFrame) -> Finding | None:
        culprits = tuple(sorted(set(ev["rank"].drop_nulls().to_list())))
        others = self.facts.victim_ranks - set(culprits)
        # cuBLAS/cuDNN failing to allocate a workspace is memory in most cases, not all (a broken CUDA setup)
        indirect = ev["detail"].fill_null("").str.ends_with("_ALLOC_FAILED").all()
        return self.finding(
            confidence=0.75 if indirect else self.base_confidence,
            culprit_ranks=culprits,
            summary=f"{ranks_text(culprits).capitalize() if culprits else 'A rank'} ran out of GPU memory"
            f"{'; ' + ranks_text(sorted(others)) + ' then waited for it' if others else ''}.",
            explanation="An out-of-memory error stops the rank mid-step; the other ranks block in the next "
            "collective until the process-group timeout.",
            evidence=quotes(ev),
            fixes=self.fixes(),
            dont=("Do not raise the collective timeout: the rank is dead, waiting longer changes nothing.",),
            verify=("`torch.cuda.max_memory_allocated()` per rank stays below capacity for a few hundred steps.",),
            facts={"victim_ranks": sorted(others)},
        )
