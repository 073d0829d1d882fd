"""EX01 job-killed-from-outside."""

from __future__ import annotations

from typing import ClassVar

import polars as pl

from ncclpm.rules.base import Finding, Fix, Rule, quotes
from ncclpm.tables import Tables
from ncclpm.tables.kinds import K
from ncclpm.tables.schema import Category
from ncclpm.util.frames import ordered

SIGNAL_NAMES = {"15": "SIGTERM (15)", "2": "SIGINT (2)", "9": "SIGKILL (9)", "1": "SIGHUP (1)"}
# A rank's own failure before the kill would explain it (the agent is then torn down as a consequence).
OWN_FAILURES = [
    K.exception,
    K.dataloader_reraise,
    K.crash_signal,
    K.cuda_oom,
    K.cuda_error,
    K.nccl_error,
    K.network_error,
    K.dataloader_error,
    K.collective_timeout,
]


class JobKilledFromOutside(Rule):
    """The launcher itself was killed from outside while no rank had failed: host memory, the scheduler or a
    person ended the job.

    ## What it detects
    torchrun's agent reporting `Received Signals.SIGTERM death signal, shutting down workers` (torch ~2.0:
    `Received 15 death signal`) - then `Sending process N closing signal SIGTERM` to every worker - or the
    workers' own handlers reporting it (Lightning's `[rank: N] Received SIGTERM: 15`), with no error, timeout or
    crash of any rank before it.

    ## Why it matters
    Nothing inside the job asked to stop: the signal came from outside. The usual senders are the host running
    out of RAM (a checkpoint save or evaluation that gathers a full state dict on the CPU; the system or the
    container runtime kills the process tree), the scheduler (preemption, time limit, a node health check) or a
    user. The ranks' SIGTERM exits are collateral, not causes; NCCL is not involved.

    ## Example
    `Val: 100%|...| 9/9 [09:26<00:00]` then `W0304 01:00:36 ... api.py:725] Received Signals.SIGTERM death signal,
    shutting down workers` and four `Sending process ... closing signal SIGTERM`.

    """

    id = "EX01"
    name = "job-killed-from-outside"
    category = Category.RANK_CRASH
    base_confidence = 0.55
    explains = ("CT01",)
    FIXES: ClassVar[dict[str, Fix]] = {
        "find_sender": Fix(
            "On the node: `dmesg -T | grep -i -E 'killed process|out of memory'` (host OOM); the scheduler's "
            "record for the job (`sacct -j JOB -o State,ExitCode,Reason`, Kubernetes pod events)."
        ),
        "shard_checkpoint": Fix(
            "If host memory ran out at a checkpoint or evaluation step: save sharded (`torch.distributed.checkpoint`, "
            "ZeRO checkpoints) rather than a full state dict gathered on one host, and lower DataLoader workers / "
            "pinned buffers."
        ),
    }

    def evidence(self, t: Tables) -> pl.DataFrame:
        killed = ordered(t.kinds(K.agent_killed, K.rank_signalled), "ts", "source", "line", nulls_last=True)
        if killed.is_empty():
            return killed
        first = killed.row(0, named=True)
        own = t.kinds(*OWN_FAILURES)
        before = own.filter(
            (pl.col("ts") < first["ts"]) if first["ts"] is not None else (pl.col("source") == first["source"])
        )
        if first["ts"] is None:
            before = before.filter(pl.col("line") < first["line"])
        return killed if before.is_empty() else killed.clear()

    def assess(self, t: Tables, ev: pl.DataFrame) -> Finding | None:
        before = t.kinds(K.progress, K.activity, K.progress_bar).filter(
            (pl.col("source") != ev["source"][0]) | (pl.col("line") < ev["line"][0])
        )
        # The last thing printed before the kill: in the launcher's own console if it shows it, else anywhere.
        same = before.filter(pl.col("source") == ev["source"][0])
        last = (same if not same.is_empty() else before).sort("ts", "source", "line", nulls_last=False).tail(1)
        signal = ev["signal"][0] or "a death signal"
        signal = SIGNAL_NAMES.get(signal, f"signal {signal}") if signal.isdigit() else signal
        after = f" right after `{last['text'][0].strip()[:100]}`" if not last.is_empty() else ""
        oom = t.kinds(K.oom_killer)
        # the launcher's own report, else the workers' signal handlers (Lightning's `Received SIGTERM`)
        agent = (ev["kind"] == K.agent_killed).any()
        who = "the torchrun agent" if agent else "the ranks' signal handlers reported that they"
        return self.finding(
            confidence=self.base_confidence + (0.05 if not last.is_empty() else 0.0),
            culprit_ranks=(),
            summary=f"The job was killed from outside: {who} received "
            f"{signal}{after}, with no error in any rank before it - host memory, the "
            "scheduler or a person stopped it.",
            explanation="The launcher tears its workers down when it is signalled itself; the workers' SIGTERM exits "
            "are collateral. No rank failed first, so the sender is outside the job: the host's OOM handling (CPU "
            "memory, often at a checkpoint save or evaluation), the scheduler, or a user.",
            evidence=quotes(last, 1) + quotes(ev, 2) + quotes(oom, 2) + quotes(self.facts.victim_lines, 2),
            fixes=self.fixes(),
            dont=("Do not debug NCCL or the network: no collective failed.",),
            verify=("The node's kernel log or the scheduler names who sent the signal.",),
        )
