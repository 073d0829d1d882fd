"""torch.multiprocessing.spawn, 2 processes, gloo. Process 1 raises while loading its data shard, before any
collective, while process 0 is still preparing; the parent re-raises process 1's exception
(`-- Process 1 terminated with the following error:` and its traceback)."""
import datetime
import os
import time

import torch.distributed as dist
import torch.multiprocessing as mp


def load_shard(rank: int) -> list[int]:
    if rank == 1:
        raise FileNotFoundError(f"/data/shards/train-0000{rank}.parquet")
    return [1, 2, 3]


def worker(rank: int, world: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29881")
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=30))
    if rank == 0:
        time.sleep(5)  # building the vocabulary
    load_shard(rank)
    dist.barrier()


if __name__ == "__main__":
    mp.spawn(worker, args=(2,), nprocs=2, join=True)
