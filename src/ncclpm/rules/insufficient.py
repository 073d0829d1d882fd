"""IN01 insufficient-evidence."""

from __future__ import annotations

from typing import ClassVar

import polars as pl

from ncclpm.analysis.crashes import TORN_DOWN, WATCHDOG_ABORT
from ncclpm.model import said
from ncclpm.rules._victim_view import victims_view
from ncclpm.rules.base import Finding, Fix, Rule, quotes, ranks_text
from ncclpm.tables import Tables
from ncclpm.tables.kinds import K
from ncclpm.tables.schema import Category
from ncclpm.util.durations import duration_text

# The evidence to collect when it is missing from the job: (what, when) - the findings' fixes read "Collect <what>."
MISSING = {
    "errors": (
        "the failed ranks' own output (ranks: {ranks|those the launcher names}): the traceback its summary leaves "
        "out is in their stderr (`torchrun --log-dir DIR --tee 3`, or `@record` from `torch.distributed.elastic."
        "multiprocessing.errors` on the entry point to put it in the summary)",
        "the launcher reports ranks failed whose own errors are not in the files",
    ),
    "logs": ("logs of ranks {ranks|that printed nothing} (no line from them was found)", "some ranks printed nothing"),
    "other_nodes": (
        "the other nodes' logs, first the node whose agent ended first (often the rendezvous endpoint's host): "
        "its workers' errors are why the job ended",
        "the job ended on another node",
    ),
    "dumps": (
        "flight-recorder dumps: run with `TORCH_NCCL_TRACE_BUFFER_SIZE=2000` and "
        "`TORCH_NCCL_DUMP_ON_TIMEOUT=1` (dumps land in `TORCH_FR_DUMP_TEMP_FILE`, default "
        "`~/.cache/torch/comm_lib_trace_rank_<rank>`)",
        "no dumps in the job",
    ),
    "nccl_log": (
        "NCCL's own log: `NCCL_DEBUG=INFO` (or `WARN`), `NCCL_DEBUG_FILE=/path/nccl.%h.%p`",
        "no NCCL_DEBUG output in the job",
    ),
    "stacks": (
        "stack dumps of the hung ranks while they hang: `py-spy dump --pid <pid>` on each rank (add "
        "`--subprocesses` for DataLoader workers), or `faulthandler.register(signal.SIGUSR1)` in the script "
        "and `kill -USR1 <pid>`; keep the files beside the logs",
        "no stack dumps in the job",
    ),
}


# torchrun's agent's own lines when another node's agent ended the job first (closed the rendezvous, took the store)
ENDED_ELSEWHERE = [K.rendezvous_closed, K.rendezvous_shutdown]
DUMP_SIGNAL = "pg.dump_signal"  # torch's notice to every rank that another rank's watchdog timed out


