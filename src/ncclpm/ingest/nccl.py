"""NCCL_DEBUG facts: communicators, warnings, and the host:pid → global rank map.

NCCL lines carry `host:pid:tid [cudaDev]`, not the rank (the `[dev]` number is the local CUDA device). The
`... rank R nranks N ... - Init COMPLETE` line of the largest communicator a process joined gives its global
rank, so every other NCCL line of that host:pid can be attributed. Tables: `nccl_comms` (host, pid, cuda_dev,
rank, nranks, comm_id, bus_id, version) and `nccl_warnings` (host, pid, rank, where, message, file, line).
"""

from __future__ import annotations

import polars as pl

COMMS_SCHEMA = pl.Schema({"host": pl.String(), "pid": pl.Int64(), "cuda_dev": pl.Int64(), "rank": pl.Int32(),
                          "nranks": pl.Int64(), "comm_id": pl.String(), "bus_id": pl.String(),
                          "version": pl.String()})


def _process_key(frame: pl.DataFrame) -> pl.DataFrame:
    """host and pid of an event: NCCL lines have them in the envelope (pid kept in `text`'s prefix)."""
    return frame.with_columns(
        pl.col("text").str.extract(r"([\w.-]+):(\d+):\d+ \[\d+\]", 1).alias("_host"),
        pl.col("text").str.extract(r"[\w.-]+:(\d+):\d+ \[\d+\]", 1).cast(pl.Int64, strict=False).alias("_pid"),
    )


def nccl_comms(events: pl.DataFrame) -> pl.DataFrame:
    init = _process_key(events.filter(pl.col("kind") == "nccl_comm_init"))
    if init.is_empty():
        return pl.DataFrame(schema=COMMS_SCHEMA)
    versions = (_process_key(events.filter(pl.col("kind") == "nccl_version"))
                .group_by("_host", "_pid").agg(pl.col("version").first()))
    host_versions = versions.group_by("_host").agg(pl.col("version").first().alias("_host_version"))
    comms = (init.join(versions, on=["_host", "_pid"], how="left", suffix="_v")
             .join(host_versions, on="_host", how="left"))
    all_versions = events.filter(pl.col("kind") == "nccl_version")["version"].drop_nulls().unique()
    job_version = all_versions[0] if all_versions.len() == 1 else None  # a bare banner with no host prefix
    return comms.select(
        pl.col("_host").alias("host"), pl.col("_pid").alias("pid"), "cuda_dev",
        pl.col("subject_rank").cast(pl.Int32).alias("rank"), "nranks", "comm_id", "bus_id",
        pl.coalesce("version_v", "_host_version", pl.lit(job_version, pl.String)).alias("version"),
    ).unique(maintain_order=True)


def rank_map(comms: pl.DataFrame) -> pl.DataFrame:
    """(host, pid) → global rank, from each process's largest communicator (the world one)."""
    if comms.is_empty():
        return pl.DataFrame(schema={"host": pl.String(), "pid": pl.Int64(), "nccl_rank": pl.Int32()})
    world = comms.filter(pl.col("nranks") == pl.col("nranks").max())
    return (world.group_by("host", "pid").agg(pl.col("rank").first().alias("nccl_rank"))
            .filter(pl.col("host").is_not_null() & pl.col("pid").is_not_null()))


def fill_ranks(frame: pl.DataFrame, ranks: pl.DataFrame) -> pl.DataFrame:
    """Give NCCL lines without a rank the rank of their process."""
    if ranks.is_empty() or frame.is_empty():
        return frame
    keyed = _process_key(frame)
    joined = keyed.join(ranks, left_on=["_host", "_pid"], right_on=["host", "pid"], how="left")
    return joined.with_columns(pl.coalesce("rank", "nccl_rank").cast(pl.Int32).alias("rank")).select(frame.columns)


def fill_line_ranks(lines: pl.DataFrame, ranks: pl.DataFrame) -> pl.DataFrame:
    """Same for the `lines` table, which has host and pid columns already."""
    if ranks.is_empty() or lines.is_empty():
        return lines
    joined = lines.join(ranks, on=["host", "pid"], how="left")
    return joined.with_columns(pl.coalesce("rank", "nccl_rank").cast(pl.Int32).alias("rank")).select(lines.columns)


def nccl_warnings(events: pl.DataFrame) -> pl.DataFrame:
    return events.filter(pl.col("kind") == "nccl_warn").select(
        "host", "rank", pl.col("detail").alias("where"), pl.col("value").alias("message"),
        pl.col("source").alias("file"), "line",
    )
