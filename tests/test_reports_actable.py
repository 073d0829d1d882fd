"""Issue 26: reports you can act on without checking them. The points other than the renderings (test_rendered_output),
the diff (test_diff_cases) and the quotes (test_evidence_quotes): 1 a rank's last line across all its files, 5 a
job that finished and then died at teardown, 6 network scope by host, 7 hosts the logs name."""

from __future__ import annotations

from pathlib import Path

import pytest

from ncclpm.analysis import analyse
from ncclpm.api import build, diagnose
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


def test_work_a_dated_log_cannot_place_against_undated_progress_is_not_what_the_rank_was_busy_with() -> None:
    """Real run: rank 1's progress lines are undated (stdout.log), its `running evaluation` lines dated in its own
    log file, each followed there by the evaluation's result; which came last cannot be known, so no report says
    rank 1 was running an evaluation, and its last line is never said to be the last."""
    d = _case("real_dated_log_beside_undated_progress")
    said = " ".join([d.summary, *(m.text for m in d.story), *(e.text for r in d.rivals for e in r.finding.evidence)])
    assert "evaluation" not in said.lower(), said
    st01 = next(r.finding for r in d.rivals if r.finding.rule == "ST01")
    assert "evaluation" not in st01.summary and "No line says what it was doing" in st01.explanation, st01
    assert not any("nothing more" in m.text for m in d.story if 1 in m.ranks), d.story


def _progress_job(tmp_path: Path, last_of_rank1: list[str]) -> Path:
    """Two ranks of pytorch/examples imagenet (progress lines only); rank 0 times out in all_reduce, rank 1's lines end
    with `last_of_rank1`."""
    step = "Epoch: [3][{:>2}/20]\tTime  0.036 ( 0.042)\tData  0.003 ( 0.002)\tLoss 2.2621e+00 (2.2166e+00)"
    lines = [step.format(i) for i in (0, 5)]
    job = tmp_path / "job"
    job.mkdir()
    (job / "rank0.log").write_text(
        "\n".join(
            [
                *(f"[rank0]: {x}" for x in lines),
                "[rank0]: RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/"
                "gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting 20000ms for recv operation to complete",
            ]
        )
        + "\n"
    )
    (job / "rank1.log").write_text("\n".join(f"[rank1]: {x}" for x in [*lines, *last_of_rank1]) + "\n")
    return job


def test_a_stalled_dataloader_is_read_from_the_last_progress_line_without_any_work_line(tmp_path: Path) -> None:
    stalled = "Epoch: [3][10/20]\tTime  6.212 ( 1.017)\tData  6.201 ( 0.984)\tLoss 2.1864e+00 (2.1927e+00)"
    d = diagnose([_progress_job(tmp_path, [stalled])])
    assert "DataLoader" in d.summary and list(d.culprit_ranks) == [1], (d.summary, d.culprit_ranks)


def test_a_line_saying_the_evaluation_ended_is_not_what_the_rank_was_busy_with(tmp_path: Path) -> None:
    d = diagnose([_progress_job(tmp_path, [" * Acc@1 9.375 Acc@5 50.000", "*** Finished validating ***"])])
    assert "validating" not in d.summary.lower() and "evaluat" not in d.summary.lower(), d.summary


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
    "case",
    ["real_teardown_abort_after_training_done", "real_dataloader_stall_split_files", "excerpt_ib_async_port_error"],
)
def test_why_not_the_others_never_argues_against_the_verdicts_own_category(case: str) -> None:
    d = _case(case)
    assert all(r.finding.category != d.category for r in d.rivals), [r.finding.rule for r in d.rivals]
    assert all(r.category != str(d.category) for r in d.ruled_out), [r.rule for r in d.ruled_out]


# ------------------------------------------------------------------------------- 6. network scope by host


def test_an_ib_port_error_on_one_host_names_that_host_and_its_ranks() -> None:
    d = _case("excerpt_ib_port_error_one_host")
    assert d.culprit_hosts == ("h100-c07",) and list(d.culprit_ranks) == [4, 5, 6, 7], (
        d.culprit_hosts,
        d.culprit_ranks,
    )
    assert str(d.action) == "exclude_node" and "no node to blame" not in d.action_reason, d.action_reason


@pytest.mark.parametrize(
    ("case", "inside"), [("excerpt_ib_port_error_one_host", [6]), ("issue4_ib_error_one_host", [8, 11])]
)
def test_a_rank_that_failed_inside_the_collective_is_not_said_to_have_never_joined(
    case: str, inside: list[int]
) -> None:
    d = _case(case)
    wait = next(m for m in d.story if m.kind == "wait")
    assert "failed inside it" in wait.text, wait.text
    never = wait.text.split("which never joined")[0] if "which never joined" in wait.text else ""
    assert not any(f"rank {r}" in never or f" {r}," in never for r in inside), wait.text


