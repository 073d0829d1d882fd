"""A launcher's number is a rank only when that launcher started the ranks. `srun -l` (and Open MPI's tag, and
horovodrun's) prefix each line with their task's number: one task per GPU makes it the rank, but `srun -l torchrun
...` runs one torchrun agent per node, and the task id is the node's. The lines say which: a local rank inside the
number (`3: [default1]:`), another rank torch names inside it (`1: [rank5]:`, `1: [E...] [Rank 5] Watchdog`), or
torchrun's failure summary printed under it - and then the number is no rank on any line of that file."""

from __future__ import annotations

from ncclpm.api import read_lines


def _ranks(*lines: str, source: str = "console.log") -> list[tuple[int | None, bool | None]]:
    table, _ = read_lines(source, list(lines), list(range(1, len(lines) + 1)))
    return list(zip(table["rank"].to_list(), table["rank_local"].to_list(), strict=True))


WATCHDOG = (
    "[E1122 08:24:16.797 ProcessGroupNCCL.cpp:632] [Rank {r}] Watchdog caught collective operation timeout: "
    "WorkNCCL(SeqNum=7, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600042 milliseconds"
)


def test_srun_tasks_that_are_the_ranks_stay_ranks() -> None:
    got = _ranks(
        "0: RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1, unhandled system error",
        f"1: [rank1]:{WATCHDOG.format(r=1)}",
        f"2: {WATCHDOG.format(r=2)}",
    )
    assert [r for r, _ in got] == [0, 1, 2]
    assert not any(local for _, local in got)


def test_srun_over_torchrun_tee_reads_the_workers_ranks() -> None:
    got = _ranks("3: [default1]:[rank9]:RuntimeError: boom", "3: [default1]: step 7")
    assert got[0] == (9, False)
    assert got[1][0] == 9  # the same torchrun stream's global rank, never srun's task 3


def test_a_rank_torch_names_under_a_task_id_disowns_it_for_the_whole_file() -> None:
    got = _ranks(
        f"1: [rank5]:{WATCHDOG.format(r=5)}",
        f"1: {WATCHDOG.format(r=6)}",
        "1: Traceback (most recent call last):",
        "1: RuntimeError: NCCL communicator was aborted on rank 6.",
    )
    assert [r for r, _ in got][:2] == [5, 6]  # (torch's bare `[Rank 6]`, once srun is no launcher of ranks)
    assert 1 not in [r for r, _ in got]


def test_torchruns_failure_summary_under_a_task_id_is_the_agents() -> None:
    got = _ranks(
        "1: Root Cause (first observed failure):",
        "1: [0]:",
        "1:   rank      : 9 (local_rank: 1)",
        "1:   exitcode  : 1 (pid: 32121)",
        "1: RuntimeError: simulated failure on rank 9",
    )
    assert 1 not in [r for r, _ in got]


def test_an_mpirun_tag_disagreeing_with_torch_is_no_rank() -> None:
    got = _ranks(f"[1,0]<stderr>:[rank4]:{WATCHDOG.format(r=4)}", "[1,0]<stderr>:RuntimeError: boom")
    assert got[0][0] == 4
    assert got[1][0] != 0


def test_an_old_torch_subgroup_rank_does_not_disown_srun() -> None:
    """torch <= 2.2 tags a subgroup's work with the rank in that group (`[Rank 1]` on global rank 5 of a
    tensor-parallel pair): srun's tasks stay the ranks."""
    got = _ranks(f"5: {WATCHDOG.format(r=1)}", "5: RuntimeError: NCCL communicator was aborted", "4: Traceback")
    assert [r for r, _ in got] == [5, 5, 4]
