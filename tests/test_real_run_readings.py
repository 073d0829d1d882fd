"""Readings from real torch 2.13 runs: failures one rank prints on another's behalf, errors the launcher's last
summary does not date, a rank that stopped itself, a store wait for a rank that was late.

- torch.distributed.checkpoint raises the same `CheckpointException ranks:dict_keys([N])` on every rank, with rank
  N's traceback under `Traceback (most recent call last): (RANK N)`: that error is rank N's, whoever printed it;
- an undated traceback is no later than the launcher's next own dated line in its file (an earlier attempt's
  failure, under torchrun --max-restarts, is not dated by the last attempt's exits);
- a rank that ended with exit code 1 and said why (no error, no wait) is the culprit when the others were torn down
  or failed waiting;
- gloo's address wait in init_process_group (`keys: /default_pg/0//cpu//0/1`) names the rank it waited for: late
  when that rank was running (its events, or torn down by the launcher), else a group that never formed.
"""

from __future__ import annotations

from pathlib import Path

from ncclpm.api import diagnose

SAVE_FRAMES = [
    "[rank{r}]: Traceback (most recent call last):",
    '[rank{r}]:   File "/workspace/train.py", line 17, in <module>',
    "[rank{r}]:     dcp.save(state, checkpoint_id=ckpt)",
]


def _relay(printer: int, failed: int, with_traceback: bool) -> list[str]:
    lines = [s.format(r=printer) for s in SAVE_FRAMES]
    lines.append(
        f"[rank{printer}]: torch.distributed.checkpoint.api.CheckpointException: "
        f"CheckpointException ranks:dict_keys([{failed}])"
    )
    if with_traceback:
        lines += [
            f"[rank{printer}]: Traceback (most recent call last): (RANK {failed})",
            f'[rank{printer}]:   File "/opt/venv/lib/python3.11/site-packages/torch/serialization.py", line 1253, in _save',
            f"[rank{printer}]:     pickler.dump(obj)",
            f"[rank{printer}]: OSError: [Errno 28] No space left on device",
        ]
    return lines


def test_a_relayed_checkpoint_error_is_the_failed_rank_s(tmp_path: Path) -> None:
    log = tmp_path / "rank0.log"
    log.write_text("\n".join(_relay(0, 2, with_traceback=True)) + "\n")
    d = diagnose([log])
    assert list(d.culprit_ranks) == [2], d.summary
    assert "No space left on device" in d.summary, d.summary


def test_a_checkpoint_exception_alone_names_the_ranks_it_lists(tmp_path: Path) -> None:
    log = tmp_path / "rank0.log"
    log.write_text("\n".join(_relay(0, 3, with_traceback=False)) + "\n")
    d = diagnose([log])
    assert list(d.culprit_ranks) == [3], d.summary


def test_a_rank_that_lists_itself_keeps_its_own_error(tmp_path: Path) -> None:
    log = tmp_path / "rank1.log"
    log.write_text("\n".join(_relay(1, 1, with_traceback=True)) + "\n")
    d = diagnose([log])
    assert list(d.culprit_ranks) == [1], d.summary


def test_an_earlier_attempt_s_undated_error_comes_before_the_restart_s_dated_ones(tmp_path: Path) -> None:
    agent = "torch/distributed/elastic/multiprocessing/api.py"
    lines = [
        "[default1]:[rank1]: Traceback (most recent call last):",
        "[default1]:[rank1]: KeyError: 'labels'",
        f"E1128 18:31:56.898000 4920 {agent}:1002] failed (exitcode: 1) local_rank: 1 (pid: 4926) of binary: /usr/bin/python",
        "[default0]:[E1128 18:32:02.436173129 ProcessGroupGloo.cpp:67] Gloo connectFullMesh failed with [pair.cc:152] "
        "timed out connecting: SO_ERROR: Connection refused, remote=[127.0.0.1]:31645$0",
        "[default0]:Traceback (most recent call last):",
        "[default0]:RuntimeError: Gloo connectFullMesh failed with [pair.cc:152] timed out connecting: SO_ERROR: "
        "Connection refused, remote=[127.0.0.1]:31645$0",
        f"E1128 18:32:03.978000 4920 {agent}:1002] failed (exitcode: 1) local_rank: 0 (pid: 4983) of binary: /usr/bin/python",
        "Root Cause (first observed failure):",
        "[0]:",
        "  time      : 2026-11-28_18:32:03",
        "  host      : localhost",
        "  rank      : 0 (local_rank: 0)",
        "  exitcode  : 1 (pid: 4983)",
        "  error_file: <N/A>",
        "  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html",
    ]
    log = tmp_path / "console.log"
    log.write_text("\n".join(lines) + "\n")
    d = diagnose([log])
    assert str(d.category) == "rank_crash" and list(d.culprit_ranks) == [1], d.summary


