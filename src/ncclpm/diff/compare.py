"""Compare two runs: their facts side by side, each difference judged against BAD's diagnosis, ranked.

Facts with the same key are compared by value. A per-host or per-peer fact seen in one run only is not a
difference (the hosts and the shape already say what changed); NCCL's choices seen in one run only mean the
other ran without NCCL_DEBUG=INFO, which is said once instead of listing every fact. The same change seen under
several names (every host's NCCL version, many rank pairs' transport) is one difference listing the others.
"""

from __future__ import annotations

from dataclasses import replace

import polars as pl

from ncclpm.analysis import Analysis
from ncclpm.analysis.configuration import launched_scripts
from ncclpm.analysis.settings import env_knowledge
from ncclpm.diff.facts import config_facts, quote
from ncclpm.diff.nccl_facts import nccl_facts
from ncclpm.diff.progress import progress_differences
from ncclpm.diff.relevance import BadContext, api_error, family_order, judge
from ncclpm.diff_model import RELEVANCE, Difference, DiffReport, Fact, Quote, RunSummary
from ncclpm.model import Category, Diagnosis
from ncclpm.tables import Tables
from ncclpm.tables.kinds import K
from ncclpm.util.durations import coarse_duration
from ncclpm.util.signals import NATIVE_CRASHES

NOT_SET = "not set"


def run_facts(facts: Analysis) -> dict[str, Fact]:
    return {f.key: f for f in (*config_facts(facts), *nccl_facts(facts.t))}


def summarize(t: Tables, d: Diagnosis, facts: dict[str, Fact] | None = None) -> RunSummary:
    """One run as the diff shows it. Its world size only where stated (a line, the launch): the highest rank its logs
    happen to show is not one."""
    stated = (facts or {}).get("shape:world_size")
    world = int(stated.value) if stated is not None and stated.value.isdigit() else None
    errors = t.events.filter(pl.col("severity") == "error")
    exits = t.elastic.filter((pl.col("exit_code").fill_null(0) != 0) | pl.col("signal").is_not_null())
    return RunSummary(
        job=d.job,
        category=str(d.category),
        confidence=d.confidence,
        band=d.band,
        rule=d.primary.rule,
        summary=d.summary,
        culprit_ranks=tuple(d.culprit_ranks),
        decisive=tuple(Quote(e.file, e.line, e.text) for e in d.decisive[:4]),
        sources=d.n_sources,
        world_size=world,
        failed=d.category.names_a_cause or not (t.tracebacks.is_empty() and exits.is_empty() and errors.is_empty()),
    )


FAILURE_ERRORS = 20  # BAD's first error lines taken besides what its diagnosis quotes


def _failure_lines(t: Tables, d: Diagnosis) -> tuple[Quote, ...]:
    """The lines BAD's failure rests on: what its diagnosis quotes, its culprits' first errors, its first errors."""
    lines = [Quote(e.file, e.line, e.text) for e in (*d.decisive, *d.primary.evidence)]
    errors = t.events.filter(pl.col("severity") == "error").sort("source", "line").head(FAILURE_ERRORS)
    lines += [quote(r) for r in errors.iter_rows(named=True)]
    for r in d.ranks:
        if r.get("rank") in d.culprit_ranks and r.get("first_error"):
            file, _, line = str(r.get("first_error_ref") or "").rpartition(":")
            lines.append(Quote(file, int(line) if line.isdigit() else None, str(r["first_error"])))
    return tuple(dict.fromkeys(lines))


def _native_crash(t: Tables, d: Diagnosis) -> Quote | None:
    crash = t.events.filter(pl.col("kind") == K.crash_signal)
    if not crash.is_empty():
        return quote(crash.sort("source", "line").row(0, named=True))
    for r in d.ranks:
        if r.get("signal") in NATIVE_CRASHES:
            return Quote("torchrun summary", None, f"rank {r['rank']} exited with {r['signal']}")
    return None


def bad_context(good: Tables, good_facts: dict[str, Fact], bad: Tables, d: Diagnosis) -> BadContext:
    timeouts = bad.events.filter((pl.col("kind") == K.collective_timeout) & pl.col("timeout_ms").is_not_null())
    timeout_lines: dict[int, Quote] = {}
    for r in timeouts.sort("source", "line").iter_rows(named=True):
        timeout_lines.setdefault(int(r["timeout_ms"]), quote(r))
    hosts = good_facts.get("shape:hosts")
    return BadContext(
        category=str(d.category),
        failure_lines=(failure := _failure_lines(bad, d)),
        culprit_ranks=tuple(d.culprit_ranks),
        culprit_hosts={
            int(r["rank"]): str(r["host"]) for r in d.ranks if r["rank"] in d.culprit_ranks and r.get("host")
        },
        good_world_size=good.world_size,
        good_hosts=frozenset(good.lines["host"].drop_nulls().unique().to_list()) if hosts else frozenset(),
        timeout_lines=timeout_lines,
        native_crash=_native_crash(bad, d),
        api_error=api_error(failure),
        unread_settings={str(k): str(v) for k, v in env_knowledge().get("unread", {}).items()},
    )


