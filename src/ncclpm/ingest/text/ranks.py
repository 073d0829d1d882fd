"""The per-rank table: one row per rank seen anywhere in the job.

For each rank: host and pid, whether it reported a collective timeout (and on which op/seq), the watchdog's
last enqueued/completed sequence numbers, its first error (time, text, file:line), how it exited
(torchrun summary), and its last activity line (progress, checkpoint, evaluation...). Built with polars
group_bys over `lines`, `events` and `elastic`.
"""

from __future__ import annotations

import polars as pl

from ncclpm.tables.kinds import K
from ncclpm.tables.schema import RANKS_SCHEMA, empty

ACTIVITY_KINDS = [K.activity, K.progress]
# torch's summary of an NCCL result (its exception line, its NCCL error reading) wraps the message that says why
# (`Last error:` and the NCCL text on the lines after them): the message is the error, they are its envelope.
WRAPPER_KINDS = [K.exception, K.nccl_error]
NCCL_WRAPPER = r"NCCL error|nccl[A-Z]\w*Error|DistBackendError"
STATED_PID_EVENT = "elastic.worker_failed"  # the launcher line that states a worker's pid (parsers/torch_elastic.toml)
BURST_LINES = 4  # error lines at most this far apart in one file are one error (a traceback's last lines)


def _ref(prefix: str = "") -> pl.Expr:
    return pl.format("{}:{}", pl.col(f"{prefix}source"), pl.col(f"{prefix}line"))


def _first_by_time(frame: pl.DataFrame, cols: list[pl.Expr]) -> pl.DataFrame:
    return frame.sort(["rank", "ts", "source", "line"], nulls_last=True).group_by("rank", maintain_order=True).agg(cols)


def _messages_over_wrappers(errors: pl.DataFrame) -> pl.DataFrame:
    """A wrapper's line gives way to the message it wraps. torch's summary of an NCCL result (`DistBackendError: NCCL
    error in: ..., unhandled system error`, `ncclSystemError: ...`) is followed, a few lines further in the same
    traceback, by the text that says why (`Last error:` and NCCL's message): when such a line is read as an error
    of its own, it is the error, at the wrapper's time if it has none."""
    if errors.is_empty():
        return errors
    wrapper = pl.col("kind").is_in(WRAPPER_KINDS) & pl.col("text").str.contains(NCCL_WRAPPER)
    per_line = (
        errors.group_by("rank", "source", "line")
        .agg(pl.col("ts").min(), pl.col("text").first(), wrapper.all().alias("_wrapper"))
        .sort("rank", "source", "line")
    )
    gap = pl.col("line").diff().over("rank", "source")
    # a burst: the rank's error lines of one file, each at most BURST_LINES after the one before
    per_line = per_line.with_columns(
        (gap.is_null() | (gap > BURST_LINES)).cum_sum().over("rank", "source").alias("_burst")
    )
    key = ["rank", "source", "_burst"]
    wrapped = pl.col("_wrapper").first().over(key) & (~pl.col("_wrapper")).any().over(key)
    out = per_line.with_columns(wrapped.alias("_wrapped"), pl.col("ts").first().over(key).alias("_opened"))
    out = out.filter(~(pl.col("_wrapped") & pl.col("_wrapper")))
    ts = pl.when(pl.col("_wrapped")).then(pl.coalesce("ts", "_opened")).otherwise(pl.col("ts"))
    return out.select("rank", "source", "line", ts.alias("ts"), "text")


