"""WT01 rank-awaited-through-store."""

from __future__ import annotations

from typing import ClassVar

import polars as pl

from ncclpm.model import said
from ncclpm.rules._busy import busy_text, last_line_evidence
from ncclpm.rules.base import Finding, Fix, Rule, quotes, ranks_text
from ncclpm.tables import Tables
from ncclpm.tables.kinds import K
from ncclpm.tables.schema import Category


class RankAwaitedThroughStore(Rule):
    """Ranks timed out waiting in the c10d store for something another rank had not published yet: that rank was
    still busy elsewhere.

    ## What it detects
    `[7] is setting up NCCL communicator and retrieving ncclUniqueId from [0] via c10d key-value store by key
    '0', but store->get('0') got error: Socket Timeout` (torch ≤ 2.0 spells it `retreiving`), a `Socket
    Timeout` / `wait timeout` raised inside a DataLoader (its shared-seed exchange waits for rank 0), store
    timeouts after the job had already made progress, torchrun's agent giving up at its exit barrier (`Error
    waiting on exit barrier`: its workers had finished, another node's were still running), and gloo's address
    exchange in `init_process_group` (`wait timeout after 15000ms, keys: /default_pg/0//cpu//0/1`: the key's last
    number is the rank that never wrote its address) when that rank's own lines show it had started.

    ## Why it matters
    The store answered - the process group had formed - so this is not a rendezvous failure. NCCL creates a
    communicator at the group's first collective: the waiting rank got there, the rank it waits for did not
    (it was tokenising a dataset, loading data over the network, evaluating - or it died). The timeout is the
    symptom; the slow rank-local work is the cause.

    ## Example
    `setting up NCCL communicator and retreiving ncclUniqueId from [0] via c10d key-value store by key '0',
    but store->get('0') got error: Socket Timeout` while rank 0 runs `dataset.map(..., desc="Running tokenizer
    on dataset")`.
    """

    id = "WT01"
    name = "rank-awaited-through-store"
    category = Category.SLOW_RANK_WORK
    base_confidence = 0.6
    explains = ("CT01", "CR01")
    FIXES: ClassVar[dict[str, Fix]] = {
        "move_work": Fix(
            "Move the slow rank-local step before the process group is used, or run it once offline and cache "
            "it (pre-tokenise; `datasets` cache files)."
        ),
        "raise_timeout": Fix(
            "Or raise the timeout that applies: `init_process_group(timeout=timedelta(hours=2))`, Trainer's "
            "`ddp_timeout`, accelerate's `InitProcessGroupKwargs(timeout=...)`, DeepSpeed's `timeout`."
        ),
        "finish_together": Fix(
            "Let every rank finish together: end the script with `dist.barrier()` after the last rank-local step "
            "(the final checkpoint save, an evaluation), then `dist.destroy_process_group()`; torchrun's agents "
            "wait only 300 s for each other at the exit barrier, and an agent that gives up takes the "
            "rendezvous store with it.",
            when="only torchrun's exit barrier timed out",
        ),
    }

    def evidence(self, t: Tables) -> pl.DataFrame:
        return self.facts.store_waits

    def assess(self, t: Tables, ev: pl.DataFrame) -> Finding | None:
        if set(ev["how"].to_list()) == {"exit_barrier"}:
            return self._exit_barrier(t, ev)
        awaited = sorted(set(ev["awaited"].drop_nulls().to_list()))
        waiting = sorted(set(ev["rank"].drop_nulls().to_list()) - set(awaited))
        busy = self.facts.work_of(awaited, attribute_unranked=True)
        conf = self.base_confidence + (0.05 if awaited else -0.1) + (0.1 if not busy.is_empty() else 0.0)
        hows = set(ev["how"].to_list())
        who = ranks_text(awaited) if awaited else "another rank"
        what = (
            f"the NCCL unique id that {who} publishes when it reaches its first collective"
            if "nccl_id" in hows
            else f"the address that {who} publishes when it reaches `init_process_group` (gloo's connection set-up)"
            if "peer_address" in hows
            else f"the DataLoader shared seed that {who} publishes when it starts iterating"
            if "dataloader_seed" in hows
            else f"a key that {who} had not written yet"
        )
        doing = busy_text(busy)
        # no work recognised: the awaited rank's own last line says where it was (it had started: it logged)
        last = self.facts.last_lines.filter(pl.col("rank").is_in(awaited) & pl.col("last_line").is_not_null())
        shown_last = busy.is_empty() and len(awaited) == 1 and not last.is_empty()
        if shown_last:
            doing = f" (its last line: `{said(last['last_line'][0], t.line_prefix)}`)"
        waiters = f"{ranks_text(waiting).capitalize()} waited" if waiting else "Ranks waited"
        return self.finding(
            confidence=conf,
            culprit_ranks=tuple(awaited),
            summary=f"{waiters} in the c10d store for {what}; {who} never got there in time: it was still busy "
            f"elsewhere{doing}.",
            explanation="The store itself answered, so the process group had formed: this is the waiting side of a "
            f"rank that had not reached the same point yet. {who.capitalize()} was doing rank-local work (typically "
            "dataset tokenisation or loading on the main process) or had died; its own log decides which.",
            evidence=quotes(busy, 2)
            + (last_line_evidence(last.row(0, named=True)) if shown_last else ())
            + quotes(ev, 4),
            fixes=self.fixes("move_work", "raise_timeout"),
            dont=(
                "Do not debug the network or the store address: the store answered.",
                "`NCCL_TIMEOUT` is read by nothing; the store's wait uses the process group's timeout.",
            ),
            verify=(f"{who.capitalize()}'s log shows what it was doing at that time; it is not an error of its own.",),
            facts={"victim_ranks": waiting},
        )

    def _exit_barrier(self, t: Tables, ev: pl.DataFrame) -> Finding:
        """Only torchrun's exit barrier timed out: this node's workers were done, another node's were not."""
        waited = t.kinds(K.exit_barrier)["count"].drop_nulls().max()
        after = f" {waited} s" if waited is not None else ""
        return self.finding(
            confidence=self.base_confidence - 0.1,  # who was still running, and why, is in another node's log
            culprit_ranks=(),
            summary=f"This node's workers had finished; its torchrun agent waited{after} at the exit barrier for "
            "the other nodes' agents and gave up: ranks on another node were still running (a final checkpoint "
            "save or an evaluation on one rank, most often) or were stuck.",
            explanation="torchrun's agent waits, once its own workers have exited, for every other node's agent at "
            "an exit barrier in the rendezvous store. Its timeout means the group had formed and the job had run: "
            "another node's workers had not finished 300 s after these. When the agent hosting the rendezvous "
            "store gives up and exits, the other agents then lose the store and stop their workers.",
            evidence=quotes(t.kinds(K.exit_barrier).filter(pl.col("count").is_not_null()), 1) + quotes(ev, 3),
            fixes=self.fixes("finish_together"),
            dont=("Do not debug MASTER_ADDR or the rendezvous: it had formed and the job ran.",),
            verify=(
                "The other nodes' logs show their ranks still working (or stuck) more than 300 s after this "
                "node's workers finished.",
            ),
        )
