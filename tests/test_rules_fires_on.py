"""A rule's `fires_on` (the event kinds without one of which its evidence is empty) lets the engine skip it: the
declaration must be exact. On every case, a rule the engine would skip finds no evidence when it is run anyway, and
the findings are the same with and without the skipping."""

from __future__ import annotations

import functools
import tomllib
from pathlib import Path

import pytest

from ncclpm import engine
from ncclpm.analysis import Analysis, analyse
from ncclpm.api import build
from ncclpm.rules import ALL_RULES
from ncclpm.rules.base import Rule
from ncclpm.tables import Tables
from ncclpm.tables.kinds import UnknownKind

ROOT = Path(__file__).resolve().parents[1]
CASES = sorted(p.parent for p in (ROOT / "tests" / "cases").glob("*/expected.toml"))
GATED = [r for r in ALL_RULES if r.fires_on]


def _input(case: Path) -> Path:
    spec = tomllib.loads((case / "expected.toml").read_text())
    return ROOT / spec["input"] if "input" in spec else case / "input"


@functools.cache
def _tables(case: Path) -> Tables:
    return build([_input(case)])


def _findings(facts: Analysis) -> list:
    found, warnings, skipped = engine.evaluate(facts, list(ALL_RULES))
    return [(f.rule, f.confidence, f.summary, f.culprit_ranks, f.evidence) for f in found] + [warnings, skipped]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_skipped_rules_find_nothing(case: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    facts = analyse(_tables(case))
    t = facts.t
    for cls in GATED:
        if all(facts.has(n) for n in cls.needs) and not cls.may_fire(t):
            assert cls(facts).evidence(t).is_empty(), f"{cls.id}: evidence without any of {sorted(cls.fires_on)}"
    skipping = _findings(facts)
    monkeypatch.setattr(Rule, "may_fire", classmethod(lambda cls, t: True))
    assert _findings(analyse(t)) == skipping


def test_every_declaration_is_exercised() -> None:
    """Each declared rule is skipped on some case and runs on another (a declaration no case reaches tests nothing)."""
    skipped, ran = set(), set()
    for case in CASES:
        t = _tables(case)
        for cls in GATED:
            (ran if cls.may_fire(t) else skipped).add(cls.id)
    assert skipped == ran == {r.id for r in GATED}


def test_fires_on_names_declared_kinds() -> None:
    with pytest.raises(UnknownKind):

        class _Bad(Rule):
            id = "XX99"
            name = "bad"
            fires_on = frozenset({"no_such_kind"})