def build_ranks(
    lines: pl.DataFrame, events: pl.DataFrame, elastic: pl.DataFrame, comms: pl.DataFrame | None = None
) -> pl.DataFrame:
    ranked = events.filter(pl.col("rank").is_not_null())
    base = (
        pl.concat([lines.select("rank"), ranked.select("rank"), elastic.select("rank")])
        .drop_nulls()
        .unique()
        .sort("rank")
    )
    world = None if comms is None or comms.is_empty() else comms.filter(pl.col("nranks") == pl.col("nranks").max())
    if world is not None:
        base = pl.concat([base, world.select("rank")]).drop_nulls().unique().sort("rank")
    if base.is_empty():  # no rank anywhere (a one-process excerpt): no query more
        return empty(RANKS_SCHEMA)
    # Each part is joined on the rank; a part whose rows are absent (most jobs have no timeout, no launcher summary,
    # no watchdog status...) is its columns of nulls, typed as the join would give them, without its queries.
    parts: list[pl.DataFrame] = []
    nulls: dict[str, pl.DataType] = {}
    ev, kind, sev = events.schema, pl.col("kind"), pl.col("severity")
    # which parts the ranked events hold, in one query (a query each cost ~0.2 ms whatever the rows)
    has = ranked.select(
        (kind == K.collective_timeout).any().alias("timeout"),
        (kind == K.watchdog_status).any().alias("watchdog"),
        # a launcher's report that the process exited is its end (the `exits` columns), not its first error
        ((sev == "error") & (kind != K.worker_exit)).any().alias("error"),
        kind.is_in(ACTIVITY_KINDS).any().alias("activity"),
        (kind.is_in([K.nccl_version, K.nccl_error]) & pl.col("version").is_not_null()).any().alias("version"),
        (pl.col("event") == STATED_PID_EVENT).any().alias("stated_pid"),
    ).row(0, named=True)
    if lines["rank"].null_count() < lines.height:
        parts.append(
            lines.filter(pl.col("rank").is_not_null())
            .group_by("rank")
            .agg(
                pl.col("host").drop_nulls().mode().sort().first().alias("host"),  # a tie: the same host every run
                pl.col("pid").drop_nulls().first().alias("pid"),
            )
        )
    else:
        nulls |= {"host": lines.schema["host"], "pid": lines.schema["pid"]}
    if ranked.height:
        parts.append(ranked.group_by("rank").agg(pl.len().cast(pl.UInt32).alias("n_events")))
    else:
        nulls["n_events"] = pl.UInt32()
    # torchrun's `failed (exitcode: 1) local_rank: 3 (pid: 40214)` states the worker's pid; the line's own prefix
    # holds the agent's, which printed it
    if has["stated_pid"]:
        stated = ranked.filter(pl.col("event") == STATED_PID_EVENT)
        parts.append(stated.group_by("rank").agg(pl.col("pid").drop_nulls().first().alias("_stated_pid")))
    else:
        nulls["_stated_pid"] = ev["pid"]
    if has["timeout"]:
        parts.append(
            _first_by_time(
                ranked.filter(pl.col("kind") == K.collective_timeout),
                [
                    pl.lit(True).alias("timed_out"),
                    pl.col("op").first().alias("timeout_op"),
                    pl.col("seq").first().alias("timeout_seq"),
                ],
            )
        )
    else:
        nulls |= {"timed_out": pl.Boolean(), "timeout_op": ev["op"], "timeout_seq": ev["seq"]}
    if has["watchdog"]:
        parts.append(
            ranked.filter(pl.col("kind") == K.watchdog_status)
            .group_by("rank")
            .agg(pl.col("last_enqueued").max(), pl.col("last_completed").max())
        )
    else:
        nulls |= {"last_enqueued": ev["last_enqueued"], "last_completed": ev["last_completed"]}
    if has["error"]:
        parts.append(
            _first_by_time(
                _messages_over_wrappers(
                    ranked.filter((pl.col("severity") == "error") & (pl.col("kind") != K.worker_exit))
                ),
                [
                    pl.col("ts").first().alias("first_error_ts"),
                    pl.col("text").first().str.slice(0, 300).alias("first_error"),
                    _ref().first().alias("first_error_ref"),
                ],
            )
        )
    else:
        nulls |= {"first_error_ts": ev["ts"], "first_error": ev["text"], "first_error_ref": pl.String()}
    if elastic["rank"].null_count() < elastic.height:
        parts.append(
            elastic.filter(pl.col("rank").is_not_null())
            .sort("root_cause")
            .group_by("rank")
            .agg(
                pl.col("exit_code").last(),
                pl.col("signal").last(),
                # torchrun's failure summary names each failed rank's host and pid: used when no line prefix does
                pl.col("host").drop_nulls().last().alias("_exit_host"),
                pl.col("pid").drop_nulls().last().alias("_exit_pid"),
            )
        )
    else:
        el = elastic.schema
        nulls |= {"exit_code": el["exit_code"], "signal": el["signal"]}
        nulls |= {"_exit_host": el["host"], "_exit_pid": el["pid"]}
    if has["activity"]:
        parts.append(
            ranked.filter(pl.col("kind").is_in(ACTIVITY_KINDS))
            .sort(["rank", "ts", "source", "line"], nulls_last=False)
            .group_by("rank", maintain_order=True)
            .agg(
                pl.col("ts").last().alias("last_activity_ts"),
                pl.col("text").last().str.slice(0, 300).alias("last_activity"),
                _ref().last().alias("last_activity_ref"),
            )
        )
    else:
        nulls |= {"last_activity_ts": ev["ts"], "last_activity": ev["text"], "last_activity_ref": pl.String()}
    # The NCCL version a rank itself reports (torch's `NCCL error ..., NCCL version X`, its own banner): used when no
    # Init COMPLETE line ties it to a communicator (init failed).
    if has["version"]:
        parts.append(
            ranked.filter(pl.col("kind").is_in([K.nccl_version, K.nccl_error]) & pl.col("version").is_not_null())
            .group_by("rank")
            .agg(pl.col("version").mode().sort().first().alias("_own_version"))
        )
    else:
        nulls["_own_version"] = ev["version"]
    if world is not None:
        parts.append(
            world.group_by("rank").agg(
                pl.col("host").first().alias("nccl_host"),
                pl.col("pid").first().alias("nccl_pid"),
                pl.col("cuda_dev").first(),
                pl.col("version").first().alias("nccl_version"),
            )
        )
    out = base
    for part in parts:
        out = out.join(part, on="rank", how="left")
    # the absent parts' columns of nulls (their order does not matter: the table is selected by name below)
    absent = nulls | {c: dt for c, dt in (("cuda_dev", pl.Int64()), ("nccl_version", pl.String())) if c not in out}
    if absent:
        out = out.with_columns(pl.lit(None, dtype).alias(name) for name, dtype in absent.items())
    nccl = ["nccl_host", "nccl_pid"] if "nccl_host" in out.columns else [None, None]
    out = out.with_columns(
        pl.coalesce(c for c in ("host", nccl[0], "_exit_host") if c).alias("host"),
        pl.coalesce(c for c in ("_stated_pid", "pid", nccl[1], "_exit_pid") if c).alias("pid"),
        pl.col("timed_out").fill_null(False),
        pl.col("n_events").fill_null(0),
        pl.coalesce("nccl_version", "_own_version").alias("nccl_version"),
    )
    known = pl.col("nccl_version").drop_nulls()
    one_on_host = pl.col("host").is_not_null() & (known.n_unique().over("host") == 1)
    same_host = pl.when(one_on_host).then(known.first().over("host"))
    version = pl.coalesce("nccl_version", same_host).alias("nccl_version")  # one version per host
    return out.select((version if c == "nccl_version" else pl.col(c)).cast(dtype) for c, dtype in RANKS_SCHEMA.items())


