"""Collect the evidence of a hang, once, into one folder: every step is recorded in the manifest, and a step that
cannot run (a tool missing, ptrace refused, the process gone) is a manifest entry, never an exception.

Order: the stacks first (what decides a hang, and what the job's end takes away): `py-spy dump` of every rank
with its child processes (DataLoader workers), in parallel; then torch's debug server, where the job started
one; then the faulthandler signal the user asked for; then the host's context (`nvidia-smi -q`, the kernel
log). Files are named so ncclpm's readers map them to ranks: `rank3.pyspy.txt` (a dump whose rank is unknown:
`pid812.pyspy.txt`, mapped by pid from the logs where they name it).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from ncclpm.watch.manifest import Manifest, Step
from ncclpm.watch.procs import JobProcesses, Rank

PYSPY_TIMEOUT_S = 30.0
DEBUG_SERVER_TIMEOUT_S = 60.0
WORKER_THREAD = "pt_workerserver"  # the thread name of torch's debug-server worker (torch >= 2.10)
PARALLEL_DUMPS = 4
SIGNAL_WAIT_S = 3.0  # how long faulthandler's output may take to land
DMESG_LINES = 300
NVSMI_SECTIONS = "ECC,PAGE_RETIREMENT,MEMORY,UTILIZATION,TEMPERATURE,PERFORMANCE,PIDS"
NVSMI_MAX_LINES = 400
_PTRACE_HINT = (
    "py-spy could not read the process (ptrace refused): run the watcher as root (or with CAP_SYS_PTRACE), or as "
    "the job's user with kernel.yama.ptrace_scope = 0; in a container add the SYS_PTRACE capability (Kubernetes: "
    "securityContext.capabilities.add: [SYS_PTRACE], and shareProcessNamespace: true for a sidecar)"
)


@dataclass(frozen=True)
class Options:
    native: bool = False  # py-spy --native: C/C++ frames too (slower)
    signal: int | None = None  # a signal the job handles (faulthandler.register), sent to every rank


_RUNNING: set[subprocess.Popen] = set()  # the helpers running now (py-spy, nvidia-smi...): ended if we stop
_RUNNING_LOCK = threading.Lock()
_STOPPING = threading.Event()


def _run(cmd: list[str], timeout: float) -> tuple[int | None, bytes, str, float]:
    """(exit code or None on timeout, stdout, stderr text, seconds). A missing tool raises FileNotFoundError."""
    t0 = time.monotonic()
    if _STOPPING.is_set():
        return None, b"", "not run: the watcher is stopping", 0.0
    p = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, start_new_session=True
    )
    with _RUNNING_LOCK:
        _RUNNING.add(p)
    try:
        try:
            stdout, stderr = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _end(p)
            stdout, _ = p.communicate()
            return None, stdout, f"no answer within {timeout:g} s", time.monotonic() - t0
    finally:
        with _RUNNING_LOCK:
            _RUNNING.discard(p)
    return p.returncode, stdout, stderr.decode("utf-8", "replace"), time.monotonic() - t0


def stop_helpers() -> None:
    """End the helper processes this watcher started (the watcher is being stopped)."""
    _STOPPING.set()
    with _RUNNING_LOCK:
        for p in _RUNNING:
            _end(p)


def _end(p: subprocess.Popen) -> None:
    """Kill a helper and whatever it started (its own session: the group is its pid)."""
    with contextlib.suppress(OSError):
        os.killpg(p.pid, signal.SIGKILL)


def _short(text: str, n: int = 400) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 3] + "..."


# -- py-spy ---------------------------------------------------------------------------------------------------
def _pyspy_one(pyspy: str, r: Rank, folder: Path, native: bool, procs: JobProcesses) -> Step:
    target = r.describe()
    out = f"{r.label}.pyspy.txt"
    base = [pyspy, "dump", "--pid", str(r.pid), "--subprocesses"] + (["--native"] if native else [])
    if not procs.alive(r):
        return Step("pyspy", target, "gone", "the process had exited before its dump (the job ended)")
    tries = [base, [*base, "--nonblocking"]]
    step = Step("pyspy", target, "failed")
    for cmd in tries:
        try:
            code, stdout, stderr, secs = _run(cmd, PYSPY_TIMEOUT_S)
        except OSError as exc:
            return Step("pyspy", target, "missing", f"py-spy cannot be run: {exc}", command=cmd)
        if code == 0 and stdout.strip():
            (folder / out).write_bytes(stdout)
            return Step("pyspy", target, "ok", command=cmd, exit_code=0, seconds=round(secs, 2), output=out)
        if not procs.alive(r):
            return Step(
                "pyspy",
                target,
                "gone",
                "the process exited during its dump (the job ended)",
                command=cmd,
                exit_code=code,
                seconds=round(secs, 2),
            )
        refused = any(w in stderr.lower() for w in ("permission", "not permitted", "ptrace"))
        why = (
            f"{_PTRACE_HINT}. py-spy said: {_short(stderr)}"
            if refused
            else f"py-spy said: {_short(stderr) or '(nothing)'}"
        )
        step = Step("pyspy", target, "failed", why, command=cmd, exit_code=code, seconds=round(secs, 2))
        if stdout.strip():  # a partial dump is still evidence
            (folder / out).write_bytes(stdout)
            step.output = out
        if refused:
            break  # --nonblocking needs the same permission
    return step


def pyspy_all(
    pyspy: str | None,
    ranks: list[Rank],
    folder: Path,
    opts: Options,
    procs: JobProcesses,
    missing: str,
    manifest: Manifest,
) -> None:
    if pyspy is None:
        manifest.add(Step("pyspy", "every rank", "missing", missing))
        return
    with ThreadPoolExecutor(max_workers=PARALLEL_DUMPS) as pool:
        for step in pool.map(lambda r: _pyspy_one(pyspy, r, folder, opts.native, procs), ranks):
            manifest.add(step)


# -- faulthandler signal --------------------------------------------------------------------------------------
def _caught(pid: int) -> set[int] | None:
    """The signals the process handles (SigCgt of /proc/PID/status); None when it cannot be read."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("SigCgt:"):
                mask = int(line.split()[1], 16)
                return {n for n in range(1, 65) if mask & (1 << (n - 1))}
    except (OSError, ValueError):
        return None
    return None


