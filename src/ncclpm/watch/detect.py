"""When is the job hanging? Three readings, each with the evidence it quotes:

- a timeout line appears: a watchdog, blocking-wait or gloo collective timeout, the heartbeat monitor, a store
  wait, a monitored barrier (`lines.HANG_KINDS`) - the ranks that printed it are about to be torn down;
- a collective stays open: a rank's newest line says it started a collective (debug logging prints one line
  per collective) and it has logged nothing since for `open_share` of the timeout in force (the logs' own
  process-group timeout, else torch's NCCL default of 10 minutes);
- silence: no rank has logged a line for `idle_s` seconds while the rank processes are alive and at least one
  of them uses no CPU (a rank waiting in a collective or on a lock sits idle; one rank spinning in a loop does
  not hide the others' wait, and ranks that all compute are not hung). Silence counts once the job has shown
  life: a rank logged a line while watched, or its ranks were already running for `idle_s` when the watch found
  them - ranks that are still starting (importing, one waiting for a slower one in the rendezvous) are not hung.

A hang is collected once: after a collection the detector stays quiet until the job makes progress again (a rank
logs a line that is not a timeout), so the timeouts that follow the hang it caught are not a second hang.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ncclpm.watch.lines import HANG_KINDS, STARTED, TIMEOUT_SETTING, Event, Reading

DEFAULT_TIMEOUT_S = 600.0  # torch's ProcessGroupNCCL default; gloo's is 30 min: the shorter one, to be early


@dataclass(frozen=True)
class Hang:
    reason: str  # timeout_line | open_collective | idle
    summary: str
    evidence: tuple[str, ...] = ()  # "file:line: text"
    ranks: tuple[int, ...] = ()


@dataclass
class _Stream:
    last_line: int = 0
    open: Event | None = None  # the collective its newest line started
    open_since: float = 0.0


def _seconds(value: str | None) -> float | None:
    if not value:
        return None
    from ncclpm.util.durations import seconds_of

    return seconds_of(value)


def _quote(e: Event) -> str:
    return f"{e.where}: {e.text.strip()[:300]}"


@dataclass
class HangDetector:
    idle_s: float
    open_share: float = 0.5
    timeout_s: float | None = None  # the process-group timeout the logs show
    timeout_from: str = ""
    last_activity: float | None = None
    armed: bool = False  # silence counts: the job has shown life (see the module's docstring)
    in_hang: bool = False
    streams: dict[tuple[str, int | None], _Stream] = field(default_factory=dict)
    ranked_files: set[str] = field(default_factory=set)
    pending: list[Event] = field(default_factory=list)

    def feed(self, reading: Reading, now: float, history: bool = False) -> None:
        """`history`: lines written before the watch started (the settings they state; not the job's life)."""
        hang_lines = {(e.source, e.line) for e in reading.events if e.kind in HANG_KINDS}
        self.ranked_files |= {f for f, r in reading.active if r is not None}
        progress = False
        for key, newest in reading.newest.items():
            source, rank = key
            if rank is None and source in self.ranked_files:
                continue  # a launcher's own line in a file whose lines name their ranks
            stream = self.streams.setdefault(key, _Stream())
            if newest > stream.last_line:
                stream.last_line = newest
                stream.open = None
                self.last_activity = now
                self.armed = self.armed or not history
                if (source, newest) not in hang_lines:
                    progress = True
        for e in reading.events:
            if e.kind == TIMEOUT_SETTING or (e.kind in HANG_KINDS and e.timeout_ms):
                seconds = e.timeout_ms / 1000 if e.timeout_ms else _seconds(e.value)
                if seconds and seconds > 0 and (self.timeout_s is None or seconds > self.timeout_s):
                    self.timeout_s, self.timeout_from = seconds, e.where
            elif e.kind == STARTED:
                stream = self.streams.get((e.source, e.rank))
                if stream is not None and stream.last_line == e.line:
                    stream.open, stream.open_since = e, now
        if progress and self.in_hang:
            self.in_hang = False
            self.pending.clear()
        if not self.in_hang:
            self.pending += [e for e in reading.events if e.kind in HANG_KINDS]

    def start_clock(self, now: float, running_for: float) -> None:
        """The ranks were seen, the youngest started `running_for` seconds ago: silence counts from now if nothing
        was logged yet, and at once if they were running for `idle_s` already (the watch came late)."""
        if self.last_activity is None:
            self.last_activity = now
        if running_for >= self.idle_s:
            self.armed = True

    def collected(self) -> None:
        self.in_hang = True
        self.pending.clear()

    @property
    def timeout(self) -> float:
        return self.timeout_s or DEFAULT_TIMEOUT_S

    def check(self, now: float, ranks_alive: int, idle_ranks: list[str]) -> Hang | None:
        """`idle_ranks`: descriptions of the rank processes that use no CPU."""
        if self.in_hang or ranks_alive == 0:
            return None
        if self.pending:
            first = self.pending[0]
            ranks = tuple(sorted({e.rank for e in self.pending if e.rank is not None}))
            who = f"rank {', '.join(map(str, ranks))}" if ranks else "a rank"
            return Hang(
                "timeout_line",
                f"{who} logged a timeout ({first.kind.replace('_', ' ')}, {first.where})",
                tuple(_quote(e) for e in self.pending[:8]),
                ranks,
            )
        hang = self._open_collective(now)
        if hang is not None:
            return hang
        if self.armed and self.last_activity is not None and now - self.last_activity >= self.idle_s and idle_ranks:
            silent = now - self.last_activity
            return Hang(
                "idle",
                f"no rank logged a line for {silent:.0f} s (--idle {self.idle_s:g}) while {ranks_alive} rank "
                f"processes were alive; idle (no CPU): {', '.join(idle_ranks)}",
            )
        return None

    def _open_collective(self, now: float) -> Hang | None:
        limit = self.open_share * self.timeout
        late = [s for s in self.streams.values() if s.open is not None and now - s.open_since >= limit]
        if not late:
            return None
        oldest = min(late, key=lambda s: s.open_since)
        e = oldest.open
        assert e is not None
        what = f"{e.op or 'a collective'}" + (f" #{e.seq}" if e.seq is not None else "")
        who = f"rank {e.rank}" if e.rank is not None else (f"pid {e.pid}" if e.pid else "a rank")
        source = (
            f"the timeout of {self.timeout:g} s from {self.timeout_from}"
            if self.timeout_s
            else (f"torch's default timeout of {self.timeout:g} s (no timeout in the logs)")
        )
        ranks = tuple(sorted({s.open.rank for s in late if s.open is not None and s.open.rank is not None}))
        return Hang(
            "open_collective",
            f"{who} started {what} {now - oldest.open_since:.0f} s ago and logged nothing since: "
            f"{self.open_share:.0%} of {source}",
            tuple(_quote(s.open) for s in late[:8] if s.open is not None),
            ranks,
        )
