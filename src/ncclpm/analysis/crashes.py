"""Who failed on their own: process exits a process did not choose, error lines that are no victim's, and the ranks
that died before waiting on anyone (a crash) - read by CR01, NW01 (a dead peer explains its errors), the engine's
silencing (`precedence.EXPLAINS`) and the story."""

from __future__ import annotations

import polars as pl

from ncclpm.analysis.victims import exceptions_not_victim
from ncclpm.tables import Tables
from ncclpm.tables.kinds import K
from ncclpm.tables.schema import empty
from ncclpm.util.frames import filtered
from ncclpm.util.signals import EXIT_SIGNALS, NATIVE_CRASHES

# Kinds another rule explains better (a DataLoader, an OOM, NVML, a mismatch, the store): their ranks are no crash.
EXPLAINED_KINDS = [
    K.dataloader_error,
    K.fd_exhaustion,
    K.cuda_oom,
    K.nvml_error,
    K.mismatch_detected,
    K.store_timeout,
    K.store_connect,
    K.store_bind,
    K.rendezvous_timeout,
    K.store_error,
    K.usage_error,
    K.comm_init_timeout,
    K.launch_env_missing,
]
# NCCL messages (parsers/nccl/) that name a cause other rules read: the rank that printed one and then raised did not
# die "of its own error" - torch's exception wraps the message (the message wins over its wrapper). Lines too weak to
# name a cause alone (a closed socket a dead peer leaves) do not count.
MESSAGE_CAUSES = [
    K.network_error,
    K.shm_error,
    K.p2p_error,
    K.topology_error,
    K.nccl_config,
    K.gpu_not_visible,
    K.gpu_fabric_error,
    K.gpu_hw_error,
    K.world_size_mismatch,
    K.version_mismatch,
    K.cuda_build_mismatch,
    K.duplicate_gpu,
]
NAMES_A_CAUSE = 0.5  # the message's strength alone (parsers/nccl/: `alone`) from which it explains its rank's death
# What says why something failed, so that NCCL's bare result class (ncclSystemError with no message) adds nothing
NAMED_CAUSES = [*EXPLAINED_KINDS, *MESSAGE_CAUSES, K.bootstrap_error, K.nccl_fatal, K.cuda_error, K.gpu_unavailable]
CRASH_KINDS = [K.crash_signal, K.cuda_error, K.nccl_fatal]  # a rank's own death read from its lines
FATAL_SIGNALS = ["SIGKILL", *NATIVE_CRASHES]
OWN_ERROR = 1  # a Python process's exit code after an uncaught exception (a timeout's included)
TORN_DOWN = -15  # SIGTERM: the launcher ending a worker that was still running
WATCHDOG_ABORT = -6  # SIGABRT: how NCCL's watchdog ends a rank whose collective timed out or failed


def fatal_exit() -> pl.Expr:
    """An exit a process did not choose: a fatal signal, or a code other than 0, 1 (its own error) and -15 (torn
    down by its launcher)."""
    chosen = pl.col("exit_code").is_in([0, OWN_ERROR, TORN_DOWN])
    return pl.col("signal").is_in(FATAL_SIGNALS) | (pl.col("signal").is_null() & ~chosen)


def unchosen_exits(t: Tables, victims: frozenset[int]) -> pl.DataFrame:
    """The launcher's rows of ranks that ended by a fatal signal or an odd exit code (a SIGABRT only when the rank
    was not a victim: the watchdog aborts a rank whose collective timed out)."""
    if t.elastic.is_empty():  # (most jobs: no launcher summary, no query)
        return empty({**t.elastic.schema, "text": t.elastic.schema["exit_text"]})
    named = pl.col("exit_code").replace_strict(EXIT_SIGNALS, default=None, return_dtype=pl.String)
    el = t.elastic.filter(pl.col("rank").is_not_null()).with_columns(pl.col("signal").fill_null(named))
    # Several ranks aborting at the same second are the watchdog's teardown after a collective, not crashes.
    at = pl.col("ts").cast(pl.String).fill_null("")
    aborts = el.filter(pl.col("signal") == "SIGABRT").with_columns(at.alias("_at"))
    wave = aborts.group_by("_at").len().filter(pl.col("len") >= 2)["_at"].to_list()
    sigabrt_ok = (pl.col("signal") != "SIGABRT") | ~(pl.col("rank").is_in(list(victims)) | at.is_in(wave))
    rows = el.filter(fatal_exit().fill_null(False) & sigabrt_ok.fill_null(True))
    # quoted as the summary says it (its `rank :` and `exitcode :` lines), never in words of ours
    return rows.with_columns(pl.coalesce("exit_line", "line").alias("line"), pl.col("exit_text").alias("text"))


