"""MC02 collective-under-rank-branch."""

from __future__ import annotations

import re
from typing import ClassVar

import polars as pl

from ncclpm.ingest.code.rank_branches import SETTING
from ncclpm.ingest.code.settings import code_facts
from ncclpm.rules.base import Finding, Fix, Rule, quotes, ranks_text
from ncclpm.tables import Tables
from ncclpm.tables.kinds import K
from ncclpm.tables.schema import Category

# how a call's name and a watchdog's OpType differ only in spelling (`all_gather_into_tensor` / `_ALLGATHER_BASE`)
_NOISE = re.compile(r"_|INTOTENSOR$|OBJECTLIST$|OBJECT$|TENSOR$|SINGLE$|BASE$|COALESCED$")
_BARRIERS = {"BARRIER", "MONITOREDBARRIER", "WAITFOREVERYONE"}


def _op_keys(name: str) -> set[str]:
    """The OpTypes a call can show up as in a watchdog line (torch's barrier is an ALLREDUCE of one element)."""
    key = _NOISE.sub("", name.rpartition(".")[2].upper())
    return {"BARRIER", "ALLREDUCE"} if key in _BARRIERS else {key}


class CollectiveUnderRankBranch(Rule):
    """The code issues a collective on some ranks only (inside `if rank == 0:`): the others never join it.

    ## What it detects
    A Python file of the job calls a collective (`dist.broadcast`, `torch.distributed.barrier`,
    `accelerator.wait_for_everyone`...) inside an `if` on the rank (`dist.get_rank() == 0`, `local_rank in [-1,
    0]`, `is_main_process`) and nowhere else, while the logs show the job hanging or timing out and no rank's own
    error: no crash, no failed exit, nothing that finished. A timeout whose operation is not that collective
    keeps it silent. Point-to-point calls and tests that only tell a distributed run from one process
    (`local_rank != -1`) are not read.

    ## Why it matters
    Every rank has to call each collective, in the same order. A collective only the main process calls waits
    for ranks that never come: the job hangs (with a lazily created NCCL communicator, without even a watchdog
    timeout, the hang being inside the communicator's creation) or the next collective mismatches. The code
    is not evidence by itself, so this is a lead (possible): the logs only show nothing failed.

    ## Example
    `if dist.get_rank() == 0:` / `    dist.broadcast(torch.tensor([1, 2, 3]).cuda(), 0)` in the script, and two
    ranks' `ProcessGroupNCCL initialized with following options` followed by nothing.
    """

    id = "MC02"
    name = "collective-under-rank-branch"
    category = Category.MISMATCHED_COLLECTIVES
    base_confidence = 0.4
    explains = ("CT01", "IN01")
    FIXES: ClassVar[dict[str, Fix]] = {
        "every_rank": Fix(
            "Call {call|the collective} on every rank: move it out of the `if` (the ranks that do not need the "
            "result still take part), or use a collective meant for it (`broadcast` from the main rank, "
            "`broadcast_object_list`) that all ranks call."
        ),
        "detail": Fix(
            "To confirm, run once with `TORCH_DISTRIBUTED_DEBUG=DETAIL`: torch then checks every collective's "
            "fingerprint across ranks and names the one a rank issued alone."
        ),
    }

    def evidence(self, t: Tables) -> pl.DataFrame:
        calls = code_facts(t, SETTING)
        if calls.is_empty() or not self.facts.scope.is_job:
            return pl.DataFrame()
        if not (self.facts.crashes.is_empty() and self.facts.own_errors.is_empty() and t.kinds(K.job_done).is_empty()):
            return pl.DataFrame()  # a rank's own failure, or a job that finished: the logs say what happened
        timed_out = set(t.kinds(K.collective_timeout)["op"].drop_nulls().to_list())
        if timed_out:  # the collective that timed out has to be one the branch issues
            shown = {_NOISE.sub("", o.upper()) for o in timed_out}
            calls = calls.filter(
                pl.col("name").map_elements(lambda n: bool(_op_keys(n) & shown), return_dtype=pl.Boolean)
            )
        return calls.with_columns(pl.lit(None, pl.Int32).alias("rank"))

    def assess(self, t: Tables, ev: pl.DataFrame) -> Finding | None:
        first = ev.row(0, named=True)
        selects = ev["number"].drop_nulls().unique().to_list()
        culprits = (int(selects[0]),) if len(selects) == 1 and ev["number"].null_count() == 0 else ()
        who = f" ({ranks_text(culprits)} alone)" if culprits else ""
        timed_out = not t.kinds(K.collective_timeout).is_empty()
        if timed_out:
            seen = "a collective of that kind timed out"
        elif not self.facts.victim_lines.is_empty():
            seen = "the logs show ranks waiting or losing their peers, and no rank's own error"
        else:
            seen = "the logs show nothing failing or finishing: a hang"
        return self.finding(
            confidence=self.base_confidence + (0.1 if timed_out else 0.0),
            culprit_ranks=culprits,
            summary=f"The code calls `{first['name']}` only under `if {first['value']}`{who}, and nowhere else: "
            f"the other ranks never join it ({seen}).",
            explanation="A collective has to be called by every rank of its group, in the same order; one issued "
            "inside a rank-dependent branch waits for ranks that never call it. This is read from the code, not "
            "seen in the logs: the logs only show that nothing else failed.",
            evidence=quotes(ev, 3),
            fixes=self.fixes(call=f"`{first['name']}`"),
            dont=("Do not raise the timeout: the other ranks never arrive.",),
            verify=(
                "With the call on every rank, the job passes that point (and `TORCH_DISTRIBUTED_DEBUG=DETAIL` "
                "reports no mismatch).",
            ),
        )
