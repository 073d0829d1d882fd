"""FR02 fr-rank-stopped."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

import polars as pl

from ncclpm.analysis.victims import exceptions_not_victim
from ncclpm.rules._fr_evidence import entry_evidence, last_entry_evidence
from ncclpm.rules.base import Finding, Fix, Rule, ranks_text
from ncclpm.tables import Tables
from ncclpm.tables.kinds import K
from ncclpm.tables.schema import Category, FRCulprit

if TYPE_CHECKING:  # (the dump reader's modules load only for a job with dumps)
    from ncclpm.analysis.fr_match import FRAnalysis

# What a culprit's own stack or log lines say it was doing -> the category it points to.
FRAME_HINTS = (
    (Category.DATALOADER_HANG, ("dataloader", "_next_data", "__next__", "_get_data", "worker")),
    (Category.SLOW_RANK_WORK, ("checkpoint", "save", "eval", "valid", "sample", "generate", "inference", "log")),
)
TORCH_FRAMES = ("distributed_c10d", "c10d_logger")
LOG_KINDS = (
    (Category.CUDA_OOM, (K.cuda_oom,)),
    (Category.NVML_DRIVER_FAILURE, (K.nvml_error, K.xid, K.gpu_lost)),
    (Category.DATALOADER_HANG, (K.dataloader_error, K.fd_exhaustion)),
    (Category.RANK_CRASH, (K.crash_signal, K.cuda_error)),
    (Category.SLOW_RANK_WORK, (K.activity,)),
)


class FlightRecorderRankStopped(Rule):
    """Flight-recorder dumps show ranks that never joined a collective their peers were waiting in, or that
    stopped completing collectives their peers had finished.

    ## What it detects
    Per process group, aligned on `collective_seq_id`: a member lacking an entry its peers hold while its own
    last sequence number is lower never reached that collective ("never joined", with how far behind it
    is); a member still holding entries not completed that every peer has already moved past "stopped
    completing" work (a stuck GPU stream, a blocked watchdog or GIL). A wait-for graph across groups keeps
    only the ranks that wait for nobody: the ones the others are waiting for.

    ## Why it matters
    It names the culprit where logs only show victims: in a hang the culprit usually prints nothing at all.
    What the culprit was doing comes from its own log lines and the stack of its last entries.

    ## Example
    `rank 0 never joined barrier #10 of default_pg; 2 peers were waiting` while rank 0's log says
    `Saving checkpoint ...`.
    """

    id = "FR02"
    name = "fr-rank-stopped"
    category = Category.SLOW_RANK_WORK
    needs = frozenset({"fr_analysis"})
    base_confidence = 0.55
    explains = ("CT01",)
    FIXES: ClassVar[dict[str, Fix]] = {
        "look": Fix(
            "Look at what the culprit rank was doing (its last lines and the stack above); on the next "
            "hang run `py-spy dump --pid <pid>` on it."
        ),
        "keep_dumps": Fix(
            "Keep `TORCH_NCCL_TRACE_BUFFER_SIZE=2000` and `TORCH_NCCL_DUMP_ON_TIMEOUT=1` set so every "
            "failure leaves dumps like these."
        ),
        "check_gpu": Fix(
            "Check the GPU of that rank: `nvidia-smi`, `dmesg | grep -i xid`.",
            when="the rank stopped completing collectives its peers had finished",
        ),
    }

    def evidence(self, t: Tables) -> pl.DataFrame:
        fa = self.facts.fr
        assert fa is not None
        if fa.culprit_kind not in (FRCulprit.NEVER_JOINED, FRCulprit.STOPPED_COMPLETING):
            return pl.DataFrame()
        return fa.rank_facts.filter(pl.col("culprit"))

    @staticmethod
    def _from_logs(t: Tables, culprits: list[int]) -> Category | None:
        mine = t.events.filter(pl.col("rank").is_in(culprits))
        for cat, kinds in LOG_KINDS:
            if not mine.filter(pl.col("kind").is_in(list(kinds))).is_empty():
                return cat
        crashed = exceptions_not_victim(t, [K.dataloader_error, K.fd_exhaustion, K.cuda_oom, K.nvml_error])
        return Category.RANK_CRASH if not crashed.filter(pl.col("rank").is_in(culprits)).is_empty() else None

    @staticmethod
    def _how(fa: FRAnalysis) -> str:
        kinds = set(fa.rank_facts.filter(pl.col("culprit"))["culprit_kind"].drop_nulls().to_list())
        parts = {
            FRCulprit.NEVER_JOINED: "never joined a collective the other ranks were waiting in",
            FRCulprit.STOPPED_COMPLETING: "stopped completing collectives its peers had already finished",
        }
        return " or ".join(parts[k] for k in sorted(kinds) if k in parts) or "stopped"

    @staticmethod
    def _from_frames(frames_text: str) -> Category | None:
        low = frames_text.lower()
        for cat, words in FRAME_HINTS:
            if any(w in low for w in words):
                return cat
        return None

    def assess(self, t: Tables, ev: pl.DataFrame) -> Finding | None:
        fa = self.facts.fr
        assert fa is not None
        culprits = sorted(ev["rank"].to_list())
        user_frames = " ".join(fa.culprit_frames["summary"].drop_nulls().to_list())
        # torch's own frames (all_reduce, barrier...) say nothing about what the rank was doing
        hint_text = " ".join(p for p in user_frames.split(" < ") if not any(m in p for m in TORCH_FRAMES))
        by_logs, by_frames = self._from_logs(t, culprits), self._from_frames(hint_text)
        stuck = fa.culprit_kind == FRCulprit.STOPPED_COMPLETING
        category = by_logs or by_frames or (Category.NVML_DRIVER_FAILURE if stuck else Category.SLOW_RANK_WORK)
        conf = 0.85 if by_logs else 0.7 if by_frames else self.base_confidence
        missing = fa.missing.filter(pl.col("missing_rank").is_in(culprits))
        keys = missing.select(pl.col("present_ranks").alias("rank"), "group_key", "collective_seq_id").explode("rank")
        evidence = entry_evidence(t, keys.head(3)) + last_entry_evidence(t, culprits)
        if stuck:
            evidence += entry_evidence(t, fa.stuck.filter(pl.col("rank").is_in(culprits)).head(3))
        why = (
            "its log lines"
            if by_logs
            else "the stack of its last flight-recorder entries"
            if by_frames
            else "nothing else in the job (no log line or stack says what it was doing)"
        )
        return self.finding(
            category=category,
            confidence=conf,
            culprit_ranks=tuple(culprits),
            summary=f"Flight recorder: {fa.summary}.",
            explanation=f"{ranks_text(culprits).capitalize()}: {self._how(fa)}; the category comes from {why}."
            + (
                " A rank whose collectives stay incomplete while its peers finished them points below Python: "
                "a GPU fault or hung CUDA call, or a blocked watchdog/GIL."
                if stuck and not by_logs
                else ""
            ),
            evidence=evidence,
            fixes=self.fixes("look", "keep_dumps", *(["check_gpu"] if stuck else [])),
            dont=("Do not raise the timeout or disable P2P/IB before knowing why this rank stopped.",),
            verify=("In the next run's dumps every rank reaches the same last sequence number in every group.",),
            facts={"fr_kind": fa.culprit_kind, "root_group": fa.root_group},
        )
