"""A dataset that raises in a DataLoader worker on rank 1 at step 3 (a corrupt sample): the worker's exception is
re-raised in rank 1's main process as `ValueError: Caught ValueError in DataLoader worker process 1.` with the
worker's `Original Traceback`; rank 0 then waits in the next all_reduce until gloo's timeout."""
import datetime, os
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset


class Shards(Dataset):
    def __init__(self, rank: int) -> None:
        self.rank = rank

    def __len__(self) -> int:
        return 64

    def __getitem__(self, i: int) -> torch.Tensor:
        if self.rank == 1 and i == 13:
            raise ValueError(f"corrupt sample {i} in shard-00{self.rank}.tar: unexpected end of record")
        return torch.randn(8)


def main() -> None:
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=15))
    rank = dist.get_rank()
    model = torch.nn.Linear(8, 1)
    loader = DataLoader(Shards(rank), batch_size=4, num_workers=2)
    for step, x in enumerate(loader):
        loss = model(x).sum()
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
        print(f"rank {rank} step {step} loss {loss.item():.3f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
