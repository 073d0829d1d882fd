"""Failures inside the tool, and the exit codes (documented in docs/SAFETY.md).

A rule that raises is a tool warning naming it, and the other rules still decide. Exit codes: 0 diagnosed,
1 a `--fail-on` threshold met, 2 usage or input error (nothing readable, bad option, an output file that exists
without --force), 3 a bug in ncclpm (one line on stderr) - never 1, which a CI job reads as "root cause found".
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

import ncclpm.api
from ncclpm.api import build, diagnose
from ncclpm.cli import main
from ncclpm.rules import ALL_RULES, by_id

ROOT = Path(__file__).resolve().parents[1]
CASE = ROOT / "tests" / "cases" / "rank0_slow_work__torchrun_3ranks" / "input"  # ST01 conclusive, FR02 supports
DL_LINE = "[rank1]: RuntimeError: DataLoader timed out after 5 seconds\n"


def _raise(message: str):
    def run(self, t):
        raise RuntimeError(message)

    return run


def _cli(*args: str, input: str | None = None):
    res = CliRunner().invoke(main, list(args), input=input)
    assert "Traceback" not in res.output, res.output
    return res


def test_a_rule_that_raises_is_a_warning_naming_it_and_the_others_still_decide(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(by_id("ST01"), "run", _raise("rule bug: boom"))  # the rule that wins on this case
    out = tmp_path / "r.json"
    res = _cli("diagnose", str(CASE), "-f", "json", "-o", str(out))
    assert res.exit_code == 0, res.output
    report = json.loads(out.read_text())
    assert any("ST01" in w and "RuntimeError: rule bug: boom" in w for w in report["warnings"]), report["warnings"]
    # FR02 (the dumps) still finds rank 0 slow on its own
    assert (report["category"], report["culprit_ranks"]) == ("slow_rank_work", [0])
    assert "ST01" not in {f["rule"] for f in report["findings"]} if "findings" in report else True
    assert "rule ST01" in res.output  # also on stderr


@pytest.mark.parametrize("exc", [KeyError("col"), ZeroDivisionError(), RecursionError(), IndexError(), TypeError()])
def test_any_exception_from_a_rule_is_contained(exc: Exception, monkeypatch: pytest.MonkeyPatch) -> None:
    def run(self, t):
        raise exc

    # CR01 runs on every job (no `fires_on`: DL01, skipped on a job without DataLoader lines, would never raise)
    monkeypatch.setattr(by_id("CR01"), "run", run)
    d = diagnose([CASE])
    assert any(w.startswith("rule CR01") and type(exc).__name__ in w for w in d.warnings), d.warnings
    assert str(d.category) == "slow_rank_work"


def test_every_rule_raising_still_gives_a_report(monkeypatch: pytest.MonkeyPatch) -> None:
    for rule in ALL_RULES:
        if not rule.fallback:
            monkeypatch.setattr(rule, "run", _raise(f"{rule.id} broken"))
    d = diagnose([CASE])
    failed = {w.split()[1] for w in d.warnings if w.startswith("rule ")}
    # a rule whose `fires_on` kinds the job lacks is not run at all (it could not fire): it cannot raise either
    tables = build([CASE])
    ran = {r.id for r in ALL_RULES if not r.fallback and r.id not in " ".join(d.not_evaluated) and r.may_fire(tables)}
    assert failed == ran
    assert d.primary.rule == next(r.id for r in ALL_RULES if r.fallback)


def test_the_fallback_rule_raising_is_contained_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "rank0.log").write_text("[rank0]: NCCL INFO nothing wrong here\n")
    fallback = next(r for r in ALL_RULES if r.fallback)
    monkeypatch.setattr(fallback, "run", _raise("fallback bug"))
    d = diagnose([tmp_path])
    assert any(fallback.id in w and "fallback bug" in w for w in d.warnings)


# --------------------------------------------------------------------------------------------------- exit codes


def _job(tmp_path: Path, text: str = DL_LINE) -> str:
    (tmp_path / "job").mkdir(exist_ok=True)
    (tmp_path / "job" / "rank1.log").write_text(text)
    return str(tmp_path / "job")


@pytest.mark.parametrize(
    ("args", "code"),
    [
        pytest.param(["diagnose", "{case}"], 0, id="diagnosed"),
        pytest.param(["diagnose", "{case}", "--fail-on", "possible"], 1, id="fail_on_possible_met"),
        pytest.param(["diagnose", "{case}", "--fail-on", "conclusive"], 1, id="fail_on_conclusive_met"),
        pytest.param(["diagnose", "{dl}", "--fail-on", "conclusive"], 0, id="fail_on_conclusive_not_met_by_likely"),
        pytest.param(["diagnose", "{dl}", "--fail-on", "likely"], 1, id="fail_on_likely_met"),
        pytest.param(["diagnose", "{empty}"], 2, id="empty_folder"),
        pytest.param(["diagnose", "{junk}"], 2, id="only_binary_junk"),
        pytest.param(["diagnose", "{tmp}/does-not-exist"], 2, id="missing_path"),
        pytest.param(["diagnose", "-"], 2, id="empty_stdin"),
        pytest.param(["diagnose"], 2, id="no_paths"),
        pytest.param(["diagnose", "{case}", "--format", "pdf"], 2, id="unknown_format"),
        pytest.param(["diagnose", "{case}", "--fail-on", "sometimes"], 2, id="unknown_band"),
        pytest.param(["diagnose", "{case}", "--patterns", "{tmp}/no-such-folder"], 2, id="missing_patterns_folder"),
        pytest.param(["diagnose", "{case}", "--no-such-option"], 2, id="unknown_option"),
        pytest.param(["diagnose", "{case}", "-o", "{existing}"], 2, id="output_exists_without_force"),
        pytest.param(["diagnose", "{case}", "-o", "{tmp}/no-such-folder/r.md"], 2, id="output_folder_missing"),
        pytest.param(["no-such-command"], 2, id="unknown_command"),
        pytest.param(["explain", "XX99"], 2, id="unknown_rule"),
        pytest.param(["tables", "{case}", "-t", "no_such_table"], 2, id="unknown_table"),
    ],
)
def test_exit_codes(tmp_path: Path, args: list[str], code: int) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "core.bin").write_bytes(bytes(range(32)) * 200)
    (tmp_path / "existing.md").write_text("keep me")
    names = {
        "case": str(CASE),
        "dl": _job(tmp_path),
        "empty": str(tmp_path / "empty"),
        "junk": str(tmp_path / "junk"),
        "tmp": str(tmp_path),
        "existing": str(tmp_path / "existing.md"),
    }
    res = _cli(*[a.format(**names) for a in args], input="")
    assert res.exit_code == code, res.output
    assert (tmp_path / "existing.md").read_text() == "keep me"


def test_nothing_readable_says_so(tmp_path: Path) -> None:
    res = _cli("diagnose", str(tmp_path))
    assert res.exit_code == 2 and "nothing readable" in res.output


@pytest.mark.parametrize("fail_on", [None, "possible"])
def test_a_crash_inside_ncclpm_exits_3_with_one_line_never_1(
    fail_on: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Exit 1 means "--fail-on threshold met" to CI; a bug must not look like a diagnosis."""

    def broken(*_a: object, **_k: object) -> None:
        raise ValueError("something nobody expected\nsecond line of a long polars message")

    monkeypatch.setattr(ncclpm.api, "build_tables", broken)
    monkeypatch.delenv("NCCLPM_DEBUG", raising=False)
    res = _cli("diagnose", str(CASE), *(["--fail-on", fail_on] if fail_on else []))
    assert res.exit_code == 3, res.output
    lines = [line for line in res.output.splitlines() if "internal error" in line]
    assert len(lines) == 1 and "ValueError: something nobody expected" in lines[0] and "second line" not in lines[0]
    assert "(at api.py:" in lines[0]  # where it broke: the innermost frame inside the ncclpm package