class InsufficientEvidence(Rule):
    """Nothing conclusive: the logs show the symptom but not the cause. Says what to collect next.

    ## What it detects
    The fallback when no other rule explains the failure: it lists which evidence the job folder lacks
    (logs of some ranks, flight-recorder dumps, NCCL_DEBUG output, stack dumps of the hung ranks).

    ## Why it matters
    A guess dressed up as a diagnosis sends people to cargo-cult fixes (`NCCL_P2P_DISABLE=1`, an
    `NCCL_TIMEOUT` that nothing reads). Naming the missing evidence gets the next failure diagnosed.

    ## Example
    Only rank 0's log, one `Watchdog caught collective operation timeout` line, no dumps.
    """

    id = "IN01"
    name = "insufficient-evidence"
    category = Category.UNKNOWN
    base_confidence = 0.2
    fallback = True
    FIXES: ClassVar[dict[str, Fix]] = {key: Fix(f"Collect {what}.", when) for key, (what, when) in MISSING.items()}

    def evidence(self, t: Tables) -> pl.DataFrame:
        return pl.DataFrame({"job": [t.job_name]})

    def assess(self, t: Tables, ev: pl.DataFrame) -> Finding | None:
        seen = set(t.ranks["rank"].to_list())
        absent = sorted(self.facts.known_ranks - seen)
        no_stacks = not t.has("stacks") or (t.extra["stacks"]["format"] == "fr").all()
        # ranks the launcher saw fail (not the ones it then ended itself with SIGTERM), their own errors not shown
        failed = t.elastic.filter(~pl.col("exit_code").fill_null(0).is_in([0, TORN_DOWN]))["rank"].drop_nulls().unique()
        failed = sorted(set(failed.to_list()) - set(t.events.filter(pl.col("severity") == "error")["rank"].to_list()))
        # every line a victim's, ranked or not (a framework's engine, torchrun's agent: lines without a rank)
        victim_events = t.events.filter(pl.col("victim"))
        # torchrun's agent found the job already ended by another node's agent: the failure is on that node
        ended_elsewhere = not victim_events.is_empty() and victim_events["kind"].is_in(ENDED_ELSEWHERE).all()
        wanted = [
            *(["other_nodes"] if ended_elsewhere else []),
            *(["errors"] if failed else []),
            *(["logs"] if absent else []),
            *(["dumps"] if t.fr is None else []),
            *(["nccl_log"] if not t.nccl_log else []),
            *(["stacks"] if no_stacks else []),
        ]
        ranks_of: dict[str, list[int]] = {k: [] for k in MISSING} | {"errors": failed, "logs": absent}
        missing = [Fix(MISSING[k][0]).render({"ranks": ", ".join(map(str, ranks_of[k][:16]))}) for k in wanted]
        victims = self.facts.victim_lines
        proves, causes = victims_view(self.facts)
        leads = f" Most likely, in order: {'; '.join(f'({i}) {c}' for i, c in enumerate(causes, 1))}." if causes else ""
        # a framework's waits only (its engine process's lines carry no rank, so they are victims without a rank)
        waits = victims if not victims.is_empty() else victim_events
        framework = not waits.is_empty() and waits["kind"].eq(K.framework_wait).all()
        # only the heartbeat monitor's lines: the watchdog thread itself stopped, no collective is shown waiting
        stuck = victims.filter(pl.col("kind") == K.heartbeat_stuck)
        watchdog_stuck = not stuck.is_empty() and stuck.height == victims.height
        stuck_for = stuck["count"].drop_nulls()
        stuck_ranks = sorted(set(stuck["rank"].drop_nulls().to_list()))
        timed_out = t.kinds(K.collective_timeout)  # (a line with no rank of its own: not a victim line above)
        limit = timed_out["timeout_ms"].drop_nulls()
        waited = f" for {duration_text(limit.max())}" if limit.len() else ""
        shown = (
            "a serving or RL framework's process waited on its peers (vLLM's shared-memory broadcast or RPC, "
            "SGLang's watchdog, Ray's compiled-graph channel, a weight sync) - the waiting side of a worker that "
            "hung, died or was busy elsewhere - and the logs do not show which or why"
            if framework
            else f"the watchdog thread of {ranks_text(stuck_ranks) if stuck_ranks else 'a process'} itself stopped "
            "making progress"
            + (f" for {duration_text(int(stuck_for.max()) * 1000)}" if stuck_for.len() else "")  # type: ignore[arg-type]
            + " and torch's heartbeat monitor ended the process: a CUDA or NCCL call that hung (an abort, an event "
            "destroyed), or another thread holding the GIL inside one - the logs do not show which"
            if watchdog_stuck
            else "the logs show ranks waiting in a collective but not why" + self._first_timed_out(t)
            if not victims.is_empty()
            else "NCCL's watchdog aborted a process (SIGABRT, its backtrace through the watchdog): a collective failed "
            "or timed out first, and the excerpt does not show which or why"
            if t.kinds(K.crash_signal)["victim"].any()
            else f"the logs show a process that waited in a collective{waited} and timed out, but not for whom or why"
            if not timed_out.is_empty()
            else "torchrun's agent here found the job already ended by another node's agent (the rendezvous closed, "
            "or its store gone): the failure happened on that node, and its logs are not among these"
            if ended_elsewhere
            else "the logs show a process cut off from another (a peer gone or not answering) but not which or why"
            if not victim_events.is_empty()
            else f"the launcher reports {ranks_text(failed)} aborted together (SIGABRT: what NCCL's watchdog does "
            "to ranks whose collective timed out or failed), but not what they waited for"
            if len(failed) > 1 and t.elastic.filter(pl.col("rank").is_in(failed))["exit_code"].eq(WATCHDOG_ABORT).all()
            else f"the launcher reports {ranks_text(failed)} failed, but not why (their own errors are not in "
            "these files)"
            if failed
            else "the text is a distributed job's (its words: "
            + "; ".join(f"`{said(x, t.line_prefix)[:80]}`" for x in self.facts.scope.job["text"].head(2))
            + "), but ncclpm reads no failure in it yet"
            if not self.facts.scope.recognised and self.facts.scope.is_job
            else "no line of the logs names a failure ncclpm recognises"
        )
        return self.finding(
            culprit_ranks=(),
            summary=f"Nothing conclusive: {shown}." + leads,
            explanation=" ".join(proves)
            + (" " if proves else "")
            + "No rule found a rank that died, stalled, mismatched or failed on its own. Collect: "
            + "; ".join(missing)
            + ".",
            evidence=quotes(victims, 4)
            or quotes(timed_out, 2)
            or (quotes(victim_events, 2) if ended_elsewhere else ())
            or (quotes(self.facts.scope.job, 2) if not self.facts.scope.recognised else ()),
            fixes=tuple(f for k in wanted for f in self.fixes(k, ranks=", ".join(map(str, ranks_of[k][:16]))))
            if wanted
            else (),
            dont=(
                "Do not set NCCL_P2P_DISABLE=1 / NCCL_IB_DISABLE=1 or an `NCCL_TIMEOUT` (read by nothing) "
                "without evidence: they hide faults and slow every job.",
            ),
            verify=("The next failure leaves per-rank logs and dumps; run `ncclpm diagnose` on them.",),
            facts={"missing_evidence": missing, "proves": proves, "likely_causes": causes},
        )

    @staticmethod
    def _first_timed_out(t: Tables) -> str:
        """torch 2.5+: the rank whose watchdog timed out first signals the others to dump their flight recorders
        (`Received a dump signal due to a collective timeout from rank N`): a waiting rank too, but the one whose
        log and dump show first what the collective waited for."""
        first = t.kinds(K.watchdog_status).filter(pl.col("event") == DUMP_SIGNAL)["subject_rank"].drop_nulls()
        ranks = sorted(set(first.to_list()))
        if not ranks:
            return ""
        return (
            f"; {ranks_text(ranks)}'s watchdog timed out first and asked the others to dump their flight recorders: "
            f"{'its' if len(ranks) == 1 else 'their'} log and dump show first what the collective waited for"
        )
