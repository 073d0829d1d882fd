"""`ncclpm watch` without torch: the log follower, the line reader, the hang detector, the process finder, the
manifest, the webhook, and the watcher on stand-in jobs (plain Python processes that log a line and sleep, with
RANK in their environment as torchrun sets it). The real torchrun jobs are in test_watch_jobs.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import ClassVar

import pytest
from click.testing import CliRunner

from ncclpm.cli import main
from ncclpm.watch.detect import HangDetector
from ncclpm.watch.follow import LogFollower
from ncclpm.watch.lines import LineReader

psutil = pytest.importorskip("psutil", reason="the watch extra is not installed: pip install 'nccl-postmortem[watch]'")

from ncclpm.watch.deps import Tools, find_pyspy  # noqa: E402
from ncclpm.watch.procs import JobProcesses, Proc, classify  # noqa: E402
from ncclpm.watch.runner import Settings, Watcher  # noqa: E402

TIMEOUT_LINE = (
    "[rank1]:[E1122 08:24:16.797000 ProcessGroupNCCL.cpp:688] [Rank 1] Watchdog caught collective operation "
    "timeout: WorkNCCL(SeqNum=12, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600006 "
    "milliseconds before timing out."
)
RUNNING = (
    "[rank{r}]:[I1122 08:25:11.736438678 ProcessGroupWrapper.cpp:710] [Rank {r}] Running collective: "
    "CollectiveFingerPrint(SequenceNumber={seq}, OpType=ALLREDUCE, TensorShape=[8], TensorDtypes=Float)"
)


# -- the follower ---------------------------------------------------------------------------------------------
def test_follower_reads_new_lines_only_and_new_files_whole(tmp_path: Path) -> None:
    old = tmp_path / "console.log"
    old.write_text("history 1\nhistory 2\n")
    (tmp_path / "ckpt.pt").write_bytes(b"\x80\x04binary\x00pickle")
    f = LogFollower(tmp_path, skip=tmp_path / "ncclpm-watch")
    f.scan()
    assert f.poll() == []
    with old.open("a") as fh:
        fh.write("new line\npartial")
    (tmp_path / "attempt_0" / "1").mkdir(parents=True)
    (tmp_path / "attempt_0" / "1" / "stderr.log").write_text("a\nb\n")
    (tmp_path / "ncclpm-watch").mkdir()
    (tmp_path / "ncclpm-watch" / "report.md").write_text("not followed\n")
    f.scan()
    chunks = {c.name: c for c in f.poll()}
    assert chunks["console.log"].first == 3 and chunks["console.log"].lines == ["new line"]
    assert chunks["attempt_0/1/stderr.log"].lines == ["a", "b"]
    assert set(chunks) == {"console.log", "attempt_0/1/stderr.log"}  # not the checkpoint, not the output folder
    with old.open("a") as fh:
        fh.write(" done\n")
    assert [c.lines for c in f.poll()] == [["partial done"]]
    old.write_text("rotated\n")  # truncated and rewritten: read again from its start
    assert [(c.first, c.lines) for c in f.poll()] == [(1, ["rotated"])]


def test_follower_reads_the_settings_written_before_it_started(tmp_path: Path) -> None:
    import re

    log = tmp_path / "console.log"
    log.write_text("a\n[rank0]: init_process_group(gloo, timeout=10.0s)\nb\n" + "noise\n" * 50000)
    f = LogFollower(tmp_path, history=re.compile(rb"init_process_group\("))
    f.scan()
    setting, tail = f.history
    assert (setting.name, setting.first, setting.lines) == (
        "console.log",
        2,
        ["[rank0]: init_process_group(gloo, timeout=10.0s)"],
    )
    assert (tail.first, len(tail.lines), tail.first + len(tail.lines) - 1) == (49804, 200, 50003)  # the last lines
    with log.open("a") as fh:
        fh.write("new\n")
    assert [(c.first, c.lines) for c in f.poll()] == [(50004, ["new"])]


def test_follower_never_reads_a_binary_file_and_does_not_count_a_huge_one(tmp_path: Path) -> None:
    (tmp_path / "model.pt").write_bytes(b"PK\x03\x04" + b"\n" * 5000)
    (tmp_path / "huge.log").write_text("x\n" * 3000)
    f = LogFollower(tmp_path, max_count=1000)
    f.scan()
    assert f.files["model.pt"].binary and f.files["huge.log"].line_no == 0
    assert f.warnings == ["huge.log: over 0 MB when the watch started: its lines are numbered from there"]
    with (tmp_path / "model.pt").open("ab") as fh:
        fh.write(b"more\n")
    with (tmp_path / "huge.log").open("a") as fh:
        fh.write("y\n")
    assert [(c.name, c.first, c.lines) for c in f.poll()] == [("huge.log", 1, ["y"])]


def test_follower_bounds_what_one_poll_reads(tmp_path: Path) -> None:
    log = tmp_path / "big.log"
    log.write_text("")
    f = LogFollower(tmp_path, max_read=1000, max_line=50)
    f.scan()
    log.write_text(("x" * 200 + "\n") * 20)
    first = f.poll()[0]
    assert sum(len(line) + 1 for line in first.lines) <= 1000 + 50 and all(len(line) <= 50 for line in first.lines)
    total = len(first.lines)
    while chunks := f.poll():
        total += len(chunks[0].lines)
    assert total == 20


# -- the reader and the detector ------------------------------------------------------------------------------
def _chunk(name: str, first: int, lines: list[str]):
    from ncclpm.watch.follow import Chunk

    return Chunk(name, first, lines)


def test_reader_finds_timeouts_collectives_and_the_ranks_that_logged() -> None:
    reading = LineReader().read(
        [
            _chunk("console.log", 10, ["[default0]:step 5 loss 1.0", TIMEOUT_LINE, RUNNING.format(r=2, seq=7)]),
            _chunk("torchrun_logs/x/attempt_0/3/stdout.log", 1, ["hello from a rank file"]),
        ]
    )
    kinds = {(e.kind, e.rank, e.line) for e in reading.events}
    assert ("collective_timeout", 1, 11) in kinds and ("collective_started", 2, 12) in kinds
    started = next(e for e in reading.events if e.kind == "collective_started")
    assert (started.op, started.seq) == ("ALLREDUCE", 7)
    assert ("torchrun_logs/x/attempt_0/3/stdout.log", 3) in reading.active  # the rank from the file's path


def test_detector_timeout_line_is_a_hang_once() -> None:
    det = HangDetector(idle_s=1000)
    det.start_clock(0.0, running_for=0.0)
    det.feed(LineReader().read([_chunk("console.log", 1, [TIMEOUT_LINE])]), 1.0)
    hang = det.check(1.0, ranks_alive=2, idle_ranks=[])
    assert hang is not None and hang.reason == "timeout_line" and hang.ranks == (1,)
    assert "Watchdog caught collective operation timeout" in hang.evidence[0]
    det.collected()
    det.feed(LineReader().read([_chunk("console.log", 2, [TIMEOUT_LINE.replace("rank1", "rank1")])]), 2.0)
    assert det.check(2.0, 2, []) is None  # the same hang's other timeouts
    det.feed(LineReader().read([_chunk("console.log", 3, ["[rank1]: step 13 loss 0.5"])]), 3.0)  # progress
    det.feed(LineReader().read([_chunk("console.log", 4, [TIMEOUT_LINE])]), 4.0)
    assert det.check(4.0, 2, []) is not None  # a new hang


def test_detector_open_collective_uses_the_logged_timeout() -> None:
    reader = LineReader()
    det = HangDetector(idle_s=1000, open_share=0.5)
    det.start_clock(0.0, running_for=0.0)
    init = "[default0]:[2026-11-22T08:24:04.105] rank0 pid1: init_process_group(gloo, timeout=10.0s)"
    det.feed(
        reader.read([_chunk("console.log", 1, [init, RUNNING.format(r=0, seq=4), RUNNING.format(r=1, seq=4)])]), 0.0
    )
    assert det.timeout_s == 10.0
    assert det.check(4.9, 2, []) is None
    hang = det.check(5.1, 2, [])
    assert hang is not None and hang.reason == "open_collective" and hang.ranks == (0, 1)
    assert "ALLREDUCE #4" in hang.summary and "console.log:1" in hang.summary
    det2 = HangDetector(idle_s=1000, open_share=0.5)
    det2.feed(reader.read([_chunk("console.log", 2, [RUNNING.format(r=0, seq=4), "[rank0]: step 5 loss 1"])]), 0.0)
    assert det2.check(1000.0, 1, []) is None  # the rank logged after it: the collective is no longer its newest line


def test_detector_open_collective_already_open_when_the_watch_started() -> None:
    """The watch starts while ranks 0 and 2 already wait: their newest lines, read from the files' tails, are the
    collective they started; it counts as open from the watch's start."""
    reader = LineReader()
    det = HangDetector(idle_s=1000, open_share=0.5)
    history = [
        "[default0]:[2026-11-22T08:24:04.105] rank0 pid1: init_process_group(gloo, timeout=10.0s)",
        "[default1]:[2026-11-22T08:24:09.000] rank1: step 2 loss 1.0",
        RUNNING.format(r=0, seq=8),
        RUNNING.format(r=2, seq=8),
    ]
    det.feed(reader.read([_chunk("console.log", 40, history)]), 100.0, history=True)
    det.start_clock(100.0, running_for=3.0)
    assert not det.armed and det.check(104.0, 3, []) is None
    hang = det.check(105.5, 3, [])
    assert hang is not None and hang.reason == "open_collective" and hang.ranks == (0, 2)