def quit_with_error(t: Tables, victims: frozenset[int], last_lines: pl.DataFrame) -> pl.DataFrame:
    """The launcher's rows of ranks that ended themselves with exit code 1 and no error: every other rank it lists was
    torn down (SIGTERM: it saw this one end first) or failed waiting, and the rank's own output is in the job, with
    no error and no wait in it (a `sys.exit(1)` after printing why: a missing file, a failed check). Without that
    output an exit 1 reads the same for a crash as for a timeout; with it, the rank chose to stop."""
    if t.elastic.is_empty() or last_lines.is_empty():
        return t.elastic.clear().with_columns(pl.lit(None, pl.String).alias("text"))
    el = t.elastic.filter(pl.col("rank").is_not_null())
    said_nothing = t.ranks.filter(pl.col("first_error").is_null())["rank"]
    spoke = last_lines.filter(pl.col("last_line").is_not_null())["rank"]
    quit_ = el.filter(
        (pl.col("exit_code") == OWN_ERROR)
        & pl.col("rank").is_in(said_nothing.to_list())
        & pl.col("rank").is_in(spoke.to_list())
        & ~pl.col("rank").is_in(list(victims))
    )
    others = el.filter(~pl.col("rank").is_in(quit_["rank"].to_list()))
    # every other rank was torn down by the launcher, or failed waiting (a victim's line says so)
    ended_after = (pl.col("exit_code") == TORN_DOWN) | pl.col("rank").is_in(list(victims))
    if quit_.is_empty() or others.is_empty() or not others.select(ended_after.all()).item():
        return t.elastic.clear().with_columns(pl.lit(None, pl.String).alias("text"))
    return quit_.with_columns(pl.coalesce("exit_line", "line").alias("line"), pl.col("exit_text").alias("text"))


def own_errors(t: Tables) -> pl.DataFrame:
    """Exception lines that are neither a victim's nor of a kind another rule explains better."""
    return exceptions_not_victim(t, EXPLAINED_KINDS)


