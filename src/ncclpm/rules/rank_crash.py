"""CR01 rank-died-first."""

from __future__ import annotations

from typing import ClassVar

import polars as pl

from ncclpm.analysis.crashes import OWN_ERROR
from ncclpm.model import said
from ncclpm.rules._busy import last_line_evidence
from ncclpm.rules._exits import BUS_ERROR, TEARDOWN, done_before_teardown, oom_killer_said
from ncclpm.rules._why import QUIET_VERDICTS, first_timeout
from ncclpm.rules.base import Finding, Fix, Rule, quotes, ranks_text
from ncclpm.tables import Tables
from ncclpm.tables.kinds import K
from ncclpm.tables.schema import Category

# torch's exception around an NCCL result (`DistBackendError: NCCL error in: ...`, `ncclSystemError: ...`): when it is
# all a rank's error says, which rank is known but not why - a lead, below the class's own reading (NW01's
# ncclSystemError) and any NCCL message read
NCCL_WRAPPER = r"NCCL error|nccl[A-Z]\w*Error|DistBackendError"
ONLY_NCCL_CLASS = 0.55


def _how(row: dict, envelopes: str, last_line: str | None = None) -> str:
    """How the first rank died, in prose: its own line quoted, or the launcher's report of its exit in words (that
    report's lines are the evidence) - with its own last line when it quit with exit code 1 and no error."""
    if row["how"] != "exit":
        return f"`{said(row['text'], envelopes)}`"
    code, signal = row.get("exit_code"), row.get("signal")
    how = f"exit code {code} = {signal}" if signal and code is not None else signal or f"exit code {code}"
    if code == OWN_ERROR and last_line:
        return f"{how}, says the launcher, with no error; its last line: `{said(last_line, envelopes)}`"
    return f"{how}, says the launcher"


