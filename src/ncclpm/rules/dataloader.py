"""DL01 dataloader-failure."""

from __future__ import annotations

from typing import ClassVar

import polars as pl

from ncclpm.model import said
from ncclpm.rules._why import QUIET_VERDICTS, last_words
from ncclpm.rules.base import Finding, Fix, Rule, quotes, ranks_text
from ncclpm.tables import Tables
from ncclpm.tables.kinds import K
from ncclpm.tables.schema import Category


class DataloaderFailure(Rule):
    """A DataLoader on one rank stopped delivering batches (worker died, timed out, ran out of fds or shm).

    ## What it detects
    DataLoader errors on a rank: `DataLoader timed out after N seconds`, `DataLoader worker (pid N) is killed
    by signal: Killed/Bus error`, `exited unexpectedly`, `Unexpected bus error encountered in worker`,
    `Too many open files` / `received 0 items of ancdata` (file-descriptor exhaustion).

    ## Why it matters
    The rank whose input pipeline stalls stops issuing collectives; every other rank waits in its next
    all-reduce until the process-group timeout fires. The timeouts on the healthy ranks are the symptom;
    this rank is the cause.

    ## Example
    `[rank1]: RuntimeError: DataLoader worker (pid 30357) is killed by signal: Bus error. It is possible that
    dataloader's workers are out of shared memory.` while rank 0 reports `Connection closed by peer`.
    """

    id = "DL01"
    name = "dataloader-failure"
    fires_on = frozenset({K.dataloader_error, K.fd_exhaustion, K.frame_dataloader})
    category = Category.DATALOADER_HANG
    base_confidence = 0.8
    explains = ("CT01",)
    FIXES: ClassVar[dict[str, Fix]] = {
        "timeout": Fix(
            "Set `DataLoader(..., timeout=120)` (well below the process-group timeout) so a stuck worker "
            "raises on the rank that owns it instead of hanging the whole job.",
            unless="dataloader_timeout",
        ),
        "shm": Fix(
            "Raise the shared-memory limit: `docker run --shm-size=16g` / Kubernetes `emptyDir: "
            "{medium: Memory}` on `/dev/shm`; check `df -h /dev/shm` on the node.",
            when="a worker ran out of shared memory (Bus error)",
        ),
        "fds": Fix(
            "Raise the file-descriptor limit (`ulimit -n 65536`) or use "
            "`torch.multiprocessing.set_sharing_strategy('file_system')`; fewer `num_workers`.",
            when="the process ran out of file descriptors (Too many open files)",
        ),
        "killed": Fix(
            "A worker was SIGKILLed (usually the kernel OOM killer): lower `num_workers` / "
            "`prefetch_factor`, check `dmesg` for `Out of memory: Killed process`.",
            when="a worker was killed by a signal",
        ),
        "traceback_end": Fix(
            "Read the end of that rank's traceback (its stderr or torchrun's error file): a worker killed by a "
            "signal, a `timeout` expiring, or a store `Socket Timeout` in the seed exchange.",
            when="the logs show only where the rank stopped (a traceback into DataLoader code), not why",
        ),
        "uneven_shards": Fix(
            "If the ranks' data iterators have different lengths (uneven shards), make them equal "
            "(`drop_last=True`, `DistributedSampler`, datapipes `fullsync()`): a rank that starts its next epoch "
            "early waits for the others.",
            when="the logs show only where the rank stopped (a traceback into DataLoader code), not why",
        ),
        "slow_read": Fix(
            "Find the slow read: `py-spy dump --pid <rank pid> --subprocesses` on the stuck rank shows its workers' "
            "frames; keep the output beside the logs for ncclpm.",
            live=True,
        ),
    }

    def evidence(self, t: Tables) -> pl.DataFrame:
        # NCCL's own sockets running out of descriptors is the open-file limit (CF01), not the input pipeline
        errors = t.kinds(K.dataloader_error, K.fd_exhaustion).filter(pl.col("exhausted").fill_null("") != "nccl_fds")
        if errors.is_empty():
            # No DataLoader error line, but a traceback that runs into DataLoader code: the rank failed (or was
            # stopped) while fetching or starting to iterate its data; the error itself was cut from the logs.
            errors = t.kinds(K.frame_dataloader).sort("source", "line").unique(["source", "rank"], keep="last")
        return errors.sort("ts", "source", "line", nulls_last=True)

    def assess(self, t: Tables, ev: pl.DataFrame) -> Finding | None:
        culprits = tuple(sorted(set(ev["rank"].drop_nulls().to_list())))
        others = self.facts.victim_ranks - set(culprits)
        conf = self.base_confidence + (0.1 if others else 0.0) - (0.15 if not culprits else 0.0)
        if (ev["kind"] == K.frame_dataloader).all():
            return self._in_dataloader_code(t, ev, culprits)
        exhausted = set(ev["exhausted"].drop_nulls().to_list())  # the kinds' readings: what ran out
        wanted = [
            "timeout",
            *(["shm"] if "shm" in exhausted else []),
            *(["fds"] if "fds" in exhausted else []),
            *(["killed"] if ev["signal"].is_not_null().any() else []),  # `worker (pid N) is killed by signal: ...`
            "slow_read",
        ]
        who = ranks_text(culprits) if culprits else "one rank"
        return self.finding(
            confidence=conf,
            culprit_ranks=culprits,
            summary=f"The DataLoader on {who} failed (`{said(ev['text'][0], t.line_prefix, 120)}`); "
            f"{'the other ranks waited for it in a collective' if others else 'its rank stopped training'}.",
            explanation="A rank whose input pipeline stalls stops issuing collectives, so every other rank "
            "waits in its next all-reduce until the process-group timeout; their timeouts are a symptom.",
            evidence=quotes(ev),
            fixes=self.fixes(*wanted),
            dont=(
                "Do not raise the NCCL/process-group timeout: it only makes the job hang longer.",
                "Do not set NCCL_P2P_DISABLE / NCCL_IB_DISABLE: the network is not involved.",
            ),
            verify=(
                "Re-run with the DataLoader timeout set: the failure must now be raised on the same rank, "
                "naming the worker.",
            ),
            facts={"victim_ranks": sorted(others)},
        )

    def _in_dataloader_code(self, t: Tables, ev: pl.DataFrame, culprits: tuple[int, ...]) -> Finding:
        who = ranks_text(culprits) if culprits else "a rank"
        where = ev["value"].drop_nulls()
        return self.finding(
            confidence=0.5,  # where it stopped, not why: a lead
            culprit_ranks=culprits,
            summary=f"{who.capitalize()} failed inside DataLoader code ({where[0] if where.len() else 'its iterator'}"
            "); the error line itself is not in these logs.",
            explanation="The traceback runs into the DataLoader - creating its iterator (worker start-up, the "
            "shared-seed exchange of distributed samplers) or fetching a batch - so the rank's data pipeline is "
            "where it stopped. The exception line that says why was cut from the paste; the rank's full stderr "
            "(or its error file) has it.",
            evidence=quotes(ev, 3),
            fixes=self.fixes("traceback_end", "uneven_shards", "timeout"),
            dont=("Do not debug NCCL: the rank stopped in its input pipeline, before any collective.",),
            verify=("The rank's full traceback ends in the DataLoader with the reason.",),
            facts={"victim_ranks": sorted(self.facts.victim_ranks - set(culprits))},
        )

    def why_not(self, t: Tables, winner: Finding, mine: Finding | None) -> str | None:
        if mine is not None or winner.category not in QUIET_VERDICTS - {Category.MISMATCHED_COLLECTIVES}:
            return None
        return (
            "no rank logged a DataLoader error (a worker killed or timed out, file descriptors or shared memory "
            f"exhausted){last_words(self.facts, winner.culprit_ranks)}"
        )
