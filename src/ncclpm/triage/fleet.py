"""What the fleet page shows (`ncclpm triage ... -o fleet.html`), computed with polars from the triage table: counts
by category and action, failures over time by category (from `failed_at`), clusters of one failure signature
(size, first and last seen, an example job, new against `--baseline`), restart storms, the per-host roll-up with
the hosts to drain, and every job. `render/fleet.py` draws it; nothing here is escaped (the template does it).
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import polars as pl

from ncclpm.triage.hosts import hosts_context
from ncclpm.triage.signature import MAX_LEN

MAX_CLUSTERS = 25
MAX_BUCKETS = 48
# (bucket width, polars truncate step, label format), the narrowest that keeps the span within MAX_BUCKETS
_STEPS = (
    (timedelta(minutes=10), "10m", "%m-%d %H:%M"),
    (timedelta(hours=1), "1h", "%m-%d %H:00"),
    (timedelta(hours=6), "6h", "%m-%d %H:00"),
    (timedelta(days=1), "1d", "%Y-%m-%d"),
    (timedelta(days=7), "1w", "%Y-%m-%d"),
    (timedelta(days=31), "1mo", "%Y-%m"),
    (timedelta(days=92), "3mo", "%Y-%m"),
    (timedelta(days=366), "1y", "%Y"),
)


def _counts(readable: pl.DataFrame, column: str) -> list[dict[str, Any]]:
    counts = readable.group_by(column).len().sort(["len", column], descending=[True, False])
    return [{"name": r[column] or "", "n": r["len"]} for r in counts.iter_rows(named=True)]


RECENT = timedelta(days=14)


def recent_timeline(readable: pl.DataFrame) -> dict[str, Any] | None:
    """The last `RECENT` days before the latest failure, finer ("what failed overnight?"), when the whole span is
    longer than that."""
    dated = readable.filter(pl.col("failed_at").is_not_null())
    if dated.is_empty():
        return None
    last = dated["failed_at"].max()
    if last - dated["failed_at"].min() <= RECENT:  # type: ignore[operator]
        return None
    return timeline(dated.filter(pl.col("failed_at") > last - RECENT))  # type: ignore[operator]


def timeline(readable: pl.DataFrame) -> dict[str, Any]:
    """Failures per time bucket and category: `buckets` (start, label, {category: n}), the step's name, and how many
    jobs have no dated failure time (they are not on the picture)."""
    dated = readable.filter(pl.col("failed_at").is_not_null())
    out: dict[str, Any] = {"buckets": [], "step": None, "undated": readable.height - dated.height, "n": dated.height}
    if dated.is_empty():
        return out
    first, last = dated["failed_at"].min(), dated["failed_at"].max()
    span = last - first  # type: ignore[operator]
    width, step, fmt = next((s for s in _STEPS if span / s[0] < MAX_BUCKETS), _STEPS[-1])
    per = (
        dated.with_columns(pl.col("failed_at").dt.truncate(step).alias("bucket"))
        .group_by("bucket", "category")
        .len()
        .sort("bucket", "category")
    )
    start, end = per["bucket"].min(), per["bucket"].max()
    buckets: list[dict[str, Any]] = []
    at = start
    while at is not None and at <= end and len(buckets) <= MAX_BUCKETS * 2:  # type: ignore[operator]
        buckets.append({"start": at, "label": at.strftime(fmt), "counts": {}})
        at = pl.select(pl.lit(at).dt.offset_by(step)).item()
    index = {b["start"]: b for b in buckets}
    for r in per.iter_rows(named=True):
        index[r["bucket"]]["counts"][r["category"]] = r["len"]
    out.update(buckets=buckets, step=step, width=width, first=first, last=last)
    return out


def clusters(readable: pl.DataFrame, limit: int = MAX_CLUSTERS) -> list[dict[str, Any]]:
    """Jobs of one failure signature (jobs without one: one cluster per category and rule), largest first."""
    sig = pl.col("signature").fill_null("")
    keyed = readable.with_columns(
        pl.when(sig != "")
        .then(sig)
        .otherwise(pl.format("({} by {})", pl.col("category"), pl.col("rule").fill_null("no rule")))
        .str.slice(0, MAX_LEN)
        .alias("_key")
    )
    grouped = (
        keyed.sort("failed_at", "job", nulls_last=True)
        .group_by("_key", maintain_order=True)
        .agg(
            pl.len().alias("n"),
            pl.col("category").mode().first().alias("category"),
            pl.col("category").unique().sort().alias("categories"),
            pl.col("failed_at").min().alias("first_seen"),
            pl.col("failed_at").max().alias("last_seen"),
            pl.col("job").first().alias("example"),
            pl.col("report").first().alias("example_report"),
            pl.col("top_error").drop_nulls().first().alias("top_error"),
            (pl.col("baseline") == "new").all().alias("new"),
            pl.col("baseline").is_not_null().any().alias("compared"),
        )
        .sort(["n", "_key"], descending=[True, False])
    )
    return [{**r, "signature": r["_key"]} for r in grouped.head(limit).iter_rows(named=True)]


def common_folder(names: list[str]) -> str:
    """The folder every job name lies under ("" when they share none): the page shows names below it."""
    folders = [n.rsplit("/", 1)[0] for n in names if "/" in n]
    if len(folders) != len(names) or not folders:
        return ""
    try:
        root = os.path.commonpath(folders)
    except ValueError:  # absolute and relative names mixed
        return ""
    return root if root not in ("", "/", ".") else ""


def _short(name: str, root: str) -> str:
    return name[len(root) + 1 :] if root and name.startswith(root + "/") else name


def _link(report: str | None, reports: Path | None, output: Path | None) -> str | None:
    """The job's report as the page links to it: relative to the page's folder when both are known."""
    if report is None or reports is None:
        return None
    target = Path(reports) / report
    if output is None:
        return target.resolve().as_uri()
    return Path(os.path.relpath(target.resolve(), Path(output).resolve().parent)).as_posix()


def fleet_context(
    frame: pl.DataFrame,
    title: str = "ncclpm triage",
    baseline: dict[str, Any] | None = None,
    reports: Path | None = None,
    output: Path | None = None,
) -> dict[str, Any]:
    """Everything the fleet page shows."""
    readable = frame.filter(pl.col("error").is_null())
    failed = frame.filter(pl.col("error").is_not_null())
    root = common_folder(frame["job"].to_list())
    jobs = []
    for r in frame.sort("failed_at", "job", descending=[True, False], nulls_last=True).iter_rows(named=True):
        own = set(r["own_hosts"] or [])
        jobs.append({**r, "name": _short(r["job"], root), "link": _link(r["report"], reports, output), "own": own})
    hosts = hosts_context(frame)
    for h in hosts["hosts"]:
        h["names"] = [_short(j, root) for j in h["job_names"]]
    all_clusters = clusters(readable, limit=readable.height or 1)
    worth = [c for c in all_clusters if c["n"] >= 2 or (c["new"] and c["compared"])]  # a new one even if alone
    shown = worth[:MAX_CLUSTERS] or all_clusters[:MAX_CLUSTERS]
    storms = [j for j in jobs if j["restart_storm"]]
    dated = readable["failed_at"].drop_nulls()
    return {
        "title": title,
        "total": frame.height,
        "n_readable": readable.height,
        "n_failed": failed.height,
        "by_category": _counts(readable, "category"),
        "by_action": _counts(readable, "action"),
        "timeline": timeline(readable),
        "recent": recent_timeline(readable),
        "clusters": [
            {
                **c,
                "example_name": _short(c["example"], root),
                "example_link": _link(c["example_report"], reports, output),
            }
            for c in shown
        ],
        "n_clusters": len(all_clusters),
        "n_single": sum(1 for c in all_clusters if c["n"] == 1),
        "root": root,
        "n_signatures": readable.select(pl.col("signature").fill_null("").n_unique()).item() if readable.height else 0,
        "storms": storms,
        "storm_node_hours": sum(j["storm_node_hours"] or 0.0 for j in storms),
        "jobs": jobs,
        "first": dated.min() if dated.len() else None,
        "last": dated.max() if dated.len() else None,
        "baseline": baseline,
        "generated": datetime.now().replace(microsecond=0),
        **hosts,
    }
