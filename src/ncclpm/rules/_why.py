"""Evidence the rules' `why_not` hooks state when they dismiss their own explanation: who joined the failing
collective, what a rank said last, when the first timeout fired. Each returns words from the logs, never a score."""

from __future__ import annotations

from datetime import datetime

import polars as pl

from ncclpm.analysis import Analysis
from ncclpm.model import Category, rank_span, said

# verdicts where a rank went quiet and the others waited: what a reader suspects first is a hang elsewhere
QUIET_VERDICTS = frozenset({Category.SLOW_RANK_WORK, Category.TIMEOUT_TOO_SHORT, Category.MISMATCHED_COLLECTIVES})


def joined(facts: Analysis) -> set[int]:
    """Ranks that reported a timeout in a collective (they had entered it)."""
    return set(facts.timeouts["rank"].drop_nulls().to_list())


def never_joined(facts: Analysis, ranks: tuple[int, ...]) -> list[int]:
    """Of `ranks`, those that never reported a collective timeout while others did."""
    waiting = joined(facts)
    return sorted(set(ranks) - waiting) if waiting else []


def collective(facts: Analysis) -> str:
    """`ALLREDUCE #6764 (NumelIn=1)` for the one collective every timed-out rank waited in, or ``."""
    keys = facts.timeouts.select("op", "seq", "numel_in").unique()
    if keys.height != 1 or keys["op"][0] is None:
        return ""
    op, seq, numel = keys.row(0)
    return f"{op}" + (f" #{seq}" if seq is not None else "") + (f" (NumelIn={numel})" if numel is not None else "")


def last_words(facts: Analysis, ranks: tuple[int, ...]) -> str:
    """`; rank 0's last line is `Generating sample images...` (slurm-48211.out:35)` for the first of `ranks` whose
    lines the logs show - its last line across every file in time order (`analysis/activity.py`) - or ``."""
    t = facts.t
    lasts = facts.last_lines
    for rank in ranks:
        row = lasts.filter(pl.col("rank") == rank)
        if row.is_empty() or not row["last_line"][0]:
            continue
        which = "last line is" if row["last_line_proven"][0] else "last line read is"
        text = said(row["last_line"][0], t.line_prefix, 90)
        return f"; {rank_span([rank])}'s {which} `{text}` ({row['last_line_ref'][0]})"
    return ""


def first_timeout(facts: Analysis) -> datetime | None:
    return facts.timeouts["ts"].drop_nulls().min()  # type: ignore[return-value]
