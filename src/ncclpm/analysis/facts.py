"""`Analysis`: the derived facts of one job, each worked out once - on first read, then kept - from its `Tables`."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from functools import cached_property
from typing import TYPE_CHECKING

import polars as pl

from ncclpm.analysis import activity, busy, cuts, peers, stores, victims
from ncclpm.analysis import crashes as own_failures
from ncclpm.analysis.identity import Identity, job_identity
from ncclpm.analysis.job import JobFacts
from ncclpm.analysis.scope import InputScope, input_scope
from ncclpm.analysis.settings import EnvLint, env_lint
from ncclpm.analysis.timeout import TimeoutInForce, timeout_in_force
from ncclpm.tables import Tables
from ncclpm.tables.kinds import K

if TYPE_CHECKING:
    from ncclpm.analysis.fr_match import FRAnalysis
    from ncclpm.analysis.stack_tree import StackTree


@dataclass(frozen=True)
class Analysis:
    """The tables (`t`) and what follows from them across sources. Frames are shared, never modified by readers."""

    t: Tables
    fr: FRAnalysis | None = None  # the flight-recorder dumps matched across ranks (None without dumps)

    def has(self, name: str) -> bool:
        """A table or a fact a rule may declare in `needs` holds something (`fr_analysis`: the dumps' matching)."""
        return self.fr is not None if name == "fr_analysis" else self.t.has(name)

    # who waited on whom (victims.py)
    @cached_property
    def victim_lines(self) -> pl.DataFrame:
        """Lines of ranks waiting on, or torn down because of, another rank; victim kinds first."""
        return victims.victim_lines(self.t)

    @cached_property
    def victim_ranks(self) -> frozenset[int]:
        return frozenset(self.victim_lines["rank"].to_list())

    @cached_property
    def timeouts(self) -> pl.DataFrame:
        """The collective timeouts that name their rank."""
        return victims.timeouts(self.t)

    @cached_property
    def desync_joined(self) -> frozenset[int]:
        """Ranks torch's desync report says entered the timed-out collective and never finished it."""
        return victims.desync_ranks(self.t, K.desync_joined)

    @cached_property
    def desync_lagging(self) -> frozenset[int]:
        """Ranks torch's desync report says never entered the timed-out collective (they finished the one before)."""
        return victims.desync_ranks(self.t, K.desync_not_joined)

    @cached_property
    def idle_at_timeout(self) -> pl.DataFrame:
        """Status lines of ranks whose own watchdog shows they never entered the collective the others timed out
        in (all their work complete, the last before it)."""
        return victims.idle_at_timeout(self.t, self.timeouts)

    @cached_property
    def lagging(self) -> frozenset[int]:
        """Ranks shown never to have entered the timed-out collective: torch's desync report, or their own status."""
        return self.desync_lagging | frozenset(self.idle_at_timeout["rank"].to_list())

    @cached_property
    def call_sites(self) -> pl.DataFrame:
        """Per rank, the torch call and the program's own frame that issued the collective the watchdog found
        failed (torch 2.5+'s `Stack trace of the failed collective`): rank, op, func, site."""
        return victims.call_sites(self.t)

    @cached_property
    def cut_at_end(self) -> bool:
        """The excerpt ends inside a rank's timeout line: ranks absent from it may be in the part not copied."""
        return victims.cut_at_end(self.t, self.timeouts)

    @cached_property
    def late_timeouts(self) -> frozenset[int]:
        """Ranks whose timeout fired long after the first one: they entered the collective late."""
        return victims.late_timeouts(self.timeouts)

    @cached_property
    def known_ranks(self) -> frozenset[int]:
        """Ranks seen, plus every rank below a (small enough) world size."""
        return victims.known_ranks(self.t)

    @cached_property
    def first_symptom(self) -> datetime | None:
        """When the first rank gave up waiting."""
        return busy.first_symptom(self.timeouts, self.victim_lines)

    # who failed on their own (crashes.py)
    @cached_property
    def exits(self) -> pl.DataFrame:
        """The launcher's rows of ranks that ended by an exit they did not choose, or quit with exit code 1 and no
        error in their own output while the others were torn down."""
        unchosen = own_failures.unchosen_exits(self.t, self.victim_ranks)
        quit_ = own_failures.quit_with_error(self.t, self.victim_ranks, self.last_lines)
        return unchosen if quit_.is_empty() else pl.concat([unchosen, quit_], how="diagonal_relaxed")

    @cached_property
    def own_errors(self) -> pl.DataFrame:
        """Exception lines that are neither a victim's nor of a kind another rule explains better."""
        return own_failures.own_errors(self.t)

    @cached_property
    def crashes(self) -> pl.DataFrame:
        """Each rank's own failures before it waited on anyone (`how`: exception, signal, exit), first first."""
        return own_failures.crashes(self.t, self.victim_lines, self.own_errors, self.exits)

    @cached_property
    def crashed_ranks(self) -> frozenset[int]:
        return frozenset(self.crashes["rank"].to_list())

    # a peer that went away (peers.py), store waits (stores.py)
    @cached_property
    def barrier_lost_peer(self) -> pl.DataFrame:
        return peers.barrier_lost_peer(self.t)

    @cached_property
    def peer_left(self) -> bool:
        """Survivors lost a peer's connection before anyone waited on anyone, and nothing else is in the files."""
        return peers.peer_left(self.t, self.barrier_lost_peer)

    @cached_property
    def store_waits(self) -> pl.DataFrame:
        """Store timeouts after the group had formed, with the rank awaited (if known) and how."""
        return stores.store_waits(self.t)

    # each rank's lines in time order across files (activity.py)
    @cached_property
    def line_order(self) -> tuple[pl.DataFrame, pl.DataFrame]:
        """(placed, unplaced): each rank's kept lines with their place in its time order across files."""
        return activity.rank_line_order(self.t)

    @cached_property
    def last_lines(self) -> pl.DataFrame:
        """Per rank: its last line across every file, and whether it is proven the last (nothing after it)."""
        return activity.last_lines(*self.line_order)

    @cached_property
    def last_activity(self) -> pl.DataFrame:
        """Per rank: its last activity or progress line, in time order across every file."""
        return activity.last_activity(self.t, self.line_order[0])

    @cached_property
    def task_hosts(self) -> pl.DataFrame:
        """(rank, host) the scheduler's own lines name (`srun: error: h100-c07: task 3: Exited ...`) when srun launched
        the ranks themselves (no torchrun summary in the job: srun's tasks are then the ranks)."""
        return activity.task_hosts(self.t)

    @cached_property
    def finished_work(self) -> activity.FinishedWork | None:
        """The work was done before anything failed (`training done`...), with the last step reached; else None."""
        return activity.finished_work(self.t, self.line_order[0])

    # what each rank was busy with (busy.py)
    @cached_property
    def waiting_in_barrier(self) -> bool:
        return busy.waiting_in_barrier(self.t, self.timeouts, self.call_sites)

    def work_of(self, ranks: list[int], attribute_unranked: bool = False) -> pl.DataFrame:
        """One activity row per rank of `ranks`: the rank-local work it started before the others gave up (an
        unranked console line attributed to the one candidate when `attribute_unranked`). Worked out per call:
        a caller that needs it twice keeps it."""
        return busy.rank_local_work(
            self.t, ranks, self.victim_lines, self.first_symptom, attribute_unranked, self.line_order[0]
        )

    # what a paste cut short still says (cuts.py)
    @cached_property
    def cut_tracebacks(self) -> pl.DataFrame:
        """Tracebacks cut before their exception line: an exception of unknown type (`launcher`: torchrun's own)."""
        return cuts.cut_tracebacks(self.t)

    @cached_property
    def agent_failed_early(self) -> pl.DataFrame:
        """torchrun's agent failing in its start-up, with no worker's output anywhere in the job."""
        return cuts.agent_failed_early(self.t, self.cut_tracebacks)

    @cached_property
    def outlasting_work(self) -> pl.DataFrame:
        """Bars of rank-local work that had run about as long as a timeout that applies (`matched_ms`)."""
        return cuts.outlasting_work(self.t, self.timeout)

    @cached_property
    def crash_in_nccl(self) -> pl.DataFrame:
        """Crashes whose native backtrace's first frame past the signal handler is NCCL's own code."""
        return cuts.crash_in_nccl(self.t)

    # what the input is (scope.py)
    @cached_property
    def scope(self) -> InputScope:
        """Whether the input is a distributed job's log, and the positive evidence that it is something else."""
        return input_scope(self.t)

    # the stacks, the timeout, the job, the settings
    @cached_property
    def stack_tree(self) -> StackTree | None:
        """The merged stacks of the ranks (dumps, else the flight recorder's entry frames)."""
        stacks = self.t.extra.get("stacks")
        if stacks is None or stacks.is_empty():  # (no tree: its module is not even loaded, ~10 ms)
            return None
        from ncclpm.analysis.stack_tree import build_stack_tree

        return build_stack_tree(stacks)

    @cached_property
    def timeout(self) -> TimeoutInForce:
        return timeout_in_force(self.t, self.timeouts)

    @cached_property
    def job(self) -> JobFacts:
        return JobFacts.of(self.t, self.timeout)

    @cached_property
    def identity(self) -> Identity:
        """One job or several, and the attempts of one job (`identity.py`)."""
        return job_identity(self.t)

    @cached_property
    def settings(self) -> tuple[EnvLint, ...]:
        """The environment variables the job sets, each with what it really does, the most severe first."""
        return env_lint(self.t)


def analyse(t: Tables) -> Analysis:
    """The analysis of `t`: the flight-recorder dumps matched at once (the rules that need them are many); every
    other fact when first read."""
    if t.fr is None or t.fr.compact.is_empty():
        return Analysis(t)
    from ncclpm.analysis.fr_match import analyze_fr

    return Analysis(t, analyze_fr(t.fr))