def _stderr_file(pid: int) -> Path | None:
    try:
        target = Path(os.readlink(f"/proc/{pid}/fd/2"))
    except OSError:
        return None
    return target if target.is_file() else None


def send_signal(
    signum: int, ranks: list[Rank], folder: Path, jobdir: Path, procs: JobProcesses, manifest: Manifest
) -> None:
    """Send the signal the job registered (faulthandler) to each rank that handles it, then keep what it wrote:
    a rank's stderr under the job folder is read by the diagnosis there; one elsewhere is copied here."""
    name = signal.Signals(signum).name
    sent: list[tuple[Rank, Path | None, int]] = []
    for r in ranks:
        target = r.describe()
        caught = _caught(r.pid)
        if caught is None:
            manifest.add(
                Step(
                    "signal",
                    target,
                    "gone" if not procs.alive(r) else "skipped",
                    f"{name} not sent: the process's signal handlers cannot be read",
                )
            )
            continue
        if signum not in caught:
            manifest.add(
                Step(
                    "signal",
                    target,
                    "skipped",
                    f"{name} not sent: the process has no handler for it "
                    "(its default action would end the process); register one with "
                    f"faulthandler.register(signal.{name})",
                )
            )
            continue
        err = _stderr_file(r.pid)
        before = err.stat().st_size if err is not None else 0
        try:
            os.kill(r.pid, signum)
        except OSError as exc:
            manifest.add(Step("signal", target, "failed", f"{name} not sent: {exc.strerror or exc}"))
            continue
        sent.append((r, err, before))
    if not sent:
        return
    deadline = time.monotonic() + SIGNAL_WAIT_S
    sizes: dict[int, int] = {}
    while time.monotonic() < deadline:
        time.sleep(0.25)
        now = {r.pid: (e.stat().st_size if e is not None and e.exists() else 0) for r, e, _ in sent}
        if now == sizes and all(now[r.pid] > b for r, e, b in sent if e is not None):
            break
        sizes = now
    for r, err, before in sent:
        target = r.describe()
        if err is None:
            manifest.add(
                Step(
                    "signal",
                    target,
                    "ok",
                    f"{name} sent; the rank's stderr is not a file (a pipe or a "
                    "terminal): faulthandler's output went there, into the job's console",
                )
            )
            continue
        grown = (err.stat().st_size if err.exists() else before) - before
        if grown <= 0:
            manifest.add(
                Step(
                    "signal",
                    target,
                    "failed",
                    f"{name} sent, but nothing was written to {err} within {SIGNAL_WAIT_S:g} s",
                )
            )
            continue
        inside = err.resolve().is_relative_to(jobdir.resolve())
        out = None
        if not inside:
            out = f"{r.label}.faulthandler.txt"
            with err.open("rb") as fh:
                fh.seek(before)
                (folder / out).write_bytes(fh.read(min(grown, 4 << 20)))
        where = f"{err} (read by the diagnosis with the job's logs)" if inside else f"{err}, copied here"
        manifest.add(Step("signal", target, "ok", f"{name} sent; {grown} bytes written to {where}", output=out))


# -- debug server ---------------------------------------------------------------------------------------------
def _has_worker_server(pid: int) -> bool:
    """The rank runs the debug server's worker (its threads are named so): a look at /proc, no torch needed."""
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return False
    for task in tasks:
        try:
            if (task / "comm").read_text().strip() == WORKER_THREAD:
                return True
        except OSError:
            continue
    return False


