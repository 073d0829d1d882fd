"""What a paste cut short still says: a traceback cut before its exception line is an exception of unknown type on
that process; a cut traceback whose every frame is torchrun's own agent is the launcher failing before its workers;
a tqdm bar of rank-local work that had run about as long as a timeout is work that outlasted it; a native backtrace
whose first frame past the signal handler is NCCL's is a crash inside NCCL. Read by CR02, MP01, RZ01, ST03, CV03."""

from __future__ import annotations

from functools import cache

import polars as pl

from ncclpm.analysis.timeout import TORCH_NCCL_DEFAULT_MS, TimeoutInForce
from ncclpm.tables import Tables
from ncclpm.tables.kinds import K
from ncclpm.tables.schema import empty
from ncclpm.util.frames import filtered
from ncclpm.util.resources import data_dir, read_toml

# torchrun's own code: its entry point, the elastic agent and launcher, and Python's module runner under them.
_LAUNCHER_PATH = r"(?:/torch/distributed/(?:run\.py|launch\.py|launcher/|elastic/)|/bin/torchrun$|/runpy\.py$)"
# The agent's functions that run before any worker starts: launching the agent, its rendezvous, its first run.
_AGENT_START = ["launch_agent", "run", "_rendezvous", "next_rendezvous", "_initialize_workers", "_invoke_run"]
TORCH_DEFAULT_MS = 1_800_000  # torch's default process-group timeout outside NCCL (gloo, the store), HF's ddp_timeout
NEAR = 0.05  # a bar's elapsed time within this share of a timeout ran about that long


def cut_tracebacks(t: Tables) -> pl.DataFrame:
    """Tracebacks a paste cut before their exception line, one row each: where it starts and ends, its rank, the
    innermost frame line kept (`text`, at `frame_line`), and whether every frame is the launcher's own (`launcher`)."""
    tb = t.tracebacks
    if tb["error_type"].null_count() == 0:  # (most jobs: every traceback has its exception line, no query)
        cols = {c: tb.schema[c] for c in ("source", "line", "end_line", "rank", "ts")}
        return pl.DataFrame(
            schema={
                **cols,
                "text": pl.String(),
                "frame_line": pl.Int64(),
                "launcher": pl.Boolean(),
                "funcs": pl.String(),
            }
        )
    cut = tb.filter(pl.col("error_type").is_null())  # (not empty: some traceback lacks its exception line)
    frames = t.kinds(K.traceback_frame).select("source", pl.col("line").alias("fl"), "text", "detail", "value")
    joined = cut.select("source", "line", "end_line", "rank", "ts").join(frames, on="source")
    inside = joined.filter((pl.col("fl") > pl.col("line")) & (pl.col("fl") <= pl.col("end_line")))
    return (
        inside.sort("source", "line", "fl")
        .group_by("source", "line", maintain_order=True)
        .agg(
            pl.col("end_line").first(),
            pl.col("rank").first(),
            pl.col("ts").first(),
            pl.col("text").last(),
            pl.col("fl").last().cast(pl.Int64).alias("frame_line"),
            pl.col("detail").fill_null("").str.contains(_LAUNCHER_PATH).all().alias("launcher"),
            pl.col("value").fill_null("").str.join(",").alias("funcs"),
        )
    )


def agent_failed_early(t: Tables, cut: pl.DataFrame) -> pl.DataFrame:
    """torchrun's agent failing before any worker ran: a traceback through the launcher's own frames only, in its
    start-up (launch_agent, the agent's first run or rendezvous), and no output of any worker in the job (no rank
    named, no worker's exit, no other traceback). Empty otherwise."""
    agent = filtered(cut, pl.col("launcher"))
    if agent.is_empty():
        return agent
    started = agent.filter(pl.col("funcs").str.contains(r"\b(?:" + "|".join(_AGENT_START) + r")\b"))
    workers = (
        not t.lines.filter(pl.col("rank").is_not_null()).is_empty()
        or not t.kinds(K.worker_exit).is_empty()
        or not t.elastic.is_empty()
        or t.tracebacks.height > agent.height
    )
    return agent.clear() if workers else started