def test_ncclpm_debug_shows_the_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*_a: object, **_k: object) -> None:
        raise RuntimeError("debug me")

    monkeypatch.setattr(ncclpm.api, "build_tables", broken)
    monkeypatch.setenv("NCCLPM_DEBUG", "1")
    res = CliRunner().invoke(main, ["diagnose", str(CASE)])
    assert isinstance(res.exception, RuntimeError) and "debug me" in str(res.exception)


def test_the_frame_inside_ncclpm_is_found_by_module_not_by_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A checkout cloned into a folder named `ncclpm` puts `/ncclpm/` in the path of every test and venv file: the
    internal-error line still names the innermost frame of the ncclpm package, not the test's own code."""
    folder = tmp_path / "ncclpm" / "tests"
    folder.mkdir(parents=True)
    (folder / "helper_in_a_clone.py").write_text("def broken(*a, **k):\n    raise ValueError('boom')\n")
    monkeypatch.syspath_prepend(str(folder))
    import helper_in_a_clone  # type: ignore[import-not-found]

    monkeypatch.setattr(ncclpm.api, "build_tables", helper_in_a_clone.broken)
    monkeypatch.delenv("NCCLPM_DEBUG", raising=False)
    res = _cli("diagnose", str(CASE))
    assert res.exit_code == 3, res.output
    line = next(line for line in res.output.splitlines() if "internal error" in line)
    assert "(at api.py:" in line, line
