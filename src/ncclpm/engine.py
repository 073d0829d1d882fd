"""Run the rules on a job's tables and turn their findings into one `Diagnosis`.

The analysis stage runs once (`analysis.analyse`); each rule then runs in isolation on the tables and those facts:
a rule whose tables are absent is recorded as "not evaluated", a rule that raises becomes a tool warning and the
others still run. A finding another fired rule explains (`precedence.EXPLAINS`) is dropped as if it had not
fired. The primary finding is the most confident root cause (confidence band first, then the rule's place in
`precedence.PRECEDENCE`, then confidence); findings the primary explains (its `explains` ids, or whose culprits
are the primary's victims) are folded under it as symptoms; the rest are rivals with the reason they lose.
"""

from __future__ import annotations

from collections.abc import Iterable

from ncclpm import precedence
from ncclpm.analysis import Analysis, analyse
from ncclpm.model import Diagnosis, Rival
from ncclpm.report.actions import action_for
from ncclpm.report.connected import connected_facts
from ncclpm.report.dismiss import rivals_dismissed, ruled_out
from ncclpm.report.facts import (
    caveats,
    cross_check,
    culprit_hosts,
    failing_collective,
    fold_evidence,
    rank_rows,
    versions,
)
from ncclpm.report.noticed import who_noticed
from ncclpm.report.settings import settings_rows
from ncclpm.report.stacks import stack_report
from ncclpm.report.story import build_story
from ncclpm.rules import ALL_RULES, by_id
from ncclpm.rules.base import Finding, Rule
from ncclpm.tables import Tables
from ncclpm.tables.schema import Category


def select_rules(select: Iterable[str] = (), ignore: Iterable[str] = ()) -> list[type[Rule]]:
    sel = {s.lower() for s in select}
    ign = {s.lower() for s in ignore}
    chosen = []
    for rule in ALL_RULES:
        keys = {rule.id.lower(), rule.name}
        if (sel and not keys & sel and not rule.fallback) or keys & ign:
            continue
        chosen.append(rule)
    return chosen


def evaluate(facts: Analysis, rules: list[type[Rule]]) -> tuple[list[Finding], list[str], list[str]]:
    findings: list[Finding] = []
    warnings: list[str] = []
    skipped: list[str] = []
    for cls in rules:
        if cls.fallback:
            continue
        missing = [n for n in sorted(cls.needs) if not facts.has(n)]
        if missing:
            skipped.append(f"{cls.id} {cls.name}: no {', '.join(missing)}")
            continue
        if not cls.may_fire(facts.t):  # none of the kinds its evidence reads: it finds nothing (not "not evaluated")
            continue
        try:
            found = cls(facts).run(facts.t)
        except Exception as exc:  # a broken rule must not take the diagnosis down with it
            warnings.append(f"rule {cls.id} ({cls.name}) failed: {type(exc).__name__}: {exc}")
            continue
        if found is not None:
            findings.append(found)
    return unexplained(facts, findings, rules), warnings, skipped


def _fires(rule_id: str, facts: Analysis) -> bool:
    """Whether a rule that was not selected would fire (it still silences what it explains)."""
    cls = by_id(rule_id)
    if any(not facts.has(n) for n in cls.needs) or not cls.may_fire(facts.t):
        return False
    try:
        return cls(facts).run(facts.t) is not None
    except Exception:  # a broken silencer silences nothing; it is not this run's rule to report
        return False


def unexplained(facts: Analysis, findings: list[Finding], rules: list[type[Rule]]) -> list[Finding]:
    """`findings` without those another rule explains (`precedence.EXPLAINS`): as if they had not fired."""
    fired = {f.rule for f in findings}
    selected = {r.id for r in rules}
    silenced = {
        f.rule
        for f in findings
        for first in precedence.silencers(f.rule)
        if first in fired or (first not in selected and _fires(first, facts))
    }
    return [f for f in findings if f.rule not in silenced]


def _rank_key(f: Finding) -> tuple:
    """Band, then the rule's place in `precedence.PRECEDENCE` (earlier wins), then confidence."""
    return (f.band.rank, -precedence.RANK[f.rule], f.confidence, f.rule)


def _why_not(rival: Finding, primary: Finding) -> str:
    """Placeholder until `dismiss.rivals_dismissed` states the evidence (kept for callers of `choose` alone)."""
    return f"{primary.rule} ({primary.band}) is preferred"


