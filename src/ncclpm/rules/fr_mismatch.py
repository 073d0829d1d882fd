"""FR01 fr-collectives-disagree."""

from __future__ import annotations

from typing import ClassVar

import polars as pl

from ncclpm.rules._fr_evidence import changed_call_sites, entry_evidence
from ncclpm.rules.base import Finding, Fix, Rule, ranks_text
from ncclpm.tables import Tables
from ncclpm.tables.schema import Category


class FlightRecorderCollectivesDisagree(Rule):
    """Flight-recorder dumps show ranks issuing different collectives at the same sequence number.

    ## What it detects
    Per process group, entries are aligned on `collective_seq_id` (never on `record_id`); at the first
    sequence number where the op type, input sizes or dtypes differ across members, the ranks in the
    minority (by vote over all members, independent of file order) are the culprits. When no majority exists
    (1 vs 1 in a 2-rank group), the rank whose stack shows the collective issued from another line of code
    than its previous ones took the diverging code path; if none or all did, every rank involved is reported.

    ## Why it matters
    This is the evidence logs cannot give: gloo aborts or hangs without saying which call differed, and
    NCCL may hang or silently reduce garbage (a float32 vs int32 all-reduce of the same byte count "works").

    ## Example
    `all_reduce #4 of default_pg: rank 0 in=[[768]] Float, rank 1 in=[[1536]] Float` — a size mismatch.
    """

    id = "FR01"
    name = "fr-collectives-disagree"
    category = Category.MISMATCHED_COLLECTIVES
    needs = frozenset({"fr_analysis"})
    base_confidence = 0.85
    explains = ("CT01", "CR01", "ST01", "TO01")
    FIXES: ClassVar[dict[str, Fix]] = {
        "same_collectives": Fix(
            "Compare the stacks of the differing entries above and make every rank issue the same "
            "collectives, with the same shapes and dtypes, in the same order."
        ),
        "debug_detail": Fix(
            "Re-run once with `TORCH_DISTRIBUTED_DEBUG=DETAIL` to have every collective's fingerprint "
            "checked before it runs."
        ),
    }

    def evidence(self, t: Tables) -> pl.DataFrame:
        assert self.facts.fr is not None
        return self.facts.fr.mismatches

    def assess(self, t: Tables, ev: pl.DataFrame) -> Finding | None:
        first = ev.row(0, named=True)
        culprits = tuple(sorted(first["culprit_ranks"]))
        g, seq = first["group_key"], first["collective_seq_id"]
        keys = t.fr.compact.filter((pl.col("group_key") == g) & (pl.col("collective_seq_id") == seq))  # type: ignore[union-attr]
        decided = bool(first["decided"])
        moved = {} if decided else changed_call_sites(t, g, seq, list(culprits))
        if moved:
            culprits = tuple(sorted(moved))
            who = (
                f"no majority, but {ranks_text(culprits)} issued it from another line of code than its previous "
                f"collectives ({'; '.join(f'rank {r}: {c}' for r, c in sorted(moved.items()))})"
            )
        else:
            who = (
                f"{ranks_text(culprits)} differ from the majority"
                if decided
                else f"{ranks_text(culprits)} disagree and no majority can say who is wrong"
            )
        more = f"; {first['cascade']} later sequence numbers differ too" if first.get("cascade") else ""
        return self.finding(
            confidence=self.base_confidence + (0.1 if decided else 0.05 if moved else 0.0),
            culprit_ranks=culprits,
            summary=f"Flight recorder: {first['kind']} mismatch at {first['pg_desc'] or 'group'} "
            f"(pg {g}) collective #{seq}: {who} ({first['ranks_by_value']}){more}.",
            explanation="Entries of every rank's dump were aligned on the process group's collective sequence "
            "number; at this one the ranks issued different collectives, so none of them can complete.",
            evidence=entry_evidence(t, keys),
            fixes=self.fixes(),
            dont=("No timeout or NCCL setting fixes a program that issues different collectives on different ranks.",),
            verify=("The next run's dumps (or DETAIL mode) show the same op/size/dtype on every rank at this step.",),
            facts={"group": g, "seq": seq, "kind": first["kind"], "decided": decided, "call_site_changed": moved},
        )
