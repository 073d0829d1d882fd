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
    readme_cmd = "pip install -e '.[test]' && ruff check . && ruff format --check . && python -m pytest -q"
    assert readme_cmd in README.read_text()
    assert readme_cmd.replace("pip install -e", "pip install -q -e") in ci
