"""Recurrence inside one job: its restarts (torchrun attempts, requeues) and whether they failed the same way.

A job's events are split into attempts by what the input shows: parts of it that ran one after the other, as the
report reads them (`analysis/identity.py`: `requeue_2/`, `restart_1/`, the same ranks' folders at disjoint times),
else torchrun's per-attempt log folders and its restart lines (`analysis/attempts.py`). Each attempt's failure is
its first error that is not a victim's line (masked by `signature`, so ranks and numbers do not tell attempts
apart), its progress the highest step a progress line reached. A job is a **restart storm** when its last two
attempts or more (`storm_attempts`) failed with the same signature and none got further than the one before (a first
attempt that failed otherwise - a crash, then restarts that cannot even rendezvous - does not hide the storm after
it). Its cost is those attempts' wall time (first to last timed line of each) times the nodes the job ran on, where
the logs give times. A host is suspected in an attempt when the attempt's first error was printed on it, or a
host-level line (Xid, lost GPU, IB port error) names it; `hosts_every_attempt` keeps the hosts suspected in every
attempt.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from ncclpm.analysis.attempts import attempt_column, has_attempts, restart_times
from ncclpm.analysis.identity import Identity
from ncclpm.tables.kinds import K
from ncclpm.triage.signature import signature

HOST_KINDS = (K.xid, K.gpu_lost, K.gpu_hw_error, K.gpu_fabric_error, K.nvml_error, K.node_failure)


def host_level() -> pl.Expr:
    """Events about a host itself, not a process on it: GPU and driver faults, a lost node, InfiniBand errors."""
    ib = (pl.col("kind") == K.network_error) & (pl.col("net_class").fill_null("") == "ib")
    return pl.col("kind").is_in(HOST_KINDS) | ib


def _suspects(part: pl.DataFrame, first: dict[str, Any] | None, host_of: dict[int, str]) -> set[str]:
    hosts: set[str] = set()
    if first is not None:
        host = first.get("host") or (host_of.get(first["rank"]) if first.get("rank") is not None else None)
        if host:
            hosts.add(str(host))
    named = part.filter(host_level())
    hosts |= {str(h) for h in pl.concat([named["node"], named["host"]]).drop_nulls().unique().to_list() if h}
    return hosts


NONE: dict[str, Any] = {
    "attempts": 1,
    "restart_storm": False,
    "storm_attempts": None,
    "storm_node_hours": None,
    "hosts_every_attempt": [],
}


def recurrence(tables: Any, d: Any, identity: Identity | None = None) -> dict[str, Any]:
    """`attempts`, `restart_storm`, `storm_node_hours`, `hosts_every_attempt` for one job's row. `identity`: the
    job's (`analysis/identity.py`): when its attempts are parts of the input that ran one after the other (a
    requeue's or a restart's own folder, day folders of the same ranks), they are the attempts counted here too."""
    events = tables.events
    by_source = dict(identity.attempt_of_source) if identity is not None else {}
    restarts = [] if by_source else restart_times(tables)
    if by_source:
        attempt = pl.col("source").replace_strict(by_source, default=None, return_dtype=pl.Int64)
    elif has_attempts(events, restarts):
        attempt = attempt_column(restarts)
    else:
        return dict(NONE)
    tagged = events.with_columns(attempt.alias("attempt")).filter(pl.col("attempt").is_not_null())
    numbers = sorted(set(tagged["attempt"].to_list()))
    n_attempts = max(len(numbers), len(restarts) + 1)
    if n_attempts < 2:
        return dict(NONE)
    host_of = {int(r["rank"]): str(r["host"]) for r in d.ranks if r.get("rank") is not None and r.get("host")}
    victims = pl.col("victim").fill_null(False)
    failures, progress, suspects, hours = [], [], [], []
    for n in numbers:
        part = tagged.filter(pl.col("attempt") == n)
        errors = part.filter((pl.col("severity") == "error") & ~victims).sort("ts", "source", "line", nulls_last=True)
        first = errors.row(0, named=True) if not errors.is_empty() else None
        failures.append(None if first is None else (first["kind"], signature(first["text"])))
        steps = part.filter(pl.col("kind") == K.progress)["seq"].drop_nulls()
        progress.append(steps.max() if steps.len() else None)
        suspects.append(_suspects(part, first, host_of))
        stamps = part["ts"].drop_nulls()
        hours.append((stamps.max() - stamps.min()).total_seconds() / 3600 if stamps.len() >= 2 else None)  # type: ignore[operator]
    run = _storm_run(failures, progress) if len(numbers) == n_attempts else 0
    nodes = max(1, len(set(host_of.values())))
    spent = hours[-run:] if run else []
    node_hours = round(sum(spent) * nodes, 3) if run and None not in spent else None  # type: ignore[arg-type]
    every = sorted(set.intersection(*suspects)) if suspects and len(suspects) == n_attempts else []
    return {
        "attempts": n_attempts,
        "restart_storm": run >= 2,
        "storm_attempts": run if run >= 2 else None,
        "storm_node_hours": node_hours if run >= 2 else None,
        "hosts_every_attempt": every,
    }


def _storm_run(failures: list[tuple[str, str] | None], progress: list[Any]) -> int:
    """How many attempts, counted back from the last, failed with one signature and got no further than the
    attempt before them (0 when the last attempt shows no failure)."""
    if not failures or failures[-1] is None:
        return 0
    run = 1
    for i in range(len(failures) - 1, 0, -1):
        earlier, later = progress[i - 1], progress[i]
        advanced = later is not None and (earlier is None or later > earlier)
        if failures[i - 1] != failures[-1] or advanced:
            break
        run += 1
    return run
