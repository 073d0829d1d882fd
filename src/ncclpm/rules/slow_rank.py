"""ST01 rank-busy-outside-collectives."""

from __future__ import annotations

from typing import ClassVar

import polars as pl

from ncclpm.model import said
from ncclpm.rules._busy import busy_text
from ncclpm.rules._timeout import timeout_origin
from ncclpm.rules._victim_view import call_site_text
from ncclpm.rules.base import Finding, Fix, Rule, quotes, ranks_text
from ncclpm.tables import Tables
from ncclpm.tables.kinds import K
from ncclpm.tables.schema import Category, FRCulprit
from ncclpm.util.durations import duration_text

BUSY_KINDS = [K.dataloader_error, K.fd_exhaustion, K.cuda_oom, K.nvml_error, K.crash_signal, K.cuda_error]


class RankBusyOutsideCollectives(Rule):
    """The other ranks waited in a collective that one rank never entered: it was busy elsewhere.

    ## What it detects
    Some ranks time out in a collective (often a barrier: `OpType=ALLREDUCE, NumelIn=1` on NCCL, `barrier` in
    the traceback) while a minority of ranks report no timeout at all - they never enqueued that collective.
    Their last lines say what they were doing (saving a checkpoint, evaluating, generating samples,
    uploading); a monitored barrier (`TORCH_DISTRIBUTED_DEBUG=DETAIL`) or the flight recorder may name them.
    When that rank's own last words are the end of its work (`training done`) and the ranks that waited logged no
    such line, it had left the loop while they were still in it: the ranks ran different numbers of steps (uneven
    shards, a rank-dependent `break`) - read as mismatched collectives, a program bug.

    ## Why it matters
    Rank-0-only work longer than the process-group timeout (default 10 min for NCCL) kills the job although
    nothing is wrong with the network or NCCL. The ranks that time out are the victims.

    ## Example
    Rank 0: `Saving checkpoint to /ckpt/step_1000 ...` then nothing; ranks 1-3: `Watchdog caught collective
    operation timeout: WorkNCCL(SeqNum=6764, OpType=ALLREDUCE, NumelIn=1, ...) ran for 600006 milliseconds`.
    """

    id = "ST01"
    name = "rank-busy-outside-collectives"
    category = Category.SLOW_RANK_WORK
    base_confidence = 0.55
    explains = ("CT01",)
    FIXES: ClassVar[dict[str, Fix]] = {
        "move_work": Fix(
            "Move the slow rank-local work out of the synchronised section: checkpoint with "
            "`torch.distributed.checkpoint.async_save`, shard evaluation/sampling across all ranks, or let "
            "the other ranks continue and synchronise later."
        ),
        "longer_timeout": Fix(
            "If the work must stay, give the process group a timeout longer than it: "
            "`dist.init_process_group(backend, timeout=datetime.timedelta(hours=1))` (or a dedicated "
            "`dist.new_group(timeout=...)` for the barrier around it)."
        ),
        "same_steps": Fix(
            "Give every rank the same number of steps: equal shards (`DistributedSampler(..., drop_last=True)`, "
            "`drop_last=True` on the DataLoader), the `torch.distributed.algorithms.Join` context manager for uneven "
            "inputs, or all-reduce a 'this rank is done' flag each step and leave the loop together.",
            when="the rank the others waited for had already logged the end of its work",
        ),
        "record_dumps": Fix(
            "Set `TORCH_NCCL_TRACE_BUFFER_SIZE=2000` and `TORCH_NCCL_DUMP_ON_TIMEOUT=1` so the next "
            "failure leaves flight-recorder dumps that name the missing rank.",
            unless="fr_dumps",
        ),
    }

    _work: pl.DataFrame  # the silent ranks' rank-local work, worked out by `evidence` and read by `assess`
    _mostly_unseen: bool = False  # most ranks are only unseen, not silent (`evidence`): a lead said less surely

    def _named(self, t: Tables) -> set[int]:
        named = _barrier_named(t.kinds(K.monitored_barrier))
        fa = self.facts.fr
        if fa is not None and fa.culprit_kind == FRCulprit.NEVER_JOINED:
            named |= set(fa.culprit_ranks)
        return named | self.facts.lagging  # desync report, or its own status: finished the one before, never joined

    def evidence(self, t: Tables) -> pl.DataFrame:
        victims = self.facts.victim_ranks
        if not victims:  # (a rank that died or went away explains why the others waited: CR01, CR03 silence it)
            return pl.DataFrame()
        named = self._named(t)
        busy = set(t.kinds(*BUSY_KINDS)["rank"].drop_nulls().to_list())
        known = self.facts.known_ranks
        silent = (known - (victims - self.facts.late_timeouts) - busy) | (named - busy)
        fa = self.facts.fr
        if fa is not None and fa.culprit_ranks:
            silent &= set(fa.culprit_ranks)  # the dumps say who never joined; other quiet ranks were just killed
        seen = set(t.ranks["rank"].to_list())
        unseen = silent - seen - named
        # A paste that shows only waiting ranks: whoever they waited for is not in it. Several absent ranks (or
        # one absent rank next to a single waiting one) are a cut excerpt, not silence - a lead only when the
        # others waited a full timeout at a barrier.
        # A paste that ends inside a timeout line goes on past the copy: its absent ranks may be in the rest.
        cut_excerpt = unseen == silent and (len(unseen) > 1 or len(victims) < 2 or not silent or self.facts.cut_at_end)
        # ...or when the one rank it can be shows rank-local work (an unranked tokenizer bar in a one-rank paste)
        self._work = self.facts.work_of(sorted(silent), attribute_unranked=True)  # assess reads it again
        worked = not self._work.is_empty()
        if cut_excerpt and (not (self.facts.waiting_in_barrier or worked) or (t.world_size_declared and not silent)):
            return pl.DataFrame()
        if not silent and not (len(seen) == 1 and seen <= victims):
            return pl.DataFrame()  # nobody unaccounted for, unless the logs are one waiting rank's excerpt
        # Most ranks silent is no minority keeping the rest waiting - counted among the ranks the logs show when one
        # of them is seen at rank-local work and the world size is only worked out from the highest rank seen (the
        # first lines of pods 0, 1 and 2 of a 24-rank job: ranks 0 and 8 timed out, rank 16 saving a checkpoint)
        at_work = set(self._work["rank"].to_list()) & seen if worked else set()
        among = seen if at_work and not t.world_size_declared else known
        if len(silent & among) > len(among) / 2 and not named and not cut_excerpt:
            return pl.DataFrame()
        # ...and then said less surely: the unseen ranks' logs may tell another story
        self._mostly_unseen = among is seen and len(silent) > len(known) / 2 and not named and not cut_excerpt
        if not silent:
            return pl.DataFrame({"rank": [None]}, schema={"rank": pl.Int32()}).with_columns(
                pl.lit(True).alias("unseen"), pl.lit(True).alias("cut_excerpt")
            )
        frame = pl.DataFrame({"rank": sorted(silent)}, schema={"rank": pl.Int32()})
        return frame.join(t.ranks, on="rank", how="left").with_columns(
            pl.col("rank").is_in(sorted(unseen)).alias("unseen"), pl.lit(cut_excerpt).alias("cut_excerpt")
        )

    def assess(self, t: Tables, ev: pl.DataFrame) -> Finding | None:
        silent = sorted(ev["rank"].drop_nulls().to_list())
        named = self._named(t)
        cut_excerpt = bool(ev["cut_excerpt"][0])
        act = self._work
        timeout_ms = self.facts.timeout.ranked_ms
        conf = self.base_confidence - (0.15 if cut_excerpt else 0.0) - (0.05 if ev["unseen"].all() else 0.0)
        conf -= 0.1 if self._mostly_unseen else 0.0
        if not act.is_empty():
            conf += 0.15 if act["attributed"].all() else 0.25
            bar = act["bar_ms"].drop_nulls()
            if bar.len() and timeout_ms and bar.max() >= 0.8 * timeout_ms:  # type: ignore[operator]
                conf += 0.1  # the work had been running about one timeout when the others gave up
        if named & set(silent):
            conf += 0.1
        in_barrier = self.facts.waiting_in_barrier
        if in_barrier:
            conf += 0.05
        if cut_excerpt and act.is_empty():
            culprits: tuple[int, ...] = ()
        else:
            # the ranks a line shows at work, else the ones named as never entering, else every silent one
            shown = set(act["rank"].to_list()) if not act.is_empty() else (named & set(silent)) or set(silent)
            culprits = tuple(sorted(shown | (named & set(silent))))
        doing = busy_text(act)
        victims = sorted(self.facts.victim_ranks - set(culprits))
        if not victims:  # the only rank that waited is the one named busy: no story of one rank keeping others
            return None
        done = self._done_first(t, silent, victims) if act.is_empty() else None
        if done is not None:
            return self._left_early(t, done, victims, conf, timeout_ms)
        site = call_site_text(self.facts, victims)  # torch 2.5+ printed where the collective was issued
        wait = f"in {site}" if site else "at a barrier" if in_barrier else "in a collective"
        origin = timeout_origin(self.facts.timeout, int(timeout_ms) if timeout_ms else None)
        origin = f", {origin}" if origin else ""
        limit = f" (timeout {duration_text(timeout_ms)}{origin})" if timeout_ms else ""
        who = (
            ranks_text(culprits).capitalize()
            if culprits
            else f"{'One of ' + ranks_text(silent) if len(silent) > 1 else ranks_text(silent).capitalize()} "
            "(absent from these logs)"
            if silent
            else "A rank absent from these logs"
        )
        verb = "was" if len(culprits) <= 1 else "were"
        subject = culprits or silent
        explanation = f"{ranks_text(subject).capitalize()} reported no timeout: " + (
            "they do not appear in these logs at all, and the others waited a full timeout at a barrier - the "
            "classic sign of one rank busy with rank-local work (checkpoint, evaluation, data preparation). Their "
            "own logs decide which rank and what it did."
            if cut_excerpt and act.is_empty()
            else f"{'it' if len(subject) == 1 else 'they'} never entered the collective the others were waiting in. "
            + (
                "Its last line shows what it was doing."
                if not act.is_empty() and not act["attributed"].all()
                else "The console's unprefixed progress line (most scripts print only on the main process) shows "
                "what it was doing."
                if not act.is_empty()
                else "No line says what it was doing: a long rank-local step, a stalled DataLoader or a "
                "host-side hang are all possible; a `py-spy dump` of that rank tells which."
            )
        )
        idle = self.facts.idle_at_timeout.filter(pl.col("rank").is_in(silent))
        if not idle.is_empty():
            last = int(idle["last_enqueued"].max())  # type: ignore[arg-type]
            explanation += (
                f" {ranks_text(sorted(set(idle['rank'].to_list()))).capitalize()}'s own watchdog status, printed "
                f"when the others timed out, shows every collective it had issued complete, the last #{last}: it "
                "had not reached the one they waited in."
            )
        return self.finding(
            confidence=conf,
            culprit_ranks=culprits,
            summary=f"{who} {verb} busy outside collectives{doing} while "
            f"{ranks_text(victims)} waited {wait} and timed out{limit}.",
            explanation=explanation,
            evidence=quotes(act) + quotes(idle, 2) + quotes(self.facts.victim_lines, 3),
            fixes=self.fixes("move_work", "longer_timeout", "record_dumps"),
            dont=(
                "`NCCL_TIMEOUT` is read by nothing; the timeout is the `timeout=` of `init_process_group`.",
                "`NCCL_P2P_DISABLE=1` / `NCCL_IB_DISABLE=1` do not help: the network is idle, not broken.",
                "`NCCL_BLOCKING_WAIT` / `NCCL_ASYNC_ERROR_HANDLING` are deprecated torch aliases and do not "
                "change how long a rank may be busy.",
            ),
            verify=(
                "Time the rank-local step (checkpoint/eval/sampling) and compare it with the timeout; after the "
                "fix the other ranks no longer report a timeout at that step.",
            ),
            facts={"victim_ranks": victims, "waiting_in_barrier": in_barrier, "candidate_ranks": silent},
        )

    def _done_first(self, t: Tables, silent: list[int], victims: list[int]) -> pl.DataFrame | None:
        """The silent ranks' own `training done` lines when the ranks that waited logged no end of work: they had
        left the loop while the others were still in it (None otherwise)."""
        done = t.kinds(K.job_done)
        if done.is_empty() or not done.filter(pl.col("rank").is_in(victims)).is_empty():
            return None
        mine = done.filter(pl.col("rank").is_in(silent))
        return mine.sort("rank", "line").group_by("rank", maintain_order=True).first() if not mine.is_empty() else None

    def _left_early(
        self, t: Tables, done: pl.DataFrame, victims: list[int], conf: float, timeout_ms: float | None
    ) -> Finding:
        """The rank the others waited for had finished its work: it ran fewer steps (uneven data), a collective the
        others issued had no partner - a program bug, not slow work."""
        culprits = tuple(sorted(done["rank"].to_list()))
        origin = timeout_origin(self.facts.timeout, int(timeout_ms) if timeout_ms else None)
        limit = f" (timeout {duration_text(timeout_ms)}{f', {origin}' if origin else ''})" if timeout_ms else ""
        site = call_site_text(self.facts, victims)
        wait = f"in {site}" if site else "in a collective"
        first = done.row(0, named=True)
        its = "its" if len(culprits) == 1 else "their"
        words = said(first["text"], t.line_prefix)
        return self.finding(
            category=Category.MISMATCHED_COLLECTIVES,
            confidence=conf + 0.15,  # its own line says it had finished: not a guess at what it was doing
            culprit_ranks=culprits,
            summary=f"{ranks_text(culprits).capitalize()} had already finished {its} work (`{words}`) while "
            f"{ranks_text(victims)} still waited {wait} and timed out{limit}: the ranks ran different numbers of "
            "steps.",
            explanation=f"{ranks_text(culprits).capitalize()} logged the end of {its} work and never entered the "
            "collective the others were waiting in; they had not finished. A rank that leaves the loop first - fewer "
            "batches in its shard, a rank-dependent `break`, a step count computed per rank - leaves the others' "
            "next collective without a partner: every rank must issue the same collectives.",
            evidence=quotes(done) + quotes(self.facts.victim_lines, 3),
            fixes=self.fixes("same_steps", "record_dumps"),
            dont=("Raising the timeout only makes the others wait longer for a rank that has stopped training.",),
            verify=("Every rank logs the same number of steps; the job passes the step where the others waited.",),
            facts={"victim_ranks": victims, "finished_ranks": list(culprits)},
        )


def _barrier_named(barrier: pl.DataFrame) -> set[int]:
    """The ranks a monitored barrier names as never arrived: the root names one (`subject_rank`) or, with
    wait_all_ranks=True, a list (`detail`: "1, 3"). The root's list beats another rank's "no answer from rank 0",
    which is also what that rank sees when the root raised after naming someone else."""
    if barrier.is_empty():  # (most jobs: no query)
        return set()
    listed = pl.col("detail").str.split(", ").cast(pl.List(pl.Int64), strict=False)
    one = pl.concat_list("subject_rank")
    barrier = barrier.with_columns(
        pl.when(pl.col("subject_rank").is_null()).then(listed).otherwise(one).alias("_named")
    ).filter(pl.col("_named").list.len() > 0)
    strength = pl.col("strength").fill_null(0.0)
    return set(barrier.filter(strength == strength.max())["_named"].explode().drop_nulls().to_list())
