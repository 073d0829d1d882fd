"""Start-up: help, version and usage errors answer without importing polars (it costs most of a tiny run)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

_CHILD = """
import json, sys
from ncclpm.cli import main
try:
    main(sys.argv[1:], prog_name="ncclpm")
    code = 0
except SystemExit as exc:
    code = exc.code
print(json.dumps({"code": code, "polars": "polars" in sys.modules}), file=sys.stderr)
"""


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (["--help"], 0),
        (["--version"], 0),
        (["diagnose", "--help"], 0),
        (["triage", "--help"], 0),
        (["diagnose"], 2),  # missing PATHS
        (["diagnose", "-f", "pdf", "x"], 2),
        (["no-such-command"], 2),
        (["rules"], 0),
        (["explain", "CR01"], 0),
        (["explain", "no-such-rule"], 2),
    ],
)
def test_help_and_usage_errors_import_no_polars(args: list[str], code: int) -> None:
    res = subprocess.run([sys.executable, "-c", _CHILD, *args], capture_output=True, text=True, timeout=60)
    out = json.loads(res.stderr.strip().splitlines()[-1])
    assert out == {"code": code, "polars": False}, res.stderr[-500:]


def test_the_format_list_is_the_renderers() -> None:
    from ncclpm.cli import FORMATS
    from ncclpm.render import RENDERERS

    assert tuple(sorted(RENDERERS)) == FORMATS


def test_import_ncclpm_is_lazy_but_complete() -> None:
    code = "import sys, ncclpm; a = 'polars' in sys.modules; ncclpm.diagnose; ncclpm.Diagnosis; print(a)"
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert res.stdout.strip() == "False"


def test_the_band_list_is_the_bands() -> None:
    from ncclpm.cli import BANDS
    from ncclpm.tables.schema import Band

    assert tuple(str(b) for b in Band) == BANDS


def test_the_rules_index_is_the_registry() -> None:
    """`rules` and `explain` answer from rules_index.json: regenerate it (`python scripts/regenerate.py`) when a
    rule's id, name, category or documentation changes."""
    from ncclpm.precedence import PRECEDENCE
    from ncclpm.ruledocs.index import INDEX, generate, load

    assert Path(INDEX).read_text(encoding="utf-8") == generate(), "stale: run `python scripts/regenerate.py`"
    assert sorted(load()) == sorted(rule_id for rule_id, _ in PRECEDENCE)


def test_a_rule_missing_from_the_index_is_read_from_the_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    from ncclpm.ruledocs import index as rules_index
    from ncclpm.rules import by_id

    full = rules_index.load()
    monkeypatch.setattr(rules_index, "load", lambda: {k: v for k, v in full.items() if k != "CR01"})
    assert rules_index.by_id("CR01", registered=True).doc == by_id("CR01").doc()
    with pytest.raises(KeyError):
        rules_index.by_id("CR01")


_LOADED = """
import json, os, sys
baseline = set(sys.modules)
import click
with_click = set(sys.modules)
sys.argv = ["ncclpm", *sys.argv[1:]]
exit_ = os._exit
def report(code):
    print(json.dumps(sorted(set(sys.modules) - with_click)), file=sys.stderr)
    exit_(code)
os._exit = report
from ncclpm.command import run
run()
"""
# what `ncclpm --help`, `rules` and `explain` may load besides click and what click loads: the CLI, its helpers, the
# rules' index (a JSON file), gettext's locale lookup (click translates its own words) and help formatting
_LIGHT = {
    "ncclpm",
    "ncclpm.cli",
    "ncclpm.command",
    "ncclpm.util.collector",
    "ncclpm.util",
    "ncclpm.util.folding",
    "ncclpm.util.outfile",
    "ncclpm.precedence",
    "ncclpm.ruledocs",
    "ncclpm.ruledocs.index",
    "gc",
    "locale",
    "_locale",
    "difflib",  # click's "did you mean" for a usage error
    "heapq",
    "_heapq",
    "textwrap",
    "click._textwrap",
}


@pytest.mark.parametrize("args", [["--help"], ["diagnose", "--help"], ["rules"], ["explain", "CR01"], ["nope"]])
def test_help_rules_and_explain_load_nothing_heavy(args: list[str]) -> None:
    """The `ncclpm` command (its console entry) for help, `rules` and `explain` loads click and little else: no
    polars, no rules, no parsers - and no `pathlib` or `shutil` either, which click's help does not need."""
    res = subprocess.run([sys.executable, "-c", _LOADED, *args], capture_output=True, text=True, timeout=60)
    loaded = set(json.loads(res.stderr.strip().splitlines()[-1]))
    extra = {m for m in loaded - _LIGHT if not m.startswith(("json", "encodings."))}
    assert not extra, f"loaded for {args}: {sorted(extra)}"
