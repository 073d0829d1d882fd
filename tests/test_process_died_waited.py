"""CR02 when ranks waited: a process with no rank that died before the first waiting rank gave up is the one they
waited for; a death after that is the teardown that followed, and an undated one cannot be placed."""

from __future__ import annotations

from pathlib import Path

from ncclpm.api import diagnose

KILLED = (
    "10.0.0.12: [2025-01-20 {at},300] [ERROR] [launch.py:325:sigkill_handler] "
    "['/usr/bin/python', '-u', 'train.py', '--local_rank=3'] exits with return code = -9\n"
)
TIMEOUT = (
    "10.0.0.11: [rank1]:[E120 03:14:05.000000000 ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog caught collective "
    "operation timeout: WorkNCCL(SeqNum=9120, OpType=_ALLGATHER_BASE, NumelIn=65536000, NumelOut=1048576000, "
    "Timeout(ms)=600000) ran for 600088 milliseconds before timing out.\n"
)


def _diagnose(tmp_path: Path, text: str):
    log = tmp_path / "console.log"
    log.write_text(text)
    return diagnose([log])


def test_a_kill_before_the_wait_ends_is_who_they_waited_for(tmp_path: Path) -> None:
    d = _diagnose(tmp_path, KILLED.format(at="03:04:05") + TIMEOUT)
    assert d.primary.rule == "CR02" and str(d.category) == "rank_crash"
    assert "10.0.0.12" in d.summary and "rank 1 then timed out waiting" in d.summary
    assert d.culprit_hosts == ("10.0.0.12",)


def test_a_kill_after_the_timeout_is_the_teardown(tmp_path: Path) -> None:
    d = _diagnose(tmp_path, TIMEOUT + KILLED.format(at="03:14:09"))
    assert d.primary.rule != "CR02"


def test_an_undated_death_cannot_be_placed_before_the_wait(tmp_path: Path) -> None:
    d = _diagnose(tmp_path, "Killed\n" + TIMEOUT)
    assert d.primary.rule != "CR02"
