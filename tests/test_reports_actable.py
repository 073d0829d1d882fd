"""Issue 26: reports you can act on without checking them. The points other than the renderings (test_rendered_output),
the diff (test_diff_cases) and the quotes (test_evidence_quotes): 1 a rank's last line across all its files, 5 a
job that finished and then died at teardown, 6 network scope by host, 7 hosts the logs name."""

from __future__ import annotations

from pathlib import Path

import pytest

from ncclpm.api import build, diagnose
from ncclpm.analysis import analyse
from ncclpm.render import render

ROOT = Path(__file__).resolve().parents[1]
CASES = ROOT / "tests" / "cases"


def _case(name: str):
    return diagnose([CASES / name / "input"], name=name)


# ------------------------------------------------------------------ 1. a rank's last line, across every file


def test_a_ranks_last_line_is_read_across_files_split_by_stream_and_interleaved_with_others() -> None:
    """Real run: rank 2's progress lines (stdout) and validation summaries (stderr, logging) are in its two torchrun
    files and interleaved with ranks 0 and 1 in the console, none stamped. Its last line is its last progress line,
    proven the last; its earlier `Finished validating` is neither its last line nor what it was busy with."""
    d = _case("real_dataloader_stall_split_files")
    mine = [m for m in d.story if 2 in m.ranks and m.kind == "last_activity"]
    assert mine, d.story
    assert "Epoch: [3][10/20]" in mine[0].text and "and nothing more" in mine[0].text, mine[0].text
    assert not any("Finished validating" in m.text for m in d.story), d.story
    assert "validating" not in d.summary and "DataLoader" in d.summary, d.summary
    row = next(r for r in d.ranks if r["rank"] == 2)
    assert "Epoch: [3][10/20]" in row["last_line"] and row["last_line_proven"], row
    assert "Epoch: [3][10/20]" in row["last_activity"], row


def test_nothing_more_is_said_only_where_no_line_of_the_rank_is_left_unplaced(tmp_path: Path) -> None:
    """Two files of one rank, no timestamps, no copy of each other: which line came last is unknown, so the report
    never says the rank logged nothing more."""
    job = tmp_path / "job"
    job.mkdir()
    (job / "rank0.log").write_text(
        "[rank0]: step 1 loss 2.0\n[rank0]:[E1014 10:10:00.000000000 ProcessGroupNCCL.cpp:688] [Rank 0] Watchdog caught"
        " collective operation timeout: WorkNCCL(SeqNum=7, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
        "Timeout(ms)=600000) ran for 600001 milliseconds before timing out.\n"
    )
    (job / "rank1.out").write_text("[rank1]: step 1 loss 2.1\n[rank1]: Saving checkpoint to /ckpt/step_2 ...\n")
    (job / "rank1.err").write_text("[rank1]: step 2 loss 1.9\n")
    facts = analyse(build([job]))
    last = facts.last_lines.filter(facts.last_lines["rank"] == 1)
    assert last.height == 1 and not last["last_line_proven"][0]
    d = diagnose([job])
    assert not any("nothing more" in m.text for m in d.story if 1 in m.ranks), d.story


# --------------------------------------------------------- 5. the work was done, then a crash at teardown


def test_a_job_that_finished_then_aborted_at_teardown_says_it_finished_first() -> None:
    d = _case("real_teardown_abort_after_training_done")
    first = d.story[0]
    assert first.kind == "finished" and "training done" in first.text and "step 30/30" in first.text, first
    assert set(first.ranks) == {0, 1}
    assert d.summary.startswith("The work was done") and "step 30/30" in d.summary, d.summary
    text = render(d, "text")
    assert text.index("work was done") < text.index("terminate called without an active exception")
    assert "teardown" in d.action_reason and any("destroy_process_group" in f for f in d.primary.fixes)


@pytest.mark.parametrize(
    "case", ["real_teardown_abort_after_training_done", "real_dataloader_stall_split_files", "excerpt_ib_async_port_error"]
)
def test_why_not_the_others_never_argues_against_the_verdicts_own_category(case: str) -> None:
    d = _case(case)
    assert all(r.finding.category != d.category for r in d.rivals), [r.finding.rule for r in d.rivals]
    assert all(r.category != str(d.category) for r in d.ruled_out), [r.rule for r in d.ruled_out]
