"""NC01 nccl-result-class."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import polars as pl

from ncclpm.analysis.crashes import NAMED_CAUSES, NAMES_A_CAUSE
from ncclpm.model import said
from ncclpm.rules._hosts import where
from ncclpm.rules.base import Finding, Fix, Rule, quotes, ranks_text, warn_message
from ncclpm.tables import Tables
from ncclpm.tables.kinds import K
from ncclpm.tables.schema import Category


@dataclass(frozen=True)
class ClassReading:
    """What one ncclResult_t means when it is all a log says (no NCCL message read), from where NCCL returns it."""

    category: Category  # UNKNOWN: the class points to no single cause; the finding is then a lead only
    confidence: float  # below any NCCL message's reading: the class says which kind of failure, not which one
    what: str  # the class's meaning, one sentence (`<class>: <what>`)
    causes: str  # what it most often is, from NCCL's source and the jobs that print it


# The classes no other rule reads (ncclSystemError and ncclRemoteError: NW01; ncclInvalidUsage/Argument: CF03).
# Read from NCCL's source (2.18-2.30: src/init.cc ncclGetErrorString, include/checks.h, include/cudawrap.h, the
# `return ncclInternalError` sites) - see the rule's docstring.
CLASSES: dict[str, ClassReading] = {
    "ncclInternalError": ClassReading(
        Category.CONFIG_VERSION,
        0.35,
        "one of NCCL's consistency checks failed - in jobs most often on a set-up NCCL does not expect, not a bug",
        "a topology NCCL cannot read (an NCCL_TOPO_FILE or a cloud image's topology XML missing attributes, a "
        "container's partial /sys), ranks that disagree (different NCCL versions or settings: bootstrap's "
        "'Message truncated'), a network plugin that does not fit this NCCL, a proxy connection that failed",
    ),
    "ncclUnhandledCudaError": ClassReading(
        Category.UNKNOWN,
        0.3,
        "a CUDA call inside NCCL failed, and the class alone points to no single cause",
        "'out of memory' (the GPU full when NCCL allocates its buffers), 'invalid device ordinal' (the device "
        "mapping), 'CUDA driver version is insufficient' (a driver too old for the runtime), 'peer access is not "
        "supported' / 'operation not supported' / 'invalid argument' in P2P, NVLS or cuMem calls (the driver, the "
        "fabric manager, IPC inside containers), 'an illegal memory access' left by an earlier kernel",
    ),
    "ncclInProgress": ClassReading(
        Category.UNKNOWN,
        0.25,
        "an operation of a non-blocking communicator had not completed when the program stopped waiting for it",
        "a communicator creation or abort that hung on a peer",
    ),
    "ncclTimeout": ClassReading(
        Category.UNKNOWN,
        0.25,
        "an NCCL operation with a time limit (device-side barriers, NCCL 2.29+) waited past it",
        "a peer that never arrived - busy, hung or dead - as with a collective timeout",
    ),
}


class NcclResultClass(Rule):
    """NCCL's result class with no NCCL message to say more: the class's own meaning, a lead at low confidence.

    ## What it detects
    An NCCL error read only as its result class, in any wrapper: torch's `NCCL error in: <file:line>, internal
    error, NCCL version X` and `ncclInternalError: Internal check failed.`, torch 1.x's `NCCL Error 3: internal
    error`, nccl2's and Horovod's `<call> failed: <class>`, vLLM's/SGLang's `NCCL error: <class>`, nccl-tests'
    `NCCL failure common.cu:1204 'unhandled cuda error ...'`, cupy's `NCCL_ERROR_INTERNAL_ERROR` - for the classes
    no other rule reads (ncclInternalError, ncclUnhandledCudaError, ncclInProgress, ncclTimeout; ncclSystemError and
    ncclRemoteError are NW01's, ncclInvalidUsage/ncclInvalidArgument CF03's) - when no NCCL message (a WARN line,
    torch's `Last error:`) nor any other line names the cause.

    ## Why it matters
    The class is what a user pastes most often, and "a rank crashed" says less than it: ncclInternalError is one of
    NCCL's consistency checks failing - in jobs most often a set-up NCCL does not expect (a topology it cannot
    read, ranks that disagree, a plugin that does not fit) - and ncclUnhandledCudaError a CUDA call inside NCCL
    failing (out of memory, a device or driver set-up, P2P/NVLS/IPC in containers). Which one NCCL's own WARN line
    says: the lead is to rerun with `NCCL_DEBUG=WARN`. The same class on several hosts at once points at what they
    share (the job's set-up or sizes), not at one GPU.

    ## Example
    `ncclCommInitRank failed with error: NCCL error: internal error` (a vLLM engine on an H100 node; the cause was a
    malformed topology XML), or nccl-tests' `HCA-128: Test NCCL failure common.cu:1204 'unhandled cuda error (run
    with NCCL_DEBUG=INFO for details) / '` on every host.
    """

    id = "NC01"
    name = "nccl-result-class"
    fires_on = frozenset({K.nccl_error})
    category = Category.CONFIG_VERSION  # ncclInternalError's; the others' are in CLASSES
    base_confidence = 0.35
    FIXES: ClassVar[dict[str, Fix]] = {
        "warn": Fix(
            "Rerun with `NCCL_DEBUG=WARN` (or read torch's `Last error:` / nccl2's `NCCL Last Error:` after the "
            "exception): NCCL's WARN line before the error names the check or the call that failed and where."
        ),
        "internal": Fix(
            "Check what NCCL was given: the same NCCL (`NCCL_DEBUG=VERSION`) and NCCL_* settings on every rank, the "
            "topology file (NCCL_TOPO_FILE, or the one a cloud image or net plugin installs) and the net plugin "
            "(`NCCL_NET_PLUGIN`) built for this NCCL; in containers give NCCL the host's /sys (or run the same "
            "image outside the container to compare).",
            when="the class is ncclInternalError",
        ),
        "cuda": Fix(
            "Read the CUDA error in NCCL's `Cuda failure '<error>'` line: 'out of memory' - leave GPU memory for "
            "NCCL (smaller batch or message sizes, `torch.cuda.empty_cache()` before creating communicators); "
            "'invalid device ordinal' - set each rank's device from LOCAL_RANK; a driver or P2P/NVLS/cuMem error - "
            "check the driver and fabric manager, and in containers `--ipc=host` (or `NCCL_CUMEM_ENABLE=0`).",
            when="the class is ncclUnhandledCudaError",
        ),
        "memory": Fix(
            "Ask for less: lower the largest size (nccl-tests' `-e`, a batch or a message size) so that the "
            "program's buffers and NCCL's fit the GPU, or free the memory another process holds (`nvidia-smi`).",
            when="the program said it had to shrink its sizes to fit GPU memory",
        ),
    }

    def evidence(self, t: Tables) -> pl.DataFrame:
        ev = t.kinds(K.nccl_error).filter(pl.col("nccl_result").is_in(list(CLASSES)))
        if ev.is_empty():
            return ev
        # the message wins over its wrapper: a line naming a cause (an NCCL WARN read, an OOM, a network error...)
        # leaves the class nothing to add
        named = t.kinds(*NAMED_CAUSES).filter(pl.col("strength").fill_null(1.0) >= NAMES_A_CAUSE)
        # ... and so does a network line too weak to name a cause alone (NW01 reads it), or a peer process seen
        # going away: the class is then that failure's consequence
        said_more = t.kinds(K.network_error, K.peer_closed)
        if not named.is_empty() or not said_more.is_empty():
            return ev.clear()
        return ev.sort("ts", "source", "line", nulls_last=True)

    def assess(self, t: Tables, ev: pl.DataFrame) -> Finding | None:
        # the first class read decides (a job fails with one; its other lines are the same failure)
        result = str(ev["nccl_result"][0])
        reading = CLASSES[result]
        mine = ev.filter(pl.col("nccl_result") == result)
        ranks = tuple(sorted(set(mine["rank"].drop_nulls().to_list())))
        hosts = sorted(set(mine["host"].drop_nulls().to_list()))
        warn = t.kinds(K.nccl_warn, K.nccl_internal)
        on = self._on(t, ranks, hosts)
        limited = t.kinds(K.gpu_memory_limited)
        if result == "ncclUnhandledCudaError" and not limited.is_empty():
            return self._memory(t, mine, limited, ranks, on)
        if warn.is_empty():
            summary = f"NCCL failed with {result}{on} and no NCCL message says why: {reading.what}."
        else:  # a message no entry reads, or one that names no cause alone: quoted, the class still the lead
            summary = f"NCCL failed with {result}{on}; its last WARN (`{_warn_said(warn['text'][-1], t.line_prefix)}`) "
            summary += f"names no cause by itself: {reading.what}."
        if len(hosts) > 1:
            summary += f" The same on {len(hosts)} hosts at once: what they share (set-up, sizes), not one GPU."
        summary += " NCCL_DEBUG=WARN names the cause." if warn.is_empty() else " NCCL_DEBUG=INFO shows where it failed."
        keys = {"ncclInternalError": ["internal"], "ncclUnhandledCudaError": ["cuda"]}.get(result, [])
        return self.finding(
            category=reading.category,
            confidence=reading.confidence,
            culprit_ranks=ranks,
            summary=summary,
            explanation=f"NCCL returns one result class for many failures: the class says which kind, NCCL's WARN "
            f"line before it says which one. {result} is most often {reading.causes}. Read alone the class is a "
            "lead, at low confidence; an NCCL message naming the cause replaces it.",
            evidence=(*quotes(mine, 4), *quotes(warn.tail(1), 1)),
            fixes=self.fixes("warn", *keys),
            dont=(
                "Do not take 'please report this issue to the NCCL developers' at its word before reading NCCL's "
                "WARN line: most internal errors in jobs are a set-up NCCL does not expect.",
            )
            if result == "ncclInternalError"
            else (),
            verify=("With `NCCL_DEBUG=WARN` the failing run prints NCCL's reason on the line before the error.",),
            facts={"nccl_result": result, "hosts": hosts, "lines": mine.height},
        )

    def _memory(self, t: Tables, mine: pl.DataFrame, limited: pl.DataFrame, ranks: tuple[int, ...], on: str) -> Finding:
        """The CUDA failure after the program said it had to shrink its sizes to fit GPU memory: out of memory is
        then the likely CUDA error, still a lead (the error itself is not printed)."""
        return self.finding(
            category=Category.CUDA_OOM,
            confidence=0.5,
            culprit_ranks=ranks,
            summary=f"NCCL failed with ncclUnhandledCudaError{on} after the program had to shrink its sizes to fit "
            f"GPU memory (`{said(limited['text'][0], t.line_prefix, 80)}`): most likely out of memory at the "
            "largest sizes. NCCL_DEBUG=WARN names the CUDA error.",
            explanation="A CUDA call inside NCCL failed; the program itself had just found the GPU's memory too small "
            "for what was asked, so the failing call is most likely an allocation (NCCL's buffers next to the "
            "program's). The CUDA error is not printed: a lead.",
            evidence=(*quotes(limited, 1), *quotes(mine, 4)),
            fixes=self.fixes("warn", "memory"),
            verify=("With smaller sizes (nccl-tests' `-e`) the run passes the size where it failed.",),
            facts={"nccl_result": "ncclUnhandledCudaError", "memory_limited": True},
        )

    @staticmethod
    def _on(t: Tables, ranks: tuple[int, ...], hosts: list[str]) -> str:
        if len(hosts) > 1:
            return f" on {len(hosts)} hosts ({', '.join(hosts[:6])}{', ...' if len(hosts) > 6 else ''})"
        if hosts:
            return f" on {where(t, hosts)}"
        return f" on {ranks_text(ranks)}" if ranks else ""


def _warn_said(text: str | None, envelopes: str) -> str:
    """An NCCL WARN line's message as prose quotes it (NW01 reads the same message: `warn_message`)."""
    message = warn_message(text)
    return said(message if message is not None else (text or ""), envelopes, 100)
