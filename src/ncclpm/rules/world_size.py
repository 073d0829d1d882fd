"""CF02 world-size-mismatch."""

from __future__ import annotations

from typing import ClassVar

import polars as pl

from ncclpm.rules.base import Finding, Fix, Rule, quotes
from ncclpm.tables import Tables
from ncclpm.tables.kinds import K
from ncclpm.tables.schema import Category
from ncclpm.util.frames import ordered


class WorldSizeMismatch(Rule):
    """The ranks disagree on the job's size: nodes were launched with different world sizes.

    ## What it detects
    NCCL's `Bootstrap Root : mismatch in rank count from procs 16 : 8`: the bootstrap root expected one number of
    ranks and a rank arrived believing in another.

    ## Why it matters
    Every process computes WORLD_SIZE from its launcher's arguments (`--nnodes` x `--nproc_per_node`, or the
    scheduler's task count). Nodes started with different values reach each other but cannot form one
    communicator; the network, the GPUs and the code are not at fault, and it fails the same way every time.

    ## Example
    `node01:2231:2231 [0] NCCL WARN Bootstrap Root : mismatch in rank count from procs 16 : 8`.
    """

    id = "CF02"
    name = "world-size-mismatch"
    category = Category.CONFIG_VERSION
    base_confidence = 0.9
    explains = ("CT01", "CR01", "RZ01", "NW01")
    FIXES: ClassVar[dict[str, Fix]] = {
        "same_size": Fix(
            "Launch every node with the same `--nnodes` and `--nproc_per_node` (or the same `WORLD_SIZE`); with "
            "Slurm, derive them from `$SLURM_NNODES` / `$SLURM_NTASKS_PER_NODE` instead of hard-coding them."
        ),
    }

    def evidence(self, t: Tables) -> pl.DataFrame:
        return ordered(t.kinds(K.world_size_mismatch), "ts", "source", "line", nulls_last=True)

    def assess(self, t: Tables, ev: pl.DataFrame) -> Finding | None:
        row = ev.row(0, named=True)
        return self.finding(
            culprit_ranks=(),
            summary=f"The ranks disagree on the job's size: NCCL's bootstrap expected {row['expected']} ranks and a "
            f"rank came with {row['count']} (`mismatch in rank count`): the nodes were launched with different "
            "world sizes.",
            explanation="The ranks reached the bootstrap root, so the network works; they were started believing "
            "in different job sizes, so no communicator can hold them all.",
            evidence=quotes(ev),
            fixes=self.fixes(),
            dont=("Do not look for a network problem: the ranks reached each other and disagreed.",),
            verify=("Every node's launcher prints the same WORLD_SIZE (torchrun logs it at start-up).",),
        )
