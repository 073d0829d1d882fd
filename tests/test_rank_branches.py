"""The code reading of collectives only some ranks issue (ingest/code/rank_branches.py)."""

from __future__ import annotations

import pytest

from ncclpm.ingest.code.rank_branches import rank_branch_facts


def _read(code: str) -> list[tuple[str, float | None]]:
    return [(f["name"], f["number"]) for f in rank_branch_facts(code)]


@pytest.mark.parametrize(
    ("code", "expect"),
    [
        ("if dist.get_rank() == 0:\n    dist.broadcast(t, 0)\n", [("dist.broadcast", 0.0)]),
        ("if rank == 1:\n    torch.distributed.all_reduce(t)\n", [("torch.distributed.all_reduce", 1.0)]),
        # a node's local rank 0 is not the job's rank 0: no culprit
        ('if int(os.environ["LOCAL_RANK"]) == 0:\n    dist.barrier()\n', [("dist.barrier", None)]),
        ("if args.local_rank in [-1, 0]:\n    dist.all_gather(out, t)\n", [("dist.all_gather", None)]),
        (
            "if accelerator.is_main_process:\n    accelerator.wait_for_everyone()\n",
            [("accelerator.wait_for_everyone", 0.0)],
        ),
        ("if self.trainer.is_global_zero and log:\n    dist.barrier()\n", [("dist.barrier", None)]),
        ("if rank > 0:\n    pass\nelse:\n    dist.reduce(t, 0)\n", [("dist.reduce", None)]),
    ],
)
def test_a_collective_under_a_rank_branch_is_read(code: str, expect: list) -> None:
    assert _read(code) == expect


@pytest.mark.parametrize(
    "code",
    [
        # the barrier pair: every rank calls a barrier, in one branch or the other
        "if args.local_rank not in [-1, 0]:\n    dist.barrier()\nload()\nif args.local_rank == 0:\n    dist.barrier()\n",
        "if rank == 0:\n    dist.broadcast(x, 0)\nelse:\n    dist.broadcast(y, 0)\n",
        # distributed or not: every rank of a distributed run takes the same path
        "if args.local_rank != -1:\n    dist.barrier()\n",
        "if rank >= 0:\n    dist.all_reduce(t)\n",
        "if num_ranks == 1:\n    dist.all_reduce(t)\n",
        # point-to-point is rank-dependent by nature
        "if rank == 0:\n    dist.send(t, 1)\nelse:\n    dist.recv(t, 0)\n",
        # not torch.distributed
        "if rank == 0:\n    np.broadcast(a, b)\n",
        "if rank == 0:\n    print(dist.get_world_size())\n",
        "not python at all: if rank == 0 dist.barrier()",
    ],
)
def test_what_every_rank_calls_is_not_read(code: str) -> None:
    assert _read(code) == []
