"""What a rank was busy with, in words (the work itself is the analysis's: `Analysis.work_of`)."""

from __future__ import annotations

import polars as pl

from ncclpm.model import MAX_QUOTE, Evidence
from ncclpm.util.durations import duration_text


def busy_text(act: pl.DataFrame) -> str:
    """` (Running tokenizer on dataset, 9% after 0:29:55)` for the work a rank was busy with, or ``."""
    if act.is_empty() or not act["detail"][0]:
        return ""
    row = act.row(0, named=True)
    bar = f", {row['bar_pct']}% after {duration_text(row['bar_ms'])}" if row.get("bar_ms") else ""
    return f" ({row['detail'].rstrip(':')}{bar})"


def last_line_evidence(last: dict) -> tuple[Evidence, ...]:
    """A rank's last line (a row of `Analysis.last_lines`: `last_line_ref` is `source:line`) as evidence."""
    source, _, line = (last.get("last_line_ref") or "").rpartition(":")
    if not (source and line.isdigit() and last.get("last_line")):
        return ()
    return (Evidence(source, int(line), last["last_line"][:MAX_QUOTE], last.get("rank")),)
