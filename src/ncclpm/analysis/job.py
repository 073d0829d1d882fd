"""Facts about the job as a whole that decide which fixes a finding gives and how (`Fix.unless`, `Fix.live`):
advice the job already follows is not repeated, and advice about a live process is for the next run when the
job is over."""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from ncclpm.analysis.timeout import TimeoutInForce
from ncclpm.tables import Tables
from ncclpm.tables.kinds import K

# `Fix.unless` names one of these; the text is what `ncclpm explain` says about it
UNLESS = {
    "fr_dumps": "the job already has flight-recorder dumps",
    "dataloader_timeout": "the job's DataLoader already has a timeout below the process group's (set in its code, or "
    "seen firing in its log)",
    "stack_dumps": "the job already has stack dumps of its ranks",
    "nccl_info": "the job already has NCCL's INFO log (ncclpm read its transports and warnings)",
}
SLOW_SWITCHES = ("NCCL_P2P_DISABLE", "NCCL_IB_DISABLE")  # traffic through host memory / TCP sockets


@dataclass(frozen=True)
class JobFacts:
    """Facts about the whole job that rules' wording and fixes depend on."""

    fr_dumps: bool = False  # flight-recorder dumps are among the job's files
    stack_dumps: bool = False  # stack dumps (py-spy, faulthandler, gdb...) are among them
    dataloader_timeout: bool = False  # a DataLoader timeout below the process group's is set in code or fired in a log
    over: bool = False  # the job has ended (exits, aborts, timeouts): advice about a live process is for next time
    nccl_info: bool = False  # NCCL_DEBUG=INFO output is among the logs
    slow_switches: tuple[str, ...] = ()  # `NCCL_P2P_DISABLE=1 (run.sh:7)`: transports the job switched off

    @classmethod
    def of(cls, t: Tables, timeout: TimeoutInForce) -> JobFacts:
        code = t.extra.get("code_settings")
        dl = [] if code is None else code.filter(pl.col("setting") == "dataloader_timeout")["number"].to_list()
        dl += t.kinds(K.dataloader_error)["count"].to_list()
        below = [s for s in dl if s and (timeout.ms is None or s * 1000 < timeout.ms)]
        stacks = t.extra.get("stacks")
        ended = not t.elastic.is_empty() or not t.events.filter(pl.col("severity") == "error").is_empty()
        return cls(
            fr_dumps=t.fr is not None and not t.fr.dumps.is_empty(),
            stack_dumps=stacks is not None and not stacks.is_empty(),
            dataloader_timeout=bool(below),
            over=ended,
            nccl_info=not t.kinds(K.nccl_comm_init).is_empty() or not t.kinds(K.nccl_transport).is_empty(),
            slow_switches=_slow_switches(t),
        )


def _slow_switches(t: Tables) -> tuple[str, ...]:
    table = t.extra.get("settings")
    if table is None or table.is_empty():
        return ()
    off = table.filter(pl.col("var").is_in(SLOW_SWITCHES) & (pl.col("value") == "1")).unique("var", keep="first")
    return tuple(f"`{r['var']}=1` ({r['file']}:{r['line']})" for r in off.sort("var").iter_rows(named=True))
