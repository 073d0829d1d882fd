"""CV03 crash-inside-nccl."""

from __future__ import annotations

from typing import ClassVar

import polars as pl

from ncclpm.model import said
from ncclpm.rules.base import Finding, Fix, Rule, quotes, ranks_text
from ncclpm.tables import Tables
from ncclpm.tables.schema import Category


class CrashInsideNccl(Rule):
    """A process crashed inside NCCL's own code: the first frame of its native backtrace past the signal handler is
    libnccl (or an NCCL symbol), not the job's.

    ## What it detects
    A fatal signal (`Caught signal 11 (Segmentation fault ...)`, UCX's `==== backtrace (tid: N) ====`) whose
    backtrace, once the handler's frames are skipped (UCX's `ucs_handle_error`, glibc's sigaction trampoline,
    raise/abort), starts in `libnccl.so` / a `libnccl-net` plugin, or in an NCCL or RAS symbol
    (`rasMsgHandlePeersUpdate`) where no library is printed.

    ## Why it matters
    NCCL runs background threads of its own (the proxy, RAS, the network plugin): a segfault there is a fault of
    that NCCL build, its plugin, or a feature it turned on by itself - not of the training code, and the same on
    every run with that version. "A rank crashed" would send the reader through the model code.

    ## Example
    `Caught signal 11 (Segmentation fault: address not mapped to object at address 0x48)` / `0 .../libucs.so.0
    (ucs_handle_error+0x2d4)` / `3 /opt/nccl/lib/libnccl.so(+0x120057)`.
    """

    id = "CV03"
    name = "crash-inside-nccl"
    category = Category.CONFIG_VERSION
    base_confidence = 0.5  # where it crashed is certain; that the build, not its input, is at fault is the lead
    explains = ("CT01", "CR01", "CR02", "IN01")
    FIXES: ClassVar[dict[str, Fix]] = {
        "version": Fix(
            "Run another NCCL release (the one the torch wheel bundles, or a newer one: `NCCL_DEBUG=VERSION` prints "
            "which is loaded) and make sure an NCCL net plugin (`libnccl-net*.so`, `NCCL_NET_PLUGIN`) was built for "
            "that NCCL; report the backtrace to NVIDIA/nccl with the version."
        ),
        "ras": Fix(
            "The frame is NCCL's RAS subsystem (on by default since 2.24): `NCCL_RAS_ENABLE=0` turns it off until a "
            "release with the fix.",
            when="the crashing frame is a RAS function",
        ),
    }

    def evidence(self, t: Tables) -> pl.DataFrame:
        return self.facts.crash_in_nccl

    def assess(self, t: Tables, ev: pl.DataFrame) -> Finding | None:
        ranks = tuple(sorted(set(ev["rank"].drop_nulls().to_list())))
        first = ev.row(0, named=True)
        ras = ev["sym"].fill_null("").str.starts_with("ras").any()
        where = f" ({ranks_text(ranks)})" if ranks else ""
        return self.finding(
            culprit_ranks=ranks,
            summary=f"A process crashed inside NCCL's own code{where}: `{said(first['text'], t.line_prefix, 100)}`, "
            f"first frame past the signal handler `{said(first['frame'], t.line_prefix, 100)}`"
            + (" - NCCL's RAS subsystem" if ras else "")
            + ". A fault of that NCCL build or its plugin, not of the job's code.",
            explanation="The signal handler's frames (UCX, glibc) only report the crash; the frame under them is "
            "where it happened. NCCL's background threads (proxy, RAS, network plugin) run no user code, so a fault "
            "there follows the NCCL version and its settings, on every run.",
            evidence=quotes(ev.select("source", "line", "rank", "text"), 2),
            fixes=self.fixes("version", *(["ras"] if ras else [])),
            dont=("Do not hunt the model code for the segfault: the process was inside NCCL.",),
            verify=("With the other NCCL (or RAS off) the job passes the point where it crashed.",),
        )