def outlasting_work(t: Tables, timeout: TimeoutInForce) -> pl.DataFrame:
    """Bars of rank-local work (an activity on the line of a tqdm bar: tokenising, `map`, loading) that had run about
    as long as a timeout that applies - the one the logs show, the one the code sets, else torch's defaults (10 min
    for NCCL, 30 min for gloo and the store, Trainer's `ddp_timeout`) - with `timeout_ms` the timeout it matches."""
    if not (t.has_kinds(K.progress_bar) and t.has_kinds(K.activity)):  # (most jobs: no bar of work, no query)
        return empty({**t.events.schema, "work": t.events.schema["detail"], "matched_ms": pl.Int64()})
    bars = t.kinds(K.progress_bar).filter(pl.col("ran_ms").is_not_null())
    work = t.kinds(K.activity).select("source", "line", pl.col("detail").alias("work"))
    bars = bars.join(work, on=["source", "line"]).unique(["source", "line"], keep="first", maintain_order=True)
    if bars.is_empty():
        return bars.with_columns(pl.lit(None, pl.Int64).alias("matched_ms"))
    known = [*timeout.observed, *([round(timeout.configured.seconds * 1000)] if timeout.configured else [])]
    candidates = sorted(set(known) or {TORCH_NCCL_DEFAULT_MS, TORCH_DEFAULT_MS})
    near = [((pl.col("ran_ms") - ms).abs() <= ms * NEAR, ms) for ms in candidates]
    matched = pl.coalesce([pl.when(cond).then(pl.lit(ms, pl.Int64)) for cond, ms in near])
    return bars.with_columns(matched.alias("matched_ms")).filter(pl.col("matched_ms").is_not_null())


@cache
def _native() -> dict:
    return read_toml(data_dir("parsers") / "stack_frames.toml").get("native", {})


FRAMES_AFTER = 60  # lines after a crash's signal line where its backtrace's frames are looked for


def crash_in_nccl(t: Tables) -> pl.DataFrame:
    """Native backtraces under a crash whose first frame past the signal handler is NCCL's own code: one row per
    crash (its signal line), with `frame` that frame's text and `value` its symbol. Empty when no crash printed
    a backtrace, or it crashed elsewhere."""
    if not (t.has_kinds(K.crash_signal) and t.has_kinds(K.native_frame)):  # (most jobs: no query)
        ev = t.events.schema
        cols = {"source": ev["source"], "sig_line": ev["line"], "rank": ev["rank"], "ts": ev["ts"], "text": ev["text"]}
        return empty({**cols, "frame": pl.String(), "sym": pl.String()})
    native = _native()
    signals = t.kinds(K.crash_signal).select("source", pl.col("line").alias("sig_line"), "rank", "ts", "text")
    frames = t.kinds(K.native_frame).select(
        "source",
        "line",
        pl.col("detail").fill_null("").alias("lib"),
        pl.col("value").fill_null("").alias("sym"),
        pl.col("text").alias("frame"),
    )
    if signals.is_empty() or frames.is_empty():
        return signals.clear().with_columns(
            pl.lit(None, pl.String).alias("frame"), pl.lit(None, pl.String).alias("sym")
        )
    base = pl.col("lib").str.split("/").list.last()
    handler = pl.any_horizontal(
        [base.str.starts_with(x) for x in native.get("handler_libraries", [])]
        + [pl.col("sym") == x for x in native.get("handler_symbols", [])]
    )
    under = (
        signals.join(frames, on="source")
        .filter((pl.col("line") > pl.col("sig_line")) & (pl.col("line") <= pl.col("sig_line") + FRAMES_AFTER))
        .filter(~handler)
        .sort("source", "sig_line", "line")
        .group_by("source", "sig_line", maintain_order=True)
        .first()
    )
    in_lib = pl.any_horizontal([base.str.starts_with(x) for x in native.get("nccl_libraries", [])])
    no_lib_symbol = (pl.col("lib") == "") & pl.any_horizontal(
        [pl.col("sym").str.starts_with(x) for x in native.get("nccl_symbol_prefixes", [])]
    )
    return under.filter(in_lib | no_lib_symbol).select(
        "source", pl.col("sig_line").alias("line"), "rank", "ts", "text", "frame", "sym"
    )
