"""NCCL_DEBUG facts: communicators, warnings, and the host:pid → global rank map.

NCCL lines carry `host:pid:tid [cudaDev]`, not the rank (the `[dev]` number is the local CUDA device). The
`... rank R nranks N ... - Init COMPLETE` line of the largest communicator a process joined gives its global
rank, so every other NCCL line of that host:pid can be attributed. Tables: `nccl_comms` (host, pid, cuda_dev,
rank, nranks, comm_id, bus_id, version), `nccl_warnings` (host, pid, tid, rank, where = file:line, message,
the return-code chain printed after the WARN on the same thread and the ncclResult_t it ends in, file, line)
and `nccl_addresses` (host, ip: the address book NCCL's interface lines give, to name the host behind a peer).
"""

from __future__ import annotations

import polars as pl

from ncclpm.tables.kinds import K
from ncclpm.tables.schema import empty

COMMS_SCHEMA = pl.Schema(
    {
        "host": pl.String(),
        "pid": pl.Int64(),
        "cuda_dev": pl.Int64(),
        "rank": pl.Int32(),
        "nranks": pl.Int64(),
        "comm_id": pl.String(),
        "bus_id": pl.String(),
        "version": pl.String(),
    }
)


def _process_key(frame: pl.DataFrame) -> pl.DataFrame:
    """host and pid of an event: NCCL lines have them in the envelope (pid kept in `text`'s prefix). One match
    gives both (two searches cost twice as much on the 160k events of a large job)."""
    key = pl.col("text").str.extract_groups(r"(?<_host>[\w.-]+):(?<_pid>\d+):\d+ \[\d+\]")
    return frame.with_columns(
        key.struct.field("_host"), key.struct.field("_pid").cast(pl.Int64, strict=False).alias("_pid")
    )


def nccl_comms(events: pl.DataFrame) -> pl.DataFrame:
    init = _process_key(events.filter(pl.col("kind") == K.nccl_comm_init))
    if init.is_empty():
        return empty(COMMS_SCHEMA)
    versions = (
        _process_key(events.filter(pl.col("kind") == K.nccl_version))
        .group_by("_host", "_pid")
        .agg(pl.col("version").first())
    )
    host_versions = versions.group_by("_host").agg(pl.col("version").first().alias("_host_version"))
    comms = init.join(versions, on=["_host", "_pid"], how="left", suffix="_v").join(
        host_versions, on="_host", how="left"
    )
    all_versions = events.filter(pl.col("kind") == K.nccl_version)["version"].drop_nulls().unique()
    job_version = all_versions[0] if all_versions.len() == 1 else None  # a bare banner with no host prefix
    return comms.select(
        pl.col("_host").alias("host"),
        pl.col("_pid").alias("pid"),
        "cuda_dev",
        pl.col("subject_rank").cast(pl.Int32).alias("rank"),
        "nranks",
        "comm_id",
        "bus_id",
        pl.coalesce("version_v", "_host_version", pl.lit(job_version, pl.String)).alias("version"),
    ).unique(maintain_order=True)


# NCCL's interface lines, printed by every process at init: `NET/IB : Using [0]mlx5_0:1/IB ; OOB eth0:10.0.3.14<0>`,
# `NET/Socket : Using [0]eth0:10.0.0.2<0>`, `Bootstrap : Using eth0:10.0.0.1<0>`.
_IFACE_LINE = r"(?:NET/IB ?: ?Using|NET/Socket ?: ?Using|Bootstrap ?: ?Using)"
_IFACE_ADDR = r"(?:OOB |\]|Using )[\w.-]+:(\d{1,3}(?:\.\d{1,3}){3}|[0-9a-fA-F:]+%?\w*)<\d+>"
ADDRESSES_SCHEMA = pl.Schema({"host": pl.String(), "ip": pl.String()})


def nccl_addresses(lines: pl.DataFrame) -> pl.DataFrame:
    """(host, ip) for every interface address a host's NCCL lines say it uses (an address that no host's line
    shows stays unknown)."""
    found = lines.filter(pl.col("host").is_not_null() & pl.col("message").str.contains(_IFACE_LINE))
    if found.is_empty():
        return empty(ADDRESSES_SCHEMA)
    return (
        found.select("host", pl.col("message").str.extract_all(_IFACE_ADDR).alias("m"))
        .explode("m")
        .drop_nulls()
        .select("host", pl.col("m").str.extract(r":([^:<]+(?::[^<]*)?)<\d+>$", 1).alias("ip"))
        .filter(pl.col("ip").is_not_null() & (pl.col("ip") != ""))
        .unique(maintain_order=True)
        .cast(ADDRESSES_SCHEMA)  # type: ignore[arg-type]
    )


