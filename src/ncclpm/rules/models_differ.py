"""MC03 models-differ."""

from __future__ import annotations

from typing import ClassVar

import polars as pl

from ncclpm.rules.base import Finding, Fix, Rule, quotes, ranks_text
from ncclpm.tables import Tables
from ncclpm.tables.kinds import K
from ncclpm.tables.schema import Category

SHAPE_CHECK = "ddp.param_shape_differs"  # raised only by ranks whose parameter differs from process 0's


class ModelsDiffer(Rule):
    """The ranks built different models: DistributedDataParallel refused to wrap them.

    ## What it detects
    DDP's check of the parameters across ranks at construction: `DDP expects same model across all ranks, but
    Rank 0 has 4 params, while rank 2 has inconsistent 6 params` (every rank raises it, naming a rank whose count
    differs from its own) and `[2]: params[0] in this process with sizes [64, 16] appears not to match sizes of
    the same param in process 0` (only the ranks whose parameter differs from rank 0's raise it). The odd rank is
    the one every pair of disagreeing ranks has in common, or the ranks that differ from rank 0.

    ## Why it matters
    Every rank stops at the same line and the launcher reports them all failed, so the job reads like a crash of
    every rank (or of the first to print). The cause is in the program or its inputs: one rank built its model
    from another config, checkpoint or vocabulary, or under a rank-dependent branch; no node, network or NCCL
    setting is involved, and a rerun fails the same way.

    ## Example
    Ranks 0 and 1: `Rank 0 has 4 params, while rank 2 has inconsistent 6 params`; rank 2: `Rank 2 has 6 params,
    while rank 0 has inconsistent 4 params` - rank 2 built the other model.
    """

    id = "MC03"
    name = "models-differ"
    category = Category.MISMATCHED_COLLECTIVES
    base_confidence = 0.85
    explains = ("CR01", "CR02", "CR03")
    fires_on = frozenset({K.model_mismatch})
    FIXES: ClassVar[dict[str, Fix]] = {
        "same_model": Fix(
            "Build the model the same way on {ranks|every rank} as on the others: no layer added or sized under "
            "`if rank == ...`, the same config file, checkpoint and vocabulary on every node; print "
            "`sum(p.numel() for p in model.parameters())` and the parameters' shapes on each rank before wrapping "
            "the model in DDP."
        ),
    }

    def evidence(self, t: Tables) -> pl.DataFrame:
        return (
            t.kinds(K.model_mismatch)
            .filter(pl.col("subject_rank").is_not_null() & pl.col("peer").is_not_null())
            .with_columns(pl.col("peer").cast(pl.Int64, strict=False).alias("peer_rank"))
            .drop_nulls("peer_rank")
            .sort("ts", "source", "line", nulls_last=True)
        )

    def _odd(self, ev: pl.DataFrame) -> tuple[int, ...]:
        """The rank(s) whose model differs; both ends of the one pair when the logs cannot say which side."""
        shape = ev.filter(pl.col("event") == SHAPE_CHECK)
        if not shape.is_empty():  # raised only where a parameter differs from process 0's
            differ = set(shape["subject_rank"].to_list())
            others = set(self.facts.known_ranks) - {0}
            if len(others) > 1 and others <= differ:  # every other rank differs from rank 0: rank 0 is the odd one
                return (0,)
            return tuple(sorted(differ | ({0} if len(others) <= 1 else set())))
        pairs = [frozenset(p) for p in ev.select("subject_rank", "peer_rank").iter_rows()]
        common = frozenset.intersection(*pairs)
        if len(set(pairs)) > 1 and len(common) == 1:
            return tuple(common)
        return tuple(sorted(frozenset.union(*pairs)))

    def assess(self, t: Tables, ev: pl.DataFrame) -> Finding | None:
        odd = self._odd(ev)
        tie = len(odd) > 1
        own = ev.filter(pl.col("subject_rank").is_in(odd))  # the odd rank's own words first
        about = (own if not own.is_empty() else ev.filter(pl.col("peer_rank").is_in(odd))).row(0, named=True)
        if about["event"] == SHAPE_CHECK:
            what = (
                f"parameter {about['count']} has sizes {about['detail']} on rank {about['subject_rank']}, not rank 0's"
            )
        else:
            what = (
                f"rank {about['subject_rank']} has {about['count']} parameters where rank {about['peer_rank']} has "
                f"{about['numel_in']}"
            )
        who = (
            f"{ranks_text(list(odd))} built different models (the logs cannot say which side is the odd one)"
            if tie
            else f"{ranks_text(list(odd))} built a different model than the other ranks"
        )
        return self.finding(
            confidence=self.base_confidence - (0.1 if tie else 0.0),
            culprit_ranks=odd,
            summary=f"{who[0].upper()}{who[1:]}: DDP refused to wrap {'them' if tie else 'it'} ({what}) - the "
            "ranks' model configs differ.",
            explanation="DistributedDataParallel compares every rank's parameters before its first broadcast, so "
            "that mismatched gradients never reach a collective; every rank then stops at the same line. The cause "
            "is what the odd rank built: another config, checkpoint or vocabulary, or a rank-dependent branch.",
            evidence=quotes(ev, 4),
            fixes=self.fixes("same_model", ranks=ranks_text(list(odd)) if not tie else ""),
            dont=("Do not look for a crashed node or a network fault, and do not rerun as is: it fails the same way.",),
            verify=("Every rank prints the same parameter count, and DDP wraps the model on all of them.",),
            facts={"odd_ranks": list(odd)},
        )
