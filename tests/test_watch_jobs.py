"""`ncclpm watch` on real jobs: torchrun, torch CPU + gloo, py-spy (tests/watch_jobs/hang_job.py).

A job whose one rank blocks - on a lock a stalled thread holds, in a busy loop, in a checkpoint save whose writes
stall - with a generous process-group timeout is caught long before the timeout fires: every rank's stacks are
taken and the report names the rank and its line of code. A healthy job ends with nothing collected; a job killed
in the middle of a collection leaves a manifest that says so. Skipped (with the reason) where torch or the watch
extra is not installed: `pip install torch==2.13.0 'nccl-postmortem[watch]'`.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ncclpm.watch.deps import find_pyspy

JOB = Path(__file__).resolve().parent / "watch_jobs" / "hang_job.py"
PG_TIMEOUT_S = 120  # generous: a hang must be caught long before it

pytestmark = [
    pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch (pip install torch==2.13.0)"),
    pytest.mark.skipif(importlib.util.find_spec("psutil") is None, reason="needs the watch extra (psutil)"),
    pytest.mark.skipif(find_pyspy() is None, reason="needs the watch extra (py-spy)"),
]


class Job:
    def __init__(self, jobdir: Path, proc: subprocess.Popen) -> None:
        self.jobdir, self.proc = jobdir, proc

    def kill(self) -> None:
        """The whole job, as a scheduler ends it: the launcher and every worker (torchrun starts each worker in
        a session of its own: killing the launcher's group alone would leave them running)."""
        import psutil

        try:
            family = [psutil.Process(self.proc.pid), *psutil.Process(self.proc.pid).children(recursive=True)]
        except psutil.NoSuchProcess:
            family = []
        for p in family:
            with contextlib.suppress(psutil.NoSuchProcess):
                p.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)
        psutil.wait_procs(family, timeout=30)

    def console(self) -> str:
        return (self.jobdir / "console.log").read_text(errors="replace")


