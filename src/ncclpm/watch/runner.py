"""The watch loop: follow the logs and the processes, detect a hang, collect once, diagnose, report; stop when
the job ends (or after the first collection with `--once`).

Bounded: one poll every `poll_s` (stat of the followed files, a CPU sample of each rank), a full search for the
job's processes and files every `scan_s`; the watcher lowers its own priority, and polars (the diagnosis) runs
on at most two threads.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from ncclpm.watch import collect
from ncclpm.watch.deps import Tools
from ncclpm.watch.detect import Hang, HangDetector
from ncclpm.watch.follow import LogFollower
from ncclpm.watch.lines import LineReader
from ncclpm.watch.manifest import Manifest, Step, collection_folder
from ncclpm.watch.procs import JobProcesses

CPU_WINDOW_S = 5.0  # the CPU use that says whether a rank is idle is measured over this window


@dataclass(frozen=True)
class Settings:
    jobdir: Path
    out_root: Path
    pids: tuple[int, ...] = ()
    idle_s: float = 300.0
    open_share: float = 0.5
    once: bool = False
    native: bool = False
    signal: int | None = None
    post: str | None = None
    poll_s: float = 0.5
    scan_s: float = 5.0
    start_timeout_s: float = 600.0
    debug_server: bool = True


@dataclass
class Outcome:
    collections: list[Path] = field(default_factory=list)
    reason: str = ""
    code: int = 0


class _Stop(Exception):
    pass


class Watcher:
    def __init__(self, settings: Settings, tools: Tools, say: Callable[[str], None], show: Callable[[str], None]):
        self.s = settings
        self.tools = tools
        self.say = say  # status lines (stderr)
        self.show = show  # the text report (stdout)
        self.procs = JobProcesses(tools.psutil, settings.jobdir, settings.pids)
        self.reader = LineReader()
        self.follower = LogFollower(settings.jobdir, skip=settings.out_root, history=self.reader.history)
        self.detector = HangDetector(settings.idle_s, settings.open_share)
        self.stop_signal: int | None = None
        self.manifest: Manifest | None = None

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        self.stop_signal = signum
        collect.stop_helpers()
        if self.manifest is not None and self.manifest.data.get("state") == "collecting":
            self.manifest.finish("interrupted", interrupted_by=signal.Signals(signum).name)
        raise _Stop

    def run(self) -> Outcome:
        out = Outcome()
        old = {s: signal.signal(s, self._on_signal) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
        try:
            self._loop(out)
        except _Stop:
            out.reason = f"stopped by {signal.Signals(self.stop_signal or signal.SIGTERM).name}"
            out.code = 130 if self.stop_signal == signal.SIGINT else 0
        finally:
            for s, h in old.items():
                signal.signal(s, h)
        return out

    def _loop(self, out: Outcome) -> None:
        start = time.monotonic()
        last_scan = -1e9
        said_warnings = 0
        if self.tools.pyspy is None:
            self.say(f"warning: {self.tools.pyspy_missing()}; stacks will not be collected")
        self.say(
            f"watching {self.s.jobdir} (idle {self.s.idle_s:g} s, open collectives {self.s.open_share:.0%} of "
            f"their timeout); collections go to {self.s.out_root}"
        )
        while True:
            now = time.monotonic()
            if now - last_scan >= self.s.scan_s:
                last_scan = now
                was_seen = self.procs.seen_any
                self.procs.refresh()
                self.follower.scan()
                for w in self.follower.warnings[said_warnings:]:
                    self.say(f"warning: {w}")
                said_warnings = len(self.follower.warnings)
                if self.procs.ranks and not was_seen:
                    self.say("found the job: " + "; ".join(r.describe() for r in self.procs.ranks))
            else:
                self.procs.drop_dead()
            if self.procs.ranks and not self.detector.armed:
                self.detector.start_clock(now, time.time() - max(r.create_time for r in self.procs.ranks))
            self.procs.sample_cpu(now)
            if self.follower.history:  # the settings stated before the watch started (the timeout in force)
                self.detector.feed(self.reader.read(self.follower.history), now, history=True)
                self.follower.history = []
            self.detector.feed(self.reader.read(self.follower.poll()), now)
            if self.procs.seen_any and not self.procs.ranks:
                self.procs.refresh()  # a restart's new workers, or the end
                if not self.procs.ranks:
                    out.reason = "the job ended" + ("" if out.collections else ": nothing hung, nothing collected")
                    return
            if not self.procs.seen_any and now - start > self.s.start_timeout_s:
                out.reason = (
                    f"no process of the job found within {self.s.start_timeout_s:g} s (give --pid, or start "
                    "the job from the job folder or with its logs there)"
                )
                out.code = 2
                return
            idle = [r.describe() for r in self.procs.idle_ranks(CPU_WINDOW_S)]
            hang = self.detector.check(now, len(self.procs.ranks), idle)
            if hang is not None:
                out.collections.append(self.handle(hang))
                if self.s.once:
                    out.reason = "collected once (--once)"
                    return
            time.sleep(max(0.0, self.s.poll_s - (time.monotonic() - now)))

    def handle(self, hang: Hang) -> Path:
        t0 = time.monotonic()
        self.say(f"hang: {hang.summary}")
        folder = self.collect(hang)
        self.detector.collected()
        self.report(folder, t0)
        return folder

    def collect(self, hang: Hang) -> Path:
        folder = collection_folder(self.s.out_root)
        ranks = list(self.procs.ranks)
        trigger: dict[str, Any] = {"reason": hang.reason, "summary": hang.summary, "evidence": list(hang.evidence)}
        if hang.ranks:
            trigger["ranks"] = list(hang.ranks)
        m = self.manifest = Manifest.start(folder, self.s.jobdir, trigger, self.procs.snapshot(CPU_WINDOW_S))
        opts = collect.Options(native=self.s.native, signal=self.s.signal)
        t0 = time.monotonic()
        # torch's debug server is asked in a child Python that imports torch (seconds): beside the other steps
        asker = threading.Thread(target=collect.debug_server, args=(ranks, folder, self.procs, m), daemon=True)
        if self.s.debug_server:
            asker.start()
        else:
            m.add(Step("debug_server", "job", "skipped", "not asked (--no-debug-server)"))
        collect.pyspy_all(self.tools.pyspy, ranks, folder, opts, self.procs, self.tools.pyspy_missing(), m)
        if opts.signal is not None:
            collect.send_signal(opts.signal, ranks, folder, self.s.jobdir, self.procs, m)
        else:
            m.add(
                Step(
                    "signal",
                    "every rank",
                    "skipped",
                    "no signal sent (--signal not given): faulthandler's stacks only where the job prints them itself",
                )
            )
        collect.host_context(folder, m)
        if self.s.debug_server:
            asker.join(collect.DEBUG_SERVER_TIMEOUT_S + 5)
        gone = [r.describe() for r in ranks if not self.procs.alive(r)]
        ended = {"job_ended_during_collection": bool(gone)}
        if gone:
            m.note(
                f"the job ended during the collection: {', '.join(gone)} had exited by its end; what was taken "
                "before is kept, the steps say which"
            )
        m.finish("complete", seconds=round(time.monotonic() - t0, 2), **ended)
        self.say(f"collected into {folder} ({time.monotonic() - t0:.1f} s)")
        return folder

    def report(self, folder: Path, t0: float) -> None:
        from ncclpm.watch import report

        m = self.manifest
        assert m is not None
        t1 = time.monotonic()
        try:
            d = report.diagnose(self.s.jobdir, self.s.out_root, folder)
            text = report.write_reports(d, folder)
        except Exception as exc:  # the collection stays: its files can be diagnosed by hand
            m.add(Step("diagnosis", "job", "failed", f"{type(exc).__name__}: {exc}"))
            self.say(
                f"error: the diagnosis failed ({type(exc).__name__}: {exc}); run `ncclpm diagnose` on "
                f"{self.s.jobdir} and {folder}"
            )
            return
        m.add(Step("diagnosis", "job", "ok", seconds=round(time.monotonic() - t1, 2), output="report.md, report.json"))
        m.data["hang_to_report_s"] = round(time.monotonic() - t0, 2)
        m.write()
        self.show(text)
        if self.s.post:
            said = report.post(d, self.s.post)
            m.add(Step("post", "webhook", "ok" if said.startswith("sent") else "failed", said))
            self.say(f"--post: {said}")


def quiet_down() -> None:
    """Lower the watcher's priority and polars' threads: the job's CPUs are the job's."""
    with contextlib.suppress(OSError):
        os.nice(10)
    os.environ.setdefault("POLARS_MAX_THREADS", "2")