def test_detector_idle_needs_silence_and_an_idle_rank() -> None:
    det = HangDetector(idle_s=3)
    det.start_clock(0.0, running_for=1.0)
    assert det.check(3.5, 2, ["rank 0, pid 1"]) is None  # ranks still starting: nothing logged yet
    det.feed(LineReader().read([_chunk("rank0.log", 1, ["step 1"])]), 1.0)
    assert det.check(3.9, 2, ["rank 0, pid 1"]) is None
    assert det.check(4.1, 2, []) is None  # every rank computes: not a hang
    hang = det.check(4.1, 2, ["rank 0, pid 1"])
    assert hang is not None and hang.reason == "idle" and "rank 0, pid 1" in hang.summary
    assert det.check(100.0, 0, ["x"]) is None  # no rank alive: the job ended, nothing hangs


def test_launcher_lines_in_a_ranked_console_are_not_a_rank_logging() -> None:
    det = HangDetector(idle_s=3)
    det.start_clock(0.0, running_for=1.0)
    det.feed(LineReader().read([_chunk("console.log", 1, ["[default0]:step 1"])]), 0.0)
    det.feed(
        LineReader().read(
            [
                _chunk(
                    "console.log",
                    2,
                    ["[I1122 08:25:09.292 TCPStoreLibUvBackend.cpp:1005] [c10d - trace] wait key_count:1"],
                )
            ]
        ),
        2.0,
    )
    assert det.check(3.5, 1, ["rank 0, pid 1"]) is not None


