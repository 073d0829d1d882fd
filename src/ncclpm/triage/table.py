"""The triage table: one row per job, a fixed polars schema, written as Parquet, CSV or NDJSON.

Parquet is written by polars itself (no pyarrow needed). CSV cannot hold lists:
`culprit_ranks` becomes "0,3" there (and `culprit_hosts` "node3,node7"), and text that a spreadsheet would run
as a formula (`=HYPERLINK(...)` in a log line) gets a leading `'`. Rows are sorted by job so the same inputs give
the same file.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import polars as pl

from ncclpm.triage.worker import ROW_KEYS

TABLE_SCHEMA = pl.Schema(
    {
        "job": pl.String(),
        "category": pl.String(),
        "confidence": pl.Float64(),
        "band": pl.String(),
        "rule": pl.String(),
        "action": pl.String(),
        "culprit_ranks": pl.List(pl.Int64()),
        "culprit_hosts": pl.List(pl.String()),
        "failing_op": pl.String(),
        "failing_seq": pl.Int64(),
        "world_size": pl.Int64(),
        "torch_version": pl.String(),
        "nccl_version": pl.String(),
        "top_evidence": pl.String(),
        "top_evidence_text": pl.String(),
        "top_error": pl.String(),
        "signature": pl.String(),
        "summary": pl.String(),
        "n_sources": pl.Int64(),
        "n_warnings": pl.Int64(),
        "error": pl.String(),
        "seconds": pl.Float64(),
        "started_at": pl.Datetime("us"),
        "failed_at": pl.Datetime("us"),
        "failed_clock": pl.String(),
        "duration_s": pl.Float64(),
        "own_hosts": pl.List(pl.String()),
        "attempts": pl.Int64(),
        "restart_storm": pl.Boolean(),
        "storm_attempts": pl.Int64(),
        "storm_node_hours": pl.Float64(),
        "hosts_every_attempt": pl.List(pl.String()),
        "report": pl.String(),
        "baseline": pl.String(),
    }
)
assert tuple(TABLE_SCHEMA) == ROW_KEYS
FORMATS = {".parquet": "parquet", ".pq": "parquet", ".csv": "csv", ".ndjson": "ndjson", ".jsonl": "ndjson"}


def to_frame(rows: Iterable[dict[str, Any]]) -> pl.DataFrame:
    data = {k: [r.get(k) for r in rows] for k in TABLE_SCHEMA} if (rows := list(rows)) else None
    frame = pl.DataFrame(data, schema=TABLE_SCHEMA)
    return frame.sort("job")


def table_format(path: Path) -> str:
    try:
        return FORMATS[path.suffix.lower()]
    except KeyError:
        raise ValueError(f"{path}: the table format comes from the extension: {', '.join(sorted(FORMATS))}") from None


LIST_COLUMNS = ("culprit_ranks", "culprit_hosts", "own_hosts", "hosts_every_attempt")


def write_frame(
    frame: pl.DataFrame, path: Path, force: bool = False, lists: tuple[str, ...] = (), fmt: str | None = None
) -> None:
    """Write a table where asked (`fmt`, default: by extension), atomically and never through a symlink
    (`outfile.py`); in CSV the `lists` columns are joined with "," and cells are made formula-safe
    (`export.csv_safe`)."""
    from ncclpm.tables.export import csv_safe
    from ncclpm.util.outfile import write_output

    fmt = fmt or table_format(path)
    if fmt == "parquet":
        write_output(path, frame.write_parquet, force)
    elif fmt == "ndjson":
        write_output(path, frame.write_ndjson, force)
    else:
        flat = frame.with_columns(pl.col(c).list.eval(pl.element().cast(pl.String)).list.join(",") for c in lists)
        write_output(path, csv_safe(flat).write_csv, force)


def write_table(frame: pl.DataFrame, path: Path, force: bool = False, fmt: str | None = None) -> None:
    """The triage table (`write_frame`: lists joined in CSV, formula-safe cells)."""
    write_frame(frame, path, force, lists=LIST_COLUMNS, fmt=fmt)