class RankDiedFirst(Rule):
    """One rank died (exception, segfault, SIGKILL, exit) before the others, which then timed out waiting.

    ## What it detects
    A rank whose first error is its own - an uncaught exception that is not a timeout, a fatal signal
    (`exitcode: -9 (SIGKILL)`, `Segmentation fault`, `Fatal Python error`), a non-zero exit - earlier than
    the collective timeouts / `Connection closed by peer` errors of the other ranks. A rank the launcher reports
    ending with exit code 1 while it tore every other one down, whose own output is in the job with no error and no
    wait in it, stopped itself (`sys.exit(1)` after printing why): its last line is quoted.

    ## Why it matters
    torchrun's "Root Cause (first observed failure)" names the first rank that *reported*, which in a hang is
    often a victim; and SIGABRT from the NCCL watchdog is a consequence of a timeout, never its cause. The
    rank that died first is where to look.

    ## Example
    `failed (exitcode: -9) local_rank: 1 (pid: 32489)` / `Signal 9 (SIGKILL) received by PID 32489` for rank
    1, then `Connection reset by peer` on rank 0.
    """

    id = "CR01"
    name = "rank-died-first"
    category = Category.RANK_CRASH
    base_confidence = 0.75
    explains = ("CT01",)
    needs = frozenset()  # the events or the launcher's summary (a pasted summary tail has no event at all)
    FIXES: ClassVar[dict[str, Fix]] = {
        "host_memory": Fix(
            "The kernel's OOM killer ended a process (host RAM, not GPU memory): lower DataLoader workers / "
            "prefetch, pinned-memory buffers and per-rank host copies, or ask for more memory "
            "(`#SBATCH --mem`).",
            when="the kernel's OOM killer shows in the job",
        ),
        "gpu_fault": Fix(
            "Check the culprit's node for GPU faults first (`dmesg -T | grep -i xid`, `nvidia-smi -q -d ECC`): an "
            "Xid 48/63/64/74/79/94/95 means the GPU failed (drain the node); none, or Xid 13/31/43, means the code's "
            "own kernel faulted (rerun with `CUDA_LAUNCH_BLOCKING=1`).",
            when="the rank died of a CUDA error a failing GPU raises as well as a bug",
        ),
        "bus_error": BUS_ERROR,
        "teardown": TEARDOWN,
        "fix_crash": Fix(
            "Fix the failure on the culprit rank (its traceback above); for SIGKILL check the host's "
            "kernel log (`dmesg -T | grep -i 'killed process'`) for the OOM killer."
        ),
        "async_errors": Fix(
            "Keep `TORCH_NCCL_ASYNC_ERROR_HANDLING=1` (torchrun's default) so the survivors abort "
            "promptly instead of hanging for the full timeout."
        ),
    }

    def evidence(self, t: Tables) -> pl.DataFrame:
        return self.facts.crashes  # the analysis works out who died of their own error before waiting

    def assess(self, t: Tables, ev: pl.DataFrame) -> Finding | None:
        first_rank = ev["rank"][0]
        first_ts = ev["ts"][0]
        same_time = ev.filter(pl.col("ts") == first_ts) if first_ts is not None else ev.head(1)
        culprits = tuple(sorted(set(same_time["rank"].to_list()) | {first_rank}))
        others = self.facts.victim_ranks - set(culprits)
        conf = self.base_confidence + (0.1 if others else 0.0) + (0.05 if (ev["how"] != "exit").any() else -0.05)
        shown = ev.filter(pl.col("rank").is_in(list(culprits)))
        # a rank that quit with exit code 1 and no error: its own last line says why it stopped
        last = self.facts.last_lines.filter((pl.col("rank") == first_rank) & pl.col("last_line").is_not_null())
        quit_ = shown["how"].eq("exit").all() and (shown["exit_code"] == OWN_ERROR).any() and not last.is_empty()
        last_words = last.row(0, named=True) if quit_ else None
        oom = t.kinds(K.oom_killer)
        culprit_pids = set(t.ranks.filter(pl.col("rank").is_in(list(culprits)))["pid"].drop_nulls().to_list())
        killed_by = oom.filter(pl.col("pid").is_in(list(culprit_pids)))["killer"]
        oom_hit = not killed_by.is_empty()
        if oom_hit:
            conf += 0.2  # the kernel names the culprit's own pid: the reason is known
        gpu_fault = shown["strength"].drop_nulls()  # a CUDA error a failing GPU raises as well as a code bug
        conf = min(conf, gpu_fault.min()) if gpu_fault.len() else conf  # type: ignore[type-var]
        # an error line that is NCCL's result class (an nccl_error event on it: nccl2's `NCCL AllReduce failed:
        # unhandled system error` too) or torch's wrapper of it
        wraps = shown.join(t.kinds(K.nccl_error).select("source", "line").unique(), on=["source", "line"], how="semi")
        if wraps.height == shown.height or shown["text"].fill_null("").str.contains(NCCL_WRAPPER).all():
            conf = min(conf, ONLY_NCCL_CLASS)  # the rank's own error is NCCL's result class, nothing says why
        done = self.facts.finished_work  # the work was done first: the crash is at teardown
        first = (
            done_before_teardown(done, t.line_prefix, ranks_text(culprits))
            if done is not None
            else f"{ranks_text(culprits).capitalize()} died first"
        )
        return self.finding(
            confidence=conf,
            culprit_ranks=culprits,
            summary=f"{first} ({_how(shown.row(0, named=True), t.line_prefix, last_words and last_words['last_line'])})"
            + (f" - killed by {oom_killer_said(killed_by[0])} (host memory, not GPU memory)" if oom_hit else "")
            + (f"; {ranks_text(sorted(others))} then failed waiting for it." if others else "."),
            explanation="The first rank to fail on its own is the cause; timeouts and 'connection closed by "
            "peer' errors on the other ranks are what a dead peer looks like from the outside. torchrun's "
            "'Root Cause' only names the first rank that reported.",
            evidence=(
                *quotes(shown),
                *(last_line_evidence(last_words) if last_words else ()),
                *quotes(oom, 2),
                *quotes(self.facts.victim_lines.filter(pl.col("rank").is_in(list(others))), 2),
            ),
            fixes=self.fixes(
                *(["teardown"] if done is not None else []),
                *([] if oom.is_empty() else ["host_memory"]),
                *(["gpu_fault"] if gpu_fault.len() else []),
                *(["bus_error"] if (shown["signal"] == "SIGBUS").any() else []),
                "fix_crash",
                "async_errors",
            ),
            dont=(
                "Do not raise the collective timeout: the peer is gone, waiting longer changes nothing.",
                "Do not chase the SIGABRT/SIGTERM of the other ranks: they are torn down because of this one.",
            ),
            verify=(
                "The culprit rank's log ends with its own error, earlier than any timeout elsewhere; "
                "after the fix the job passes the step where it died.",
            ),
            # SIGKILL (the launcher's -9, mpirun's or the shell's `Killed`) comes from outside the process
            facts={"victim_ranks": sorted(others), "killed": oom_hit or _killed(shown), "after_work": done is not None},
        )

    def why_not(self, t: Tables, winner: Finding, mine: Finding | None) -> str | None:
        if mine is not None or winner.category not in QUIET_VERDICTS:
            return None
        fired, ends = first_timeout(self.facts), t.elastic["ts"].drop_nulls()
        if fired is not None and ends.len() and ends.min() >= fired:  # type: ignore[operator]
            return f"every rank ended after the first timeout fired ({fired:%H:%M:%S}): the exits are its consequence"
        return "no rank died of its own error (an exception, a segfault, a kill) before the others waited"


def _killed(shown: pl.DataFrame) -> bool:
    return bool(((shown["signal"] == "SIGKILL") | (shown["detail"] == "Killed")).any())
