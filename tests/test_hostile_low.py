"""Hostile and unlucky input, round three (issue 27), part 5: the low items. A backtick in a `--baseline` category
broke the triage summary's code spans; `diff` took a folder of several jobs as one side; a gzipped UTF-16 log was
not decoded (`test_hostile_linear.py::test_a_utf16_log_gzipped_is_decoded`). Each failed before."""

from __future__ import annotations

import shutil
from pathlib import Path

import polars as pl
from click.testing import CliRunner
from markdown_it import MarkdownIt

from ncclpm.cli import main
from ncclpm.triage import to_frame
from ncclpm.triage.baseline import baseline_context, mark_new
from ncclpm.triage.summary import render_summary

ROOT = Path(__file__).resolve().parents[1]
CASES = ROOT / "tests" / "cases"
EVIL = "x`**bold**` <b>y</b> | z"


def _row(job: str, category: str, signature: str) -> dict:
    return {
        "job": job,
        "category": category,
        "rule": "CR01",
        "signature": signature,
        "error": None,
        "culprit_ranks": [],
    }


def _inline_tokens(md: str) -> list:
    return [c for tok in MarkdownIt("commonmark").enable("table").parse(md) if tok.children for c in tok.children]


def test_a_backtick_in_a_baseline_category_stays_inside_its_code_span() -> None:
    before = to_frame([_row("old0", EVIL, "ValueError: a"), _row("job1", EVIL, "ValueError: b")])
    now = to_frame([_row("job1", "rank_crash", "ValueError: b"), _row("new2", "rank_crash", "RuntimeError: c")])
    marked = mark_new(now, before)
    md = render_summary(marked, baseline=baseline_context(marked, before, "last.parquet"))
    tokens = _inline_tokens(md)
    assert not [t for t in tokens if t.type == "html_inline"], md
    outside = [t.content for t in tokens if "bold" in t.content and t.type != "code_inline"]
    assert not outside, outside  # (before: the backtick closed the span, `**bold**` was bold text)
    spans = [t.content for t in tokens if t.type == "code_inline"]
    assert sum("**bold**" in s for s in spans) >= 2, spans  # the whole category, shown as code


def _two_jobs(root: Path) -> Path:
    for i, case in enumerate(("excerpt_cuda_error_out_of_memory", "excerpt_cuda_error_out_of_memory")):
        shutil.copytree(CASES / case / "input", root / str(4471201 + i))
    return root


def test_diff_refuses_a_side_that_holds_several_jobs(tmp_path: Path) -> None:
    jobs = _two_jobs(tmp_path / "jobs")
    good = CASES / "excerpt_cuda_error_out_of_memory" / "input"
    for args in ([str(good), str(jobs)], [str(jobs), str(good)]):
        res = CliRunner().invoke(main, ["diff", *args])
        assert res.exit_code == 2, res.output
        side = "BAD" if args[1] == str(jobs) else "GOOD"
        assert f"{side}: {jobs} holds 2 separate jobs (4471201, 4471202)" in res.stderr, res.stderr
        assert "one run with one run" in res.stderr
    res = CliRunner().invoke(main, ["diff", str(good), str(jobs / "4471201")])
    assert res.exit_code == 0, res.output


def test_the_triage_summary_table_keeps_its_columns_with_a_pipe_in_a_category() -> None:
    before = to_frame([_row("a", EVIL, "s")])
    now = to_frame([_row("b", "rank_crash", "s")])
    md = render_summary(mark_new(now, before), baseline=baseline_context(now, before, "b.csv"))
    row = next(line for line in md.splitlines() if "bold" in line and line.startswith("|"))
    cells = pl.Series([row]).str.split(" | ").list.len()[0]
    assert cells == 5, row
