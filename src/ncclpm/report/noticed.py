"""Who noticed first: which rank's watchdog saw the failure and told the others, and what NCCL's own
diagnostics (`NCCL DIAG`, `ncclras`) said about the ranks. The rank that noticed first is a waiter, not the
culprit: it tells where the failure became visible and which ranks only reacted to it."""

from __future__ import annotations

import polars as pl

from ncclpm.rules.base import ranks_text
from ncclpm.tables import Tables
from ncclpm.tables.kinds import K


def _ranks(frame: pl.DataFrame, col: str = "rank") -> list[int]:
    return sorted({int(r) for r in frame[col].drop_nulls().to_list()})


def _at(frame: pl.DataFrame) -> str:
    r = frame.sort("ts", "source", "line", nulls_last=True).row(0, named=True)
    when = f" at {r['ts']:%H:%M:%S}" if r["ts"] is not None else ""
    return f"{when} ({r['source']}:{r['line']})"


def _dump_signals(t: Tables) -> list[str]:
    if not t.has_kinds(K.dump_first_signal, K.watchdog_status, K.dump_signal_observed, K.comm_aborted):
        return []  # (most jobs: none of the lines read here, no query)
    out = []
    first = t.kinds(K.dump_first_signal).filter(pl.col("rank").is_not_null())
    told = t.kinds(K.watchdog_status).filter(pl.col("text").str.contains("Received a dump signal"))
    by_peer = told.filter(pl.col("subject_rank").is_not_null())
    observed = t.kinds(K.dump_signal_observed)
    if not first.is_empty():
        who = _ranks(first)
        out.append(
            f"{ranks_text(who).capitalize()} noticed first: its watchdog signalled every rank to dump{_at(first)}."
        )
    elif not by_peer.is_empty():
        who = _ranks(by_peer, "subject_rank")
        out.append(f"{ranks_text(who).capitalize()} noticed first: the others were told to dump by it{_at(by_peer)}.")
    reacted = sorted(set(_ranks(observed)) | set(_ranks(by_peer)))
    if reacted:
        out.append(
            f"{ranks_text(reacted).capitalize()} dumped on another rank's signal, not on a failure of their own."
        )
    remote = t.kinds(K.comm_aborted).filter(pl.col("text").str.contains("remote error detected from rank"))
    if not remote.is_empty():
        src = _ranks(remote, "subject_rank")
        out.append(
            f"{ranks_text(_ranks(remote)).capitalize()} learned of the failure from {ranks_text(src)} "
            f"(TORCH_NCCL_PROPAGATE_ERROR){_at(remote)}."
        )
    return out


def _nccl(t: Tables) -> list[str]:
    if not t.has_kinds(K.nccl_diag_fault, K.ras_rank_status, K.ras_dead):
        return []  # (most jobs: none of NCCL's diagnostics, no query)
    out = []
    for r in t.kinds(K.nccl_diag_fault).sort("source", "line").head(4).iter_rows(named=True):
        text = r["text"].split("NCCL DIAG ", 1)[-1][:200]
        out.append(f"NCCL diagnostics: {text} ({r['source']}:{r['line']}).")
    status = t.kinds(K.ras_rank_status).filter(pl.col("subject_rank").is_not_null())
    idle = status.filter(pl.col("count").is_null() & pl.col("value").is_null())
    if not idle.is_empty():
        out.append(f"ncclras: {ranks_text(_ranks(idle, 'subject_rank'))} had not launched any operation{_at(idle)}.")
    launched = status.filter(pl.col("count").is_not_null())
    if not launched.is_empty():
        low = launched.sort("count").row(0, named=True)
        out.append(
            f"ncclras: rank {low['subject_rank']} was furthest behind, at operation {low['count']}{_at(launched)}."
        )
    other = status.filter(pl.col("value").is_not_null())
    for r in other.head(4).iter_rows(named=True):
        out.append(f"ncclras: rank {r['subject_rank']} has status {r['value']} ({r['source']}:{r['line']}).")
    dead = t.kinds(K.ras_dead)
    if not dead.is_empty():
        count = dead["count"].drop_nulls()
        peers = dead["peer"].drop_nulls().unique().to_list()
        what = f"{int(count.max())} process(es) considered dead" if count.len() else "peers declared dead"
        peer_text = f" ({', '.join(sorted(peers)[:4])})" if peers else ""
        out.append(f"ncclras: {what}{peer_text}{_at(dead)}.")
    return out


def who_noticed(t: Tables) -> tuple[str, ...]:
    """Sentences for the report, most telling first; empty when the job has none of these lines."""
    return tuple(_dump_signals(t) + _nccl(t))