def _pair(
    good: dict[str, Fact], bad: dict[str, Fact], good_t: Tables, bad_t: Tables
) -> tuple[list[Difference], list[tuple[str, str]], int, list[str]]:
    """The facts of both runs side by side. A fact one run shows and the other does not is compared only when the
    other's files show it unset (the same launch script without the export or the argument): else the other run just
    did not say, which is no difference that can explain anything."""
    diffs: dict[str, Difference] = {}
    same: list[tuple[str, str]] = []
    notes: list[str] = []
    compared = 0
    for key in [*good, *(k for k in bad if k not in good)]:
        g, b = good.get(key), bad.get(key)
        fact = g or b
        assert fact is not None
        if g is not None and b is not None:
            compared += 1
            if g.value == b.value:
                if not g.paired_only:
                    same.append((_named(g), g.value))
                continue
        elif fact.paired_only or fact.section == "nccl":
            continue
        unset = NOT_SET if _unset_in(good_t if g is None else bad_t, fact) else None
        diffs[key] = Difference(
            fact.what,
            fact.family,
            fact.section,
            g.value if g else unset,
            b.value if b else unset,
            good_evidence=g.evidence if g else None,
            bad_evidence=b.evidence if b else None,
            of=fact.of,
            controls=fact.controls,
            controls_evidence=fact.controls_evidence,
            good_seconds=g.seconds if g else None,
            bad_seconds=b.seconds if b else None,
        )
    # a fact that only restates a changed setting (the timeout PG_TIMEOUT_S sets) is that setting's difference
    for key in list(diffs):
        vias = {f.via for f in (good.get(key), bad.get(key)) if f is not None and f.via}
        if vias and vias <= set(diffs):
            derived = diffs.pop(key)
            for via in vias:
                d = diffs[via]
                seconds = {"good_seconds": derived.good_seconds, "bad_seconds": derived.bad_seconds}
                diffs[via] = replace(d, **{k: v for k, v in seconds.items() if getattr(d, k) is None})
    for side, mine, other in (("GOOD", good, bad), ("BAD", bad, good)):
        if any(f.section == "nccl" for f in mine.values()) and not any(f.section == "nccl" for f in other.values()):
            notes.append(
                f"Only {side}'s logs show NCCL's choices (NCCL_DEBUG=INFO): transports, interfaces and channels "
                "are not compared."
            )
    return list(diffs.values()), same, compared, notes


def _named(f: Fact) -> str:
    """A fact's name as shown beside its value: `--nproc_per_node (torchrun)`, `PG_TIMEOUT_S`."""
    return f"{f.what} ({f.of})" if f.of else f.what


def _one_sided(d: Difference) -> Difference:
    """A fact only one run shows is no known change (the other run may just not have said it): never one that can
    explain BAD's failure, whatever BAD's failure says about its value."""
    if d.good is None or d.bad is None:
        side = "BAD" if d.good is None else "GOOD"
        why = f"only {side}'s files show it: cannot tell whether it changed"
        return replace(d, relevance="none", why=why, linked=False, failure_evidence=None)
    return d


def _unset_in(other: Tables, fact: Fact) -> bool:
    """A variable or a script argument the other run's files would show - the same launch script, env dump or launch
    line, without it: it was not set there."""
    if fact.evidence is None or not fact.key.startswith(("setting:", "arg:")):
        return False
    name = fact.evidence.file.rsplit("/", 1)[-1]
    if fact.key.startswith("arg:"):
        return (name, fact.of) in launched_scripts(other)
    return any(src.rsplit("/", 1)[-1] == name for src in (*other.sources, *other.code_sources))


def _fold(diffs: list[Difference]) -> list[Difference]:
    """The same change under several names (hosts, rank pairs) is one difference that lists the others."""
    groups: dict[tuple, list[Difference]] = {}
    for d in diffs:
        groups.setdefault((d.family, d.good, d.bad, d.relevance, d.linked), []).append(d)
    out = []
    for members in groups.values():
        first = members[0]
        also = tuple(m.what for m in members[1:]) + first.also
        out.append(Difference(**{**first.__dict__, "also": also}) if also else first)
    return out


def _rank_key(d: Difference) -> tuple:
    return (RELEVANCE.index(d.relevance), not d.linked, family_order(d.family), d.what)


def _value(v: str | None, seconds: float | None) -> str:
    """A value as written, in a code span, with its duration when it is one and reads otherwise: `60` (1 min)."""
    if v is None or v == NOT_SET:
        return "not seen" if v is None else NOT_SET
    text = f"`{v}`"
    if seconds is not None and coarse_duration(seconds) != v:
        text += f" ({coarse_duration(seconds)})"
    return text


