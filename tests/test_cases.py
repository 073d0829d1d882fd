"""Whole-job cases: each folder under tests/cases holds `input/` (or names a sample folder) and `expected.toml`.

expected.toml keys: category, culprit_ranks (exact) or culprit_ranks_include (subset), min_confidence,
max_confidence, must_fire, must_not_fire, failing_op, failing_seq, world_size, action, and `input` (path
relative to the repo root) when the job lives in sample_logs/.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from ncclpm.api import diagnose
from ncclpm.rules import by_id
from ncclpm.rules.base import LIVE_PREFIX

ROOT = Path(__file__).resolve().parents[1]
CASES = sorted(p.parent for p in (ROOT / "tests" / "cases").glob("*/expected.toml"))


def _input(case: Path, spec: dict) -> Path:
    return ROOT / spec["input"] if "input" in spec else case / "input"


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_case(case: Path) -> None:
    spec = tomllib.loads((case / "expected.toml").read_text())
    d = diagnose([_input(case, spec)])
    fired = {f.rule for f in d.findings}
    assert str(d.category) == spec["category"], d.summary
    if "culprit_ranks" in spec:
        assert list(d.culprit_ranks) == spec["culprit_ranks"], d.summary
    if "culprit_ranks_include" in spec:
        assert set(spec["culprit_ranks_include"]) <= set(d.culprit_ranks), d.summary
    assert d.confidence >= spec.get("min_confidence", 0.0)
    assert d.confidence <= spec.get("max_confidence", 1.0)
    assert set(spec.get("must_fire", [])) <= fired, fired
    assert not set(spec.get("must_not_fire", [])) & fired, fired
    if "failing_op" in spec:
        assert d.failing_collective and d.failing_collective["op"] == spec["failing_op"]
    if "failing_seq" in spec:
        assert d.failing_collective and d.failing_collective["seq"] == spec["failing_seq"]
    if "world_size" in spec:
        assert d.world_size == spec["world_size"]
    if "action" in spec:
        assert str(d.action) == spec["action"], d.action_reason
    if "summary_contains" in spec:
        assert spec["summary_contains"] in d.summary, d.summary
    if "fix_contains" in spec:  # the verdict's first fix
        assert d.primary.fixes and spec["fix_contains"] in d.primary.fixes[0], d.primary.fixes
    for ev in d.primary.evidence:
        assert ev.file and ev.text, "every evidence quote names its file and text"
    for f in d.findings:  # fix text has one source: the rule's FIXES (also its documentation)
        for text in f.fixes:
            assert any(p.match(text) for p in _fix_patterns(f.rule)), f"{f.rule}: {text!r} is not in its FIXES"


def _fix_patterns(rule_id: str) -> list[re.Pattern[str]]:
    """The rule's FIXES as regexes: their text, any value in their slots; a `live` fix may be put for next time
    (`LIVE_PREFIX`, its first letter lowered)."""
    slot = r"\\\{\w+\\\|[^{}]*\\\}"
    out = []
    for f in by_id(rule_id).FIXES.values():
        body = re.sub(slot, ".*", re.escape(f.text))
        if f.live:
            body = f"(?:{re.escape(LIVE_PREFIX)})?(?i:{body[0]}){body[1:]}"
        out.append(re.compile(f"^{body}$", re.DOTALL))
    return out
