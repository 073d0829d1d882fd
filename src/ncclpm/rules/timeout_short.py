"""TO01 all-ranks-timed-out-together."""

from __future__ import annotations

from typing import ClassVar

import polars as pl

from ncclpm.rules._timeout import timeout_origin
from ncclpm.rules._why import never_joined
from ncclpm.rules.base import Finding, Fix, Rule, quotes, ranks_text
from ncclpm.tables import Tables
from ncclpm.tables.schema import Category
from ncclpm.util.durations import duration_text

DEFAULT_NCCL_TIMEOUT_MS = 600_000


class AllRanksTimedOutTogether(Rule):
    """Every rank entered the same collective and it still did not finish in time.

    ## What it detects
    Watchdog timeouts from every known rank naming the same process group, `SeqNum`, `OpType` and size - nobody
    is missing, nobody is behind, and no rank failed on its own.

    ## Why it matters
    If all ranks joined, the collective itself was too slow for the configured timeout: a first collective
    that includes lazy NCCL init / compilation, a huge tensor over a slow link, or a timeout set far below
    the default. (A network fault can look the same: check NCCL WARN lines.)

    ## Example
    Ranks 0-7: `WorkNCCL(SeqNum=1, OpType=BROADCAST, NumelIn=131072000, ..., Timeout(ms)=60000) ran for 60012
    milliseconds`.
    """

    id = "TO01"
    name = "all-ranks-timed-out-together"
    category = Category.TIMEOUT_TOO_SHORT
    base_confidence = 0.5
    explains = ("CT01",)
    FIXES: ClassVar[dict[str, Fix]] = {
        "raise_timeout": Fix(
            "Raise the process-group timeout above {limit|the one the collectives timed out after}: "
            "`dist.init_process_group(backend, timeout=datetime.timedelta(minutes=30))`."
        ),
        "slow_switch": Fix(
            "Remove {switches|`NCCL_P2P_DISABLE=1` / `NCCL_IB_DISABLE=1` where the job sets it}: with peer-to-peer or "
            "InfiniBand off every transfer goes through host memory or TCP sockets, several times slower, so a large "
            "collective that fit the timeout no longer does.",
            when="the job switches peer-to-peer or InfiniBand off",
        ),
        "check_transport": Fix(
            "Run with `NCCL_DEBUG=INFO` and check the transport (`via NET/IB` vs `via NET/Socket`) and any "
            "`NCCL WARN` lines before assuming it is only the timeout.",
            unless="nccl_info",
        ),
    }

    def evidence(self, t: Tables) -> pl.DataFrame:
        to = self.facts.timeouts.filter(pl.col("seq").is_not_null() & pl.col("op").is_not_null())
        if to.is_empty():
            return to
        calls = to.select(pl.col("pg").fill_null("?"), "seq", "op", "numel_in").unique()
        everyone = set(to["rank"].to_list()) >= self.facts.known_ranks and len(self.facts.known_ranks) > 1
        together = not self.facts.late_timeouts  # a rank that started waiting much later was busy, not slow together
        return to if calls.height == 1 and everyone and together else to.clear()

    def assess(self, t: Tables, ev: pl.DataFrame) -> Finding | None:
        timeout_ms = int(ev["timeout_ms"].max() or 0)
        row = ev.row(0, named=True)
        conf = self.base_confidence + (0.15 if timeout_ms and timeout_ms < DEFAULT_NCCL_TIMEOUT_MS else 0.0)
        conf += 0.05 if (row["seq"] or 0) <= 2 else 0.0
        limit = duration_text(timeout_ms)
        origin = timeout_origin(self.facts.timeout, timeout_ms or None)
        return self.finding(
            confidence=conf,
            culprit_ranks=(),
            summary=f"All {ev['rank'].n_unique()} ranks timed out together in {row['op']} #{row['seq']} after "
            f"{limit}{f' ({origin})' if origin else ''}: every rank joined, so the collective itself did not finish "
            "within the timeout.",
            explanation="No rank is missing or behind and none failed on its own; either the timeout is too "
            "short for this collective (first collective with lazy init, very large tensors, slow link) or the "
            "transport is degraded.",
            evidence=quotes(ev, 4),
            fixes=self.fixes(
                "raise_timeout",
                *(["slow_switch"] if self.job.slow_switches else []),
                "check_transport",
                limit=limit,
                switches=" and ".join(self.job.slow_switches),
            ),
            dont=("`NCCL_TIMEOUT` does nothing - only `timeout=` in `init_process_group`/`new_group` counts.",),
            verify=(
                "Time the collective with `TORCH_NCCL_ENABLE_TIMING=1` and a flight-recorder dump; it must "
                "finish well inside the new timeout.",
            ),
            facts={"timeout_ms": timeout_ms} | ({"timeout_origin": origin} if origin else {}),
        )

    def why_not(self, t: Tables, winner: Finding, mine: Finding | None) -> str | None:
        if winner.category == Category.MISMATCHED_COLLECTIVES:
            return None  # the ranks did join, each its own collective: MC01/FR01 say which
        away = never_joined(self.facts, winner.culprit_ranks)
        return f"not every rank joined the collective: {ranks_text(away)} never entered it" if away else None
