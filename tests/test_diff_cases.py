"""Real GOOD/BAD pairs (tests/diff_cases/<pair>/, made with the real-gloo corpus scripts, see their SOURCE.md):
the one thing that changed ranks first; where nothing changed, nothing is claimed relevant."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from ncclpm.api import diff

HERE = Path(__file__).resolve().parent / "diff_cases"
PAIRS = sorted(p.parent for p in HERE.glob("*/expected.toml"))


@pytest.fixture(scope="module", params=PAIRS, ids=[p.name for p in PAIRS])
def pair(request: pytest.FixtureRequest) -> tuple[dict, object]:
    case: Path = request.param
    spec = tomllib.loads((case / "expected.toml").read_text())
    return spec, diff([case / "good"], [case / "bad"])


def test_the_changed_factor_ranks_first_or_nothing_is_claimed(pair) -> None:
    spec, report = pair
    ranked = [(d.what, d.relevance) for d in report.differences]
    if spec.get("nothing_relevant"):
        assert report.relevant == (), ranked
        assert "No difference between GOOD and BAD bears on it" in report.headline
        if "note" in spec:
            assert any(spec["note"] in n for n in report.notes), report.notes
        return
    first = report.differences[0]
    assert first.what == spec["first"], ranked
    assert first.relevance == spec.get("first_relevance", "high"), ranked
    assert first.linked == spec.get("linked", first.linked), first.why
    assert first.good != first.bad
    assert first.good_evidence is not None and first.bad_evidence is not None, "the line from both runs"
    assert spec["first"] in report.headline


def test_bad_is_diagnosed_and_good_is_not_a_failure(pair) -> None:
    spec, report = pair
    assert report.bad.failed and not report.good.failed
    if "bad_category" in spec:
        assert report.bad.category == spec["bad_category"]


def test_volatile_differences_are_never_relevant(pair) -> None:
    _, report = pair
    for d in report.differences:
        if d.family in ("launcher_logging", "run_id", "progress_reached", "progress_collective") or (
            d.good and d.bad and "/" in d.good and "/" in d.bad and d.section in ("settings", "launcher")
        ):
            assert d.relevance == "none", d
