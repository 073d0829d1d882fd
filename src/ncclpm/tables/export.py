"""Export a parsed table for people who want to dig with polars themselves (`ncclpm tables`)."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl

from ncclpm.tables import Tables
from ncclpm.util.escape import FORMULA_START
from ncclpm.util.outfile import write_output


def table_names(t: Tables) -> list[str]:
    names = ["lines", "events", "tracebacks", "elastic", "ranks"]
    if t.fr is not None:
        names += ["fr_entries", "fr_groups", "fr_status", "fr_dumps"]
    return names + sorted(t.extra)


def get_table(t: Tables, name: str) -> pl.DataFrame:
    if name.startswith("fr_") and t.fr is not None:
        attr = {"fr_entries": "entries", "fr_groups": "groups", "fr_status": "status", "fr_dumps": "dumps"}
        if name in attr:
            return getattr(t.fr, attr[name])
    if name in ("lines", "events", "tracebacks", "elastic", "ranks"):
        return getattr(t, name)
    if name in t.extra:
        return t.extra[name]
    raise KeyError(f"no table {name!r}; available: {', '.join(table_names(t))}")


def _flat(frame: pl.DataFrame) -> pl.DataFrame:
    """CSV cannot hold nested values: lists and structs become JSON text."""
    nested = [c for c, dt in frame.schema.items() if isinstance(dt, pl.List | pl.Struct | pl.Array)]
    return frame.with_columns(
        pl.Series(c, [json.dumps(v, default=str) for v in frame[c].to_list()], dtype=pl.String) for c in nested
    )


def csv_safe(frame: pl.DataFrame) -> pl.DataFrame:
    """Text cells no spreadsheet runs as a formula (`escape.csv_cell`, as a polars expression)."""
    return frame.with_columns(
        pl.when(pl.col(c).str.contains(FORMULA_START)).then(pl.lit("'") + pl.col(c)).otherwise(pl.col(c)).alias(c)
        for c, dt in frame.schema.items()
        if dt == pl.String
    )


def export_table(t: Tables, name: str, fmt: str, output: Path | None, force: bool = False) -> str | None:
    """Write table `name` to `output` (atomically, `outfile.py`), or return its text for stdout."""
    frame = get_table(t, name)
    if fmt == "parquet":
        if output is None:
            raise KeyError("parquet needs -o FILE")
        write_output(output, frame.write_parquet, force)
        return None
    text = csv_safe(_flat(frame)).write_csv() if fmt == "csv" else frame.write_ndjson()
    if output is None:
        return text
    write_output(output, lambda tmp: tmp.write_text(text, encoding="utf-8"), force)
    return None
