"""The per-host roll-up of a triage table: each host named as a culprit, in how many jobs, with which categories and
actions, first and last seen (from `failed_at`), and whether the evidence is the host's own (a hardware or network
finding names it: Xid, ECC, IB port errors - the `own_hosts` column) or only a culprit rank that ran on it (a
correlation, not evidence about the node). "Hosts to drain": hosts whose jobs said `exclude_node` in
`DRAIN_MIN_JOBS` jobs or more.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from ncclpm.tables.schema import empty

DRAIN_MIN_JOBS = 2
MAX_JOBS_LISTED = 20

HOSTS_SCHEMA = pl.Schema(
    {
        "host": pl.String(),
        "jobs": pl.Int64(),
        "own_evidence_jobs": pl.Int64(),  # jobs whose root cause names the host from its own evidence
        "rank_only_jobs": pl.Int64(),  # jobs that blame it only because a culprit rank ran on it
        "exclude_node_jobs": pl.Int64(),
        "evidence": pl.String(),  # own / rank on it / both
        "categories": pl.List(pl.String()),
        "actions": pl.List(pl.String()),
        "first_seen": pl.Datetime("us"),
        "last_seen": pl.Datetime("us"),
        "drain": pl.Boolean(),
        "job_names": pl.List(pl.String()),
    }
)

OWN, RANK, BOTH = "own", "rank on it", "own and rank on it"


def host_rollup(frame: pl.DataFrame) -> pl.DataFrame:
    """One row per culprit host of `frame` (a triage table), most jobs first."""
    readable = frame.filter(pl.col("error").is_null())
    if readable.is_empty():
        return empty(HOSTS_SCHEMA)
    per_job = (
        readable.select(
            "job",
            "category",
            "action",
            "failed_at",
            "own_hosts",
            pl.concat_list(pl.col("culprit_hosts").fill_null([]), pl.col("own_hosts").fill_null([])).alias("host"),
        )
        .explode("host")
        .filter(pl.col("host").is_not_null() & (pl.col("host") != ""))
        .with_columns(pl.col("own_hosts").list.contains(pl.col("host")).fill_null(False).alias("own"))
        .unique(["job", "host"], maintain_order=True)
    )
    if per_job.is_empty():
        return empty(HOSTS_SCHEMA)
    grouped = (
        per_job.sort("job")
        .group_by("host")
        .agg(
            pl.len().cast(pl.Int64).alias("jobs"),
            pl.col("own").sum().cast(pl.Int64).alias("own_evidence_jobs"),
            (~pl.col("own")).sum().cast(pl.Int64).alias("rank_only_jobs"),
            (pl.col("action") == "exclude_node").sum().cast(pl.Int64).alias("exclude_node_jobs"),
            pl.col("category").drop_nulls().unique().sort().alias("categories"),
            pl.col("action").drop_nulls().unique().sort().alias("actions"),
            pl.col("failed_at").min().alias("first_seen"),
            pl.col("failed_at").max().alias("last_seen"),
            pl.col("job").head(MAX_JOBS_LISTED).alias("job_names"),
        )
        .with_columns(
            pl.when((pl.col("own_evidence_jobs") > 0) & (pl.col("rank_only_jobs") > 0))
            .then(pl.lit(BOTH))
            .when(pl.col("own_evidence_jobs") > 0)
            .then(pl.lit(OWN))
            .otherwise(pl.lit(RANK))
            .alias("evidence"),
            (pl.col("exclude_node_jobs") >= DRAIN_MIN_JOBS).alias("drain"),
        )
    )
    return (
        grouped.select(HOSTS_SCHEMA.names())
        .cast(dict(HOSTS_SCHEMA))
        .sort(  # type: ignore[arg-type]
            ["drain", "jobs", "own_evidence_jobs", "host"], descending=[True, True, True, False]
        )
    )


def hosts_context(frame: pl.DataFrame) -> dict[str, Any]:
    """What the summary and the fleet page show: every culprit host, and the short list to drain."""
    hosts = host_rollup(frame)
    rows = list(hosts.iter_rows(named=True))
    return {"hosts": rows, "drain": [r for r in rows if r["drain"]], "drain_min_jobs": DRAIN_MIN_JOBS}


def write_hosts(frame: pl.DataFrame, path: Any, force: bool = False) -> None:
    """The host roll-up as its own table (.parquet, .csv or .ndjson; lists joined with "," in CSV)."""
    from ncclpm.triage.table import write_frame

    write_frame(host_rollup(frame), path, force, lists=("categories", "actions", "job_names"))
