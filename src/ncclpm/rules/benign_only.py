"""OK02 benign-notices-only."""

from __future__ import annotations

from typing import ClassVar

import polars as pl

from ncclpm.ingest.text.nccl_messages import reading
from ncclpm.model import said
from ncclpm.rules.base import Finding, Fix, Rule, quotes
from ncclpm.tables import Tables
from ncclpm.tables.kinds import K
from ncclpm.tables.schema import Category


class BenignNoticesOnly(Rule):
    """The only alarming lines are notices the stack recovers from by itself: nothing failed.

    ## What it detects
    Input whose warnings are all of kinds declared benign (kinds.toml `benign = true`): NCCL's `Failed to open
    libibverbs.so` (it uses sockets instead), libibverbs skipping a provider for hardware the host lacks
    (`couldn't load driver 'libipathverbs-rdmav25.so'`), cuda-gdb reporting CUDA calls a library makes and handles
    (`Cuda API error detected: cudaDeviceEnablePeerAccess returned (0x2c0)`) - with no error, timeout, crash,
    traceback or failed exit anywhere.

    ## Why it matters
    These lines look like failures and are pasted as such; chasing them wastes a day. What they can still mean
    is a performance note (a job meant to use InfiniBand runs over TCP), which is said as such.

    ## Example
    `NCCL WARN Failed to open libibverbs.so[.1]` then `NET/Socket : Using [0]eth0:10.0.0.1<0>` and `Using network
    Socket`, and nothing else.
    """

    id = "OK02"
    name = "benign-notices-only"
    category = Category.NO_FAILURE
    base_confidence = 0.55
    FIXES: ClassVar[dict[str, Fix]] = {
        "nothing": Fix(
            "Nothing to fix for these lines. If the job did fail, its error is not in these files: add every rank's "
            "stderr (`torchrun --log-dir DIR --tee 3`) and the launcher's console."
        ),
        "message": Fix(
            "{fix|What NCCL's message's declared entry says (parsers/nccl/): nothing, unless the fallback it took "
            "is not what was meant}",
            when="NCCL says what it fell back to",
        ),
    }

    def evidence(self, t: Tables) -> pl.DataFrame:
        benign = t.kinds(*K.benign)
        if benign.is_empty():
            return benign
        alarming = t.events.filter(
            pl.col("severity").is_in(["warn", "error"]) & ~pl.col("kind").is_in(list(K.benign))
        ).join(benign.select("source", "line"), on=["source", "line"], how="anti")  # a generic `NCCL WARN` reading
        failed = t.elastic.filter(pl.col("exit_code").fill_null(0) != 0)
        if not alarming.is_empty() or not t.tracebacks.is_empty() or not failed.is_empty():
            return t.events.clear()
        return benign

    def assess(self, t: Tables, ev: pl.DataFrame) -> Finding | None:
        others = t.events.join(ev.select("source", "line"), on=["source", "line"], how="anti")
        ran = not others.is_empty()  # the job's own lines show it running (a network chosen, ranks listed)
        first = ev.row(0, named=True)
        fallback = ev.filter(pl.col("kind") == K.nccl_fallback)
        msg = reading(fallback["event"][0]) if not fallback.is_empty() else None
        return self.finding(
            confidence=self.base_confidence + (0.1 if ran else 0.0),
            culprit_ranks=(),
            summary="No failure in these lines: "
            + (
                f"NCCL says `{said(fallback['detail'][0] or fallback['text'][0], t.line_prefix)}` - "
                f"{msg['meaning'][:1].lower()}{msg['meaning'][1:].rstrip('.')}"
                if msg is not None
                else f"`{said(first['text'], t.line_prefix)}` is a notice the stack recovers from by itself"
            )
            + (f" ({ev.height} such lines)" if ev.height > 1 else "")
            + ", and nothing errs, times out or crashes.",
            explanation="Every warning in the input is of a kind declared benign: something the stack works around "
            "on its own (a fallback transport, a provider for absent hardware, a debugger's notice of a call that "
            "failed as probed). What remains is at most a performance question.",
            evidence=quotes(ev, 3) + quotes(others, 2),
            fixes=(self.fixes("message", fix=msg["fix"]) if msg is not None else ()) + self.fixes("nothing"),
            dont=("Do not set NCCL_IB_DISABLE or NCCL_P2P_DISABLE because of these lines: nothing failed.",),
            verify=("The job's exit status (scheduler record, `echo $?` of the launcher) is 0.",),
        )
