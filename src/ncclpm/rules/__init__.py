"""The rule registry. Every rule module is listed here explicitly (a meta-test checks none is missing)."""

from __future__ import annotations

from ncclpm import precedence
from ncclpm.rules.base import Rule, RuleError
from ncclpm.rules.benign_only import BenignNoticesOnly
from ncclpm.rules.config_version import VersionsDifferAcrossRanks
from ncclpm.rules.cuda_build import CudaBuildDoesNotFit
from ncclpm.rules.cuda_oom import CudaOutOfMemory
from ncclpm.rules.dataloader import DataloaderFailure
from ncclpm.rules.engine_memory import EngineMemoryShort
from ncclpm.rules.finished_cleanly import JobFinishedCleanly
from ncclpm.rules.fr_mismatch import FlightRecorderCollectivesDisagree
from ncclpm.rules.fr_never_joined import FlightRecorderRankStopped
from ncclpm.rules.gpus_short import GpusShort
from ncclpm.rules.insufficient import InsufficientEvidence
from ncclpm.rules.killed_outside import JobKilledFromOutside
from ncclpm.rules.launch_config import LaunchMisconfigured
from ncclpm.rules.main_first import MainProcessFirstOutlastedTimeout
from ncclpm.rules.mismatch_logs import CollectivesDisagreeInLogs
from ncclpm.rules.models_differ import ModelsDiffer
from ncclpm.rules.nccl_class import NcclResultClass
from ncclpm.rules.nccl_crash import CrashInsideNccl
from ncclpm.rules.nccl_invalid_usage import NcclInvalidUsage
from ncclpm.rules.network import NcclTransportError
from ncclpm.rules.not_a_job import NotATrainingLog
from ncclpm.rules.nvml import NvmlDriverFailure
from ncclpm.rules.parallel_layout import ParallelLayoutRefused
from ncclpm.rules.peer_gone import PeerProcessGone
from ncclpm.rules.process_died import ProcessDiedRankUnknown
from ncclpm.rules.rank_branch import CollectiveUnderRankBranch
from ncclpm.rules.rank_crash import RankDiedFirst
from ncclpm.rules.rendezvous import ProcessGroupNeverFormed
from ncclpm.rules.scheduler import JobCancelledByScheduler
from ncclpm.rules.scheduler_refused import SchedulerRefusedRequest
from ncclpm.rules.shm_topology import ShmOrP2pFailure
from ncclpm.rules.slow_rank import RankBusyOutsideCollectives
from ncclpm.rules.stacks import StacksOddRankOut
from ncclpm.rules.still_running import StillRunningWhenOthersFailed
from ncclpm.rules.store_wait import RankAwaitedThroughStore
from ncclpm.rules.timeout_sanity import TimeoutSetTooShort
from ncclpm.rules.timeout_short import AllRanksTimedOutTogether
from ncclpm.rules.timeout_symptom import CollectiveTimeoutSymptom
from ncclpm.rules.torch_usage import TorchUsageError
from ncclpm.rules.work_outlasted import WorkOutlastedTimeout
from ncclpm.rules.world_size import WorldSizeMismatch
from ncclpm.rules.wrong_values import CollectivesDeliveredWrongValues

ALL_RULES: tuple[type[Rule], ...] = (
    CollectiveTimeoutSymptom,
    RankDiedFirst,
    ProcessDiedRankUnknown,
    PeerProcessGone,
    RankBusyOutsideCollectives,
    StillRunningWhenOthersFailed,
    DataloaderFailure,
    NvmlDriverFailure,
    CollectivesDisagreeInLogs,
    CollectiveUnderRankBranch,
    CudaOutOfMemory,
    EngineMemoryShort,
    AllRanksTimedOutTogether,
    ProcessGroupNeverFormed,
    FlightRecorderCollectivesDisagree,
    FlightRecorderRankStopped,
    NcclTransportError,
    NcclResultClass,
    ShmOrP2pFailure,
    VersionsDifferAcrossRanks,
    CudaBuildDoesNotFit,
    CrashInsideNccl,
    JobCancelledByScheduler,
    LaunchMisconfigured,
    GpusShort,
    ParallelLayoutRefused,
    ModelsDiffer,
    SchedulerRefusedRequest,
    CollectivesDeliveredWrongValues,
    WorldSizeMismatch,
    NcclInvalidUsage,
    TorchUsageError,
    JobKilledFromOutside,
    MainProcessFirstOutlastedTimeout,
    WorkOutlastedTimeout,
    TimeoutSetTooShort,
    JobFinishedCleanly,
    BenignNoticesOnly,
    RankAwaitedThroughStore,
    StacksOddRankOut,
    NotATrainingLog,
    InsufficientEvidence,
)


def check_registry(rules: tuple[type[Rule], ...]) -> None:
    """Ids and names are unique, every rule has its place in `precedence.PRECEDENCE`, and every `explains` id is
    a registered rule (else `RuleError` at import)."""
    for attr in ("id", "name"):
        values = [getattr(r, attr) for r in rules]
        dupes = sorted({v for v in values if values.count(v) > 1})
        if dupes:
            raise RuleError(f"rule {attr}s registered twice: {dupes}")
    ids = {r.id for r in rules}
    for rule in rules:
        unknown = sorted(set(rule.explains) - ids)
        if unknown:
            raise RuleError(f"{rule.id} ({rule.__module__}): `explains` names unknown rule ids {unknown}")
    problems = precedence.check(ids)
    if problems:
        raise RuleError(f"src/ncclpm/precedence.py: {'; '.join(problems)}")


check_registry(ALL_RULES)


def by_id(rule_id: str) -> type[Rule]:
    """Look a rule up by id (`CR01`) or name (`rank-died-first`), case-insensitively."""
    key = rule_id.strip().lower()
    for rule in ALL_RULES:
        if key in (rule.id.lower(), rule.name):
            return rule
    raise KeyError(rule_id)
