"""The Markdown summary of a triage run (`templates/summary.md`): counts per category, the jobs of each category,
the unexplained failures (category `unknown`, readable) clustered by signature - a new failure mode shows up as
one cluster of many jobs -, the hosts to drain and the per-host roll-up (`hosts.py`), the restart storms, and the
jobs that could not be read, clustered by their error."""

from __future__ import annotations

from typing import Any

import polars as pl

from ncclpm.render.jinja import environment
from ncclpm.tables.schema import Category
from ncclpm.triage.hosts import hosts_context

MAX_JOBS_LISTED = 50
MAX_CLUSTERS = 30
MAX_HOSTS = 40


def _clusters(frame: pl.DataFrame) -> list[dict[str, Any]]:
    if frame.is_empty():
        return []
    grouped = (
        frame.with_columns(pl.col("signature").fill_null("").replace("", "(no error message found)"))
        .sort("job")
        .group_by("signature", maintain_order=True)
        .agg(
            pl.len().alias("n"),
            pl.col("job"),
            pl.col("top_error").drop_nulls().first().alias("example"),
            pl.col("top_evidence").drop_nulls().first().alias("where"),
            pl.col("error").drop_nulls().first(),
            (pl.col("baseline") == "new").all().alias("new"),
        )
        .sort(["n", "signature"], descending=[True, False])
    )
    return [
        {**r, "jobs": r["job"][:MAX_JOBS_LISTED], "more": max(0, r["n"] - MAX_JOBS_LISTED)}
        for r in grouped.head(MAX_CLUSTERS).iter_rows(named=True)
    ]


def summary_context(frame: pl.DataFrame) -> dict[str, Any]:
    """Everything the summary template shows, computed with polars from the triage table."""
    failed = frame.filter(pl.col("error").is_not_null())
    readable = frame.filter(pl.col("error").is_null())
    counts = (
        readable.group_by("category")
        .agg(pl.len().alias("n"), pl.col("confidence").median().alias("conf"))
        .sort(["n", "category"], descending=[True, False])
    )
    per_category = []
    for c in counts.iter_rows(named=True):
        rows = readable.filter(pl.col("category") == c["category"]).sort(
            ["confidence", "job"], descending=[True, False]
        )
        per_category.append(
            {
                **c,
                "rows": list(rows.head(MAX_JOBS_LISTED).iter_rows(named=True)),
                "more": max(0, rows.height - MAX_JOBS_LISTED),
            }
        )
    unknown = readable.filter(pl.col("category") == str(Category.UNKNOWN))
    storms = readable.filter(pl.col("restart_storm").fill_null(False)).sort("job")
    dated = readable["failed_at"].drop_nulls()
    return {
        **hosts_context(frame),
        "storms": list(storms.iter_rows(named=True)),
        "first": dated.min() if dated.len() else None,
        "last": dated.max() if dated.len() else None,
        "n_dated": dated.len(),
        "total": frame.height,
        "n_failed": failed.height,
        "counts": list(counts.iter_rows(named=True)),
        "per_category": per_category,
        "unknown_clusters": _clusters(unknown),
        "n_unknown": unknown.height,
        "error_clusters": _clusters(failed),
        "max_clusters": MAX_CLUSTERS,
        "max_hosts": MAX_HOSTS,
    }


def render_summary(frame: pl.DataFrame, title: str = "ncclpm triage", baseline: dict[str, Any] | None = None) -> str:
    """`baseline`: `triage.baseline.baseline_context(...)` when the run is compared with an earlier table."""
    return environment().get_template("summary.md").render(title=title, baseline=baseline, **summary_context(frame))
