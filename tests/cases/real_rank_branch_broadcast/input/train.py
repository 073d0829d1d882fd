import datetime
import os

import torch
import torch.distributed as dist


def main() -> None:
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    rank = dist.get_rank()
    t = torch.ones(4)
    dist.all_reduce(t)
    print(f"rank {rank}: warm-up all_reduce done, sum {t.sum().item()}", flush=True)
    if rank == 0:
        stats = torch.tensor([float(rank), 1.0])
        dist.broadcast(stats, 0)  # only the main rank shares its stats
    print(f"rank {rank}: step done", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
