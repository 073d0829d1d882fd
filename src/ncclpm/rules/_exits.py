"""What several rules say of a process's end: the fix for SIGBUS, who an OOM kill was by, and a crash at teardown
after the work was done (how exits are read: `analysis/crashes.py`; the end of the work: `analysis/activity.py`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ncclpm.model import said
from ncclpm.rules.base import Fix

if TYPE_CHECKING:
    from ncclpm.analysis.activity import FinishedWork

# SIGBUS in a training process is memory it mapped that could not be backed, almost always /dev/shm.
BUS_ERROR = Fix(
    "SIGBUS: a page of mapped memory could not be backed - almost always a full `/dev/shm` (Docker's 64 MB "
    "default; DataLoader workers and NCCL both use it): run the container with `--shm-size=16g` or `--ipc=host`, "
    "check `df -h /dev/shm` on the node.",
    when="a process ended with SIGBUS",
)
TEARDOWN = Fix(
    "The work finished before the crash (its results are written): fix the shutdown - wait for every rank "
    "(`dist.barrier()`) before `dist.destroy_process_group()`, join or stop background threads (data "
    "prefetchers, loggers, async checkpoint writers) before the interpreter exits.",
    when="the job logged the end of its work before the crash",
)

# an oom_killer event's `killer` (parsers/kinds.toml) as a report says it
_OOM_KILLERS = {
    "kernel": "the kernel's OOM killer",
    "cgroup": "its memory cgroup's OOM killer",
    "slurm": "Slurm's OOM killer (the job step's memory limit)",
    "kubernetes": "the OOM killer at its container's memory limit (Kubernetes: OOMKilled)",
    "ray": "Ray's memory monitor (the node passed its memory threshold)",
}


def oom_killer_said(killer: str | None) -> str:
    """`the kernel's OOM killer`, `Ray's memory monitor (...)`: whose OOM kill ended a process."""
    return _OOM_KILLERS.get(killer or "kernel", _OOM_KILLERS["kernel"])


def done_before_teardown(done: FinishedWork, prefix: str, who: str) -> str:
    """`The work was done (`training done` after `step 900`) when rank 1 died at teardown`: said first."""
    after = f" after `{said(done.last_step, prefix, 60)}`" if done.last_step else ""
    return f"The work was done (`{said(done.text, prefix, 60)}`{after}) when {who} died at teardown"