def _run_fallback(fallback: type[Rule], facts: Analysis, warnings: list[str]) -> Finding:
    """The fallback rule is isolated like every other: if it fails, say so and still return a verdict."""
    try:
        found = fallback(facts).run(facts.t)
        if found is not None:
            return found
    except Exception as exc:  # a broken rule must not take the diagnosis down with it
        warnings.append(f"rule {fallback.id} ({fallback.name}) failed: {type(exc).__name__}: {exc}")
    return Finding(
        rule=fallback.id,
        name=fallback.name,
        category=Category.UNKNOWN,
        confidence=0.0,
        culprit_ranks=(),
        summary="Nothing conclusive.",
        explanation="No rule found a cause.",
        evidence=(),
    )


def choose(
    findings: list[Finding], rules: list[type[Rule]], facts: Analysis, warnings: list[str] | None = None
) -> tuple[Finding, list[Rival], list[Finding], list[Finding]]:
    """Primary root cause; rivals (with why they lose); symptoms it explains; findings that support it."""
    roots = sorted((f for f in findings if f.category != Category.SYMPTOM), key=_rank_key, reverse=True)
    fallback = next((r for r in rules if r.fallback), None)
    warnings = warnings if warnings is not None else []
    if roots:
        primary = roots[0]
    elif fallback is not None:
        primary = _run_fallback(fallback, facts, warnings)
    else:
        raise ValueError("no rule found anything and the fallback rule was not selected")
    victims = set(primary.victim_ranks)
    symptoms, rivals, supporting = [], [], []
    for f in findings:
        if f is primary:
            continue
        if f.category == primary.category:
            # another reading of the same verdict (a weaker rule, another source): support, never a rival - "why
            # not the others" does not argue against the verdict's own category
            supporting.append(f)
        elif (
            f.category == Category.SYMPTOM
            or f.rule in primary.explains
            or (f.culprit_ranks and set(f.culprit_ranks) <= victims)
        ):
            symptoms.append(f)
        else:
            rivals.append(Rival(f, _why_not(f, primary)))
    return primary, rivals, symptoms, supporting


def diagnose_tables(t: Tables, select: Iterable[str] = (), ignore: Iterable[str] = ()) -> Diagnosis:
    return diagnose_facts(analyse(t), select, ignore)


def diagnose_facts(facts: Analysis, select: Iterable[str] = (), ignore: Iterable[str] = ()) -> Diagnosis:
    """The diagnosis of a job already analysed (`analysis.analyse`: done once, whoever asks)."""
    t = facts.t
    rules = select_rules(select, ignore)
    findings, warnings, skipped = evaluate(facts, rules)
    primary, rivals, symptoms, supporting = choose(findings, rules, facts, warnings)
    stack_tree, stack_check = stack_report(facts, primary, findings)
    support_first = [e for s in supporting for e in s.evidence[:1]]
    victims_all = list({e.rank: e for s in symptoms for e in reversed(s.evidence[:8])}.values())[::-1][:4]
    candidates = list(dict.fromkeys([*primary.evidence[:8], *support_first[:2], *victims_all]))
    decisive = fold_evidence(candidates, t.line_prefix, primary.culprit_ranks, limit=6)
    rows = rank_rows(facts, primary)
    failing = failing_collective(facts)
    action, action_reason = action_for(primary)
    if primary.category == Category.NOT_A_TRAINING_LOG:  # said on stderr too: the input may be the wrong files
        warnings.append("no line of a distributed PyTorch job in the input: are these the job's own logs?")
    return Diagnosis(
        job=t.job_name,
        primary=primary,
        rivals=rivals_dismissed(facts, rivals, primary, rules, warnings),
        ruled_out=ruled_out(facts, rules, findings, primary, warnings),
        symptoms=tuple(symptoms),
        supporting=tuple(supporting),
        failing_collective=failing,
        world_size=t.world_size,
        world_size_declared=t.world_size_declared,
        ranks=rows,
        decisive=decisive,
        warnings=tuple(t.warnings) + tuple(warnings),
        not_evaluated=tuple(skipped),
        versions=versions(t),
        n_sources=len(t.sources),
        cross_check=cross_check(facts, primary),
        stack_tree=stack_tree,
        stack_check=stack_check,
        noticed=who_noticed(t),
        settings=settings_rows(facts),
        code_files=t.code_sources,
        caveats=caveats(facts),
        line_prefix=t.line_prefix,
        action=action,
        action_reason=action_reason,
        culprit_hosts=culprit_hosts(primary, rows),
        story=build_story(facts, primary, rows, failing),
        connected=connected_facts(facts, primary, warnings),
    )