# -- processes ------------------------------------------------------------------------------------------------
def _p(pid: int, ppid: int, env: dict[str, str], cmd: str = "python train.py") -> Proc:
    return Proc(pid, ppid, "python3", tuple(cmd.split()), env, float(pid))


def test_ranks_from_the_environment_with_their_workers() -> None:
    procs = {
        10: _p(10, 1, {"SLURM_PROCID": "0", "RANK": "0"}, "python -m torch.distributed.run train.py"),  # a launcher
        11: _p(11, 10, {"RANK": "0", "LOCAL_RANK": "0"}),
        12: _p(12, 10, {"RANK": "1", "LOCAL_RANK": "1"}),
        13: _p(13, 11, {"RANK": "0", "LOCAL_RANK": "0"}),  # rank 0's DataLoader worker
    }
    ranks = classify(procs)
    assert [(r.rank, r.pid, r.local_rank, r.workers) for r in ranks] == [(0, 11, 0, [13]), (1, 12, 1, [])]
    assert ranks[0].label == "rank0"


def test_ranks_of_mp_spawn_have_no_number() -> None:
    procs = {
        20: _p(20, 1, {}, "python launch.py"),
        21: _p(21, 20, {}, "python -c from multiprocessing.spawn import spawn_main"),
        22: _p(22, 20, {}, "python -c from multiprocessing.spawn import spawn_main"),
        23: _p(23, 20, {}, "python -c from multiprocessing.resource_tracker import main;main(5)"),
    }
    ranks = classify(procs)
    assert [(r.rank, r.pid, r.label) for r in ranks] == [(None, 21, "pid21"), (None, 22, "pid22")]


