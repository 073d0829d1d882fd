"""CT01 collective-timeout-symptom."""

from __future__ import annotations

from typing import ClassVar

import polars as pl

from ncclpm.rules.base import Finding, Fix, Rule, quotes, ranks_text
from ncclpm.tables import Tables
from ncclpm.tables.kinds import K
from ncclpm.tables.schema import Category
from ncclpm.util.frames import ordered


class CollectiveTimeoutSymptom(Rule):
    """Ranks timed out (or were torn down) waiting for a collective - the symptom, not the cause.

    ## What it detects
    `Watchdog caught collective operation timeout`, gloo's `Timed out waiting ...ms`, the watchdog's
    "failure detected"/teardown lines, `Connection closed by peer`, heartbeat-monitor "watchdog got stuck".

    ## Why it matters
    These lines are what every surviving rank prints when another rank stops participating. They say which
    collective the job died in and who was waiting, which is how the other rules find the culprit. On its own
    this finding is never the root cause.

    ## Example
    `[Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=668, OpType=ALLREDUCE, NumelIn=52,
    NumelOut=52, Timeout(ms)=600000) ran for 600097 milliseconds before timing out.`
    """

    id = "CT01"
    name = "collective-timeout-symptom"
    category = Category.SYMPTOM
    FIXES: ClassVar[dict[str, Fix]] = {
        "root_cause": Fix(
            "Fix the root cause reported above it. If none was found, collect more evidence: per-rank logs of every "
            "rank, flight-recorder dumps (`TORCH_NCCL_TRACE_BUFFER_SIZE=2000`, `TORCH_NCCL_DUMP_ON_TIMEOUT=1`), "
            "`NCCL_DEBUG=INFO`, and `py-spy dump` of a hung rank."
        ),
    }
    base_confidence = 0.9

    def evidence(self, t: Tables) -> pl.DataFrame:
        return ordered(self.facts.victim_lines, "ts", "source", "line", nulls_last=True)

    def assess(self, t: Tables, ev: pl.DataFrame) -> Finding | None:
        ranks = tuple(sorted(set(ev["rank"].to_list())))
        to = ev.filter(pl.col("kind") == K.collective_timeout)
        what = ""
        if not to.is_empty() and to["op"].drop_nulls().len():
            r = to.filter(pl.col("op").is_not_null()).row(0, named=True)
            what = f" in {r['op']}" + (f" #{r['seq']}" if r["seq"] is not None else "")
        return self.finding(
            culprit_ranks=(),
            summary=f"{ranks_text(ranks).capitalize()} timed out or lost a peer{what}.",
            explanation="Every surviving rank reports the collective it was stuck in; the rank that caused it is "
            "usually the one that did not report.",
            evidence=quotes(ev, 4),
            facts={"waiting_ranks": list(ranks)},
        )
