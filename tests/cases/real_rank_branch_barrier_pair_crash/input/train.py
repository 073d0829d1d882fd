import datetime

import torch
import torch.distributed as dist


def prepare(rank: int) -> torch.Tensor:
    # the main process builds the cache first, the others wait and then read it (the usual barrier pair)
    if rank != 0:
        dist.barrier()
    data = torch.arange(8, dtype=torch.float32)
    if rank == 0:
        dist.barrier()
    return data


def main() -> None:
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    rank = dist.get_rank()
    data = prepare(rank)
    dist.all_reduce(data)
    print(f"rank {rank}: data ready, sum {data.sum().item()}", flush=True)
    if rank == 1:
        raise ValueError(f"rank {rank}: label index 9 out of range for 8 classes")
    dist.all_reduce(data)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
