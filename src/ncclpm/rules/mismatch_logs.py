"""MC01 collectives-disagree-in-logs."""

from __future__ import annotations

from typing import ClassVar

import polars as pl

from ncclpm.rules._votes import minority, odd_by_work
from ncclpm.rules._why import collective
from ncclpm.rules.base import Finding, Fix, Rule, quotes, ranks_text
from ncclpm.tables import Tables
from ncclpm.tables.kinds import K
from ncclpm.tables.schema import Category


def _calls(votes: pl.DataFrame) -> str:
    """`rank 1 ran ALLREDUCE #104 (shape [1024], Float) while rank 0 ran BROADCAST #104 (shape [1], Long)`."""
    said = []
    for fp, ranks in votes.group_by("fp", maintain_order=True).agg("rank").iter_rows():
        shape = ", ".join(x for x in (f"shape {fp['shape']}" if fp["shape"] else "", fp["dtype"] or "") if x)
        said.append(f"{ranks_text(sorted(ranks))} ran {fp['op']} #{fp['seq']}{f' ({shape})' if shape else ''}")
    return " while ".join(said)


class CollectivesDisagreeInLogs(Rule):
    """Ranks issued different collectives (op, size, dtype or sequence) - seen in the logs.

    ## What it detects
    `Detected mismatch between collectives on ranks` (TORCH_DISTRIBUTED_DEBUG=DETAIL), gloo's `Received data
    size doesn't match expected size`, or watchdog timeouts of the same process group that name different
    `SeqNum` / `OpType` / `NumelIn` on different ranks (a rank behind or ahead in the sequence); NCCL's `message
    truncated` (likely only: NCCL says differing NCCL_PROTO/NCCL_ALGO looks the same). The odd rank is the one
    in the minority; on a tie, the one whose call came from rank-local work (a checkpoint save, evaluation).

    ## Why it matters
    Collectives are matched by order. When one rank skips a collective, issues an extra one, or calls it with
    another size or dtype, the ranks wait for each other forever (or exchange garbage). Raising the timeout or
    changing NCCL settings cannot fix a program bug.

    ## Example
    `Rank 0 is running collective: CollectiveFingerPrint(SequenceNumber=3, OpType=ALLREDUCE,
    TensorShape=[768], ...), but Rank 1 is running collective: ...TensorShape=[1536]...`
    """

    id = "MC01"
    name = "collectives-disagree-in-logs"
    fires_on = frozenset({K.mismatch_detected, K.collective_timeout})  # (`facts.timeouts` are collective timeouts)
    category = Category.MISMATCHED_COLLECTIVES
    base_confidence = 0.8
    explains = ("CT01", "CR01")
    FIXES: ClassVar[dict[str, Fix]] = {
        "same_collectives": Fix(
            "Find the rank-dependent code path at that step (a collective under `if rank == 0`, an early "
            "`continue`/`break`, an uneven last batch, DDP with unused parameters) and make every rank "
            "issue the same collectives with the same shapes and dtypes."
        ),
        "debug_detail": Fix(
            "Run once with `TORCH_DISTRIBUTED_DEBUG=DETAIL` (checks every collective's fingerprint) and "
            "`TORCH_NCCL_TRACE_BUFFER_SIZE=2000` (flight-recorder dumps) to get the exact call site."
        ),
    }

    def evidence(self, t: Tables) -> pl.DataFrame:
        detected = t.kinds(K.mismatch_detected)
        # One timeout per rank and group, its last: a rank that reports two different collectives was restarted,
        # or the paste mixes runs - that is not two ranks disagreeing.
        to = (
            # a line that lost its op (cut by the end of a paste) cannot disagree with anyone
            self.facts.timeouts.filter(pl.col("seq").is_not_null() & pl.col("op").is_not_null())
            .with_columns(pl.col("pg").fill_null("?").alias("_pg"))
            .sort("ts", "source", "line", nulls_last=False)
            .group_by("rank", "_pg", maintain_order=True)
            .last()
        )
        disagree = to.filter(pl.struct("seq", "op", "numel_in").n_unique().over("_pg") > 1).select(detected.columns)
        return pl.concat([detected, disagree]).sort("ts", "source", "line", nulls_last=True)

    def _culprits(self, t: Tables, ev: pl.DataFrame) -> tuple[tuple[int, ...], str]:
        # A coordinator's stall report lists the ranks that did not submit what the others wait in (Horovod).
        missing = t.kinds(K.stall_missing_rank)
        if not missing.is_empty() and (ev["kind"] == K.mismatch_detected).any():
            ranks = tuple(sorted(set(missing["subject_rank"].drop_nulls().to_list())))
            what = missing["detail"].drop_nulls()
            shown = f" (`{what[0][:80]}`)" if what.len() else ""
            return ranks, f"the stall report lists them as not having submitted the tensors the others wait on{shown}"
        # DETAIL mode's line: "Rank <subject_rank> is running collective: CollectiveFingerPrint(<its own call>), but
        # Rank <peer> is running collective: CollectiveFingerPrint(<the peer's call>)": a vote for each of the two.
        fps = ev.filter((pl.col("kind") == K.mismatch_detected) & pl.col("subject_rank").is_not_null())
        own = pl.struct("seq", "op", "shape", "dtype").alias("fp")
        peers = fps.filter(pl.col("peer_op").is_not_null()).select(
            pl.col("peer").cast(pl.Int32, strict=False).alias("rank"),
            pl.struct(seq="peer_seq", op="peer_op", shape="peer_shape", dtype="peer_dtype").alias("fp"),
        )
        votes = pl.concat([fps.select(pl.col("subject_rank").cast(pl.Int32).alias("rank"), own), peers])
        votes = votes.drop_nulls("rank").unique().sort("rank")
        if votes["rank"].n_unique() > 1:  # a vote needs two voters; one rank's own call alone names nobody
            aspects = ev["detail"].drop_nulls()
            how = aspects[0] if aspects.len() else _calls(votes)
            culprits = minority(votes, "fp")
            if set(culprits) == set(votes["rank"].to_list()):
                return odd_by_work(t, fps, culprits, how)
            return culprits, how
        to = ev.filter(pl.col("kind") == K.collective_timeout)
        if not to.is_empty():
            numel = pl.format(" numel {}", "numel_in").fill_null("")  # older wordings print no size
            call = pl.concat_str(pl.format("{} #{}", "op", "seq"), numel)
            votes = to.select("rank", call.alias("call")).unique().sort("rank", "call")
            by_call = votes.group_by("call").agg(pl.col("rank").sort()).sort(pl.col("rank").list.len(), "call")
            return minority(votes, "call"), " while ".join(
                f"{ranks_text(r)} timed out in {c}" for c, r in by_call.iter_rows()
            )
        # gloo's size check names no peer: the aborting rank and the ranks that lost it are all involved.
        ranks = tuple(sorted(set(ev["rank"].drop_nulls().to_list()) | self.facts.victim_ranks))
        if len(ranks) < 2:  # one rank's view: it cannot say which side called the collective differently
            return (), "the logs do not show which rank called it differently"
        return ranks, "the byte counts of one collective differ across ranks"

    def assess(self, t: Tables, ev: pl.DataFrame) -> Finding | None:
        culprits, how = self._culprits(t, ev)
        involved = sorted(set(ev["rank"].drop_nulls().to_list()) | set(culprits))
        stalled = not t.kinds(K.stall_missing_rank).is_empty()  # a stall report names the ranks that did not submit
        tie = set(culprits) == set(involved) and len(involved) > 1 and not stalled
        detected = (ev["kind"] == K.mismatch_detected).any()
        # A tie names no culprit: evidence that can (the flight recorder's call sites) should win over it.
        conf = self.base_confidence + (0.0 if not detected else 0.05 if tie else 0.15)
        caps = ev.filter(pl.col("kind") == K.mismatch_detected)["strength"]
        if caps.len() and caps.null_count() == 0:  # only readings that cannot tell a size bug from a setting
            conf = min(conf, caps.max())
        who = (
            f"{ranks_text(involved)} disagree (a tie: the logs cannot say which side is wrong)"
            if tie
            else f"{ranks_text(culprits)} did not submit the collective the others waited in"
            if culprits and stalled
            else f"{ranks_text(culprits)} issued a different collective than the others"
            if culprits
            else "one collective's byte counts differ across ranks"
        )
        return self.finding(
            confidence=conf,
            culprit_ranks=culprits,
            summary=f"Mismatched collectives: {who}; {how}.",
            explanation="Collectives are matched by call order on every rank of a group; a rank that skips, adds "
            "or reshapes one leaves the others waiting (or reduces garbage).",
            evidence=quotes(ev),
            fixes=self.fixes(),
            dont=("Raising the timeout or setting NCCL_P2P_DISABLE / NCCL_IB_DISABLE cannot fix a program bug.",),
            verify=("`TORCH_DISTRIBUTED_DEBUG=DETAIL` passes the step without a 'Detected mismatch' error.",),
            facts={"involved_ranks": involved},
        )

    def why_not(self, t: Tables, winner: Finding, mine: Finding | None) -> str | None:
        same = collective(self.facts) if mine is None and winner.category != Category.MISMATCHED_COLLECTIVES else ""
        return f"every rank that timed out was in the same collective, {same}" if same else None