def world_size_is_declared(events: pl.DataFrame, fr=None) -> bool:
    """True when a line or a dump states the world size (not just the highest rank seen)."""
    stated = bool((events["kind"] == K.world_size).any()) or events["expected"].null_count() < events.height
    return stated or (fr is not None and not fr.groups.is_empty())


def world_size(events: pl.DataFrame, elastic: pl.DataFrame, fr=None) -> int | None:
    """Best estimate of the job's world size from every hint the logs give (at least highest rank + 1)."""
    hints: list[int] = []
    said = (events["kind"] == K.world_size).any()  # (most jobs: no line says it, no query)
    declared = events.filter(pl.col("kind") == K.world_size)["nranks"].drop_nulls() if said else events["nranks"][:0]
    if declared.len():
        hints.append(int(declared.max()))  # type: ignore[arg-type]
    expected = events["expected"].drop_nulls()
    if expected.len():
        hints.append(int(expected.max()))  # type: ignore[arg-type]
    ranks = pl.concat([events["rank"].drop_nulls(), elastic["rank"].drop_nulls()])
    if ranks.len():
        hints.append(int(ranks.max()) + 1)  # type: ignore[arg-type]
    if fr is not None and not fr.groups.is_empty():
        hints.append(int(fr.groups["size"].max()))
    return max(hints) if hints else None
