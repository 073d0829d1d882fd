"""Exit codes read as the signals they stand for, and what a report then says about them."""

from __future__ import annotations

from pathlib import Path

import pytest

from ncclpm.api import diagnose
from ncclpm.util.signals import exit_signal

SUMMARY = """\
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
train.py FAILED
------------------------------------------------------------
Failures:
  <NO_OTHER_FAILURES>
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2023-11-02_10:11:12
  host      : ip-172-31-1-1
  rank      : 1 (local_rank: 1)
  exitcode  : {code} (pid: 5512)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
============================================================
"""


@pytest.mark.parametrize(
    ("code", "name"),
    [(-9, "SIGKILL"), (-11, "SIGSEGV"), (-7, "SIGBUS"), (137, "SIGKILL"), (139, "SIGSEGV"), (1, None), (0, None)],
)
def test_exit_codes_name_linux_signals(code: int, name: str | None) -> None:
    assert exit_signal(code) == name  # Linux numbers, whatever machine reads the log (SIGBUS is 10 on macOS)


def test_a_bus_error_exit_points_at_shared_memory(tmp_path: Path) -> None:
    log = tmp_path / "console.log"
    log.write_text(SUMMARY.format(code=-7))
    d = diagnose([log])
    assert d.primary.category == "rank_crash" and d.primary.culprit_ranks == (1,)
    assert "SIGBUS" in d.primary.summary
    assert any("/dev/shm" in fix for fix in d.primary.fixes)


def test_a_segfault_exit_does_not_point_at_shared_memory(tmp_path: Path) -> None:
    log = tmp_path / "console.log"
    log.write_text(SUMMARY.format(code=-11))
    d = diagnose([log])
    assert "SIGSEGV" in d.primary.summary
    assert not any("/dev/shm" in fix for fix in d.primary.fixes)


def test_the_lookup_table_is_exit_signal() -> None:
    from ncclpm.util.signals import EXIT_SIGNALS, exit_signal

    for code in range(-70, 260):
        assert EXIT_SIGNALS.get(code) == exit_signal(code), code


def test_a_rank_s_pid_is_the_one_torchrun_states(tmp_path: Path) -> None:
    """torchrun's `failed (exitcode: 1) local_rank: 3 (pid: 40214)` is printed by the agent (its own pid, 140211,
    in the glog prefix) about the worker: the rank's pid is the worker's."""
    (tmp_path / "console.log").write_text(
        "[rank3]: Traceback (most recent call last):\n"
        '[rank3]:   File "/workspace/train.py", line 41, in <module>\n'
        "[rank3]: RuntimeError: CUDA error: an illegal memory access was encountered\n"
        "E1120 10:02:11.412000 140211 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: 1) "
        "local_rank: 3 (pid: 40214) of binary: /usr/bin/python\n"
    )
    from ncclpm.api import build

    ranks = build([tmp_path]).ranks
    assert ranks.filter(ranks["rank"] == 3)["pid"].to_list() == [40214]