def _summary(rows: list[tuple[int, int]]) -> list[str]:
    """torchrun's ChildFailedError summary for (rank, exitcode) rows, the first as the root cause."""

    def block(i: int, rank: int, code: int) -> list[str]:
        sig = "  (SIGTERM)" if code == -15 else ""
        return [
            f"[{i}]:",
            "  time      : 2026-11-28_19:00:10",
            "  host      : localhost",
            f"  rank      : {rank} (local_rank: {rank})",
            f"  exitcode  : {code} (pid: {100 + rank}){sig}",
            "  error_file: <N/A>",
            "  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html",
        ]

    (r0, c0), *rest = rows
    lines = ["train.py FAILED", "-" * 60, "Failures:"]
    for i, (rank, code) in enumerate(rest, 1):
        lines += block(i, rank, code)
    return [*lines, "-" * 60, "Root Cause (first observed failure):", *block(0, r0, c0), "=" * 60]


def _job(tmp_path: Path, rank1_says: str, summary: list[tuple[int, int]]) -> Path:
    base = tmp_path / "torchrun_logs" / "run_abc" / "attempt_0"
    for rank, out, err in (
        (0, "[rank0] step 2 loss 0.5000\n", "[rank0]: RuntimeError: Connection closed by peer [127.0.0.1]:3039\n"),
        (1, f"[rank1] step 2 loss 0.5000\n{rank1_says}\n", ""),
    ):
        (base / str(rank)).mkdir(parents=True)
        (base / str(rank) / "stdout.log").write_text(out)
        (base / str(rank) / "stderr.log").write_text(err)
    (tmp_path / "console.log").write_text("\n".join(_summary(summary)) + "\n")
    return tmp_path


def test_a_rank_that_quit_with_exit_1_and_said_why_is_named(tmp_path: Path) -> None:
    # the survivor failed waiting (its own exit 1, a lost peer) rather than being torn down: rank 1 still stopped first
    d = diagnose([_job(tmp_path, "[rank1] step 3: loss is NaN, stopping", [(1, 1), (0, 1)])])
    assert str(d.category) == "rank_crash" and list(d.culprit_ranks) == [1], d.summary
    assert "loss is NaN, stopping" in d.summary, d.summary


def test_an_exit_1_whose_rank_said_nothing_is_not_read_as_quitting(tmp_path: Path) -> None:
    # no line of rank 1's own: its exit 1 reads the same for a crash as for a wait, nothing says it stopped itself
    job = _job(tmp_path, "", [(1, 1), (0, 1)])
    (job / "torchrun_logs" / "run_abc" / "attempt_0" / "1" / "stdout.log").write_text("")
    d = diagnose([job])
    assert "stopping" not in d.summary and "with no error" not in d.summary, d.summary


def _late_init(tmp_path: Path, rank1_torn_down: bool) -> Path:
    lines = [
        "[default0]:Traceback (most recent call last):",
        '[default0]:  File "/workspace/train.py", line 10, in <module>',
        '[default0]:    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=15))',
        "[default0]:torch.distributed.DistStoreError: wait timeout after 15000ms, keys: /default_pg/0//cpu//0/1",
    ]
    rows = [(0, 1), (1, -15)] if rank1_torn_down else [(0, 1)]
    (tmp_path / "console.log").write_text("\n".join(lines + _summary(rows)) + "\n")
    return tmp_path


def test_a_gloo_address_wait_for_a_running_rank_is_that_rank_late(tmp_path: Path) -> None:
    d = diagnose([_late_init(tmp_path, rank1_torn_down=True)])
    assert str(d.category) == "slow_rank_work" and list(d.culprit_ranks) == [1], d.summary


def test_a_gloo_address_wait_for_a_rank_never_seen_is_a_group_that_never_formed(tmp_path: Path) -> None:
    d = diagnose([_late_init(tmp_path, rank1_torn_down=False)])
    assert str(d.category) == "init_rendezvous", d.summary


def test_the_failed_rank_s_own_copy_of_its_error_is_quoted_first(tmp_path: Path) -> None:
    # every rank prints the same relay; the copy in the failed rank's own log is quoted before another rank's
    (tmp_path / "rank0.log").write_text("\n".join(_relay(0, 1, with_traceback=True)) + "\n")
    (tmp_path / "rank1.log").write_text("\n".join(_relay(1, 1, with_traceback=True)) + "\n")
    d = diagnose([tmp_path])
    assert list(d.culprit_ranks) == [1], d.summary
    assert d.primary.evidence[0].file == "rank1.log", d.primary.evidence
