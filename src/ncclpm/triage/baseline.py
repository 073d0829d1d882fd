"""Triage against history (`ncclpm triage --baseline OLD.parquet`): which failure signatures are new since the
baseline, and how the share of each category moved.

A job's failure signature is its `signature` column (the top error with numbers, ids, paths and times masked); a
job without one is keyed by its category and rule. A signature is "new" when no job of the baseline had it, in any
category. A category "shifts" when its share of the jobs moved by at least `SHIFT_POINTS` percentage points, or it
appears or disappears. Jobs present in both tables (same name) whose category changed are listed too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl

from ncclpm.triage.table import TABLE_SCHEMA, table_format

SHIFT_POINTS = 10.0
NEW, SEEN = "new", "seen"


class BaselineError(ValueError):
    """The baseline table cannot be read or lacks the columns a triage table has."""


def read_baseline(path: Path) -> pl.DataFrame:
    """A triage table written earlier (.parquet, .csv or .ndjson), with the columns the comparison needs."""
    try:
        fmt = table_format(path)
        frame = {"parquet": pl.read_parquet, "ndjson": pl.read_ndjson, "csv": pl.read_csv}[fmt](path)
    except ValueError as exc:
        raise BaselineError(str(exc)) from None
    except (OSError, pl.exceptions.PolarsError) as exc:
        raise BaselineError(f"{path}: cannot read the baseline table: {exc}") from None
    missing = {"job", "category", "rule", "signature", "error"} - set(frame.columns)
    if missing:
        raise BaselineError(f"{path}: not a triage table (no {', '.join(sorted(missing))} column)")
    return frame.select(
        pl.col(c).cast(TABLE_SCHEMA[c], strict=False) for c in ("job", "category", "rule", "signature", "error")
    )


def _key() -> pl.Expr:
    sig = pl.col("signature").fill_null("")
    return pl.when(sig != "").then(sig).otherwise(pl.format("{}/{}", "category", "rule").fill_null("")).alias("_key")


def mark_new(frame: pl.DataFrame, baseline: pl.DataFrame) -> pl.DataFrame:
    """The triage table with `baseline` set: "new" for a failure signature the baseline never had, else "seen"."""
    seen = set(baseline.select(_key())["_key"].to_list())
    keyed = frame.with_columns(_key())
    return keyed.with_columns(
        pl.when(pl.col("_key").is_in(list(seen))).then(pl.lit(SEEN)).otherwise(pl.lit(NEW)).alias("baseline")
    ).drop("_key")


def _shares(frame: pl.DataFrame) -> dict[str, tuple[int, float]]:
    readable = frame.filter(pl.col("error").is_null())
    total = max(readable.height, 1)
    counts = readable.group_by("category").len()
    return {str(r["category"]): (int(r["len"]), 100.0 * r["len"] / total) for r in counts.iter_rows(named=True)}


def category_shifts(frame: pl.DataFrame, baseline: pl.DataFrame) -> list[dict[str, Any]]:
    """Every category of either table: jobs and share before and now, the change in points, whether it shifts."""
    before, now = _shares(baseline), _shares(frame)
    rows = []
    for cat in sorted(set(before) | set(now)):
        b_n, b_share = before.get(cat, (0, 0.0))
        n_n, n_share = now.get(cat, (0, 0.0))
        delta = n_share - b_share
        shift = abs(delta) >= SHIFT_POINTS or (b_n == 0) != (n_n == 0)
        rows.append(
            {"category": cat, "before": b_n, "before_share": b_share, "now": n_n, "now_share": n_share,
             "delta": delta, "shift": shift}
        )  # fmt: skip
    return sorted(rows, key=lambda r: (-abs(r["delta"]), r["category"]))


def changed_jobs(frame: pl.DataFrame, baseline: pl.DataFrame) -> list[dict[str, Any]]:
    """Jobs in both tables whose category is not the same any more."""
    both = frame.select("job", "category").join(
        baseline.select("job", pl.col("category").alias("before")), on="job", how="inner"
    )
    moved = both.filter(pl.col("category").fill_null("") != pl.col("before").fill_null("")).sort("job")
    return list(moved.iter_rows(named=True))


def baseline_context(frame: pl.DataFrame, baseline: pl.DataFrame, name: str) -> dict[str, Any]:
    """What the summary shows about the baseline (`frame` already has its `baseline` column)."""
    new = frame.filter(pl.col("baseline") == NEW)
    clusters = (
        new.with_columns(_key())
        .sort("job")
        .group_by("_key", maintain_order=True)
        .agg(pl.len().alias("n"), pl.col("job"), pl.col("category").first())
        .sort(["n", "_key"], descending=[True, False])
    )
    return {
        "name": name,
        "jobs_before": baseline.height,
        "n_new": new.height,
        "new_signatures": [
            {
                "signature": r["_key"],
                "n": r["n"],
                "jobs": r["job"][:20],
                "more": max(0, r["n"] - 20),
                "category": r["category"],
            }
            for r in clusters.head(30).iter_rows(named=True)
        ],
        "shifts": category_shifts(frame, baseline),
        "changed_jobs": changed_jobs(frame, baseline)[:50],
    }