def _sleeper(jobdir: Path, rank: int, seconds: float = 60, line: str = "step 1 loss 0.5") -> subprocess.Popen:
    """A stand-in rank: logs a line a moment after it starts (the watcher, started beside it, sees the job
    alive), then sleeps."""
    env = {**os.environ, "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": "2"}
    log = (jobdir / f"rank{rank}.log").open("ab")
    code = f"import time; time.sleep(1.5); print({line!r}, flush=True); time.sleep({seconds})"
    return subprocess.Popen([sys.executable, "-c", code], cwd=jobdir, env=env, stdout=log, stderr=log)


@pytest.fixture
def stand_in(tmp_path: Path):
    """Two 'ranks' that log one line and then sleep (idle), working in the job folder."""
    procs = [_sleeper(tmp_path, r) for r in (0, 1)]
    yield tmp_path, procs
    for p in procs:
        p.kill()
        p.wait()


def test_job_processes_are_found_from_the_job_folder(stand_in) -> None:
    jobdir, procs = stand_in
    jp = JobProcesses(psutil, jobdir)
    jp.refresh()
    assert {(r.rank, r.pid) for r in jp.ranks} >= {(0, procs[0].pid), (1, procs[1].pid)}
    jp2 = JobProcesses(psutil, jobdir, pids=(procs[1].pid,))  # one rank named: its launcher's ranks are watched
    jp2.refresh()
    assert {r.pid for r in jp2.ranks} >= {procs[0].pid, procs[1].pid}


def _settings(jobdir: Path, **kw) -> Settings:
    base = dict(
        jobdir=jobdir,
        out_root=jobdir / "ncclpm-watch",
        idle_s=1.0,
        poll_s=0.1,
        scan_s=0.5,
        once=True,
        start_timeout_s=20.0,
        debug_server=True,
    )
    return Settings(**{**base, **kw})


def _watch(settings: Settings, pyspy: str | None) -> tuple[object, list[str], list[str]]:
    said: list[str] = []
    shown: list[str] = []
    out = Watcher(settings, Tools(psutil, pyspy), said.append, shown.append).run()
    return out, said, shown


def _manifest(folder: Path) -> dict:
    return json.loads((folder / "manifest.json").read_text())


def test_missing_pyspy_is_a_manifest_entry_and_the_rest_runs(stand_in) -> None:
    jobdir, _ = stand_in
    out, said, shown = _watch(_settings(jobdir), pyspy=None)
    assert len(out.collections) == 1 and out.code == 0
    m = _manifest(out.collections[0])
    assert m["state"] == "complete" and m["trigger"]["reason"] == "idle"
    spy = [s for s in m["steps"] if s["name"] == "pyspy"]
    assert spy[0]["status"] == "missing" and "nccl-postmortem[watch]" in spy[0]["why"]
    assert any(s["name"] == "dmesg" for s in m["steps"]) and any(s["name"] == "diagnosis" for s in m["steps"])
    assert (out.collections[0] / "report.md").is_file() and (out.collections[0] / "report.json").is_file()
    assert any("py-spy is not installed" in s for s in said) and shown


