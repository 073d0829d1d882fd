"""Real users' logs (../shared/corpus/real-issues): every case is a test; one summary test holds the floor.

A case listed in tests/real_issues_misses.toml is an expected miss (strict xfail: when it becomes right the
test fails, so the list and the published table stay true). The summary test prints the confusion and
calibration tables, fails below FLOOR or when the conclusive band is right less than 95% of the time, and
checks that docs/REAL_ISSUES.md shows the current tables (NCCLPM_UPDATE_DOCS=1 rewrites them).
"""

from __future__ import annotations

import os

import pytest

from tests.real_issues import (
    DOC,
    case_names,
    corpus_dir,
    doc_with,
    generated,
    known_misses,
    run_all,
    run_case,
    total,
)
from tests.shared import ABSENT

FLOOR = 0.87  # share of the corpus score; raised as readings land
CONCLUSIVE_PRECISION = 0.95  # a conclusive answer must be right (label) at least this often
NAMES = case_names()
needs_corpus = pytest.mark.skipif(corpus_dir() is None, reason=ABSENT)


@needs_corpus
@pytest.mark.parametrize("name", NAMES)
def test_real_issue(name: str) -> None:
    r = run_case(name)
    misses = known_misses()
    if name in misses:
        if r.score < 1.0:
            pytest.xfail(misses[name])
        pytest.fail(f"{name} is listed as a miss but is now right: remove it from tests/real_issues_misses.toml")
    assert r.category == r.label, f"{name}: got {r.category} ({r.band} {r.confidence}), label {r.label}"
    if r.label_culprits and r.culprits:
        assert set(r.culprits) & set(r.label_culprits), f"{name}: culprits {r.culprits}, label {r.label_culprits}"


@needs_corpus
def test_real_issues_summary(capsys: pytest.CaptureFixture[str]) -> None:
    results = run_all()
    with capsys.disabled():
        print("\n" + generated(results))
    share = total(results) / len(results)
    assert share >= FLOOR, f"corpus score {share:.1%} below the floor {FLOOR:.0%}"
    conclusive = [r for r in results if r.band == "conclusive"]
    if conclusive:
        right = sum(r.score == 1.0 for r in conclusive) / len(conclusive)
        assert right >= CONCLUSIVE_PRECISION, f"conclusive answers right {right:.0%} < {CONCLUSIVE_PRECISION:.0%}"
    text = DOC.read_text(encoding="utf-8")
    fresh = doc_with(results, text)
    if os.environ.get("NCCLPM_UPDATE_DOCS"):
        DOC.write_text(fresh, encoding="utf-8")
    assert fresh == text, "docs/REAL_ISSUES.md is stale: run `python scripts/regenerate.py` (or NCCLPM_UPDATE_DOCS=1)"


@needs_corpus
def test_every_listed_miss_is_a_case() -> None:
    assert set(known_misses()) <= set(NAMES)