def start_job(jobdir: Path, mode: str, nproc: int = 3, **env: str) -> Job:
    jobdir.mkdir(parents=True, exist_ok=True)
    full = {
        **os.environ,
        "WATCH_MODE": mode,
        "WATCH_RANK": "1",
        "WATCH_PG_TIMEOUT_S": str(PG_TIMEOUT_S),
        "WATCH_OUT": str(jobdir),
        "OMP_NUM_THREADS": "1",
        **env,
    }
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={nproc}",
        "--log-dir",
        str(jobdir / "torchrun_logs"),
        "--tee",
        "3",
        str(JOB),
    ]
    with (jobdir / "console.log").open("wb") as out:
        proc = subprocess.Popen(cmd, cwd=jobdir, env=full, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    return Job(jobdir, proc)


def running(job: Job, nproc: int = 3, timeout: float = 120) -> Job:
    """Wait until every rank has run its first step (a sidecar started beside a running job). On a busy host one
    rank can start many seconds after another; a short --idle would rightly call that wait a hang."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if job.console().count(": step 1 loss") >= nproc:
            return job
        assert job.proc.poll() is None, job.console()
        time.sleep(0.1)
    raise AssertionError(f"the job did not start within {timeout} s:\n{job.console()}")


def watch(
    jobdir: Path, *args: str, timeout: float = 150, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "ncclpm", "watch", str(jobdir), "--poll", "0.2", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})})


@pytest.fixture
def jobs(tmp_path: Path) -> Iterator[list[Job]]:
    started: list[Job] = []
    yield started
    for j in started:
        j.kill()


def _collection(jobdir: Path) -> Path:
    (folder,) = (jobdir / "ncclpm-watch").iterdir()
    return folder


def _caught(job: Job, res: subprocess.CompletedProcess, reason: str, where: str) -> dict:
    assert res.returncode == 0, res.stderr
    folder = _collection(job.jobdir)
    m = json.loads((folder / "manifest.json").read_text())
    assert m["state"] == "complete" and m["trigger"]["reason"] == reason, m["trigger"]
    assert job.proc.poll() is None and "Timed out" not in job.console()  # caught before the timeout fired
    spy = {s["output"] for s in m["steps"] if s["name"] == "pyspy" and s["status"] == "ok"}
    assert spy == {"rank0.pyspy.txt", "rank1.pyspy.txt", "rank2.pyspy.txt"}, m["steps"]
    report = json.loads((folder / "report.json").read_text())
    assert report["culprit_ranks"] == [1], report["summary"]
    assert where in (folder / "report.md").read_text() and where in res.stdout  # the rank's own line of code
    assert "culprit rank 1" in res.stdout
    return m


def test_a_rank_in_a_slow_checkpoint_save(tmp_path: Path, jobs: list[Job]) -> None:
    job = start_job(tmp_path / "job", "save")
    jobs.append(job)
    running(job)
    res = watch(job.jobdir, "--idle", "3", "--once")
    m = _caught(job, res, "idle", "save_checkpoint (hang_job.py:")
    assert "slow_rank_work" in res.stdout and m["hang_to_report_s"] < 60


def test_a_busy_rank_is_caught_by_its_peers_open_collective(tmp_path: Path, jobs: list[Job]) -> None:
    """TORCH_DISTRIBUTED_DEBUG=DETAIL + TORCH_CPP_LOG_LEVEL=INFO log every collective as it starts: the waiting
    ranks' newest line is their all_reduce, open past 5% of the 120 s timeout the job logs; silence alone could not
    tell (--idle is out of reach) and the busy rank uses a whole core. The watcher starts once the ranks run: the
    timeout they logged at their start is read from the lines written before it."""
    job = start_job(tmp_path / "job", "busy", TORCH_DISTRIBUTED_DEBUG="DETAIL", TORCH_CPP_LOG_LEVEL="INFO")
    jobs.append(job)
    running(job)  # the timeout is logged before the watcher starts: read from the files' history
    res = watch(job.jobdir, "--idle", "1000", "--open-share", "0.05", "--once")
    m = _caught(job, res, "open_collective", "spin_until_converged (hang_job.py:")
    assert "Running collective: CollectiveFingerPrint" in m["trigger"]["evidence"][0]
    assert "of the timeout of 120 s from" in m["trigger"]["summary"]


def test_a_healthy_job_ends_and_nothing_is_collected(tmp_path: Path, jobs: list[Job]) -> None:
    job = start_job(tmp_path / "job", "healthy", nproc=2, WATCH_STEPS="8")
    jobs.append(job)
    res = watch(job.jobdir, "--idle", "20")
    assert res.returncode == 0, res.stderr
    assert job.proc.wait(timeout=30) == 0 and "training done" in job.console()
    assert "the job ended: nothing hung, nothing collected" in res.stderr
    assert not (job.jobdir / "ncclpm-watch").exists()


def test_a_job_killed_in_the_middle_of_a_collection(tmp_path: Path, jobs: list[Job]) -> None:
    """py-spy made slow (a wrapper that waits a second, like a dump of many ranks): the job is killed as soon as
    the collection starts; the manifest says which steps found the ranks gone and that the job ended."""
    job = start_job(tmp_path / "job", "lock", nproc=2)
    jobs.append(job)
    running(job, nproc=2)
    slow = tmp_path / "bin" / "py-spy"
    slow.parent.mkdir()
    slow.write_text(f'#!/bin/sh\nsleep 1\nexec {find_pyspy()} "$@"\n')
    slow.chmod(0o755)
    env = {"PATH": f"{slow.parent}:{os.environ['PATH']}"}
    cmd = [sys.executable, "-m", "ncclpm", "watch", str(job.jobdir), "--idle", "3", "--poll", "0.2"]
    w = subprocess.Popen(cmd, env={**os.environ, **env}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not list((job.jobdir / "ncclpm-watch").glob("*/manifest.json")) and time.monotonic() < deadline:
            time.sleep(0.02)
        job.kill()
        _out, err = w.communicate(timeout=120)
    finally:
        if w.poll() is None:
            w.kill()
    assert w.returncode == 0, err
    m = json.loads((_collection(job.jobdir) / "manifest.json").read_text())
    assert m["state"] == "complete" and m["job_ended_during_collection"] is True
    assert any("the job ended during the collection" in n for n in m["notes"])
    gone = [s for s in m["steps"] if s["name"] == "pyspy" and s["status"] == "gone"]
    assert gone and all("exited" in s["why"] for s in gone)
    assert "the job ended" in err


@pytest.mark.skipif(importlib.util.find_spec("tabulate") is None, reason="torch's debug-server frontend needs tabulate")
def test_a_rank_waiting_on_a_lock_held_by_a_stalled_thread_with_torchs_debug_server(
    tmp_path: Path, jobs: list[Job]
) -> None:
    """Rank 1 waits on a lock a stalled thread of its own holds. The job also started torch's debug server
    (torch.distributed.debug.start_debug_server()): every rank runs its worker server; the watcher asks each for
    its stacks and flight recorder through the job's store, and the report reads both."""
    import socket

    with socket.socket() as s:  # a free port for the frontend on rank 0
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    job = start_job(tmp_path / "job", "lock", WATCH_DEBUG_PORT=str(port))
    jobs.append(job)
    running(job)
    res = watch(job.jobdir, "--idle", "3", "--once")
    m = _caught(job, res, "idle", "wait_for_state_lock (hang_job.py:")
    folder = _collection(job.jobdir)
    step = next(s for s in m["steps"] if s["name"] == "debug_server")
    assert step["status"] == "ok" and "stacks of ranks 0, 1, 2" in step["why"], step
    assert {p.name for p in folder.glob("fr_trace_rank*.json")} == {f"fr_trace_rank{r}.json" for r in range(3)}
    assert "=== Rank 1: " in (folder / "debug_server.stacks.txt").read_text()
    report = json.loads((folder / "report.json").read_text())
    assert "rank 1 never joined" in (report["cross_check"] or ""), report["cross_check"]