def test_the_c10_stack_under_an_error_is_not_glued_to_the_error_line(tmp_path: Path) -> None:
    """`Exception raised from ...` opens the C++ stack torch prints under a message: never the tail of a line that
    happens to be as long as a terminal is wide (200 columns) and to end inside a token."""
    head = "[rank6]:NET/IB : Got async event : port error on mlx5_2:1 localGid ::ffff:10.40.1.7 remoteGid fe80::a288:c203:61f1"
    head += " lid 0x3f21 qpn 0x0001a2b4 psn 0x9c1f0e2d remote qpn 0x0001c7e9 gid 3 err 0x81 0x061f1"
    assert len(head) == 200, len(head)
    (tmp_path / "rank6.log").write_text(
        "[rank6]:[E412 02:31:47.218533071 ProcessGroupNCCL.cpp:1595] [PG 0 (default_pg) Rank 6] Process group watchdog "
        "thread terminated with exception: NCCL error: remote process exited or there was a network error\n"
        f"{head}\nException raised from checkForNCCLErrorsInternal at ../torch/csrc/distributed/c10d/NCCLUtils.cpp:275"
        " (most recent call first):\n"
    )
    t = build([tmp_path])
    glued = t.lines.filter(t.lines["message"].str.contains(r"\S+Exception raised from"))
    assert glued.is_empty(), glued["message"].to_list()


def test_fixed_format_lines_of_one_length_are_not_glued_as_hard_wrapped() -> None:
    """A per-rank stdout.log of progress lines all as long as each other is no terminal-wrapped text."""
    t = build([CASES / "real_dataloader_stall_split_files" / "input"])
    assert not t.lines.filter(t.lines["message"].str.count_matches("Epoch: ") > 1).height


def test_the_timeline_draws_each_ranks_exit_at_its_time() -> None:
    from ncclpm.render.timeline import build_timeline

    d = _case("excerpt_ib_port_error_one_host")
    tl = build_timeline(d)
    assert tl is not None and tl.scaled
    row6 = next(r for r in tl.rows if r.full_label == "6")
    exits = [m for m in row6.marks if m.kind == "exit"]
    fired = max(m.x for r in tl.rows if r.role == "waiting" for m in r.marks if m.kind == "timeout")
    assert exits and exits[0].x < fired < tl.plot_x + tl.plot_w, (exits, fired)


# ------------------------------------------------------------------------------- 7. hosts the logs name


def test_a_driver_failure_names_the_host_srun_names_for_its_rank() -> None:
    d = _case("excerpt_srun_nvml_failure_host_named")
    assert str(d.action) == "exclude_node" and d.culprit_hosts == ("h100-c07",), (d.action, d.culprit_hosts)
    assert "h100-c07" in render(d, "text").split("\n")[4]  # on the action line: `→ exclude_node h100-c07 — ...`


# ------------------------------------------------------------------------------------------------ 8. the CLI


def _cli(*args: str):
    from click.testing import CliRunner

    from ncclpm.cli import main

    return CliRunner().invoke(main, list(args))


PAIR = CASES.parent / "diff_cases" / "pg_timeout_env"


def test_quiet_prints_no_warning_and_warnings_about_many_files_fold_into_one() -> None:
    job = str(CASES.parent / "diff_cases" / "timeout" / "good")  # three empty stderr.log files
    loud = _cli("diagnose", job, "-f", "json")
    warned = [line for line in loud.stderr.splitlines() if "warning" in line]
    assert any("empty files in" in line for line in warned), warned  # `3 empty files in torchrun_logs/...: ...`
    assert not any(line.endswith(": empty file") for line in warned), warned
    quiet = _cli("diagnose", job, "-f", "json", "-q")
    assert quiet.exit_code == 0 and "warning" not in quiet.stderr, quiet.stderr
    diffed = _cli("diff", str(PAIR / "good"), str(PAIR / "bad"), "-q", "-f", "json")
    assert diffed.exit_code == 0 and "warning" not in diffed.stderr, diffed.stderr


def test_diff_has_the_terminal_format_and_colour_of_diagnose() -> None:
    coloured = _cli("diff", str(PAIR / "good"), str(PAIR / "bad"), "-f", "text", "--color", "always")
    assert coloured.exit_code == 0 and "\x1b[" in coloured.stdout and "DIFFERENCES THAT CAN EXPLAIN" in coloured.stdout
    plain = _cli("diff", str(PAIR / "good"), str(PAIR / "bad"), "-f", "text", "--color", "never")
    assert "\x1b[" not in plain.stdout and "PG_TIMEOUT_S" in plain.stdout
    piped = _cli("diff", str(PAIR / "good"), str(PAIR / "bad"))  # no terminal: Markdown, as diagnose does
    assert piped.stdout.startswith("# ncclpm diff")


def test_the_terminal_report_shows_the_stack_tree_compact() -> None:
    d = _case("stacks__checkpoint_pyspy_with_logs")
    text = render(d, "text")
    tree = text.split("WHERE EACH RANK WAS STUCK", 1)[1].split("\n\n", 1)[0].splitlines()[1:]
    assert any("odd one out" in line and "save_checkpoint" in line for line in tree), tree
    assert all(len(line) <= 100 for line in tree)
