"""Crash readings (issue 32): what a crash line means decides the verdict, not that a process died.

- a SIGABRT whose native backtrace runs through torch's NCCL watchdog is the watchdog ending its process after a
  collective failed: a victim's line, never "a process crashed";
- a crash after the job logged the end of its work is a teardown crash, said first, with the last step reached,
  whether or not a rank is named;
- torch's "NVIDIA driver on your system is too old" is a build that does not fit the driver, not a rank crash;
- the loader refusing a compiled library (`undefined symbol`) is a version/ABI mismatch between installed packages.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ncclpm.api import diagnose
from ncclpm.model import Category

WATCHDOG_BACKTRACE = [
    "(RayWorkerWrapper pid=4009) /usr/lib64/libstdc++.so.6(+0x5e9f4) [0x7fa2fd0009f4]",
    "(RayWorkerWrapper pid=4009) /usr/local/lib/python3.9/site-packages/torch/lib/libtorch_cuda.so(+0xe0845a) "
    "[0x7f9a817d745a] c10d::ProcessGroupNCCL::ncclCommWatchdog()",
    "(RayWorkerWrapper pid=4009) /usr/lib64/libpthread.so.0(+0x7ea5) [0x7fa2fe195ea5] start_thread",
    "(RayWorkerWrapper pid=4009) *** SIGABRT received at time=1720159248 on cpu 5 ***",
]


def _diagnose(tmp_path: Path, lines: list[str]):
    log = tmp_path / "job.log"
    log.write_text("\n".join(lines) + "\n")
    return diagnose([log])


def test_a_sigabrt_through_the_nccl_watchdog_is_its_abort_not_a_crash(tmp_path: Path) -> None:
    d = _diagnose(tmp_path, WATCHDOG_BACKTRACE)
    assert str(d.category) == "unknown" and "watchdog aborted" in d.primary.summary, d.primary.summary


def test_a_sigabrt_elsewhere_is_the_process_s_own_crash(tmp_path: Path) -> None:
    lines = [
        line.replace("c10d::ProcessGroupNCCL::ncclCommWatchdog()", "at::native::copy_") for line in WATCHDOG_BACKTRACE
    ]
    d = _diagnose(tmp_path, lines)
    assert str(d.category) == "rank_crash" and "SIGABRT" in d.primary.summary, d.primary.summary


def test_a_crash_after_the_work_was_done_is_said_to_be_at_teardown_with_the_last_step(tmp_path: Path) -> None:
    d = _diagnose(
        tmp_path,
        [
            "Epoch 9: 100%|██████████| 500/500 [10:00<00:00,  1.2it/s, loss=0.1]",
            "Training completed. Saving final model to /out/final",
            "terminate called without an active exception",
            "Aborted (core dumped)",
        ],
    )
    assert str(d.category) == "rank_crash"
    assert d.primary.summary.startswith("The work was done (`Training completed"), d.primary.summary
    assert "died at teardown" in d.primary.summary and "Epoch 9" in d.primary.summary
    assert any("destroy_process_group" in f for f in d.primary.fixes)


def test_a_crash_before_the_work_was_done_is_no_teardown(tmp_path: Path) -> None:
    d = _diagnose(tmp_path, ["Epoch 3: 40%|████      | 200/500 [04:00<06:00,  1.2it/s]", "Aborted (core dumped)"])
    assert str(d.category) == "rank_crash" and "teardown" not in d.primary.summary


def test_a_driver_too_old_for_the_build_is_a_configuration_fault(tmp_path: Path) -> None:
    d = _diagnose(
        tmp_path,
        [
            "[rank3]: RuntimeError: The NVIDIA driver on your system is too old (found version 11040). Please update "
            "your GPU driver by downloading and installing a new version from the URL: "
            "http://www.nvidia.com/Download/index.aspx"
        ],
    )
    assert str(d.category) == "config_version" and "driver" in d.primary.summary, d.primary.summary


def test_an_extension_built_for_another_torch_is_a_version_fault_not_a_crash(tmp_path: Path) -> None:
    d = _diagnose(
        tmp_path,
        [
            "[rank0]: ImportError: /usr/local/lib/python3.10/dist-packages/flash_attn_2_cuda.cpython-310-x86_64-linux-gnu.so: "
            "undefined symbol: _ZN3c104cuda9SetDeviceEi"
        ],
    )
    assert str(d.category) == "config_version", d.primary.summary
    assert "flash_attn_2_cuda" in d.primary.summary and any("--force-reinstall" in f for f in d.primary.fixes)


def test_an_import_error_that_names_no_symbol_is_no_version_fault(tmp_path: Path) -> None:
    d = _diagnose(tmp_path, ["[rank0]: ImportError: cannot import name 'flash_attn_func' from 'flash_attn'"])
    assert str(d.category) != "config_version"


def test_the_oom_kill_and_the_launchers_exit_of_one_pid_name_the_worker(tmp_path: Path) -> None:
    """The kernel's `Out of memory: Killed process 5523 (python)` and torchrun's `failed (exitcode: -9) local_rank: 2
    (pid: 5523)` are one death: the summary names local rank 2 and its pid, at a higher confidence than either line
    alone (it said "A process ... the excerpt does not say which rank it was", 0.50)."""
    log = tmp_path / "node.log"
    log.write_text(
        "[Thu Mar  7 10:00:00 2024] Out of memory: Killed process 5523 (python) total-vm:120000000kB, "
        "anon-rss:90000000kB, file-rss:0kB, shmem-rss:0kB, UID:1000 pgtables:200000kB oom_score_adj:0\n"
        "WARNING:torch.distributed.elastic.multiprocessing.api:Sending process 5521 closing signal SIGTERM\n"
        "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -9) local_rank: 2 (pid: 5523) of "
        "binary: /usr/bin/python3\n"
    )
    d = diagnose([log])
    assert d.category == Category.RANK_CRASH and d.summary.startswith(
        "Local rank 2 (pid 5523) was killed by the kernel"
    ), d.summary
    assert d.confidence == pytest.approx(0.6)
    other = tmp_path / "other.log"
    other.write_text(log.read_text().replace("(pid: 5523)", "(pid: 6001)"))
    assert diagnose([other]).summary.startswith("A process was killed by the kernel")


@pytest.mark.parametrize(
    ("line", "said"),
    [
        (
            "[Tue Apr  1 02:11:45 2025] Out of memory: Killed process 48211 (python) total-vm:412345678kB",
            "the kernel's",
        ),
        (
            "[Tue Mar 11 02:11:45 2025] Memory cgroup out of memory: Killed process 48213 (python) total-vm:61234kB",
            "its memory cgroup's",
        ),
        (
            "slurmstepd: error: Detected 1 oom_kill event in StepId=771204.0. Some of the step tasks have been OOM Killed.",
            "Slurm's",
        ),
        (
            "Memory on the node (IP: 10.0.0.5, ID: 7a8b) where the task (actor ID: 1b2c, name=WorkerDict.__init__, "
            "pid=4410, memory used=180.25GB) was running was 241.86GB / 251.55GB (0.961484), which exceeds the memory "
            "usage threshold of 0.95. Ray killed this worker (ID: 9f9f) because it was the most recently scheduled task",
            "Ray's memory monitor",
        ),
    ],
)
def test_an_oom_kill_says_whose_it_was(tmp_path: Path, line: str, said: str) -> None:
    """The kernel, a memory cgroup, Slurm and Ray's memory monitor all end a process for host memory; the report
    names the one whose line it read (`killer`, set by the oom_killer kind's readings)."""
    d = _diagnose(tmp_path, [line])
    assert str(d.category) == "rank_crash" and f"killed by {said}" in d.primary.summary, d.primary.summary
