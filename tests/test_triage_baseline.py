"""`ncclpm triage --baseline OLD`: failure signatures the baseline never had are marked "new" in the table and
the summary, and category shifts are shown."""

from __future__ import annotations

import shutil
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from ncclpm.cli import main
from ncclpm.triage import to_frame, write_table
from ncclpm.triage.baseline import BaselineError, baseline_context, category_shifts, mark_new, read_baseline
from ncclpm.triage.summary import render_summary

CASES = Path(__file__).resolve().parent / "cases"


def _row(job: str, category: str, signature: str, rule: str = "CR01", error: str | None = None) -> dict:
    return {"job": job, "category": category, "rule": rule, "signature": signature, "error": error, "culprit_ranks": []}


def _tables() -> tuple[pl.DataFrame, pl.DataFrame]:
    before = to_frame(
        [_row(f"old{i}", "slow_rank_work", "RuntimeError: Timed out waiting <n>ms", "ST01") for i in range(8)]
        + [_row("old8", "rank_crash", "ValueError: loss is NaN"), _row("old9", "unknown", "", "IN01")]
    )
    now = to_frame(
        [_row(f"new{i}", "rank_crash", "FATAL: checkpoint shard <n> has checksum <hex>") for i in range(5)]
        + [_row("new5", "slow_rank_work", "RuntimeError: Timed out waiting <n>ms", "ST01")]
        + [
            _row("new6", "unknown", "", "IN01"),
            _row("old8", "cuda_oom", "torch.OutOfMemoryError: CUDA out of memory", "OM01"),
        ]
    )
    return now, before


def test_signatures_the_baseline_never_had_are_new() -> None:
    now, before = _tables()
    marked = dict(mark_new(now, before).select("job", "baseline").iter_rows())
    assert {marked[f"new{i}"] for i in range(5)} == {"new"}
    assert marked["new5"] == "seen", "the same masked message, seen before"
    assert marked["new6"] == "seen", "no message: keyed by category and rule, which the baseline had"
    assert marked["old8"] == "new"


def test_category_shifts() -> None:
    now, before = _tables()
    shifts = {s["category"]: s for s in category_shifts(now, before)}
    assert shifts["slow_rank_work"]["shift"] and shifts["slow_rank_work"]["delta"] < -60
    assert shifts["rank_crash"]["shift"] and shifts["rank_crash"]["now"] == 5
    assert shifts["cuda_oom"]["shift"] and shifts["cuda_oom"]["before"] == 0, "a category that appears"
    assert not shifts["unknown"]["shift"], "10% before, 12.5% now"


def test_summary_shows_new_signatures_shifts_and_changed_jobs() -> None:
    now, before = _tables()
    marked = mark_new(now, before)
    md = render_summary(marked, baseline=baseline_context(marked, before, "last_week.parquet"))
    assert "## Against the baseline (last_week.parquet, 10 jobs)" in md
    assert "**new** · 5 jobs · `rank_crash` · `FATAL: checkpoint shard <n> has checksum <hex>`" in md
    assert "| `slow_rank_work` | 8 (80%) | 1 (12%) | -68 pts | **shift** |" in md
    assert "old8 (`rank_crash` → `cuda_oom`)" in md
    assert "| new0 **new** |" in md, "marked in the per-category job table"
    assert "Against the baseline" not in render_summary(marked), "nothing about a baseline without one"


@pytest.mark.parametrize("suffix", [".parquet", ".csv", ".ndjson"])
def test_baseline_is_read_in_every_table_format(tmp_path: Path, suffix: str) -> None:
    _, before = _tables()
    path = tmp_path / f"old{suffix}"
    write_table(before, path)
    assert read_baseline(path).height == before.height


def test_a_file_that_is_not_a_triage_table_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "x.csv"
    bad.write_text("a,b\n1,2\n")
    with pytest.raises(BaselineError, match="not a triage table"):
        read_baseline(bad)
    res = CliRunner().invoke(main, ["triage", str(tmp_path), "--baseline", str(bad)])
    assert res.exit_code == 2 and "not a triage table" in res.output


def test_triage_command_with_a_baseline(tmp_path: Path) -> None:
    """Last week: two crash jobs. This week: one of them again and a data-loader hang, against last week's table."""
    week1, week2 = tmp_path / "week1", tmp_path / "week2"
    for week, cases in (
        (week1, ["rank_crash__sigkill", "rank_crash__os_exit"]),
        (week2, ["rank_crash__sigkill", "dataloader_hang__dl_timeout"]),
    ):
        for case in cases:
            shutil.copytree(CASES / case / "input", week / case)
    old = tmp_path / "week1.parquet"
    runner = CliRunner()
    assert runner.invoke(main, ["triage", str(week1), "-o", str(old), "-j", "1"]).exit_code == 0
    table, summary = tmp_path / "week2.csv", tmp_path / "summary.md"
    res = runner.invoke(
        main, ["triage", str(week2), "-o", str(table), "--summary", str(summary), "--baseline", str(old), "-j", "1"]
    )
    assert res.exit_code == 0, res.output
    rows = {Path(job).name: mark for job, mark in pl.read_csv(table).select("job", "baseline").iter_rows()}
    assert rows == {"rank_crash__sigkill": "seen", "dataloader_hang__dl_timeout": "new"}
    text = summary.read_text()
    assert "Against the baseline (week1.parquet, 2 jobs)" in text and "`dataloader_hang`" in text
