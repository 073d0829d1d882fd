"""Lines a terminal hard-wrapped are re-joined in files (not only in pastes), and nothing else is."""

from __future__ import annotations

from pathlib import Path

import pytest

from ncclpm.api import build, diagnose
from tests.real_issues import corpus_dir
from tests.shared import ABSENT

WATCHDOG = (
    "[rank{r}]:[E ProcessGroupNCCL.cpp:563] [Rank {r}] Watchdog caught collective operation timeout: "
    "WorkNCCL(SeqNum=15037, OpType=_ALLGATHER_BASE, NumelIn=131072512, NumelOut=524290048, Timeout(ms)=600000) "
    "ran for 6000{r}5 milliseconds before timing out."
)


def _wrap(line: str, width: int) -> list[str]:
    return [line[i : i + width] for i in range(0, len(line), width)]


def _timeouts(path: Path) -> list[int]:
    t = build([path])
    return sorted(t.events.filter(t.events["kind"] == "collective_timeout")["rank"].to_list())


@pytest.mark.parametrize("width", [80, 94, 132, 183])
def test_watchdog_lines_cut_at_a_terminal_width_are_read_whole(tmp_path: Path, width: int) -> None:
    log = tmp_path / "train.log"
    log.write_text("\n".join(piece for r in (1, 2, 3) for piece in _wrap(WATCHDOG.format(r=r), width)) + "\n")
    assert _timeouts(log) == [1, 2, 3]


def test_a_cut_right_after_a_bracket_or_next_to_a_space_is_re_joined(tmp_path: Path) -> None:
    """Determined's prefix ends at column 80 (`...cpp:828] ` + `[Rank 1] Watchdog...`); other cuts land next to
    a space (`... Watchdog` + ` caught ...`). Each width below puts the cut at one of those places."""
    line = (
        "[2024-02-27T21:35:28.705869Z] fa88a9df [rank={r}] || [E ProcessGroupNCCL.cpp:828] [Rank {r}] Watchdog "
        "caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLGATHER, Timeout(ms)=1800000) ran for "
        "1804775 milliseconds before timing out."
    )
    for width in (80, 101):
        log = tmp_path / f"w{width}.log"
        log.write_text("\n".join(p for r in (1, 4) for p in _wrap(line.format(r=r), width)) + "\n")
        t = build([log])
        hits = t.events.filter(t.events["kind"] == "collective_timeout")
        # the tail alone names its rank too; only the re-joined line has the prefix's time
        assert sorted(hits["rank"].to_list()) == [1, 4] and hits["ts"].null_count() == 0, width


def test_full_lines_of_one_width_are_not_glued(tmp_path: Path) -> None:
    # NCCL INFO lines of the same length, then a shorter log line: all are lines of their own.
    lines = [
        f"node0{i}:21{i}:3{i} [{i}] NCCL INFO Channel 0{i}/0 : 0[101c0] -> 1[101d0] via P2P/IPC/read" for i in range(4)
    ]
    lines.append("node01:2119:2119 [1] misc/socket.cc:50 NCCL WARN socketProgress: Connection closed by remote peer")
    lines.append("Use NCCL_DEBUG=INFO for more details")  # a plain line after a long one, but not a tail
    log = tmp_path / "nccl.log"
    log.write_text("\n".join(lines) + "\n")
    t = build([log])
    messages = t.lines["message"].to_list()
    assert "misc/socket.cc:50 NCCL WARN socketProgress: Connection closed by remote peer" in messages
    assert not [m for m in messages if "peerUse" in m]


def test_a_traceback_after_a_long_line_is_not_glued(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    first = WATCHDOG.format(r=1)
    log.write_text(f'{first}\nTraceback (most recent call last):\n{first}\n  File "x.py", line 1, in f\n')
    assert _timeouts(log) == [1, 1]


def test_kernel_log_lines_of_one_length_stay_apart(tmp_path: Path) -> None:
    # Syslog lines have no envelope; two Xid lines of one length ending in `.` are two records, not line + tail.
    xid = "Nov 14 03:12:44 gpu-c02 kernel: [2419876.551211] NVRM: Xid (PCI:0000:3b:00): 79, pid=48211, name=python, "
    lines = [
        xid + "GPU has fallen off the bus.",
        "Nov 14 03:12:44 gpu-c02 kernel: [2419876.551241] NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.",
        "Nov 14 03:12:44 gpu-c02 kernel: [2419876.551302] NVRM: A GPU crash dump has been created. If possible,",
        "Nov 14 03:12:44 gpu-c02 kernel: [2419876.551303] NVRM: nvidia-bug-report.sh as root to collect this data",
    ]
    log = tmp_path / "kern.log"
    log.write_text("\n".join(lines) + "\n")
    texts = build([log]).lines["message"].to_list()
    assert lines[0] in texts and not [t for t in texts if "bus.Nov" in t]


@pytest.mark.skipif(corpus_dir() is None, reason=ABSENT)
def test_the_real_hard_wrapped_torchtune_log_is_read() -> None:
    """torchtune#1165 (corpus d058): `...NumelOut=524290048, Timeo` / `ut(ms)=600000) ran for ...`."""
    log = corpus_dir() / "d058" / "train.log"  # type: ignore[operator]
    assert _timeouts(log) == [1, 2, 3]
    d = diagnose([log])
    assert d.failing_collective and d.failing_collective["timeout_ms"] == 600000