def has_nccl_log(lines: pl.DataFrame) -> bool:
    """Whether the job holds NCCL's own log (NCCL_DEBUG=INFO or WARN output)."""
    return not lines.filter(pl.col("message").str.contains("NCCL (?:INFO|WARN|ATTN)")).is_empty()


def rank_map(comms: pl.DataFrame) -> pl.DataFrame:
    """(host, pid) → global rank, from each process's largest communicator (the world one)."""
    if comms.is_empty():
        return pl.DataFrame(
            schema={"host": pl.String(), "pid": pl.Int64(), "nccl_rank": pl.Int32(), "nccl_nranks": pl.Int64()}
        )
    world = comms.filter(pl.col("nranks") == pl.col("nranks").max())
    return (
        world.group_by("host", "pid")
        .agg(pl.col("rank").first().alias("nccl_rank"), pl.col("nranks").first().alias("nccl_nranks"))
        .filter(pl.col("host").is_not_null() & pl.col("pid").is_not_null())
    )


def _prefer_init_rank(frame: pl.DataFrame, ranks: pl.DataFrame) -> bool:
    """The Init COMPLETE rank beats the line's own rank (which for a NCCL line is only a guess: torchrun's LOCAL
    rank prefix, a file name) when its communicator is the world one - at least as large as any rank seen."""
    seen = frame["rank"].drop_nulls()
    return seen.is_empty() or int(ranks["nccl_nranks"].max()) > int(seen.max())  # type: ignore[arg-type]


def _merged(joined: pl.DataFrame, prefer: bool) -> pl.Expr:
    order = ("nccl_rank", "rank") if prefer else ("rank", "nccl_rank")
    return pl.coalesce(*order).cast(pl.Int32).alias("rank")


def fill_ranks(frame: pl.DataFrame, ranks: pl.DataFrame) -> pl.DataFrame:
    """Give NCCL lines the rank of their process (host:pid → Init COMPLETE rank)."""
    if ranks.is_empty() or frame.is_empty():
        return frame
    keyed = _process_key(frame)
    joined = keyed.join(ranks, left_on=["_host", "_pid"], right_on=["host", "pid"], how="left")
    return joined.with_columns(_merged(joined, _prefer_init_rank(frame, ranks))).select(frame.columns)


def fill_line_ranks(lines: pl.DataFrame, ranks: pl.DataFrame) -> pl.DataFrame:
    """Same for the `lines` table, which has host and pid columns already."""
    if ranks.is_empty() or lines.is_empty():
        return lines
    joined = lines.join(ranks, on=["host", "pid"], how="left")
    merged = _merged(joined, _prefer_init_rank(lines, ranks))
    local = pl.when(pl.col("nccl_rank").is_not_null() & (merged == pl.col("nccl_rank"))).then(False)
    return joined.with_columns(merged, local.otherwise(pl.col("rank_local")).alias("rank_local")).select(lines.columns)


def launched_ranks(events: pl.DataFrame) -> pl.DataFrame:
    """pid → rank from a launcher's own record of the processes it started (DeepSpeed's `process P spawned with
    command: [... --local_rank=R ...]`, torchrun's `local_rank: R (pid: P)`). A local rank is the job's rank only
    when the launcher's processes are the whole job: the job states no world size larger than them, and its lines
    name at most one host."""
    nothing = empty({"pid": pl.Int64(), "launched_rank": pl.Int32()})
    pairs = events.filter(pl.col("local_rank").is_not_null() & pl.col("pid").is_not_null())
    if pairs.is_empty() or events["host"].drop_nulls().n_unique() > 1:
        return nothing
    declared = events.filter(pl.col("kind") == K.world_size)["nranks"].drop_nulls()
    local = int(pairs["local_rank"].max()) + 1  # type: ignore[arg-type]
    if declared.len() and int(declared.max()) > local:  # type: ignore[arg-type]
        return nothing  # one node of several: a local rank is not the job's rank
    firsts = pairs.group_by("pid").agg(pl.col("local_rank").unique())
    # a pid given two local ranks (pids reused across restarts) names neither
    firsts = firsts.filter(pl.col("local_rank").list.len() == 1)
    return firsts.select("pid", pl.col("local_rank").list.first().cast(pl.Int32).alias("launched_rank"))


