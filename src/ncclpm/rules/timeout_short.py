"""TO01 all-ranks-timed-out-together."""

from __future__ import annotations

from typing import ClassVar

import polars as pl

from ncclpm.rules._timeout import timeout_origin
from ncclpm.rules._why import never_joined
from ncclpm.rules.base import Finding, Fix, Rule, quotes, ranks_text
from ncclpm.tables import Tables
from ncclpm.tables.kinds import K
from ncclpm.tables.schema import Category
from ncclpm.util.durations import duration_text
from ncclpm.util.frames import filtered

DEFAULT_NCCL_TIMEOUT_MS = 600_000
DEFAULT_TIMEOUTS_MS = (DEFAULT_NCCL_TIMEOUT_MS, 1_800_000)  # NCCL's; gloo's, the store's and Trainer's ddp_timeout
GPUS_PER_NODE = 8  # the most GPUs most nodes hold (HGX/DGX): more ranks than that span hosts


class AllRanksTimedOutTogether(Rule):
    """Every rank entered the same collective and it still did not finish in time.

    ## What it detects
    Watchdog timeouts from every known rank naming the same process group, `SeqNum`, `OpType` and size - nobody
    is missing, nobody is behind, and no rank failed on its own.

    torch's desync report counts too: `[0, ..., 15] joined but didn't finish collective #730` says every rank
    entered it even when only one rank's timeout line is shown.

    ## Why it matters
    If all ranks joined, the collective itself was too slow for the configured timeout: a first collective
    that includes lazy NCCL init / compilation, a huge tensor over a slow link, or a timeout set far below
    the default. At torch's default timeout (10 min for NCCL, 30 min otherwise) that nobody set, no collective
    legitimately runs that long: the transport stalled - between nodes when the ranks span hosts (the network),
    within one host when they share it (P2P/SHM) - and the verdict says so instead of "raise the timeout"; with
    no host known and no more ranks than one node's GPUs, it says nothing (IN01 lists both leads).

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
        "stall_network": Fix(
            "Check the network between {hosts|the nodes}: NCCL's own view (`NCCL_DEBUG=INFO`: `via NET/IB` or "
            "`NET/Socket`, any `NCCL WARN`), the links' counters (`ibstat`, `perfquery`, NIC error counters), and run "
            "nccl-tests' `all_reduce_perf` across the same nodes; a flight-recorder dump shows each rank inside it.",
            when="every rank entered the collective and the ranks span hosts",
        ),
        "stall_intranode": Fix(
            "Check the GPUs' peer-to-peer path on that host: `nvidia-smi topo -m`, ACS/IOMMU settings (P2P through "
            "the PCIe switch hangs when ACS redirects it), and nccl-tests' `all_reduce_perf -g <n>` on the host; "
            "`NCCL_P2P_LEVEL=NVL` or `NCCL_P2P_DISABLE=1` confirms it when the hang goes away.",
            when="every rank entered the collective on one host",
        ),
        "check_transport": Fix(
            "Run with `NCCL_DEBUG=INFO` and check the transport (`via NET/IB` vs `via NET/Socket`) and any "
            "`NCCL WARN` lines before assuming it is only the timeout.",
            unless="nccl_info",
        ),
    }

    def evidence(self, t: Tables) -> pl.DataFrame:
        to = filtered(self.facts.timeouts, pl.col("seq").is_not_null() & pl.col("op").is_not_null())
        if to.is_empty():
            return to
        calls = to.select(pl.col("pg").fill_null("?"), "seq", "op", "numel_in").unique()
        # who joined: the ranks whose own timeout is shown, and those torch's desync report says entered it
        joined = set(to["rank"].to_list()) | self.facts.desync_joined
        known = self.facts.known_ranks | self.facts.desync_joined | self.facts.lagging
        everyone = joined >= known and len(known) > 1 and not self.facts.lagging
        together = not self.facts.late_timeouts  # a rank that started waiting much later was busy, not slow together
        return to if calls.height == 1 and everyone and together else to.clear()

    def assess(self, t: Tables, ev: pl.DataFrame) -> Finding | None:
        timeout_ms = int(ev["timeout_ms"].max() or 0)
        row = ev.row(0, named=True)
        if timeout_ms in DEFAULT_TIMEOUTS_MS and not self.facts.timeout.set_by_code(timeout_ms):
            return self._stalled(t, ev, timeout_ms, row)
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

    def _stalled(self, t: Tables, ev: pl.DataFrame, timeout_ms: int, row: dict) -> Finding | None:
        """Every rank inside one collective at a default timeout nobody set: the transport stalled."""
        joined = sorted(set(ev["rank"].to_list()) | self.facts.desync_joined)
        hosts = t.ranks.filter(pl.col("rank").is_in(joined) & pl.col("host").is_not_null())
        n_hosts = hosts["host"].n_unique()
        limit = duration_text(timeout_ms)
        head = (
            f"All {len(joined)} ranks entered {row['op']} #{row['seq']} and none finished it within torch's default "
            f"{limit} - nobody set that timeout, and no collective legitimately runs that long: "
        )
        if n_hosts >= 2:
            category, conf, key = Category.NETWORK_TRANSPORT, 0.45, "stall_network"
            why = f"the transport between their {n_hosts} hosts stalled."
        elif n_hosts == 1 and hosts.height == len(joined):
            category, conf, key = Category.SHM_P2P_TOPOLOGY, 0.45, "stall_intranode"
            why = f"the transport inside host {hosts['host'][0]} (P2P/SHM) stalled."
        elif len(joined) > GPUS_PER_NODE:
            category, conf, key = Category.NETWORK_TRANSPORT, 0.35, "stall_network"
            why = (
                f"{len(joined)} ranks are more than one node's GPUs on most machines, so they span hosts and the "
                "transport between them (the network) most likely stalled - the logs name no host to confirm it."
            )
        else:
            return None  # no host known, few enough ranks for one node: both leads stay open (IN01 lists them)
        return self.finding(
            category=category,
            confidence=conf,
            culprit_ranks=(),
            summary=head + why,
            explanation="When every rank is inside the same collective, no rank is missing or busy elsewhere; at "
            "a timeout far longer than any one collective takes, the data stopped moving. Raising the timeout "
            "would only make the hang longer.",
            evidence=quotes(ev, 2) + quotes(t.kinds(K.desync_joined), 1),
            fixes=self.fixes(key, hosts=", ".join(sorted(hosts["host"].unique().to_list())[:8]) or "the nodes"),
            dont=("Do not raise the timeout: the collective did not progress at all.",),
            verify=("nccl-tests across the same ranks completes at the expected bandwidth after the fix.",),
            facts={"timeout_ms": timeout_ms},
        )

    def why_not(self, t: Tables, winner: Finding, mine: Finding | None) -> str | None:
        if winner.category == Category.MISMATCHED_COLLECTIVES:
            return None  # the ranks did join, each its own collective: MC01/FR01 say which
        away = never_joined(self.facts, winner.culprit_ranks)
        return f"not every rank joined the collective: {ranks_text(away)} never entered it" if away else None
