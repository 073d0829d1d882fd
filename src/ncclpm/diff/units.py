"""Durations as logs and code write them (`10.0s`, `1800`, `timedelta(minutes=30)`) and as the diff shows them.
These read a value the catalog already isolated from its line, not a log line."""

from __future__ import annotations

import re

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


def duration_text(seconds: float) -> str:
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{seconds / 3600:g} h"
    if seconds >= 60 and seconds % 60 == 0:
        return f"{seconds / 60:g} min"
    return f"{seconds:g} s"
