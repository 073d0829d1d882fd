"""When a job started and when it failed, from facts the diagnosis already has (no log is read again).

`failed_at` is the time of the first decisive event: the earliest error among the decisive lines (the lines the
verdict quotes, looked up in the events table by file and line), else the earliest decisive line with a time,
else the story's first dated error or timeout, else the culprit ranks' first error, else when the failing
collective was issued (its flight-recorder entries' wall clock, UTC), else the first error the logs date at all.
A decisive line with no stamp of its own takes the last stamped line before it in its file. `started_at` is the
earliest time any kept line of the job shows. A time without a date (a glog stamp in a job where no line gives
the year) is no date: `failed_at`/`started_at` stay null, `failed_clock` keeps the failure's time as written
(`11-22 08:37:58`), and `duration_s` is still worked out when both ends are on the same clock.
"""

from __future__ import annotations

import itertools
from datetime import UTC, datetime
from typing import Any

import polars as pl

UNDATED_YEAR = 1970  # glog stamps (`E1122 08:37:58`) are read in 1970 when no line of the job gives the year


def dated(ts: Any) -> datetime | None:
    """`ts` when it is a real date and time, else None."""
    return ts if isinstance(ts, datetime) and ts.year > UNDATED_YEAR else None


def _decisive_times(tables: Any, d: Any) -> tuple[datetime | None, datetime | None]:
    """(earliest decisive error, earliest decisive line) among the decisive lines with a time. A line without a
    stamp of its own (a traceback's last line, an error printed bare) is dated by the last stamped line before it
    in its file, as a reader of the log dates it."""
    refs = [(e.file, e.line) for e in d.decisive if e.line is not None]
    if not refs:
        return None, None
    wanted = pl.DataFrame(
        {"source": [r[0] for r in refs], "line": [r[1] for r in refs]},
        schema={"source": pl.String(), "line": pl.Int64()},
    ).unique()
    events = tables.events.select("source", "line", "ts", "severity").join(wanted, on=["source", "line"], how="semi")
    hits = events.filter(pl.col("ts").is_not_null())
    if hits.is_empty():  # no quoted line has a stamp of its own: the last stamped line before each
        sources = wanted["source"].unique().to_list()
        stamped = (
            tables.lines.select("source", "line", "ts")
            .filter(pl.col("ts").is_not_null() & pl.col("source").is_in(sources))
            .sort("source", "line")
        )
        if stamped.is_empty():
            return None, None
        dated = wanted.sort("source", "line").join_asof(
            stamped,
            on="line",
            by="source",
            strategy="backward",
            check_sortedness=False,  # sorted by (source, line)
        )
        severity = events.select("source", "line", "severity").unique(["source", "line"])
        hits = dated.join(severity, on=["source", "line"], how="left").filter(pl.col("ts").is_not_null())
        if hits.is_empty():
            return None, None
    errors = hits.filter(pl.col("severity") == "error")["ts"]
    return (errors.min() if errors.len() else None), hits["ts"].min()  # type: ignore[return-value]


def _story_time(d: Any) -> datetime | None:
    for kinds in (("error", "timeout"), ("end",)):
        times = [m.ts for m in d.story if m.kind in kinds and not m.approx and isinstance(m.ts, datetime)]
        if times:
            return min(times)
    return None


def _culprit_error_time(d: Any) -> datetime | None:
    culprits = set(d.culprit_ranks)
    times = [r["first_error_ts"] for r in d.ranks if r.get("rank") in culprits]
    times = [t for t in times if isinstance(t, datetime)]
    return min(times) if times else None


def _fr_time(tables: Any, d: Any) -> datetime | None:
    """When the failing collective was issued, from the flight-recorder entries of it (their wall-clock
    `time_created_ns`), when the verdict comes from the dumps."""
    fc = d.failing_collective or {}
    if tables.fr is None or fc.get("seq") is None or "time_created_ns" not in tables.fr.compact.columns:
        return None
    entries = tables.fr.compact.filter(pl.col("collective_seq_id") == fc["seq"])
    if fc.get("pg") is not None and "group_key" in entries.columns:
        entries = entries.filter(pl.col("group_key") == fc["pg"])
    first = entries["time_created_ns"].drop_nulls().min()
    if not isinstance(first, int) or first <= 0:
        return None
    at = datetime.fromtimestamp(first / 1e9, tz=UTC).replace(tzinfo=None)
    return at if at.year >= 2000 else None  # a steady clock, not a date


def _first_error_time(tables: Any) -> datetime | None:
    """The first error the logs date, whoever printed it (when the decisive evidence itself is undated: a
    flight-recorder dump, an excerpt pasted without stamps beside a stamped log)."""
    times = tables.events.filter((pl.col("severity") == "error") & pl.col("ts").is_not_null())["ts"]
    real = times.filter(times.dt.year() > UNDATED_YEAR)
    first = (real if real.len() else times).min()
    return first if isinstance(first, datetime) else None


def failure_time(tables: Any, d: Any) -> datetime | None:
    """The time of the first decisive event, on the logs' own clock (dated or not), or None."""
    first_error, first_line = _decisive_times(tables, d)
    later = (  # each worked out only when the ones before it gave no time
        lambda: _story_time(d),
        lambda: _culprit_error_time(d),
        lambda: _fr_time(tables, d),
        lambda: _first_error_time(tables),
    )
    for candidate in itertools.chain((first_error, first_line), (f() for f in later)):
        if candidate is not None:
            return candidate.replace(tzinfo=None)
    return None


def start_time(tables: Any) -> datetime | None:
    """The earliest time any kept line or event of the job shows (the logs' own clock), or None."""
    firsts = [tables.lines["ts"].min(), tables.events["ts"].min()]  # glog stamps read in 1970 sort first
    stamps = [f for f in firsts if isinstance(f, datetime)]
    if not stamps:
        return None
    if min(stamps).year <= UNDATED_YEAR:  # the first stamp is undated: the first dated one, if any
        dated_ = [s.filter(s.dt.year() > UNDATED_YEAR).min() for s in (tables.lines["ts"], tables.events["ts"])]
        real = [f for f in dated_ if isinstance(f, datetime)]
        stamps = real or stamps
    return min(stamps).replace(tzinfo=None)


def clock(ts: datetime | None) -> str | None:
    """An undated failure time as the logs write it: `11-22 08:37:58` (a glog stamp: month and day, no year) or
    `08:37:58` (a time of day alone); None for a dated time or none."""
    if ts is None or dated(ts) is not None:
        return None
    text = ts.strftime("%H:%M:%S") + (f".{ts.microsecond // 1000:03d}" if ts.microsecond else "")
    return text if (ts.month, ts.day) == (1, 1) else ts.strftime("%m-%d ") + text


def job_times(tables: Any, d: Any) -> dict[str, Any]:
    """`started_at`, `failed_at` (dated only), `failed_clock` (the time of an undated failure, as written) and
    `duration_s` (when both ends are on the same clock)."""
    failed, started = failure_time(tables, d), start_time(tables)
    same_clock = failed is not None and started is not None and (dated(failed) is None) == (dated(started) is None)
    duration = (failed - started).total_seconds() if same_clock else None  # type: ignore[operator]
    if duration is not None and duration < 0:  # a whole-second stamp (an error file) is "within that second"
        duration = 0.0 if duration > -1 else None
    return {
        "started_at": dated(started),
        "failed_at": dated(failed),
        "failed_clock": clock(failed),
        "duration_s": None if duration is None else round(duration, 3),
    }