def crashes(t: Tables, victim_lines: pl.DataFrame, errors: pl.DataFrame, exits: pl.DataFrame) -> pl.DataFrame:
    """Each rank's own failures (`how`: exception, signal, exit) before it waited on anyone, first first: the ranks
    that died of their own error (an exception, a segfault, a kill) while the others were still fine."""
    cols = ["source", "line", "rank", "ts", "text", "how", "strength", "signal", "detail", "exit_code"]
    if errors.is_empty() and exits.is_empty() and not t.has_kinds(*CRASH_KINDS):  # nothing to read: no query
        schema = {c: pl.String() if c == "how" else t.events.schema[c] for c in cols}
        return empty({**schema, "victim_ts": t.events.schema["ts"]})
    named = filtered(t.kinds(*MESSAGE_CAUSES), pl.col("strength").fill_null(1.0) >= NAMES_A_CAUSE)
    explained = set(t.kinds(*EXPLAINED_KINDS)["rank"].drop_nulls().to_list()) | set(named["rank"].drop_nulls())
    # the parts a job holds (an absent one would add no row, only its queries)
    parts = [errors.with_columns(pl.lit("exception").alias("how")).select(cols)] if not errors.is_empty() else []
    if t.has_kinds(*CRASH_KINDS):
        sig = t.kinds(*CRASH_KINDS).filter(
            pl.col("rank").is_not_null() & ~pl.col("error_type").fill_null("").str.contains("DistBackendError")
        )
        parts.append(sig.with_columns(pl.lit("signal").alias("how")).select(cols))
    if not exits.is_empty():
        how = [pl.lit("exit").alias("how"), pl.lit(None, pl.Float64).alias("strength")]
        parts.append(exits.with_columns(how).select(cols))
    ev = pl.concat(parts) if len(parts) > 1 else parts[0]
    # An error printed without a time (a traceback in torchrun's summary) happened by its process's exit,
    # which the launcher dates: order it by that, not after every dated line.
    if t.elastic["rank"].null_count() < t.elastic.height:
        ended = t.elastic.filter(pl.col("rank").is_not_null()).group_by("rank").agg(pl.col("ts").min().alias("_end"))
        ev = ev.join(ended, on="rank", how="left")
    else:
        ev = ev.with_columns(pl.lit(None, ev.schema["ts"]).alias("_end"))
    # ... and no later than the next dated line of its file, written after it: the summary dates the last attempt's
    # exits, so a traceback of an earlier attempt (torchrun --max-restarts) is dated by the agent's own line that
    # followed it (`failed (exitcode: 1) local_rank: 1`), not by an exit of the restarted group.
    bounded = pl.coalesce("ts", pl.min_horizontal("_end", "_next")).alias("ts")
    ev = _no_later_than_next_dated(t, ev).with_columns(bounded).drop("_end", "_next")
    ev = ev.filter(~pl.col("rank").is_in(list(explained)))
    if victim_lines.is_empty():  # (no rank waited on anyone: no victim time to compare with)
        ev = ev.with_columns(pl.lit(None, victim_lines.schema["ts"]).alias("victim_ts"))
    else:
        victims_at = victim_lines.group_by("rank").agg(pl.col("ts").min().alias("victim_ts"))
        ev = ev.join(victims_at, on="rank", how="left")
        # A rank that was already waiting on someone else when it failed is a victim, not the cause.
        ev = ev.filter(pl.col("victim_ts").is_null() | (pl.col("ts") < pl.col("victim_ts")))
    return ev.sort("ts", "rank", "line", nulls_last=True, maintain_order=True)


def _no_later_than_next_dated(t: Tables, ev: pl.DataFrame) -> pl.DataFrame:
    """`ev` with `_next`: for an undated row, the time of the first dated unranked event after it in its file (null if
    none, or if the row is dated). A file's lines are written in order, and an unranked line (the launcher's own, in a
    console where the ranks' lines carry their prefix) is written when it is dated. A rank's dated line is not a bound:
    torchrun's --tee relays each rank's output in chunks, so a line dated earlier can follow (real-gloo's segfaults)."""
    undated = ev.filter(pl.col("ts").is_null())
    if undated.is_empty():
        return ev.with_columns(pl.lit(None, ev.schema["ts"]).alias("_next"))
    sources = undated["source"].unique()
    dated = (
        filtered(t.events, pl.col("ts").is_not_null() & pl.col("rank").is_null())
        .filter(pl.col("source").is_in(sources.to_list()))
        .group_by("source", "line")
        .agg(pl.col("ts").min().alias("_next"))
        .sort("line")
    )
    if dated.is_empty():
        return ev.with_columns(pl.lit(None, ev.schema["ts"]).alias("_next"))
    keyed = ev.with_row_index("_row").with_columns((pl.col("line") + 1).alias("_after"))
    nxt = keyed.sort("_after").join_asof(
        dated.rename({"line": "_dated_line"}),
        left_on="_after",
        right_on="_dated_line",
        by="source",
        strategy="forward",
        check_sortedness=False,
    )
    nxt = nxt.with_columns(pl.when(pl.col("ts").is_null()).then(pl.col("_next")).alias("_next"))
    return nxt.sort("_row").drop("_row", "_after", "_dated_line")
