"""ST01 rank-busy-outside-collectives."""

from __future__ import annotations

from datetime import timedelta

import polars as pl

from ncclpm.ingest.tables import Tables
from ncclpm.kinds import K
from ncclpm.rules._facts import known_ranks, late_timeouts, timeouts, victim_lines, victim_ranks
from ncclpm.rules.base import Finding, Rule, quotes, ranks_text
from ncclpm.rules.rank_crash import crashed_ranks
from ncclpm.schema import Category

BUSY_KINDS = [K.dataloader_error, K.fd_exhaustion, K.cuda_oom, K.nvml_error, K.crash_signal, K.cuda_error]


class RankBusyOutsideCollectives(Rule):
    """The other ranks waited in a collective that one rank never entered: it was busy elsewhere.

    ## What it detects
    Some ranks time out in a collective (often a barrier: `OpType=ALLREDUCE, NumelIn=1` on NCCL, `barrier` in
    the traceback) while a minority of ranks report no timeout at all - they never enqueued that collective.
    Their last lines say what they were doing (saving a checkpoint, evaluating, generating samples,
    uploading); a monitored barrier (`TORCH_DISTRIBUTED_DEBUG=DETAIL`) or the flight recorder may name them.

    ## Why it matters
    Rank-0-only work longer than the process-group timeout (default 10 min for NCCL) kills the job although
    nothing is wrong with the network or NCCL. The ranks that time out are the victims.

    ## Example
    Rank 0: `Saving checkpoint to /ckpt/step_1000 ...` then nothing; ranks 1-3: `Watchdog caught collective
    operation timeout: WorkNCCL(SeqNum=6764, OpType=ALLREDUCE, NumelIn=1, ...) ran for 600006 milliseconds`.

    ## How to fix
    Do the slow work on every rank or outside the synchronised section (async checkpointing with
    `torch.distributed.checkpoint.async_save`, evaluation sharded across ranks), or give the process group a
    timeout longer than the work (`init_process_group(timeout=timedelta(hours=1))`, or a separate group with a
    long timeout just for the barrier around the slow step).
    """

    id = "ST01"
    name = "rank-busy-outside-collectives"
    category = Category.SLOW_RANK_WORK
    base_confidence = 0.55
    priority = 60
    explains = ("CT01",)

    def _named(self, t: Tables) -> set[int]:
        named = set(t.kinds(K.monitored_barrier)["subject_rank"].drop_nulls().to_list())
        fa = t.fr_analysis
        if fa is not None and fa.culprit_kind == "never_joined":
            named |= set(fa.culprit_ranks)
        return named

    def evidence(self, t: Tables) -> pl.DataFrame:
        victims = victim_ranks(t)
        named = self._named(t)
        if not victims:
            return pl.DataFrame()
        crashed = crashed_ranks(t)
        if crashed:
            return pl.DataFrame()  # a rank that died explains why the others waited; silence proves nothing
        busy = set(t.kinds(*BUSY_KINDS)["rank"].drop_nulls().to_list())
        late = late_timeouts(t)
        silent = (known_ranks(t) - (victims - late) - busy) | (named - busy)
        fa = t.fr_analysis
        if fa is not None and fa.culprit_ranks:
            silent &= set(fa.culprit_ranks)  # the dumps say who never joined; other quiet ranks were just killed
        if not silent or (len(silent) > len(known_ranks(t)) / 2 and not named):
            return pl.DataFrame()
        return t.ranks.filter(pl.col("rank").is_in(sorted(silent)))

    def _activity(self, t: Tables, ranks: list[int]) -> pl.DataFrame:
        act = t.kinds(K.activity).filter(pl.col("rank").is_in(ranks))
        if act.is_empty():
            return act
        # Only work that started before the others gave up counts (it is what they were waiting for).
        first = timeouts(t)["ts"].drop_nulls().min() or victim_lines(t)["ts"].drop_nulls().min()
        if first is not None:
            act = act.filter(pl.col("ts").is_null() | (pl.col("ts") <= first))
        # The work that kept a rank away started after its last progress line: quote where it started
        # ("Saving checkpoint ..."), not where it ended ("Checkpoint saved in 270 s").
        progress = (
            t.kinds(K.progress)
            .filter(pl.col("rank").is_in(ranks))
            .group_by("rank", "source")
            .agg(pl.col("line").max().alias("_last_progress"))
        )
        act = act.join(progress, on=["rank", "source"], how="left").sort("source", "line")
        after = act.filter(pl.col("_last_progress").is_null() | (pl.col("line") > pl.col("_last_progress")))
        started = after.group_by("rank", maintain_order=True).first()
        rest = act.join(started.select("rank"), on="rank", how="anti").group_by("rank", maintain_order=True).last()
        return pl.concat([started, rest]).drop("_last_progress").sort("rank")

    def assess(self, t: Tables, ev: pl.DataFrame) -> Finding | None:
        silent = sorted(ev["rank"].to_list())
        named = self._named(t)
        act = self._activity(t, silent)
        conf = self.base_confidence
        if not act.is_empty():
            conf += 0.25
        if named & set(silent):
            conf += 0.1
        to = timeouts(t)
        barrier = to.filter(((pl.col("op") == "ALLREDUCE") & (pl.col("numel_in") == 1)) | (pl.col("op") == "BARRIER"))
        in_barrier = (
            not barrier.is_empty()
            or t.tracebacks.filter(
                pl.col("frames").list.eval(pl.element().str.starts_with("barrier")).list.any()
            ).height
            > 0
        )
        if in_barrier:
            conf += 0.05
        busy = set(act["rank"].to_list()) if not act.is_empty() else set(silent)
        culprits = tuple(sorted(busy | (named & set(silent))))
        doing = f" ({act['detail'][0]})" if not act.is_empty() and act["detail"][0] else ""
        wait = "at a barrier" if in_barrier else "in a collective"
        victims = sorted(victim_ranks(t) - set(culprits))
        timeout_ms = to["timeout_ms"].drop_nulls().max() if not to.is_empty() else None
        limit = f" (timeout {timedelta(milliseconds=int(timeout_ms))})" if timeout_ms else ""
        return self.finding(
            confidence=conf,
            culprit_ranks=culprits,
            summary=f"{ranks_text(culprits).capitalize()} was busy outside collectives{doing} while "
            f"{ranks_text(victims)} waited {wait} and timed out{limit}.",
            explanation=(
                f"{ranks_text(culprits).capitalize()} reported no timeout: it never entered the collective "
                "the others were waiting in. "
                + (
                    "Its last line shows what it was doing."
                    if not act.is_empty()
                    else "No line says what it was doing: a long rank-local step, a stalled DataLoader or a "
                    "host-side hang are all possible; a `py-spy dump` of that rank tells which."
                )
            ),
            evidence=quotes(act) + quotes(victim_lines(t), 3),
            fixes=(
                "Move the slow rank-local work out of the synchronised section: checkpoint with "
                "`torch.distributed.checkpoint.async_save`, shard evaluation/sampling across all ranks, or let "
                "the other ranks continue and synchronise later.",
                "If the work must stay, give the process group a timeout longer than it: "
                "`dist.init_process_group(backend, timeout=datetime.timedelta(hours=1))` (or a dedicated "
                "`dist.new_group(timeout=...)` for the barrier around it).",
                "Set `TORCH_NCCL_TRACE_BUFFER_SIZE=2000` and `TORCH_NCCL_DUMP_ON_TIMEOUT=1` so the next "
                "failure leaves flight-recorder dumps that name the missing rank.",
            ),
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
            facts={"victim_ranks": victims, "waiting_in_barrier": in_barrier},
        )
