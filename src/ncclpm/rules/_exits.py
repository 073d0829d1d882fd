"""A fix several rules give for a process that ended with SIGBUS (how exits are read: `analysis/crashes.py`)."""

from __future__ import annotations

from ncclpm.rules.base import Fix

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