def debug_server(ranks: list[Rank], folder: Path, procs: JobProcesses, manifest: Manifest) -> None:
    """torch's debug server (`torch.distributed.debug.start_debug_server`), where a rank runs its worker: asked in a
    child Python that imports torch (the watcher itself stays small), through the job's store, for the local
    ranks' stacks and flight-recorder entries."""
    numbered = [r for r in ranks if r.rank is not None and _has_worker_server(r.pid)]
    if not numbered:
        manifest.add(
            Step(
                "debug_server",
                "job",
                "missing",
                "the job started no debug server (no rank runs the "
                f"`{WORKER_THREAD}` thread of torch.distributed.debug.start_debug_server)",
            )
        )
        return
    env = next((e for r in ranks if (e := procs.environ(r.pid)).get("MASTER_ADDR") and e.get("MASTER_PORT")), None)
    if env is None:
        manifest.add(
            Step(
                "debug_server",
                "job",
                "skipped",
                "not asked: the ranks' environment does not give "
                "MASTER_ADDR, MASTER_PORT and their RANK (the debug server registers through the store)",
            )
        )
        return
    cmd = [
        sys.executable,
        "-m",
        "ncclpm.watch.debug_server",
        "--out",
        str(folder),
        "--master",
        f"{env['MASTER_ADDR']}:{env['MASTER_PORT']}",
        "--ranks",
        ",".join(str(r.rank) for r in numbered),
    ]
    code, stdout, stderr, secs = _run(cmd, DEBUG_SERVER_TIMEOUT_S)
    said = stdout.decode("utf-8", "replace").strip()
    if code == 0:
        files = sorted(p.name for p in folder.glob("debug_server.*")) + sorted(
            p.name for p in folder.glob("fr_trace_rank*.json")
        )
        manifest.add(
            Step(
                "debug_server",
                "job",
                "ok",
                said,
                command=cmd[1:],
                exit_code=0,
                seconds=round(secs, 2),
                output=", ".join(files) or None,
            )
        )
    else:
        status = "missing" if code in (3, 4) else "failed"
        why = said or _short(stderr) or "no answer"
        manifest.add(Step("debug_server", "job", status, why, command=cmd[1:], exit_code=code, seconds=round(secs, 2)))


# -- host context ---------------------------------------------------------------------------------------------
def _tool_step(
    name: str, cmd: list[str], timeout: float, keep: Callable[[str], str], out: Path, manifest: Manifest
) -> bool:
    try:
        code, stdout, stderr, secs = _run(cmd, timeout)
    except FileNotFoundError:
        manifest.add(Step(name, "host", "missing", f"`{cmd[0]}` is not installed on this host", command=cmd))
        return False
    except OSError as exc:
        manifest.add(Step(name, "host", "failed", f"`{cmd[0]}` cannot be run: {exc}", command=cmd))
        return False
    if code != 0 or not stdout.strip():
        said = _short(stderr) or _short(stdout.decode("utf-8", "replace")) or "(nothing)"
        manifest.add(
            Step(
                name,
                "host",
                "failed",
                f"`{' '.join(cmd)}` said: {said}",
                command=cmd,
                exit_code=code,
                seconds=round(secs, 2),
            )
        )
        return False
    out.write_text(keep(stdout.decode("utf-8", "replace")), encoding="utf-8")
    manifest.add(Step(name, "host", "ok", command=cmd, exit_code=0, seconds=round(secs, 2), output=out.name))
    return True


def host_context(folder: Path, manifest: Manifest) -> None:
    host = "".join(c if c.isalnum() or c in "-_." else "_" for c in socket.gethostname()) or "host"

    def head(text: str) -> str:
        lines = text.splitlines()
        cut = f"\n... ({len(lines) - NVSMI_MAX_LINES} more lines)\n" if len(lines) > NVSMI_MAX_LINES else "\n"
        return "\n".join(lines[:NVSMI_MAX_LINES]) + cut

    def tail(text: str) -> str:
        return "\n".join(text.splitlines()[-DMESG_LINES:]) + "\n"

    smi = folder / f"host.{host}.nvidia-smi.txt"
    done = _tool_step("nvidia-smi", ["nvidia-smi", "-q", "-d", NVSMI_SECTIONS], 30.0, head, smi, manifest)
    if not done and manifest.steps("nvidia-smi")[-1]["status"] == "failed":  # an older driver: no such sections
        _tool_step("nvidia-smi", ["nvidia-smi", "-q"], 30.0, head, smi, manifest)
    _tool_step("dmesg", ["dmesg", "-T"], 15.0, tail, folder / f"host.{host}.dmesg.txt", manifest)
