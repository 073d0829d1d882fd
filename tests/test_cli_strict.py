"""Issue 11, points 7 and 9: the terminal layout (`-f text`, `--color`, NO_COLOR; Markdown when piped) and a CLI as
strict as the linters users know (comma lists, unknown rule ids, nothing readable, nothing on stdout after an
error, --version)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from ncclpm import __version__
from ncclpm.cli import _default_format, _use_colour, main

ROOT = Path(__file__).resolve().parents[1]
JOB = str(ROOT / "sample_logs" / "gloo_dataloader_timeout")
SGR = re.compile(r"\x1b\[[0-9;]*m")


def run(*args: str) -> object:
    return CliRunner().invoke(main, list(args))


@pytest.fixture(scope="module")
def coloured() -> str:
    name = "job \x1b[2J\x1b]0;title\x07 <b>"
    res = run("diagnose", JOB, "-f", "text", "--color", "always", "--name", name)
    assert res.exit_code == 0, res.output
    return res.stdout


def test_text_report_is_compact_and_coloured_only_with_our_own_codes(coloured: str) -> None:
    assert SGR.search(coloured), "colours asked for"
    assert "\x1b" not in SGR.sub("", coloured), "no escape sequence from the input (the job name) survives"
    plain = SGR.sub("", coloured)
    lines = plain.splitlines()
    assert lines[1].startswith("dataloader_hang  conclusive 0.90") and "→ fix_code" in plain
    assert "WHAT HAPPENED" in plain and "WHY NOT THE OTHERS" not in plain and "FIXES" in plain


def test_no_colour_when_asked_or_piped() -> None:
    never = run("diagnose", JOB, "-f", "text", "--color", "never").stdout
    piped = run("diagnose", JOB, "-f", "text").stdout  # CliRunner's stdout is no terminal
    assert "\x1b" not in never and "\x1b" not in piped and never == piped


def test_colour_auto_follows_the_terminal_and_no_color(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")
    assert _use_colour("auto", None) and not _use_colour("auto", Path("r.txt")) and not _use_colour("never", None)
    monkeypatch.setenv("NO_COLOR", "1")
    assert not _use_colour("auto", None) and _use_colour("always", None)
    assert _default_format(None) == "text" and _default_format(Path("r.md")) == "md"
    monkeypatch.setattr(sys.stdout, "isatty", lambda: False)
    assert _default_format(None) == "md"


def test_markdown_is_the_default_when_piped() -> None:
    assert run("diagnose", JOB).stdout.startswith("# NCCL post-mortem: ")


def test_select_and_ignore_take_comma_lists_ids_and_names() -> None:
    res = run("diagnose", JOB, "-f", "json", "--select", "DL01,st01", "--select", "collective-timeout-symptom")
    assert res.exit_code == 0 and '"category": "dataloader_hang"' in res.stdout
    res = run("diagnose", JOB, "-f", "json", "--ignore", "dl01,FR02,SK01")
    assert res.exit_code == 0 and '"rule": "DL01"' not in res.stdout


@pytest.mark.parametrize("option", ["--select", "--ignore"])
def test_an_unknown_rule_id_is_a_usage_error_with_nothing_on_stdout(option: str) -> None:
    res = run("diagnose", JOB, option, "ST01,XX99")
    assert res.exit_code == 2 and res.stdout == "" and "no rule 'XX99'" in res.stderr


def test_nothing_readable_prints_nothing_on_stdout(tmp_path: Path) -> None:
    (tmp_path / "junk.bin").write_bytes(bytes(range(256)) * 64)
    res = run("diagnose", str(tmp_path), "-f", "json")
    assert res.exit_code == 2 and res.stdout == "" and "nothing readable" in res.stderr


def test_triage_of_nothing_readable_exits_2(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "junk.bin").write_bytes(bytes(range(256)) * 64)
    res = run("triage", str(tmp_path), "-j", "1")
    assert res.exit_code == 2 and res.stdout == "" and "nothing readable" in res.stderr
    assert "binary content" in res.stderr, "each unreadable job says why"
    empty = tmp_path / "empty"
    empty.mkdir()
    res = run("triage", str(empty / "missing"), "-j", "1")
    assert res.exit_code == 2 and res.stdout == ""


def test_version() -> None:
    res = run("--version")
    assert res.exit_code == 0 and __version__ in res.stdout
