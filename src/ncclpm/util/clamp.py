"""Bounds for numbers read from input, and time arithmetic that cannot overflow.

A log line is free to say `Timeout(ms)=86400000000000000`, `WORLD_SIZE=999999999` or a timestamp in year 9999.
Such a value is not a fact about the job: it is a typo, a corrupt line or an attack. The bounds below say what a
value can mean; `ingest/bounds.py` turns values past them into nulls (with one warning) before any rule reads
them, and the helpers below keep every renderer's time arithmetic inside what `datetime` can hold (durations in words:
`durations.py`).
No import from the rest of ncclpm.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

MAX_RANK = 2**20 - 1  # the largest jobs have ~10^5 ranks; a rank past a million is not a rank
MAX_WORLD = MAX_RANK + 1
MAX_DURATION_MS = 100 * 366 * 86_400_000  # a timeout or a wait past a century means "forever", not a time
MAX_LISTED_RANKS = 65_536  # ranks a rule may enumerate one by one (absent ranks, missing clients)
FIRST_YEAR, LAST_YEAR = 1970, 2199  # year-less logs are dated 1970; later than 2199 is not a log's date
EARLIEST = datetime(FIRST_YEAR, 1, 1)
LATEST = datetime(LAST_YEAR, 12, 31, 23, 59, 59, 999_999)

# events column -> (lowest, highest) value that can mean something; outside it the value becomes null
FIELD_BOUNDS: dict[str, tuple[int, int]] = {
    "subject_rank": (0, MAX_RANK),
    "local_rank": (0, MAX_RANK),
    "nranks": (0, MAX_WORLD),
    "expected": (0, MAX_WORLD),
    "cuda_dev": (0, 65_535),
    "pid": (0, 2**31 - 1),
    "timeout_ms": (0, MAX_DURATION_MS),
    "ran_ms": (0, MAX_DURATION_MS),
}


def timedelta_ms(ms: Any) -> timedelta | None:
    """`ms` milliseconds as a timedelta, or None when it is not a number or past what a timedelta holds."""
    try:
        return timedelta(milliseconds=int(ms))
    except (TypeError, ValueError, OverflowError):
        return None


def shift(ts: datetime, delta: timedelta) -> datetime:
    """`ts + delta`, held at `datetime.min`/`datetime.max` instead of overflowing."""
    try:
        return ts + delta
    except OverflowError:
        return (
            datetime.max.replace(tzinfo=ts.tzinfo) if delta > timedelta(0) else datetime.min.replace(tzinfo=ts.tzinfo)
        )
