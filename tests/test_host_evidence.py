"""Host and scheduler evidence: kernel log (Xid, GPU lost, OOM killer), nvidia-smi, Slurm - each in the wordings
real tools print (dmesg, dmesg -T, syslog/kern.log, journalctl, slurmstepd/srun of several releases).

Every line goes through the whole text path (envelope + catalogs) and must produce the event kind the rules read.
"""

from __future__ import annotations

import polars as pl
import pytest

from ncclpm.api import catalog
from ncclpm.ingest.selftest import parse_one


def _events(line: str) -> pl.DataFrame:
    return parse_one(catalog(), line)[1]


def _one(line: str, kind: str) -> dict:
    rows = _events(line).filter(pl.col("kind") == kind)
    assert rows.height == 1, f"{kind!r} from {line!r}: {_events(line).select('event', 'kind').rows()}"
    return rows.row(0, named=True)


# ---- NVIDIA driver: Xid, GPU lost, nvidia-smi ---------------------------------------------------------------------

XID_LINES = [
    # dmesg (seconds since boot), dmesg -T, syslog/kern.log, journalctl -k
    (
        "[2419876.551211] NVRM: Xid (PCI:0000:3b:00): 79, pid=48211, name=python, GPU has fallen off the bus.",
        79,
        "0000:3b:00",
        48211,
    ),
    (
        "[Mon Mar  3 10:21:09 2025] NVRM: Xid (PCI:0000:3b:00): 79, pid=2711, name=python, GPU has fallen off the bus.",
        79,
        "0000:3b:00",
        2711,
    ),
    (
        "Nov 14 03:12:44 gpu-c02 kernel: [2419876.551211] NVRM: Xid (PCI:0000:86:00): 48, pid='<unknown>', "
        "name=<unknown>, An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at "
        "partition 6, subpartition 0.",
        48,
        "0000:86:00",
        None,
    ),
    (
        "Nov 14 03:12:44 gpu-c02 kernel: NVRM: Xid (PCI:0000:bd:00): 94, pid=1234, name=python3, Ch 00000008",
        94,
        "0000:bd:00",
        1234,
    ),
    (
        "Oct 02 11:40:19 dgx07 kernel: NVRM: Xid (PCI:0000:c1:00): 119, pid=91239, name=python, Timeout after 6s of "
        "waiting for RPC response from GPU1 GSP! Expected function 76 (GSP_RM_CONTROL) (0x20800a4c 0x4).",
        119,
        "0000:c1:00",
        91239,
    ),
    (
        "[Thu Jan  9 07:02:11 2025] NVRM: Xid (PCI:0000:0f:00): 74, pid=3310, name=pt_main_thread, NVLink: fatal error "
        "detected on link 6(0x10000, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0)",
        74,
        "0000:0f:00",
        3310,
    ),
    (
        "[Thu Jan  9 07:02:11 2025] NVRM: Xid (PCI:0000:0f:00): 63, pid=3310, name=python, Row Remapper: New row "
        "marked for remapping, reset gpu to activate.",
        63,
        "0000:0f:00",
        3310,
    ),
]


@pytest.mark.parametrize(
    ("line", "code", "pci", "pid"), XID_LINES, ids=[f"xid{x[1]}-{i}" for i, x in enumerate(XID_LINES)]
)
def test_xid_lines_give_code_pci_address_and_pid(line: str, code: int, pci: str, pid: int | None) -> None:
    row = _one(line, "xid")
    assert (row["xid"], row["pci"], row["pid"]) == (code, pci, pid)


@pytest.mark.parametrize(
    "line",
    [
        "Apr  2 16:31:54 a100-s2-n05 kernel: [884211.310022] NVRM: Xid (PCI:0000:0f:00): 31, pid=26116, name=python, "
        "Ch 00000018, intr 00000000. MMU Fault: ENGINE GRAPHICS GPC3 GPCCLIENT_T1_12 faulted @ 0x7f1d_5a000000.",
        "[Thu Feb  6 09:12:40 2025] NVRM: Xid (PCI:0000:1b:00): 13, pid=5123, name=python, Graphics SM Warp Exception on "
        "(GPC 0, TPC 0, SM 0): Out Of Range Address",
        "Apr  2 16:31:54 a100-s2-n05 kernel: [884211.310301] NVRM: Xid (PCI:0000:0f:00): 43, pid=26116, name=python, "
        "Ch 00000018",
    ],
)
def test_application_xids_are_not_driver_failures(line: str) -> None:
    assert _one(line, "xid_app")["pid"] is not None
    assert _events(line).filter(pl.col("kind") == "xid").is_empty()


def test_gpu_fallen_off_the_bus_without_an_xid_is_a_lost_gpu() -> None:
    row = _one(
        "Nov 14 03:12:44 gpu-c02 kernel: [2419876.551241] NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.",
        "gpu_lost",
    )
    assert row["pci"] == "0000:3b:00.0"


@pytest.mark.parametrize(
    "line",
    [
        "Unable to determine the device handle for GPU0000:3B:00.0: Unknown Error",
        "|   3  NVIDIA A100-SXM4-80GB          On  | 00000000:4E:00.0 Off |                 ERR! |",
    ],
)
def test_nvidia_smi_failures_are_nvml_errors(line: str) -> None:
    _one(line, "nvml_error")


def test_a_healthy_nvidia_smi_row_is_not_an_error() -> None:
    line = "|   3  NVIDIA A100-SXM4-80GB          On  | 00000000:4E:00.0 Off |                    0 |"
    assert _events(line).filter(pl.col("kind") == "nvml_error").is_empty()