def headline(good: RunSummary, bad: RunSummary, diffs: list[Difference], compared: int) -> str:
    if not bad.failed:
        verdict = "BAD shows no failure ncclpm can name."
    elif not Category(bad.category).names_a_cause:
        verdict = "BAD failed; its diagnosis names no cause."
    else:
        verdict = f"BAD failed with `{bad.category}`."
    top = [d for d in diffs if d.relevance in ("high", "medium")]
    if top:
        d = top[0]
        lead = "Most likely explained by" if bad.failed else "The difference that matters most:"
        name = f"`{d.what}`" + (f" of `{d.of}`" if d.of else "")
        return (
            f"{verdict} {lead} {name}: {_value(d.good, d.good_seconds)} in GOOD, {_value(d.bad, d.bad_seconds)} "
            f"in BAD - {d.why}."
        )
    minor = [d for d in diffs if d.relevance == "low"]
    if minor:
        return (
            f"{verdict} Only minor differences ({', '.join(f'`{d.what}`' for d in minor[:3])}): none is a likely "
            "cause; the failure did not come from a change ncclpm can see."
        )
    changed = [d for d in diffs if d.section != "progress" and d.good is not None and d.bad is not None]
    nothing = (
        "No setting, version or launch option shows in both runs: there was nothing to compare"
        if not compared
        else f"Nothing changed between GOOD and BAD: the {compared} settings, versions and launch options both runs "
        "show are the same"
        if not changed
        else f"No difference between GOOD and BAD bears on it: {compared} facts (versions, settings, shape, NCCL's "
        "choices) compared, the rest differs only in what cannot matter (times, pids, paths)"
    )
    if good.failed and Category(good.category).names_a_cause:  # two failures: not a before and after
        return (
            f"{verdict} GOOD failed too (`{good.category}`), so the runs are not a before and after. {nothing}; "
            "each run's own diagnosis names its cause (BAD's below)."
        )
    return (
        f"{verdict} {nothing}. The failure did not come from a change of configuration ncclpm can see: look at what "
        "happened only in BAD (its diagnosis below; a rank killed from outside, a node, a transient fault)."
    )


def same_work_note(good_t: Tables, good: RunSummary, bad_t: Tables, bad_d: Diagnosis) -> str | None:
    """When BAD blames a rank's work outside collectives and GOOD's same rank did the same work and completed, say
    so: that work alone does not explain BAD's failure."""
    if good.failed or bad_d.category != Category.SLOW_RANK_WORK or not bad_d.culprit_ranks:
        return None
    work = pl.col("kind") == K.activity
    for rank in bad_d.culprit_ranks:
        bad_work = bad_t.events.filter(work & (pl.col("rank") == rank))["detail"].drop_nulls().str.to_lowercase()
        same = good_t.events.filter(
            work & (pl.col("rank") == rank) & pl.col("detail").str.to_lowercase().is_in(bad_work.to_list())
        )
        if not same.is_empty():
            r = same.sort("source", "line").row(0, named=True)
            return (
                f"GOOD's rank {rank} did the same work ({r['detail']}, {r['source']}:{r['line']}) and GOOD completed: "
                "that work alone does not explain BAD's failure; what differs between the runs is listed below."
            )
    return None


def compare(good_a: Analysis, good_d: Diagnosis, bad_a: Analysis, bad_d: Diagnosis) -> DiffReport:
    """GOOD and BAD (each analysed once, `analysis.analyse`) and their diagnoses -> the ranked differences."""
    good_t, bad_t = good_a.t, bad_a.t
    good_facts, bad_facts = run_facts(good_a), run_facts(bad_a)
    diffs, same, compared, notes = _pair(good_facts, bad_facts, good_t, bad_t)
    diffs += progress_differences(good_a, bad_a)
    ctx = bad_context(good_t, good_facts, bad_t, bad_d)
    judged = sorted(_fold([_one_sided(judge(d, ctx)) for d in diffs]), key=_rank_key)
    good, bad = summarize(good_t, good_d, good_facts), summarize(bad_t, bad_d, bad_facts)
    warnings = [f"GOOD: {w}" for w in good_d.warnings] + [f"BAD: {w}" for w in bad_d.warnings]
    note = same_work_note(good_t, good, bad_t, bad_d)
    if note:
        notes.append(note)
    if good.failed and Category(good.category).names_a_cause:
        notes.insert(0, f"GOOD failed too (`{good.category}`: {good.summary}): the differences are not a before/after.")
    return DiffReport(
        good=good,
        bad=bad,
        differences=tuple(judged),
        same=tuple(same),
        headline=headline(good, bad, judged, compared),
        compared=compared,
        warnings=tuple(warnings),
        notes=tuple(notes),
    )
