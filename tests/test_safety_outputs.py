"""Output safety and failures inside the tool: log text never becomes markup, `-o` writes only where asked and
never overwrites without --force, a rule that raises is a warning, and the exit codes are the documented ones
(0 diagnosed, 1 a --fail-on threshold met, 2 usage or input error)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from ncclpm.api import diagnose
from ncclpm.cli import main
from ncclpm.render import render
from ncclpm.rules.dataloader import DataloaderFailure

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "sample_logs" / "nccl_rank0_sample_generation"
HOSTILE = '[rank1]: RuntimeError: DataLoader timed out after 5 seconds <script>alert("x")</script> & <b>bold</b>\n'


@pytest.fixture
def hostile_job(tmp_path: Path) -> Path:
    job = tmp_path / "job"
    job.mkdir()
    (job / "rank1.log").write_text(HOSTILE)
    return job


def test_html_shows_log_markup_as_text(hostile_job: Path) -> None:
    html = render(diagnose([hostile_job]), "html")
    assert "<script>alert" not in html and "&lt;script&gt;alert" in html
    assert "<b>bold</b>" not in html


def test_slack_escapes_ampersand_and_angle_brackets(hostile_job: Path) -> None:
    text = render(diagnose([hostile_job]), "slack")
    assert "<script>" not in text and "&lt;script&gt;" in text and "&amp;" in text
    assert len(text) < 4000


def test_output_file_is_not_overwritten_without_force(tmp_path: Path) -> None:
    out = tmp_path / "report.md"
    out.write_text("keep me")
    res = CliRunner().invoke(main, ["diagnose", str(SAMPLE), "-o", str(out)])
    assert res.exit_code == 2 and "--force" in res.output
    assert out.read_text() == "keep me"
    res = CliRunner().invoke(main, ["diagnose", str(SAMPLE), "-o", str(out), "--force"])
    assert res.exit_code == 0 and out.read_text().startswith("# NCCL post-mortem")


def test_output_only_where_asked(tmp_path: Path) -> None:
    out = tmp_path / "sub" / "r.json"
    res = CliRunner().invoke(main, ["diagnose", str(SAMPLE), "-f", "json", "-o", str(out)])
    assert res.exit_code == 2 and not out.parent.exists()  # a missing folder is an error, never created
    res = CliRunner().invoke(main, ["diagnose", str(SAMPLE), "-f", "json", "-o", str(tmp_path / "r.json")])
    assert res.exit_code == 0 and sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]


def test_a_rule_that_raises_is_a_tool_warning_and_the_others_still_decide(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(self, t):
        raise RuntimeError("rule bug")

    monkeypatch.setattr(DataloaderFailure, "evidence", boom)
    d = diagnose([SAMPLE])
    assert str(d.category) == "slow_rank_work"
    assert any("DL01" in w and "rule bug" in w for w in d.warnings)


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (["diagnose", str(SAMPLE)], 0),
        (["diagnose", str(SAMPLE), "--fail-on", "likely"], 1),
        (["diagnose", str(ROOT / "does-not-exist")], 2),
        (["diagnose"], 2),
        (["diagnose", str(SAMPLE), "--format", "pdf"], 2),
        (["explain", "XX99"], 2),
    ],
)
def test_exit_codes(args: list[str], code: int) -> None:
    res = CliRunner().invoke(main, args)
    assert res.exit_code == code, res.output
    assert "Traceback" not in res.output
