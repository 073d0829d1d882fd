"""Per-rank rows grouped for display: culprits and unusual ranks one by one, identical healthy ranks folded
into one row ("ranks 4-1023: waiting in ALLREDUCE #12"), so a 1024-rank job stays readable."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ncclpm.model import Diagnosis

MAX_SINGLE_ROWS = 24
MAX_LABEL = 48


@dataclass(frozen=True)
class RankGroup:
    label: str
    ranks: tuple[int, ...]
    row: dict[str, Any]


def _span(ranks: list[int]) -> str:
    """[0, 1, 2, 5, 7, 8] -> "0-2, 5, 7-8"."""
    parts: list[str] = []
    start = prev = ranks[0]
    for r in [*ranks[1:], None]:
        if r is not None and r == prev + 1:
            prev = r
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if r is not None:
            start = prev = r
    return ", ".join(parts)


def _signature(row: dict[str, Any]) -> tuple:
    return (row["role"], row["timeout_op"], row["timeout_seq"], row["exit_code"], row["signal"], row["host"] is None)


def rank_groups(d: Diagnosis) -> list[RankGroup]:
    rows = list(d.ranks)
    if len(rows) <= MAX_SINGLE_ROWS:
        return [RankGroup(str(r["rank"]), (r["rank"],), r) for r in rows]
    culprits = [r for r in rows if r["role"] == "culprit"]
    singles = culprits if len(culprits) <= MAX_SINGLE_ROWS else []  # thousands of culprits fold like the rest
    rest: dict[tuple, list[dict[str, Any]]] = {}
    for r in rows:
        if not (r["role"] == "culprit" and singles):
            rest.setdefault(_signature(r), []).append(r)
    groups = [RankGroup(str(r["rank"]), (r["rank"],), r) for r in singles]
    for members in rest.values():
        ranks = sorted(m["rank"] for m in members)
        span = _span(ranks)
        span = span if len(span) <= MAX_LABEL else span[:MAX_LABEL].rsplit(",", 1)[0] + ", …"
        label = str(ranks[0]) if len(ranks) == 1 else f"{span} ({len(ranks)} ranks)"
        hosts = {m["host"] for m in members}
        row = members[0] if len(hosts) == 1 else {**members[0], "host": f"{len(hosts)} hosts"}
        groups.append(RankGroup(label, tuple(ranks), row))
    return sorted(groups, key=lambda g: g.ranks[0])
