"""Progress of a triage run for a log that is not a terminal (a cron job, CI): one line every `interval` seconds -
jobs done of the total, the rate, the time left - instead of a progress bar nobody sees redrawn.

    ncclpm: triage 120/300 jobs (40%), 4.1 jobs/s, about 44 s left
"""

from __future__ import annotations

import time
from collections.abc import Callable

from ncclpm.util.durations import human_duration

INTERVAL = 10.0  # s


class ProgressLines:
    """Call `tick()` as each job finishes: a line is said when `interval` seconds passed since the last one."""

    def __init__(
        self,
        total: int,
        say: Callable[[str], None],
        interval: float = INTERVAL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.total, self.say, self.interval, self.clock = total, say, interval, clock
        self.done = 0
        self.start = self.last = clock()

    def line(self) -> str:
        elapsed = max(self.clock() - self.start, 1e-9)
        rate = self.done / elapsed
        share = 100.0 * self.done / self.total if self.total else 100.0
        text = f"ncclpm: triage {self.done}/{self.total} jobs ({share:.0f}%), {rate:.1f} jobs/s"
        left = self.total - self.done
        if left and rate > 0:
            text += f", about {human_duration(left / rate)} left"
        return text

    def tick(self, n: int = 1) -> None:
        self.done += n
        now = self.clock()
        if now - self.last >= self.interval and self.done < self.total:
            self.last = now
            self.say(self.line())
