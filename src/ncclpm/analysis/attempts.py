"""Which attempt of a job each event belongs to, read once for every stage that asks (triage's restart storms,
`triage/recurrence.py`; the report's attempts of one job, `identity.py`).

What the logs show: torchrun's per-attempt log folders (`attempt_N/` in a source's path) and torchrun's own restart
lines (`Worker group FAILED. 2/3 attempts left; will restart worker group`: each ends an attempt at its time).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import polars as pl

from ncclpm.tables.kinds import K

if TYPE_CHECKING:
    from ncclpm.tables import Tables

ATTEMPT_DIR = re.compile(r"(?:^|[/!\\])attempt_(\d+)(?:[/\\]|$)")


def path_attempt(source: str) -> int | None:
    """The attempt a source's path names (`.../attempt_2/0/stderr.log` -> 2), the innermost if several."""
    found = ATTEMPT_DIR.findall(source or "")
    return int(found[-1]) if found else None


def restart_times(t: Tables) -> list[Any]:
    """When torchrun restarted the worker group, in order (its restart lines that carry a time)."""
    return sorted(t.kinds(K.worker_restart)["ts"].drop_nulls().to_list())


def has_attempts(events: pl.DataFrame, restarts: list[Any]) -> bool:
    """Whether anything splits the job into attempts (restart lines, or attempt folders)."""
    return bool(restarts) or bool(events["source"].str.contains(ATTEMPT_DIR.pattern).any())


def attempt_column(restarts: list[Any]) -> pl.Expr:
    """Each event's attempt: from its path (`attempt_N/`), else from how many restart lines came before it."""
    by_path = pl.col("source").map_elements(path_attempt, return_dtype=pl.Int64)
    if not restarts:
        return by_path
    by_time = pl.sum_horizontal([(pl.col("ts") > t).cast(pl.Int64) for t in restarts])
    return pl.coalesce(by_path, pl.when(pl.col("ts").is_not_null()).then(by_time))
