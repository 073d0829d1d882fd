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
        said = "Nothing changed between GOOD and BAD" if spec.get("nothing_changed") else "No difference"
        assert said in report.headline, report.headline
        if "note" in spec:
            assert any(spec["note"] in n for n in report.notes), report.notes
        return
    first = report.differences[0]
    assert first.what == spec["first"], ranked
    assert first.of == spec.get("first_of", first.of), first
    assert first.relevance == spec.get("first_relevance", "high"), ranked
    assert first.linked == spec.get("linked", first.linked), first.why
    assert first.good != first.bad
    assert first.good is not None and first.bad is not None, "a value both runs' files show"
    assert first.good_evidence is not None or first.good == "not set", "the line from GOOD, or GOOD's files without it"
    assert first.bad_evidence is not None, "the line from BAD"
    assert spec["first"] in report.headline
    if "controls" in spec:
        assert spec["controls"] in first.controls, first.controls
        assert first.controls_evidence is not None, "the line of the job's files that says what it controls"


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


def test_not_seen_is_never_a_difference_that_explains(pair) -> None:
    """A value only one run shows is no known change: listed at most, never relevant, never linked."""
    _, report = pair
    for d in report.differences:
        if d.good is None or d.bad is None:
            assert d.relevance == "none" and not d.linked, d


def test_the_world_size_is_compared_only_where_both_runs_state_it(pair) -> None:
    """The highest rank a run's logs happen to show is no world size: a script that logs on rank 0 only."""
    _, report = pair
    for d in report.differences:
        if d.family == "world_size" and d.good is not None and d.bad is not None:
            assert d.good_evidence is not None and d.bad_evidence is not None, d


@pytest.mark.parametrize("case", [p for p in PAIRS if (p / "good" / "run.sh").is_file()], ids=lambda p: p.name)
def test_ranks_per_host_is_stated_not_counted_from_the_ranks_a_summary_lists(case: Path) -> None:
    """torchrun's failure summary lists the ranks that failed, a healthy run lists none: the ranks per host are the
    launch line's `--nproc_per_node` (or every rank of a stated world size placed), never a count of what was shown.
    Both sides of a pair launched by a script state it."""
    report = diff([case / "good"], [case / "bad"])
    shown = [d for d in report.differences if d.family == "ranks_per_host" and (d.good is None or d.bad is None)]
    assert not shown, [(d.good, d.bad) for d in shown]
