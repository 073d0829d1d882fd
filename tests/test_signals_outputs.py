"""Signals and outputs (issue 13, items 18-19).

- A symlink (or a file) planted at the `-o`/`--summary` path while ncclpm runs is never written through and never
  overwritten without --force: the path is checked again when the file is written, and the file is put there in
  one step (a hard link without --force, a rename with it), from a temporary file that never outlives the run.
- Ctrl-C: `diagnose` exits 130 with one line, no traceback; `triage` cancels the jobs not started, kills its
  workers, writes the rows it has to the `-o` table (partial) and exits 130 - in seconds, not after the queue.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

import ncclpm.api
from ncclpm.cli import main

ROOT = Path(__file__).resolve().parents[1]
CASE = ROOT / "tests" / "cases" / "rank0_slow_work__torchrun_3ranks" / "input"
DL = "[rank{}]: RuntimeError: DataLoader timed out after 5 seconds\n"


# ------------------------------------------------------------------------- 18. planted while ncclpm runs


def _plant_during_diagnose(monkeypatch: pytest.MonkeyPatch, plant) -> None:
    real = ncclpm.api.build  # (diagnose reads the job with build, then looks for several jobs in it)

    def slow(*args, **kwargs):
        plant()  # after the check at the start, before the report is written
        return real(*args, **kwargs)

    monkeypatch.setattr(ncclpm.api, "build", slow)


@pytest.mark.parametrize("planted", ["symlink", "dangling_symlink", "file"])
def test_a_path_taken_during_the_run_is_not_written_without_force(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, planted: str
) -> None:
    out, target = tmp_path / "out" / "report.md", tmp_path / "precious.txt"
    out.parent.mkdir()
    if planted == "symlink":
        target.write_text("keep me")

    def plant() -> None:
        if planted == "file":
            out.write_text("someone else's file")
        else:
            out.symlink_to(target)

    _plant_during_diagnose(monkeypatch, plant)
    res = CliRunner().invoke(main, ["diagnose", str(CASE), "-o", str(out)])
    assert res.exit_code == 2 and "exists" in res.output, res.output
    assert (target.read_text() == "keep me") if planted == "symlink" else not target.exists()
    if planted == "file":
        assert out.read_text() == "someone else's file"
    assert sorted(p.name for p in out.parent.iterdir()) == ["report.md"]  # no temporary file left


def test_with_force_a_planted_symlink_is_replaced_not_followed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out, target = tmp_path / "out" / "report.md", tmp_path / "precious.txt"
    out.parent.mkdir()
    target.write_text("keep me")
    _plant_during_diagnose(monkeypatch, lambda: out.symlink_to(target))
    res = CliRunner().invoke(main, ["diagnose", str(CASE), "-o", str(out), "--force"])
    assert res.exit_code == 0, res.output
    assert target.read_text() == "keep me"
    assert not out.is_symlink() and out.read_text().startswith("# NCCL post-mortem")


def test_triage_outputs_are_checked_again_when_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import ncclpm.triage
    from ncclpm.triage import triage_job

    table, summary, target = tmp_path / "t.csv", tmp_path / "s.md", tmp_path / "precious.txt"
    target.write_text("keep me")

    def run_local(jobs, workers=None, on_done=None, options=None):
        table.symlink_to(target)
        summary.symlink_to(target)
        return [triage_job(j.path, j.name, **(options or {})) for j in jobs]

    monkeypatch.setattr(ncclpm.triage, "run_local", run_local)
    res = CliRunner().invoke(main, ["triage", str(CASE), "-o", str(table), "--summary", str(summary)])
    assert res.exit_code == 2 and "exists" in res.output, res.output
    assert target.read_text() == "keep me"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["precious.txt", "s.md", "t.csv"]


def test_a_failed_write_leaves_no_partial_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "events.parquet"

    def half_then_fail(self: pl.DataFrame, path, *a, **k) -> None:
        Path(path).write_bytes(b"PAR1 half of a file")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(pl.DataFrame, "write_parquet", half_then_fail)
    res = CliRunner().invoke(main, ["tables", str(CASE), "-o", str(out)])
    assert res.exit_code == 2 and "No space left" in res.output, res.output
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------------------------------------- 19. Ctrl-C


def _children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _wchan(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/wchan").read_text()
    except OSError:
        return ""


def _as_a_shell_starts_it() -> None:
    """A command started from a shell gets Ctrl-C at its default disposition, unblocked; the test process may hold
    it blocked (a pytest-xdist worker after some other file's tests: seen as a child that ignored Ctrl-C, and
    reproduced by blocking SIGINT in the parent), and a child inherits the mask across exec."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def _interrupt(proc: subprocess.Popen, ready, limit: float = 120) -> float:
    """Wait until `ready()` (or `limit` s), then Ctrl-C the process group the way a terminal does; returns the
    seconds from the signal to the exit."""
    start = time.monotonic()
    while proc.poll() is None and not ready() and time.monotonic() - start < limit:
        time.sleep(0.1)
    assert proc.poll() is None, "finished before it could be interrupted"
    os.killpg(proc.pid, signal.SIGINT)
    sent = time.monotonic()
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise AssertionError("still running 60 s after Ctrl-C") from None
    return time.monotonic() - sent


@pytest.mark.skipif(not Path("/proc/self/wchan").exists(), reason="needs Linux /proc")
def test_ctrl_c_in_diagnose_exits_130_without_a_traceback(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "ncclpm", "diagnose", "-"],  # blocks reading stdin: a known place to interrupt
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        start_new_session=True,
        preexec_fn=_as_a_shell_starts_it,
        text=True,
    )
    took = _interrupt(proc, lambda: any(w in _wchan(proc.pid) for w in ("select", "poll", "pipe")), limit=60)
    assert took < 10
    err = proc.stderr.read()
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "interrupted" in err


@pytest.mark.skipif(not Path("/proc/self/wchan").exists(), reason="needs Linux /proc")
def test_ctrl_c_in_triage_cancels_the_queue_and_keeps_the_finished_rows(tmp_path: Path) -> None:
    jobs = tmp_path / "jobs"
    for i in range(40):
        (jobs / f"job{i:02d}").mkdir(parents=True)
        (jobs / f"job{i:02d}" / "rank1.log").write_text(DL.format(1) * 20_000)  # a few seconds each
    out = tmp_path / "partial.ndjson"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "ncclpm", "triage", str(jobs), "-j", "1", "-o", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        start_new_session=True,
        preexec_fn=_as_a_shell_starts_it,
        text=True,
    )
    seen: list[float] = []

    def worker_busy_a_while() -> bool:  # a worker exists and has had a few seconds
        if _children(proc.pid) and not seen:
            seen.append(time.monotonic())
        return bool(seen) and time.monotonic() - seen[0] > 6

    took = _interrupt(proc, worker_busy_a_while)
    err = proc.stderr.read()
    assert proc.returncode == 130, err
    assert took < 20, f"{took:.1f} s from Ctrl-C to exit: the queue kept running"
    assert "Traceback" not in err and "interrupted after" in err
    rows = pl.read_ndjson(out) if out.stat().st_size else pl.DataFrame()
    assert rows.height < 40
    assert all(c == "dataloader_hang" for c in rows["category"]) if rows.height else True
    assert not [p for p in _children(proc.pid)]
