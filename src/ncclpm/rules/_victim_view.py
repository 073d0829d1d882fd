"""What the waiting ranks' own lines prove, and the likely causes in order, when no rule names the cause.

A watchdog timeout is a victim's view: it proves which collective the rank waited in (op, sequence number,
size, group), for how long, and that this rank got there. The rest is inference, ordered by what such a wait
usually means: a 1-element all-reduce early in a job is a barrier some rank had not reached yet (rank-local
set-up work); a large collective in the middle of training stalls when another rank died, hung or issued a
different collective. (A `ran for` far above the timeout - the watchdog itself held up - is said for every verdict
by `connected.late_watchdog`.)
"""

from __future__ import annotations

import polars as pl

from ncclpm.analysis import Analysis
from ncclpm.analysis.victims import BARRIER_SHAPED
from ncclpm.rules.base import ranks_text
from ncclpm.util.durations import duration_text

EARLY_SEQ = 10  # the first collectives of a job: barriers, parameter broadcasts, lazy NCCL init


def victims_view(facts: Analysis) -> tuple[list[str], list[str]]:
    """(what the waiting ranks' lines prove, the likely causes in order) - both empty without a timeout."""
    t = facts.t
    to = facts.timeouts.sort("ts", "source", "line", nulls_last=True)
    if to.is_empty():
        return [], []
    row = to.row(0, named=True)
    ranks = sorted(set(to["rank"].to_list()))
    op, seq, numel = row["op"] or "a collective", row["seq"], row["numel_in"]
    call = f"{op}" + (f" #{seq}" if seq is not None else "") + (f" ({numel} elements)" if numel is not None else "")
    group = f" of process group {row['pg']}" if row["pg"] not in (None, "0") else ""
    proves = [
        f"{ranks_text(ranks).capitalize()} entered {call}{group} and waited the full timeout "
        f"({duration_text(row['timeout_ms'])}) for a peer: {'it was' if len(ranks) == 1 else 'they were'} there, "
        "another rank was not, or could not deliver."
    ]
    status = t.events.filter(pl.col("last_enqueued").is_not_null() & pl.col("rank").is_in(ranks))
    if seq is not None and not status.is_empty() and int(status["last_enqueued"].max()) > seq:  # type: ignore[arg-type]
        proves.append(
            f"The waiting rank had already enqueued work up to #{int(status['last_enqueued'].max())}: it kept "  # type: ignore[arg-type]
            "running, so the stall is on the other side of this collective."
        )
    site = call_site_text(facts, ranks)
    if site:
        proves.append(f"torch printed the failed collective's stack: {site}.")
    # the collective's own stack says what the call was; else its shape (a 1-element all-reduce: a barrier)
    shaped = bool(to.head(1).select(BARRIER_SHAPED.fill_null(False)).item())
    barrier = facts.waiting_in_barrier if not facts.call_sites.is_empty() else shaped
    early = seq is not None and seq <= EARLY_SEQ
    if barrier and early:
        causes = [
            "a rank still busy with start-up work before its first collectives (dataset loading or tokenisation "
            "on the main process, model download, compilation)",
            "a rank that crashed before reaching the barrier",
            "a rank that never joined the job (launch or rendezvous problem on its node)",
        ]
    elif barrier:
        causes = [
            "one rank busy outside collectives at a synchronisation point (checkpoint save, evaluation, "
            "generation, logging) for longer than the timeout",
            "a rank whose data iterator stalled or ran out (DataLoader hang, uneven shards)",
            "a rank that crashed, or took a different code path (mismatched collectives)",
        ]
    else:
        causes = [
            "another rank that crashed or hung (its own log shows it)",
            "ranks issuing different collectives (a rank-dependent branch, uneven data)",
            "a degraded or broken network link between the ranks (NCCL WARN lines with NCCL_DEBUG=INFO)",
        ]
    return proves, causes


def call_site_text(facts: Analysis, ranks: list[int]) -> str | None:
    """`all_reduce called from log_metrics (/workspace/train.py:152)`: where the first of `ranks` with a printed
    stack issued the collective it waited in (torch 2.5+), or None."""
    sites = facts.call_sites.filter(pl.col("rank").is_in(ranks))
    if sites.is_empty():
        return None
    row = sites.row(0, named=True)
    own = f" called from `{row['func']}` ({row['site']})" if row["site"] else ""
    return f"`{row['op']}`{own}"
