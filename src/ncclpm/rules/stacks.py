"""SK01 stacks-odd-rank-out."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, ClassVar

import polars as pl

from ncclpm.rules.base import Evidence, Finding, Fix, Rule, ranks_text
from ncclpm.tables import Tables
from ncclpm.tables.schema import Category

if TYPE_CHECKING:  # (the stack tree's module is loaded for a job with stacks: SK01 needs stacks)
    from ncclpm.analysis.stack_tree import StackClass, StackTree

WAITING = {"collective", "backward"}  # a rank here is waiting for its peers
BUSY = {
    "checkpoint": "saving a checkpoint",
    "evaluation": "running evaluation",
    "generation": "generating samples",
    "logging": "logging metrics",
}


class StacksOddRankOut(Rule):
    """Stack dumps of the hung ranks show one rank somewhere else than its peers.

    ## What it detects
    Reads the stack of every rank's main thread (py-spy `dump` text or `--json`, faulthandler output - on its
    own or inside a rank's log -, torch's debug-server `stacks_*.txt`, gdb `thread apply all bt`/`py-bt`),
    merges them into one tree and groups ranks by stack. Ranks waiting in a collective are the victims; a rank
    that is elsewhere is the culprit: inside a DataLoader `__next__` (dataloader_hang), in a different
    collective or the same collective from another call site (mismatched_collectives), in `torch.save` /
    checkpoint / evaluation / generation code (slow_rank_work), or blocked in a CUDA synchronize or NCCL wait.
    A single rank's dump that shows it waiting for its data iterator is read the same way.

    ## Why it matters
    A hang leaves no error line until the timeout fires, and then only on the ranks that waited. The stacks
    say where the odd rank really was, down to the user's file and line - the first thing experienced engineers
    look at, and what decides between a slow rank, a stuck input pipeline and a code path that skipped a
    collective.

    ## Example
    `ranks 0, 1, 3: all_reduce ← train_step (train.py:76); rank 2: torch.save ← save_checkpoint (train.py:53)`.
    """

    id = "SK01"
    name = "stacks-odd-rank-out"
    category = Category.SLOW_RANK_WORK
    needs = frozenset({"stacks"})
    base_confidence = 0.6
    explains = ("CT01",)
    FIXES: ClassVar[dict[str, Fix]] = {
        "dataloader_timeout": Fix(
            "Give the DataLoader a `timeout=` well below the process-group timeout so the stalled read raises on "
            "the rank that owns it; dump the worker processes too (`py-spy dump --pid <pid> --subprocesses`) to see "
            "the read that hangs.",
            when="the odd rank waited for its DataLoader",
        ),
        "fix_read": Fix(
            "Fix the read itself (network storage, a lock shared across workers) or lower `num_workers`.",
            when="the odd rank waited for its DataLoader",
        ),
        "same_collectives": Fix(
            "Make every rank issue the same collectives in the same order: move collectives out of rank-dependent "
            "branches (`if rank == 0: ...`), run evaluation/logging collectives on all ranks.",
            when="the odd rank was in another collective",
        ),
        "debug_detail": Fix(
            "Run once with `TORCH_DISTRIBUTED_DEBUG=DETAIL` to have torch check each collective across ranks.",
            when="the odd rank was in another collective",
        ),
        "move_work": Fix(
            "Move the slow rank-local work out of the synchronised section (async checkpointing with "
            "`torch.distributed.checkpoint.async_save`, evaluation sharded across ranks), or give the process group "
            "a timeout longer than it (`init_process_group(timeout=timedelta(hours=1))`).",
            when="the odd rank was busy elsewhere",
        ),
        "time_step": Fix(
            "Time the step the odd rank was in and compare it with the process-group timeout.",
            when="the odd rank was busy elsewhere",
        ),
        "first_dead": Fix(
            "Find the rank that died or stopped first and fix that: the stuck watchdog is the consequence.",
            when="a watchdog thread is stuck in an NCCL kernel",
        ),
        "keep_monitoring": Fix(
            "Keep the heartbeat monitor on (`TORCH_NCCL_ENABLE_MONITORING=1`, the default) so a stuck watchdog "
            "kills its process instead of hanging the job; newer torch releases also abort such hangs.",
            when="a watchdog thread is stuck in an NCCL kernel",
        ),
    }

    def evidence(self, t: Tables) -> pl.DataFrame:
        stacks = t.extra.get("stacks")
        live = stacks is not None and not (stacks["format"] == "fr").all()
        return stacks if live else pl.DataFrame()  # flight-recorder frames alone are FR01/FR02's evidence

    def assess(self, t: Tables, ev: pl.DataFrame) -> Finding | None:
        tree = self.facts.stack_tree  # built once from the same stacks (the report draws it too)
        if tree is None or tree.source != "live":
            return self._stuck_thread(ev)
        waiting = [c for c in tree.classes if c.activity in WAITING]
        elsewhere = [c for c in tree.classes if c.activity not in WAITING]
        if waiting and elsewhere:
            return self._elsewhere(t, tree, elsewhere, waiting)
        if len(waiting) > 1 and tree.majority is not None:
            return self._mismatch(t, tree)
        if len(tree.classes) == 1 and tree.classes[0].activity == "dataloader":
            return self._alone(t, tree, tree.classes[0])
        return None

    def _fixes(self, category: Category) -> tuple[str, ...]:
        if category == Category.DATALOADER_HANG:
            return self.fixes("dataloader_timeout", "fix_read")
        if category == Category.MISMATCHED_COLLECTIVES:
            return self.fixes("same_collectives", "debug_detail")
        return self.fixes("move_work", "time_step")

    def _category(self, c: StackClass) -> tuple[Category, float, str]:
        if c.activity == "dataloader":
            return Category.DATALOADER_HANG, 0.8, "waiting for its DataLoader"
        if c.activity in BUSY:
            return Category.SLOW_RANK_WORK, 0.75, BUSY[c.activity]
        if c.activity == "cuda_sync":
            return Category.SLOW_RANK_WORK, 0.5, "blocked in a CUDA synchronize (its GPU queue never drained)"
        if c.activity == "nccl_wait":
            return Category.SLOW_RANK_WORK, 0.5, "blocked waiting on an NCCL kernel"
        return Category.SLOW_RANK_WORK, 0.6, "busy in its own code"

    def _boost(self, t: Tables, tree: StackTree, culprits: set[int], waiting: set[int]) -> float:
        bonus = 0.0
        world = self.facts.known_ranks
        if world and tree.n_processes >= len(world):
            bonus += 0.05  # every rank was dumped
        if len(waiting) >= 2 * max(1, len(culprits)):
            bonus += 0.05
        victims = self.facts.victim_ranks
        if victims and waiting and victims <= waiting | (world - culprits) and not victims & culprits:
            bonus += 0.05  # the logs show the waiting ranks timing out, not the odd one
        return bonus

    def _elsewhere(self, t: Tables, tree: StackTree, odd: list[StackClass], waiting: list[StackClass]) -> Finding:
        main = odd[0]
        category, conf, doing = self._category(main)
        culprits = {r for c in odd for r in c.ranks}
        waiters = {r for c in waiting for r in c.ranks}
        who = _who(odd)
        wait_where = "; ".join(f"{_who([c])}: {c.where}" for c in waiting)
        workers = _busy_workers(t, culprits) if category == Category.DATALOADER_HANG else []
        busy = "".join(f" Its DataLoader worker ({w.members[0]}) is in {w.where}." for w in workers[:2])
        return self.finding(
            category=category,
            confidence=conf + self._boost(t, tree, culprits, waiters),
            culprit_ranks=tuple(sorted(culprits)),
            summary=f"Stack dumps: {who} was {doing} ({main.where}) while {_who(waiting)} waited in {_ops(waiting)}.",
            explanation=f"Merged stacks of {tree.n_processes} processes: {tree.summary()}. The ranks in a "
            f"collective are waiting for the odd one; {who} never reached it because it was {doing}.{busy}",
            evidence=_quotes(odd) + _quotes(workers[:1], 1) + _quotes(waiting, 2),
            fixes=self._fixes(category),
            verify=(
                "Dump the stacks again after the fix (`py-spy dump --pid <pid>` on every rank): all ranks "
                f"should be in the same place; today: {wait_where}.",
            ),
            facts={"victim_ranks": sorted(waiters), "stack_classes": tree.summary()},
        )

    def _mismatch(self, t: Tables, tree: StackTree) -> Finding:
        major = tree.majority
        assert major is not None
        odd = list(tree.suspects)
        culprits = {r for c in odd for r in c.ranks}
        same_op = all(c.op == major.op for c in odd)
        how = "the same collective from another call site" if same_op else "a different collective"
        return self.finding(
            category=Category.MISMATCHED_COLLECTIVES,
            confidence=0.75 + self._boost(t, tree, culprits, set(major.ranks)),
            culprit_ranks=tuple(sorted(culprits)),
            summary=f"Stack dumps: {_who(odd)} waited in {how} ({odd[0].where}) while {_who([major])} waited "
            f"in {major.where}.",
            explanation=f"Every rank is inside a collective, but not the same one: {tree.summary()}. Collectives "
            "are matched by order, so ranks that call different ones (or call them from different code paths) "
            "wait for each other forever.",
            evidence=_quotes(odd) + _quotes([major], 2),
            fixes=self._fixes(Category.MISMATCHED_COLLECTIVES),
            facts={"victim_ranks": sorted(major.ranks), "stack_classes": tree.summary()},
        )

    def _stuck_thread(self, ev: pl.DataFrame) -> Finding | None:
        """No main-thread stack, but a thread blocked in an NCCL wait or a CUDA call (a gdb backtrace of the
        watchdog): the GPU runs an NCCL kernel that never finishes, so the watchdog can neither time out nor
        abort. That is what a peer that died or stopped mid-collective looks like from this process."""
        from ncclpm.analysis.stack_tree import describe_dumps

        live = ev.filter(pl.col("format") != "fr")
        described = describe_dumps(live, live["dump"].unique().sort().to_list())
        stuck = [c for _, c in described if c.activity in ("nccl_wait", "cuda_sync")]
        if not stuck:
            return None
        c = stuck[0]
        calls = [f.func for f in reversed(c.frames) if "::" in f.func or f.func.startswith("cuda")]
        chain = " ← ".join(calls[:4])
        return self.finding(
            category=Category.RANK_CRASH,
            confidence=0.45,
            culprit_ranks=(),
            summary=f"Stack dump: a thread {_thread_of(c)} is blocked in {chain[:200] or c.where}: its NCCL kernel "
            "never finishes, which is what a peer that died or stopped mid-collective looks like.",
            explanation="A thread inside a CUDA call waits on the GPU, and the GPU on an NCCL kernel that waits for a "
            "peer; a watchdog stuck there can neither time out nor abort, so the job hangs instead of failing. Look "
            "for the rank that exited or stopped first (its log, torchrun's summary, `dmesg` on its node); a GPU "
            "fault (Xid) looks the same from here.",
            evidence=_quotes([c], 4),
            fixes=self.fixes("first_dead", "keep_monitoring"),
        )

    def _alone(self, t: Tables, tree: StackTree, c: StackClass) -> Finding:
        others = self.facts.victim_ranks - set(c.ranks)
        return self.finding(
            category=Category.DATALOADER_HANG,
            confidence=0.6 + (0.15 if others else 0.0),
            culprit_ranks=c.ranks,
            summary=f"Stack dump: {_who([c])} was waiting for its data iterator ({c.where})"
            + (f" while {ranks_text(sorted(others))} timed out waiting." if others else "."),
            explanation="The main thread is blocked getting the next batch: the input pipeline stopped feeding "
            "this rank, so it stopped issuing collectives. Dumps of the other ranks would show them waiting in a "
            "collective.",
            evidence=_quotes([c]),
            fixes=self._fixes(Category.DATALOADER_HANG),
            facts={"victim_ranks": sorted(others), "stack_classes": tree.summary()},
        )


def _busy_workers(t: Tables, ranks: set[int]) -> list[StackClass]:
    """DataLoader workers of these ranks (dumped with `--subprocesses`) that are inside the user's code (reading
    a sample), not idle waiting for work."""
    stacks = t.extra["stacks"]
    workers = stacks.filter(
        pl.col("parent_pid").is_not_null() & pl.col("main_thread") & pl.col("rank").is_in(sorted(ranks))
    )
    from ncclpm.analysis.stack_tree import describe_dumps

    busy = []
    for dump, c in describe_dumps(workers, workers["dump"].unique().sort().to_list()):
        loop = max((i for i, f in enumerate(c.frames) if f.func.endswith("_worker_loop")), default=None)
        inner = [f for f in c.frames[loop + 1 :] if f.user] if loop is not None else []
        if inner:  # the worker is inside the user's dataset code, not waiting for work
            pid = workers.filter(pl.col("dump") == dump)["pid"][0]
            busy.append(replace(c, members=(f"pid {pid}",), where=inner[-1].label(), quote=inner[-1]))
    return busy


def _thread_of(c: StackClass) -> str:
    if c.ranks or not c.members[0].startswith(c.quote.source if c.quote else "\0"):
        return f"of {_who([c])}"
    return f"in {c.quote.source}" if c.quote else ""


def _who(classes: list[StackClass]) -> str:
    ranks = sorted(r for c in classes for r in c.ranks)
    named = [m for c in classes for m in c.members if not m.startswith("rank ")]
    parts = ([ranks_text(ranks)] if ranks else []) + named[:4]
    return ", ".join(parts) or "a process"


def _ops(classes: list[StackClass]) -> str:
    ops = sorted({c.op or c.where.split(" ← ")[0] for c in classes})
    return " / ".join(ops)


def _quotes(classes: list[StackClass], limit: int = 3) -> tuple[Evidence, ...]:
    out = []
    for c in classes:
        frames = [f for f in (c.quote, *reversed(c.frames)) if f is not None]
        seen = set()
        for f in frames[:limit]:
            if (f.source, f.src_line) in seen:
                continue
            seen.add((f.source, f.src_line))
            out.append(Evidence(f.source, f.src_line, f.text, f.rank))
    return tuple(out)
