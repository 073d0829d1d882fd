"""Durations, read and written in one place.

Written four ways, each kept where the reports use it (their wording is fixed by the golden reports):
`duration_text` - a timeout as a clock, `0:10:00`; `human_duration` - a span as people say it, rounded to two units,
`10 min 5 s`; `human_seconds` - a configured value, exact, `90 s`, `1 h 30 min`; `coarse_duration` - the diff's
values in one unit, `90 min`. Read one way: `seconds_of` (`10.0s`, `1800`, `30 min`, `timedelta(minutes=30)`), a
value the catalog already isolated from its line. No import from the rest of ncclpm but `clamp` (the bounds).
"""

from __future__ import annotations

import re
from typing import Any

from ncclpm.util.clamp import MAX_DURATION_MS, timedelta_ms


def duration_text(ms: Any) -> str:
    """`0:10:00` for 600000; "?" for nothing; "over N days" past what a timedelta holds."""
    if ms is None:
        return "?"
    delta = timedelta_ms(ms)
    if delta is None:
        return "over 999999999 days" if _is_big(ms) else "?"
    return str(delta)


def human_duration(seconds: float | None) -> str:
    """A span as people say it: `0.4 s`, `12 s`, `10 min`, `10 min 5 s`, `2 h 30 min`, `3 days 4 h`; "?" for None."""
    if seconds is None:
        return "?"
    if seconds < 10:
        return f"{seconds:.1f} s".replace(".0 s", " s")
    s = round(min(seconds, MAX_DURATION_MS / 1000))
    days, rest = divmod(s, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days} day{'s' if days != 1 else ''}" + (f" {hours} h" if hours else "")
    if hours:
        return f"{hours} h" + (f" {minutes} min" if minutes else "")
    if minutes:
        return f"{minutes} min" + (f" {secs} s" if secs else "")
    return f"{secs} s"


def _is_big(value: Any) -> bool:
    try:
        return int(value) > 0
    except (TypeError, ValueError, OverflowError):
        return False


def human_seconds(seconds: float) -> str:
    """`60 s`, `30 min`, `1 h 30 min`, `2 days 1 h`."""
    s = round(seconds)
    if abs(seconds - s) > 1e-6 or s < 120:
        return f"{seconds:g} s"
    days, rest = divmod(s, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{days} day{'s' if days != 1 else ''}" if days else "", f"{hours} h" if hours else ""]
    parts += [f"{minutes} min" if minutes else "", f"{secs} s" if secs else ""]
    return " ".join(p for p in parts if p)


_UNITS = {
    **dict.fromkeys(("ms", "milliseconds"), 0.001),
    **dict.fromkeys(("s", "sec", "seconds"), 1.0),
    **dict.fromkeys(("m", "min", "minutes"), 60.0),
    **dict.fromkeys(("h", "hours"), 3600.0),
    "days": 86400.0,
}
_TIMEDELTA = re.compile(r"(\w+)\s*=\s*(\d+(?:\.\d+)?)")
_PLAIN = re.compile(r"(\d+(?:\.\d+)?)\s*([a-z]*)")


def seconds_of(value: str) -> float | None:
    """`10.0s`, `1800`, `30 min`, `timedelta(minutes=30)` -> seconds (None when it is none of these)."""
    text = value.strip().lower()
    if "timedelta" in text:
        parts = _TIMEDELTA.findall(text)
        return sum(float(n) * _UNITS.get(u, 0) for u, n in parts) if parts else None
    m = _PLAIN.fullmatch(text)
    if not m:
        return None
    return float(m.group(1)) * _UNITS.get(m.group(2) or "s", 1)


def coarse_duration(seconds: float) -> str:
    """`2 h`, `90 min`, `45 s`: in the largest unit that divides it exactly (the diff's values, as written)."""
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{seconds / 3600:g} h"
    if seconds >= 60 and seconds % 60 == 0:
        return f"{seconds / 60:g} min"
    return f"{seconds:g} s"
