"""The README's rule table is generated from the registry; regenerate it (and everything else generated) with
`python scripts/regenerate.py`."""

from __future__ import annotations

from pathlib import Path

from ncclpm.ruledocs.readme import BEGIN, END, update_readme

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_rule_table_is_current() -> None:
    text = README.read_text()
    assert BEGIN in text and END in text
    assert update_readme(text) == text, "README rule table is stale: run `python scripts/regenerate.py`"


def test_readme_test_command_is_what_ci_runs() -> None:
    ci = (README.parent / ".ci" / "run").read_text()
    readme_cmd = "pip install -e '.[test]' && ruff check . && ruff format --check . && python -m pytest -q -n auto --dist loadfile"
    assert readme_cmd in README.read_text()
    assert readme_cmd.replace("pip install -e", "pip install -q -e") in ci


def test_readme_says_which_tests_need_the_shared_corpus() -> None:
    """A fresh clone without `../shared` skips some tests: the README says where the corpus goes (`../shared`,
    `NCCLPM_SHARED`) and names every test module that reads it."""
    text = README.read_text()
    assert "../shared" in text and "NCCLPM_SHARED" in text
    tests = README.parent / "tests"
    readers = sorted(
        p.name
        for p in tests.glob("test_*.py")
        if p.name != Path(__file__).name and "from tests.shared import" in (code := p.read_text()) and "corpus(" in code
    )
    assert readers, "no test reads the shared corpus: this test checks nothing"
    assert [name for name in readers if name not in text] == []