def test_refused_ptrace_is_explained(stand_in, tmp_path_factory) -> None:
    jobdir, _ = stand_in
    fake = tmp_path_factory.mktemp("bin") / "py-spy"
    fake.write_text("#!/bin/sh\necho 'Error: Operation not permitted (os error 1)' >&2\nexit 1\n")
    fake.chmod(0o755)
    out, _, _ = _watch(_settings(jobdir, debug_server=False), pyspy=str(fake))
    spy = [s for s in _manifest(out.collections[0])["steps"] if s["name"] == "pyspy"]
    assert len(spy) == 2 and all(s["status"] == "failed" and "SYS_PTRACE" in s["why"] for s in spy)
    assert all("--nonblocking" not in s["command"] for s in spy)  # the same permission: not tried again


def test_pyspy_dumps_are_named_for_the_stack_reader(stand_in) -> None:
    pyspy = find_pyspy()
    if pyspy is None:
        pytest.skip("py-spy is not installed: pip install 'nccl-postmortem[watch]'")
    jobdir, _ = stand_in
    out, _, _ = _watch(_settings(jobdir), pyspy=pyspy)
    folder = out.collections[0]
    m = _manifest(folder)
    ok = {s["output"] for s in m["steps"] if s["name"] == "pyspy" and s["status"] == "ok"}
    assert ok == {"rank0.pyspy.txt", "rank1.pyspy.txt"}, m["steps"]
    assert (
        "time.sleep" in (folder / "rank0.pyspy.txt").read_text()
        or "<module>" in (folder / "rank0.pyspy.txt").read_text()
    )
    deb = next(s for s in m["steps"] if s["name"] == "debug_server")
    assert deb["status"] == "missing" and "pt_workerserver" in deb["why"]
    report = json.loads((folder / "report.json").read_text())
    assert report["stack_tree"] is not None and sorted(report["stack_tree"]["classes"][0]["ranks"]) == [0, 1]


def test_signal_is_sent_only_where_the_job_handles_it(tmp_path: Path) -> None:
    handled = tmp_path / "rank0.log"
    code = (
        "import faulthandler, signal, sys, time; faulthandler.register(signal.SIGUSR1, file=sys.stderr); "
        "time.sleep(1.5); print('step 1', flush=True); time.sleep(60)"
    )
    env = {**os.environ, "RANK": "0", "WORLD_SIZE": "2"}
    with handled.open("ab") as log:
        a = subprocess.Popen([sys.executable, "-c", code], cwd=tmp_path, env=env, stdout=log, stderr=log)
    b = _sleeper(tmp_path, 1)
    try:
        out, _, _ = _watch(_settings(tmp_path, signal=signal.SIGUSR1, debug_server=False), pyspy=None)
        steps = {s["target"]: s for s in _manifest(out.collections[0])["steps"] if s["name"] == "signal"}
        assert steps[f"rank 0, pid {a.pid}"]["status"] == "ok" and "written to" in steps[f"rank 0, pid {a.pid}"]["why"]
        assert (
            steps[f"rank 1, pid {b.pid}"]["status"] == "skipped"
            and "no handler" in steps[f"rank 1, pid {b.pid}"]["why"]
        )
        assert b.poll() is None  # the rank without a handler was not sent a signal that would have ended it
        assert "most recent call first" in handled.read_text()
    finally:
        for p in (a, b):
            p.kill()
            p.wait()


class _Hook(BaseHTTPRequestHandler):
    bodies: ClassVar[list[tuple[str, bytes]]] = []

    def do_POST(self) -> None:
        n = int(self.headers.get("Content-Length", 0))
        _Hook.bodies.append((self.headers.get("Content-Type", ""), self.rfile.read(n)))
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args: object) -> None:
        pass


