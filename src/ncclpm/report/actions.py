"""What on-call does next, in one word - declared in one place.

Every verdict gets one `Action`: `restart` (transient: resubmit), `exclude_node` (hardware on a named node: drain
it), `fix_code` (the job's own code: hand it to the job owner), `fix_config` (launch, environment, container),
`raise_timeout` (legitimate work outlasts a timeout or a time limit), `collect_more` (the logs do not decide),
`none` (nothing failed). The category decides (`BY_CATEGORY`); a rule that knows better overrides it for its
findings (`BY_RULE`, a function of the finding's own facts). Every category must have an entry (checked at
import): a new category without an action fails every test at once.
"""

from __future__ import annotations

from collections.abc import Callable

from ncclpm.model import Action, Category, Finding

# category -> (action, why in a few words). Categories are str enums: a plain id maps a category another branch
# adds (`no_failure`, `not_a_training_log`) before it exists.
BY_CATEGORY: dict[str, tuple[Action, str]] = {
    Category.SLOW_RANK_WORK: (Action.FIX_CODE, "rank-local work inside a synchronised section: the job owner moves it"),
    Category.DATALOADER_HANG: (Action.FIX_CODE, "the input pipeline of one rank stopped: the job owner fixes it"),
    Category.NVML_DRIVER_FAILURE: (
        Action.EXCLUDE_NODE,
        "a GPU or driver fault on a node: drain it, resubmit without it",
    ),
    Category.MISMATCHED_COLLECTIVES: (Action.FIX_CODE, "ranks issued different collectives: a program bug"),
    Category.RANK_CRASH: (Action.FIX_CODE, "a rank died of its own error: the job owner fixes it"),
    Category.CUDA_OOM: (Action.FIX_CONFIG, "out of GPU memory: smaller batch, sharding or activation checkpointing"),
    Category.TIMEOUT_TOO_SHORT: (Action.RAISE_TIMEOUT, "every rank was in the collective: give it more time"),
    Category.NETWORK_TRANSPORT: (Action.RESTART, "a network error with no node to blame: resubmit, watch for a repeat"),
    Category.SHM_P2P_TOPOLOGY: (Action.FIX_CONFIG, "/dev/shm or peer-to-peer set-up: container or launch settings"),
    Category.INIT_RENDEZVOUS: (Action.FIX_CONFIG, "the ranks never met: address, port or world size"),
    Category.CONFIG_VERSION: (Action.FIX_CONFIG, "the job was set up wrong: launch settings or versions"),
    Category.SYMPTOM: (Action.COLLECT_MORE, "only the symptom is in the logs"),
    Category.UNKNOWN: (Action.COLLECT_MORE, "the logs do not decide: collect what the report lists"),
    "no_failure": (Action.NONE, "nothing failed"),
    "not_a_training_log": (Action.COLLECT_MORE, "not a training job's log: send the job's own logs"),
}


def _network(f: Finding) -> tuple[Action, str] | None:
    classes = f.net_classes
    if classes and classes <= {"interface"}:
        return Action.FIX_CONFIG, "no usable network interface: NCCL_SOCKET_IFNAME / NCCL_IB_HCA"
    if len(f.named_hosts) == 1:
        if not f.host_pairs:
            return Action.EXCLUDE_NODE, "the host's own network adapter reported the failure: drain it"
        return Action.EXCLUDE_NODE, "every failing connection goes through one host: drain it"
    return None


def _scheduler(f: Finding) -> tuple[Action, str] | None:
    if f.culprit_ranks:  # a node failed under the job (the rule names its ranks)
        return Action.EXCLUDE_NODE, "Slurm saw the node fail: drain it, resubmit without it"
    return Action.RAISE_TIMEOUT, "the job reached its time limit: raise it or checkpoint and resume"


def _killed(f: Finding) -> tuple[Action, str] | None:
    if f.after_work:
        return Action.FIX_CODE, "the work was done, the crash is at teardown: the job owner fixes the shutdown"
    if f.killed:
        return (
            Action.FIX_CONFIG,
            "a process killed from outside (host memory, most often): find the sender, use less RAM",
        )
    return None


# rule id -> the action its findings call for, from their own facts (None: the category's action stands)
BY_RULE: dict[str, Callable[[Finding], tuple[Action, str] | None]] = {
    "NV01": lambda f: (Action.EXCLUDE_NODE, "a GPU or driver fault on a node: drain it, resubmit without it"),
    "NW01": _network,
    # a Ray driver that never reached its cluster's head: Ray's address and ports, not the ranks' rendezvous
    "RZ01": lambda f: (
        (Action.FIX_CONFIG, "the Ray driver never reached its cluster: the head's address and ports")
        if f.facts.get("ray_cluster")
        else None
    ),
    "SH01": lambda f: (Action.FIX_CONFIG, "/dev/shm or peer-to-peer set-up: container or launch settings"),
    "CF01": lambda f: (Action.FIX_CONFIG, "ranks set up wrong (GPU binding, launcher vs script)"),
    "TS01": lambda f: (Action.RAISE_TIMEOUT, "the timeout in force is too short for the job's work"),
    # (a stall at a default timeout nobody set is the transport's: its category's action, not more time)
    "TO01": lambda f: (
        (Action.RAISE_TIMEOUT, "every rank was in the collective: give it more time")
        if f.category == Category.TIMEOUT_TOO_SHORT
        else None
    ),
    "SL01": _scheduler,
    "EX01": lambda f: (Action.RESTART, "killed from outside while no rank had failed: resubmit, find the sender"),
    "CR03": lambda f: (Action.COLLECT_MORE, "a peer process went away: its own output has the reason, collect it"),
    "OM02": lambda f: (Action.FIX_CONFIG, "the engine does not fit the GPU: context length, memory share or more GPUs"),
    "CR01": _killed,
    "CR02": _killed,
}


def action_for(f: Finding) -> tuple[Action, str]:
    """The action and its reason for a root-cause finding."""
    override = BY_RULE.get(f.rule)
    chosen = override(f) if override is not None else None
    return chosen or BY_CATEGORY[str(f.category)]


def check() -> list[str]:
    """Categories without an action (empty when every category has one)."""
    return [f"category {c} has no action in actions.BY_CATEGORY" for c in Category if str(c) not in BY_CATEGORY]


_problems = check()
if _problems:  # pragma: no cover - a declaration error, caught by every test
    raise RuntimeError("; ".join(_problems))
