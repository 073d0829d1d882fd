"""Read the new lines of the job's logs with ncclpm's own reader (`ncclpm.api.read_lines`: the catalog's
envelopes, rank resolution and patterns), keeping what the hang detector needs: which ranks logged, and the
events of the kinds that tell a hang (timeouts) or where a rank is (a collective it started, the timeout in
force).

Cheap by design: a line reaches the reader only if it holds an anchor of those kinds' patterns (one compiled
alternation, C speed), plus the last `tail` lines of each chunk to see which ranks logged; a flood of output is
sampled, never read whole.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from ncclpm.watch.follow import Chunk

# Lines that mean the job is hanging now: a watchdog / blocking-wait / gloo timeout, the heartbeat monitor, a
# store wait, a monitored barrier that ran out of time.
HANG_KINDS = ("collective_timeout", "heartbeat_stuck", "store_timeout", "monitored_barrier")
STARTED = "collective_started"  # a rank entered a collective (debug logging)
TIMEOUT_SETTING = "pg_timeout"  # the process-group timeout as configured
WATCHED = (*HANG_KINDS, STARTED, TIMEOUT_SETTING)


@dataclass(frozen=True)
class Event:
    kind: str
    source: str
    line: int
    rank: int | None
    pid: int | None
    text: str
    op: str | None = None
    seq: int | None = None
    timeout_ms: int | None = None
    value: str | None = None

    @property
    def where(self) -> str:
        return f"{self.source}:{self.line}"


@dataclass
class Reading:
    """What one poll's new lines say."""

    events: list[Event] = field(default_factory=list)
    # the streams that logged: (file, rank) - rank None for lines no rank could be told for
    active: set[tuple[str, int | None]] = field(default_factory=set)
    # per stream, its newest line read in this poll (its number)
    newest: dict[tuple[str, int | None], int] = field(default_factory=dict)


class LineReader:
    def __init__(self, patterns: tuple[Path, ...] = (), tail: int = 400) -> None:
        from ncclpm.api import catalog

        cat = catalog(patterns)
        anchors = sorted({a for p in cat.patterns if p.kind in WATCHED for a in p.anchors})
        self._anchor = re.compile("|".join(re.escape(a) for a in anchors))
        settings = sorted({a for p in cat.patterns if p.kind == TIMEOUT_SETTING for a in p.anchors})
        # what is worth reading in the lines written before the watch started: the timeout the job set
        self.history = re.compile("|".join(re.escape(a) for a in settings).encode())
        self.patterns = patterns
        self.tail = tail

    def read(self, chunks: list[Chunk]) -> Reading:
        from ncclpm.api import read_lines

        out = Reading()
        for chunk in chunks:
            n = len(chunk.lines)
            keep = {i for i, line in enumerate(chunk.lines) if self._anchor.search(line)}
            keep |= set(range(max(0, n - self.tail), n))
            picked = sorted(keep)
            lines, events = read_lines(
                chunk.name,
                [chunk.lines[i] for i in picked],
                [chunk.first + i for i in picked],
                patterns=self.patterns,
            )
            for number, rank in lines.select("line", "rank").iter_rows():
                key = (chunk.name, rank)
                out.active.add(key)
                out.newest[key] = max(out.newest.get(key, 0), number)
            wanted = events.filter(events["kind"].is_in(list(WATCHED)))
            pids = dict(lines.select("line", "pid").iter_rows())
            for row in wanted.iter_rows(named=True):
                out.events.append(
                    Event(
                        kind=row["kind"],
                        source=row["source"],
                        line=row["line"],
                        rank=row["rank"],
                        pid=pids.get(row["line"]),
                        text=row["text"] or "",
                        op=row["op"],
                        seq=row["seq"],
                        timeout_ms=row["timeout_ms"],
                        value=row["value"],
                    )
                )
        return out