def test_post_sends_the_slack_json_to_the_webhook(stand_in) -> None:
    jobdir, _ = stand_in
    server = HTTPServer(("127.0.0.1", 0), _Hook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_port}/hook"
        out, _said, _ = _watch(_settings(jobdir, post=url, debug_server=False), pyspy=None)
    finally:
        server.shutdown()
    ctype, body = _Hook.bodies[-1]
    assert ctype == "application/json" and "blocks" in json.loads(body)
    post = next(s for s in _manifest(out.collections[0])["steps"] if s["name"] == "post")
    assert post["status"] == "ok" and post["why"] == "sent: HTTP 200"


def test_a_healthy_job_ends_with_nothing_collected(tmp_path: Path) -> None:
    procs = [_sleeper(tmp_path, r, seconds=1.5) for r in (0, 1)]
    out, _said, _ = _watch(_settings(tmp_path, idle_s=30.0, once=False), pyspy=None)
    for p in procs:
        p.wait()
    assert out.collections == [] and out.code == 0 and "nothing collected" in out.reason
    assert not (tmp_path / "ncclpm-watch").exists()


def test_watcher_stopped_mid_collection_leaves_a_manifest_that_says_so(stand_in, tmp_path_factory) -> None:
    jobdir, _ = stand_in
    slow = tmp_path_factory.mktemp("bin") / "py-spy"
    slow.write_text("#!/bin/sh\nsleep 20\n")
    slow.chmod(0o755)
    env = {**os.environ, "PATH": f"{slow.parent}:{os.environ['PATH']}"}
    cmd = [sys.executable, "-m", "ncclpm", "watch", str(jobdir), "--idle", "1", "--poll", "0.1", "--no-debug-server"]
    w = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 40
        while not list((jobdir / "ncclpm-watch").glob("*/manifest.json")) and time.monotonic() < deadline:
            time.sleep(0.05)
        w.send_signal(signal.SIGTERM)
        _, err = w.communicate(timeout=40)
    finally:
        if w.poll() is None:
            w.kill()
    (folder,) = (jobdir / "ncclpm-watch").iterdir()
    m = _manifest(folder)
    assert m["state"] == "interrupted" and m["interrupted_by"] == "SIGTERM"
    assert b"stopped by SIGTERM" in err and w.returncode == 0


def test_cli_refuses_a_bad_signal_and_url(tmp_path: Path) -> None:
    res = CliRunner().invoke(main, ["watch", str(tmp_path), "--signal", "NOPE"])
    assert res.exit_code == 2 and "no signal 'NOPE'" in res.output
    res = CliRunner().invoke(main, ["watch", str(tmp_path), "--post", "file:///etc/passwd"])
    assert res.exit_code == 2 and "not an http(s) URL" in res.output


def test_cli_says_how_to_install_the_extra(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "psutil", None)  # `import psutil` raises ImportError
    res = CliRunner().invoke(main, ["watch", str(tmp_path)])
    assert res.exit_code == 2 and "pip install 'nccl-postmortem[watch]'" in res.output


def test_reports_and_manifests_ncclpm_wrote_are_not_read_again(tmp_path: Path) -> None:
    from ncclpm.api import diagnose
    from ncclpm.render import render

    sample = Path(__file__).resolve().parents[1] / "sample_logs" / "nccl_rank0_sample_generation"
    before = diagnose([sample])
    out = tmp_path / "ncclpm-watch" / "20260101T000000Z"
    out.mkdir(parents=True)
    for fmt, name in (("md", "report.md"), ("json", "report.json"), ("html", "report.html"), ("text", "report.txt")):
        (out / name).write_text(render(before, fmt), encoding="utf-8")
    (out / "manifest.json").write_text(
        json.dumps({"tool": "ncclpm 0.1.0 watch", "trigger": {"evidence": [TIMEOUT_LINE]}})
    )
    after = diagnose([sample, tmp_path])
    assert after.n_sources == before.n_sources and after.code_files == before.code_files
    assert sum("a report ncclpm wrote" in w for w in after.warnings) == 5
    assert (after.category, after.culprit_ranks, after.confidence) == (
        before.category,
        before.culprit_ranks,
        before.confidence,
    )
