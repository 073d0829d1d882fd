"""Meta-tests: the registry is complete, ids are unique, every rule documents itself and has a case."""

from __future__ import annotations

import importlib
import pkgutil
import tomllib
from pathlib import Path

import pytest

import ncclpm.rules as rules_pkg
from ncclpm.rules import ALL_RULES, by_id
from ncclpm.rules.base import DOC_SECTIONS, Rule

ROOT = Path(__file__).resolve().parents[1]


def _rule_classes_in_modules() -> set[type[Rule]]:
    found = set()
    for mod in pkgutil.iter_modules(rules_pkg.__path__):
        if mod.name.startswith("_") or mod.name == "base":
            continue
        module = importlib.import_module(f"ncclpm.rules.{mod.name}")
        found |= {
            v
            for v in vars(module).values()
            if isinstance(v, type) and issubclass(v, Rule) and v is not Rule and v.__module__ == module.__name__
        }
    return found


def test_every_rule_module_is_registered() -> None:
    assert _rule_classes_in_modules() == set(ALL_RULES)


def test_ids_and_names_are_unique() -> None:
    assert len({r.id for r in ALL_RULES}) == len(ALL_RULES)
    assert len({r.name for r in ALL_RULES}) == len(ALL_RULES)


@pytest.mark.parametrize("rule", ALL_RULES, ids=[r.id for r in ALL_RULES])
def test_rule_doc_has_the_fixed_sections(rule: type[Rule]) -> None:
    doc = rule.doc()
    assert doc.splitlines()[0].strip(), "first line is the title"
    for section in DOC_SECTIONS:
        assert section in doc, f"{rule.id} lacks {section}"


def _expected_cases() -> list[dict]:
    return [tomllib.loads(p.read_text()) for p in (ROOT / "tests" / "cases").glob("*/expected.toml")]


@pytest.mark.parametrize("rule", [r for r in ALL_RULES if not r.fallback], ids=lambda r: r.id)
def test_every_rule_fires_in_some_case(rule: type[Rule]) -> None:
    assert any(rule.id in c.get("must_fire", []) for c in _expected_cases()), f"no case shows {rule.id} firing"


@pytest.mark.parametrize("rule", ALL_RULES, ids=lambda r: r.id)
def test_every_rule_must_stay_silent_in_some_case(rule: type[Rule]) -> None:
    """A near miss: a real case that looks like the rule's and where it must not fire (its `must_not_fire`)."""
    assert any(rule.id in c.get("must_not_fire", []) for c in _expected_cases()), f"no case keeps {rule.id} silent"


def test_by_id_accepts_ids_and_names() -> None:
    assert by_id("st01") is by_id("rank-busy-outside-collectives")
    with pytest.raises(KeyError):
        by_id("XX99")