def fill_launched_ranks(frame: pl.DataFrame, launched: pl.DataFrame, *, lines: bool = False) -> pl.DataFrame:
    """Give a process's own lines with no rank (NCCL's `host:pid:tid [dev]` lines) the rank its launcher gave its
    pid. Only the line's own process key counts, never a pid the message names (`Killing subprocess P`)."""
    if launched.is_empty() or frame.is_empty():
        return frame
    keyed = frame.with_columns(pl.col("pid").alias("_pid")) if lines else _process_key(frame)
    joined = keyed.join(launched, left_on="_pid", right_on="pid", how="left", suffix="_launched")
    filled = [pl.coalesce("rank", "launched_rank").cast(pl.Int32).alias("rank")]
    if lines:
        own = pl.col("rank").is_null() & pl.col("launched_rank").is_not_null()
        filled.append(pl.when(own).then(False).otherwise(pl.col("rank_local")).alias("rank_local"))
    return joined.with_columns(filled).select(frame.columns)


RESULTS = {
    1: "ncclUnhandledCudaError",
    2: "ncclSystemError",
    3: "ncclInternalError",
    4: "ncclInvalidArgument",
    5: "ncclInvalidUsage",
    6: "ncclRemoteError",
    7: "ncclInProgress",
}
WARNINGS_SCHEMA = pl.Schema(
    {
        "host": pl.String(),
        "pid": pl.Int64(),
        "tid": pl.Int64(),
        "rank": pl.Int32(),
        "where": pl.String(),
        "message": pl.String(),
        "chain": pl.List(pl.String()),
        "result": pl.String(),
        "file": pl.String(),
        "line": pl.Int64(),
    }
)
_TID = r"[\w.-]+:\d+:(\d+) \[\d+\]"


def nccl_warnings(events: pl.DataFrame) -> pl.DataFrame:
    """One row per NCCL WARN with the return-code chain NCCL printed after it on the same thread
    (`proxy.cc:1390 -> 3`, ...) and the ncclResult_t it ends in (nccl.h codes)."""
    if not events["kind"].is_in([K.nccl_warn, K.nccl_retcode]).any():  # (most jobs: no query)
        return empty(WARNINGS_SCHEMA)
    rows = _process_key(events.filter(pl.col("kind").is_in([K.nccl_warn, K.nccl_retcode])))
    rows = rows.filter(pl.col("_host").is_not_null()).with_columns(
        pl.col("text").str.extract(_TID, 1).cast(pl.Int64, strict=False).alias("_tid")
    )
    if rows.is_empty():
        return empty(WARNINGS_SCHEMA)
    thread = ["source", "_host", "_pid", "_tid"]
    rows = rows.sort("source", "line").with_columns(
        (pl.col("kind") == K.nccl_warn).cast(pl.Int32).cum_sum().over(thread).alias("_n")
    )
    chain = (
        rows.filter((pl.col("kind") == K.nccl_retcode) & (pl.col("_n") > 0))
        .group_by([*thread, "_n"])
        .agg(pl.format("{} -> {}", "detail", "exit_code").alias("chain"), pl.col("exit_code").last().alias("_code"))
    )
    warns = rows.filter(pl.col("kind") == K.nccl_warn).join(chain, on=[*thread, "_n"], how="left")
    return warns.select(
        pl.col("_host").alias("host"),
        pl.col("_pid").alias("pid"),
        pl.col("_tid").alias("tid"),
        "rank",
        pl.col("detail").alias("where"),
        pl.col("value").alias("message"),
        pl.col("chain").fill_null(pl.lit([], pl.List(pl.String))),
        pl.col("_code").replace_strict(RESULTS, default=None, return_dtype=pl.String).alias("result"),
        pl.col("source").alias("file"),
        "line",
    ).cast(WARNINGS_SCHEMA)  # type: ignore[arg-type]
