"""Connected facts: the settings, timeouts and transports of the job tied to the verdict where they bear on it.

Each fact is one sentence with its file:line: a DataLoader timeout not below the process-group timeout (so a
waiting rank's watchdog fires first and the DataLoader never names itself), where the timeout in force really
comes from when a variable read by nothing claims to set it, a peer-to-peer or InfiniBand switch-off that the
channels' transport lines show in effect for the collective that timed out, whether flight-recorder dumps exist, a
watchdog that noticed its timeout minutes late.
Checks are independent functions (`CHECKS`); one that fails is skipped, never the report.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import polars as pl

from ncclpm.analysis import Analysis
from ncclpm.analysis.timeout import TORCH_NCCL_DEFAULT_MS
from ncclpm.model import Category, Finding, rank_span
from ncclpm.rules._timeout import timeout_origin
from ncclpm.tables import Tables
from ncclpm.tables.kinds import K
from ncclpm.util.durations import human_seconds
from ncclpm.util.frames import filtered

TIMEOUT_VERDICTS = {Category.SLOW_RANK_WORK, Category.TIMEOUT_TOO_SHORT, Category.DATALOADER_HANG}
FR_HELPS = {Category.SLOW_RANK_WORK, Category.TIMEOUT_TOO_SHORT, Category.MISMATCHED_COLLECTIVES, Category.UNKNOWN}


def _settings(t: Tables, var: str) -> list[dict[str, Any]]:
    table = t.extra.get("settings")
    if table is None or table.is_empty():
        return []
    return list(table.filter(pl.col("var") == var).iter_rows(named=True))


def _dataloader_timeout(t: Tables) -> tuple[float, str] | None:
    """(seconds, where) of the DataLoader timeout: fired in the log (`DataLoader timed out after N seconds`), else
    set in the code."""
    fired = t.kinds(K.dataloader_error)
    fired = fired.filter(pl.col("count").is_not_null()).sort("source", "line") if not fired.is_empty() else fired
    if not fired.is_empty():
        r = fired.row(0, named=True)
        whom = rank_span([r["rank"]]) if r["rank"] is not None else "a rank"
        return float(r["count"]), f"fired on {whom} at {r['source']}:{r['line']}"
    code = t.extra.get("code_settings")
    if code is None or code.is_empty():
        return None
    set_ = code.filter((pl.col("setting") == "dataloader_timeout") & (pl.col("number").fill_null(0) > 0))
    if set_.is_empty():
        return None
    r = set_.row(0, named=True)
    return float(r["number"]), f"`{r['text'].strip()[:60]}` at {r['source']}:{r['line']}"


def dataloader_vs_process_group(facts: Analysis, primary: Finding) -> str | None:
    dl, pg = _dataloader_timeout(facts.t), facts.timeout.ms
    if dl is None or primary.category not in TIMEOUT_VERDICTS:
        return None
    seconds, where = dl
    if pg is not None and seconds * 1000 >= pg:
        return (
            f"The DataLoader timeout ({human_seconds(seconds)}, {where}) is not below the process-group timeout "
            f"(Timeout(ms)={pg}): a stuck worker lets the waiting ranks' watchdogs fire first, so the job dies of a "
            "collective timeout instead of the DataLoader error that names the rank. Set it well below (e.g. 120 s)."
        )
    if primary.category == Category.DATALOADER_HANG:
        return (
            f"The DataLoader's own timeout ({human_seconds(seconds)}, {where}) did its job: it named the rank whose "
            "worker stopped. Raising it would only hide the stall; the worker is what to fix."
        )
    return None


def timeout_in_force(facts: Analysis, primary: Finding) -> str | None:
    """Where the timeout in force comes from - said when a variable read by nothing claims to set it, or when the
    verdict is to raise it."""
    t, ms = facts.t, facts.timeout.ms
    if ms is None:
        return None
    dead = _settings(t, "NCCL_TIMEOUT") + _settings(t, "TORCH_NCCL_TIMEOUT")
    origin = timeout_origin(facts.timeout, ms)
    if origin.startswith("set by"):
        origin = f"was {origin}"
    elif origin:
        origin = f"is not what the code asks for: {origin}"
    elif ms == TORCH_NCCL_DEFAULT_MS:
        origin = "is torch's 10-min default for NCCL (no `timeout=` given)"
    else:
        origin = (
            "was set where the job creates its process group (`init_process_group(timeout=)`, a Trainer's "
            "`ddp_timeout`, a launcher), in code that is not among the files read"
        )
    limit = f"Timeout(ms)={ms} ({human_seconds(ms / 1000)})"
    if dead:
        s = dead[0]
        same = str(s["value"]).strip() == str(ms // 1000)
        value = "the same number" if same else "the timeout in force"
        return f"`{s['var']}={s['value']}` ({s['file']}:{s['line']}) is read by nothing; {value}, {limit}, {origin}."
    if primary.category == Category.TIMEOUT_TOO_SHORT:
        return f"The timeout in force, {limit}, {origin}."
    return None


def transport(facts: Analysis, primary: Finding) -> str | None:
    """NCCL_P2P_DISABLE / NCCL_IB_DISABLE tied to the transport the channels used, for a collective that was slow."""
    t = facts.t
    if primary.category not in {Category.TIMEOUT_TOO_SHORT, Category.SLOW_RANK_WORK, Category.NETWORK_TRANSPORT}:
        return None
    off = [s for v in ("NCCL_P2P_DISABLE", "NCCL_IB_DISABLE") for s in _settings(t, v) if str(s["value"]) == "1"]
    if not off:
        return None
    s = off[0]
    slow = {
        "NCCL_P2P_DISABLE": ("SHM", "host shared memory instead of NVLink/PCIe peer-to-peer"),
        "NCCL_IB_DISABLE": ("NET/Socket", "TCP sockets instead of InfiniBand"),
    }[s["var"]]
    used = t.kinds(K.nccl_transport).filter(pl.col("value").str.starts_with(slow[0])).sort("source", "line")
    seen = (
        f", and the channels show it ({used['source'][0]}:{used['line'][0]}: via {used['value'][0]})"
        if used.height
        else ""
    )
    what = ""
    to = t.kinds(K.collective_timeout).filter(pl.col("op").is_not_null()).sort("source", "line")
    if not to.is_empty():
        r = to.row(0, named=True)
        n = r["numel_out"] or r["numel_in"]
        size = f" of {n:,} elements ({n * 4 / 2**30:.1f} GiB in fp32)" if n else ""
        what = f": the {r['op']} #{r['seq']}{size} that timed out went through {slow[1]}"
    return f"`{s['var']}=1` ({s['file']}:{s['line']}) was in effect{seen}{what}."


def flight_recorder(facts: Analysis, primary: Finding) -> str | None:
    t = facts.t
    if primary.category not in FR_HELPS:
        return None
    if t.fr is not None and not t.fr.dumps.is_empty():
        ranks = sorted(set(t.fr.dumps.filter(pl.col("used"))["rank"].drop_nulls().to_list()))
        return f"Flight-recorder dumps of {rank_span(ranks)} are among the files read."
    if any("TORCH_NCCL_TRACE_BUFFER_SIZE" in f for f in primary.fixes) or t.kinds(K.collective_timeout).is_empty():
        return None  # the fixes already ask for them
    size = _settings(t, "TORCH_NCCL_TRACE_BUFFER_SIZE")
    if size and str(size[0]["value"]) != "0":
        s = size[0]
        return (
            f"`TORCH_NCCL_TRACE_BUFFER_SIZE={s['value']}` ({s['file']}:{s['line']}) records collectives, but no "
            "flight-recorder dump is among the files read: dumps are written only with "
            "`TORCH_NCCL_DUMP_ON_TIMEOUT=1`, to `TORCH_FR_DUMP_TEMP_FILE` (default `/tmp/nccl_trace_rank_<rank>`) on "
            "each node - copy them with the logs."
        )
    return "No flight-recorder dump is among the files read, and none of them sets `TORCH_NCCL_TRACE_BUFFER_SIZE`."


LATE_FACTOR, LATE_MS = 1.5, 60_000  # `ran for` this far past the timeout: the watchdog noticed late


def late_watchdog(facts: Analysis, primary: Finding) -> str | None:
    """`ran for` far above `Timeout(ms)`: the watchdog that checks every few hundred ms noticed minutes late, so it
    was held up itself (a hung CUDA call or driver under it, the process stopped or its VM suspended)."""
    to = filtered(
        facts.t.kinds(K.collective_timeout),
        pl.col("ran_ms").is_not_null()
        & pl.col("timeout_ms").is_not_null()
        & (pl.col("ran_ms") >= pl.col("timeout_ms") * LATE_FACTOR)
        & (pl.col("ran_ms") - pl.col("timeout_ms") >= LATE_MS),
    )
    if to.is_empty():
        return None
    r = to.sort("ran_ms", descending=True).row(0, named=True)
    whom = rank_span([r["rank"]]) if r["rank"] is not None else "A rank"
    late = human_seconds((r["ran_ms"] - r["timeout_ms"]) // 1000)
    return (
        f"{whom[0].upper()}{whom[1:]}'s watchdog reported `ran for {r['ran_ms']} milliseconds` against "
        f"Timeout(ms)={r['timeout_ms']} ({r['source']}:{r['line']}): it noticed {late} late, so the watchdog thread "
        "itself was held up - a CUDA call or the driver hung under it, or the process was stopped (SIGSTOP, a "
        "suspended VM). Times worked back from this timeout are late by as much; check the node's driver (`dmesg`)."
    )


CHECKS: tuple[Callable[[Analysis, Finding], str | None], ...] = (
    timeout_in_force,
    dataloader_vs_process_group,
    transport,
    flight_recorder,
    late_watchdog,
)


def connected_facts(facts: Analysis, primary: Finding, warnings: list[str]) -> tuple[str, ...]:
    out = []
    for check in CHECKS:
        try:
            fact = check(facts, primary)
        except Exception as exc:  # a broken check must not take the report down
            warnings.append(f"connected fact {check.__name__} failed: {type(exc).__name__}: {exc}")
            continue
        if fact:
            out.append(fact)
    return tuple(out)