# ---- OOM killer -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "pid"),
    [
        (
            "[Tue Mar 11 02:11:45 2025] Out of memory: Killed process 48213 (python) total-vm:612345676kB, "
            "anon-rss:401234560kB, file-rss:123456kB, shmem-rss:2097152kB, UID:1000 pgtables:782456kB oom_score_adj:0",
            48213,
        ),
        (
            "[Tue Mar 11 02:11:45 2025] oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0-1,"
            "global_oom,task_memcg=/user.slice/user-1000.slice/session-12.scope,task=python,pid=48213,uid=1000",
            48213,
        ),
        # cgroup limit (Slurm, Kubernetes, Docker --memory): the kernel says "Memory cgroup out of memory"
        (
            "[Tue Mar 11 02:11:45 2025] Memory cgroup out of memory: Killed process 48213 (python) total-vm:612345676kB, "
            "anon-rss:401234560kB, file-rss:0kB, shmem-rss:0kB, UID:1000 pgtables:782456kB oom_score_adj:0",
            48213,
        ),
        # kernels before 5.x
        ("[1733456.123456] Out of memory: Kill process 48213 (python) score 951 or sacrifice child", 48213),
    ],
)
def test_oom_killer_lines_name_the_killed_pid(line: str, pid: int) -> None:
    rows = _events(line).filter(pl.col("kind") == "oom_killer")
    assert rows.height >= 1 and set(rows["pid"].to_list()) == {pid}


@pytest.mark.parametrize(
    "line",
    [
        "slurmstepd: error: Detected 1 oom-kill event(s) in StepId=1234.0 cgroup. Some of your processes may have been "
        "killed by the cgroup out-of-memory handler.",
        "slurmstepd: error: Detected 2 oom_kill events in StepId=771204.batch. Some of the step tasks have been OOM Killed.",
        "slurmstepd: error: Detected 1 oom-kill event(s) in step 88123.0 cgroup. Some of your processes may have been "
        "killed by the cgroup out-of-memory handler.",
    ],
)
def test_slurm_oom_kill_summaries(line: str) -> None:
    assert _one(line, "oom_killer")["count"] >= 1


def test_gpu_memory_oom_is_not_the_kernel_oom_killer() -> None:
    line = "[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."
    assert _events(line).filter(pl.col("kind") == "oom_killer").is_empty()


# ---- Slurm -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "reason", "node"),
    [
        (
            "slurmstepd: error: *** STEP 881234.0 ON gpu-d01 CANCELLED AT 2025-11-03T12:00:14 DUE TO TIME LIMIT ***",
            "TIME LIMIT",
            "gpu-d01",
        ),
        (
            "slurmstepd: error: *** JOB 881234 ON gpu-d01 CANCELLED AT 2025-11-03T12:00:14 DUE TO TIME LIMIT ***",
            "TIME LIMIT",
            "gpu-d01",
        ),
        (
            "slurmstepd: error: *** STEP 4410.0 ON nid001232 CANCELLED AT 2024-06-02T08:14:51 DUE TO NODE FAILURE, SEE "
            "SLURMCTLD LOG FOR DETAILS ***",
            "NODE FAILURE",
            "nid001232",
        ),
        (
            "slurmstepd: error: *** JOB 4410 ON nid001232 CANCELLED AT 2024-06-02T08:14:51 DUE TO PREEMPTION ***",
            "PREEMPTION",
            "nid001232",
        ),
        ("slurmstepd: error: *** STEP 902211.0 ON gpu-b01 CANCELLED AT 2026-09-02T07:41:58 ***", None, "gpu-b01"),
    ],
)
def test_slurm_cancel_lines_give_the_reason_and_node(line: str, reason: str | None, node: str) -> None:
    row = _one(line, "scheduler_cancel")
    assert (row["error_type"], row["value"]) == (reason, node)


def test_srun_names_the_node_that_failed() -> None:
    assert _one("srun: error: Node failure on gpu-g02", "node_failure")["value"] == "gpu-g02"


@pytest.mark.parametrize(
    ("line", "tasks", "how"),
    [
        ("srun: error: nid00123: task 5: Killed", "5", "Killed"),
        ("srun: error: gpu-c01: tasks 0-3: Aborted (core dumped)", "0-3", "Aborted"),
        ("srun: error: gpu-b02: tasks 5-6: Exited with exit code 1", "5-6", "Exited with exit code 1"),
        ("srun: error: gpu-c02: tasks 4,6-7: Segmentation fault (core dumped)", "4,6-7", "Segmentation fault"),
    ],
)
def test_srun_task_failures(line: str, tasks: str, how: str) -> None:
    row = _one(line, "scheduler_task_exit")
    assert (row["detail"], row["error_type"]) == (tasks, how)


# ---- container limits ------------------------------------------------------------------------------------------


def test_df_of_dev_shm_gives_its_size_and_use() -> None:
    row = _one("shm              64M   64M     0 100% /dev/shm", "shm_size")
    assert (row["detail"], row["value"]) == ("64M", "100%")
    assert _events("shm              64M   64M     0 100% /dev/shm").filter(pl.col("kind") == "shm_error").is_empty()


def test_srun_task_out_of_memory_is_an_oom_kill() -> None:
    row = _one("srun: error: nid00123: task 5: Out Of Memory", "oom_killer")
    assert (row["value"], row["detail"]) == ("nid00123", "5")
