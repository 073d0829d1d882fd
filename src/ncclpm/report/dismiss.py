"""Why not the others: each rival finding, and each explanation a reader would suspect that no rule found, is
dismissed in one clause from evidence - never from its confidence.

A rule states its own case (`Rule.why_not`: "no rank logged a DataLoader error; rank 0's last line is ..."). A rival
whose rule says nothing is compared with the winner line against line: it names no rank while the winner does, it
only starts after the winner's first line, it names the same rank without saying why - or the winner's line is the
stronger kind of evidence, for the reason its place in `precedence.PRECEDENCE` gives.
"""

from __future__ import annotations

from datetime import datetime

import polars as pl

from ncclpm import precedence
from ncclpm.analysis import Analysis
from ncclpm.model import Evidence, Finding, Rival, RuledOut, rank_span, said
from ncclpm.rules.base import Rule
from ncclpm.tables import Tables
from ncclpm.util.durations import human_duration

MAX_RULED_OUT = 4
_REASON = dict(precedence.PRECEDENCE)


def _ts(t: Tables, e: Evidence) -> datetime | None:
    if e.line is None:
        return None
    hit = t.events.filter((pl.col("source") == e.file) & (pl.col("line") == e.line))["ts"].drop_nulls()
    return hit.min() if hit.len() else None  # type: ignore[return-value]


def _quote(t: Tables, e: Evidence) -> str:
    return f"`{said(e.text, t.line_prefix, 90)}` ({e.ref})"


def compare(t: Tables, rival: Finding, winner: Finding) -> str:
    """The rival against the winner, line against line."""
    won = winner.evidence[0] if winner.evidence else None
    lost = rival.evidence[0] if rival.evidence else None
    if won is None:
        return f"{winner.rule} explains more of the job: {_REASON.get(winner.rule, '')}"
    if winner.culprit_ranks and not rival.culprit_ranks:
        return f"it names no rank, while {_quote(t, won)} names {rank_span(winner.culprit_ranks)}"
    t_won, t_lost = _ts(t, won), (_ts(t, lost) if lost is not None else None)
    if lost is not None and t_won is not None and t_lost is not None and t_lost > t_won:
        gap = human_duration((t_lost - t_won).total_seconds())
        return f"its first line {_quote(t, lost)} comes {gap} after {_quote(t, won)}: a consequence"
    if rival.culprit_ranks and set(rival.culprit_ranks) == set(winner.culprit_ranks):
        return f"it names the same {rank_span(winner.culprit_ranks)}, but only {_quote(t, won)} says why"
    return f"{_quote(t, won)} is the stronger evidence: {_REASON.get(winner.rule, '')}"


def _hook(cls: type[Rule], facts: Analysis, winner: Finding, mine: Finding | None, warnings: list[str]) -> str | None:
    if cls.why_not is Rule.why_not:
        return None
    try:
        return cls(facts).why_not(facts.t, winner, mine)
    except Exception as exc:  # a broken hook must not take the diagnosis down with it
        warnings.append(f"rule {cls.id} ({cls.name}) why_not failed: {type(exc).__name__}: {exc}")
        return None


def rivals_dismissed(
    facts: Analysis, rivals: list[Rival], winner: Finding, rules: list[type[Rule]], warnings: list[str]
) -> tuple[Rival, ...]:
    t = facts.t
    by_id = {r.id: r for r in rules}
    out = []
    for rival in rivals:
        f = rival.finding
        cls = by_id.get(f.rule)
        text = (_hook(cls, facts, winner, f, warnings) if cls is not None else None) or compare(t, f, winner)
        out.append(Rival(f, text))
    return tuple(out)


def ruled_out(
    facts: Analysis, rules: list[type[Rule]], findings: list[Finding], winner: Finding, warnings: list[str]
) -> tuple[RuledOut, ...]:
    """Suspects no rule found, in precedence order: each rule that did not fire says what the logs show instead."""
    fired = {f.rule for f in findings} | {winner.rule}
    out: list[RuledOut] = []
    for cls in sorted(rules, key=lambda r: precedence.RANK[r.id]):
        if cls.id in fired or cls.fallback or any(not facts.has(n) for n in cls.needs):
            continue
        if cls.category == winner.category:  # the verdict's own category is never a suspect to dismiss
            continue
        text = _hook(cls, facts, winner, None, warnings)
        if text:
            out.append(RuledOut(cls.id, str(cls.category), text))
    return tuple(out[:MAX_RULED_OUT])
