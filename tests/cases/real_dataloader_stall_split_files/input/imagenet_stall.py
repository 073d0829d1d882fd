"""ImageNet-style training loop (torch, gloo, CPU, 3 ranks under torchrun). Progress lines are printed (stdout) in
the format of pytorch/examples' imagenet/main.py (no timestamps); epoch and validation summaries are logged with
Python's logging (stderr). On rank 2 the dataset's reads slow down in epoch 3 and then stall (a hung network
filesystem): the other ranks wait in all_reduce and hit the process-group timeout (20 s)."""

import datetime
import logging
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset

logging.basicConfig(level=logging.INFO, format="%(levelname)s:%(name)s:%(message)s")
log = logging.getLogger("imagenet")
STALL_RANK, STALL_EPOCH = 2, 3
SLOW = {8: 1.5, 9: 3.1, 10: 6.2, 11: 9.0, 12: 120.0}  # batch -> seconds its read takes on the stalling rank


class Images(Dataset):
    def __init__(self, rank, epoch_ref):
        self.rank, self.epoch_ref = rank, epoch_ref

    def __len__(self):
        return 20 * 8

    def __getitem__(self, i):
        if self.rank == STALL_RANK and self.epoch_ref[0] == STALL_EPOCH and i % 8 == 0:
            time.sleep(SLOW.get(i // 8, 0.0))
        g = torch.Generator().manual_seed(i)
        return torch.randn(64, generator=g), int(torch.randint(0, 10, (1,), generator=g))


class Meter:
    def __init__(self):
        self.sum, self.n, self.val = 0.0, 0, 0.0

    def update(self, v):
        self.val, self.sum, self.n = v, self.sum + v, self.n + 1

    @property
    def avg(self):
        return self.sum / max(self.n, 1)


def main():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=20))
    rank, world = dist.get_rank(), dist.get_world_size()
    epoch_ref = [0]
    loader = DataLoader(Images(rank, epoch_ref), batch_size=8, num_workers=0)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(1, 5):
        epoch_ref[0] = epoch
        batch_time, data_time, losses = Meter(), Meter(), Meter()
        end = time.time()
        for i, (x, y) in enumerate(loader):
            data_time.update(time.time() - end)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            for p in model.parameters():
                dist.all_reduce(p.grad)
                p.grad /= world
            opt.step()
            losses.update(loss.item())
            batch_time.update(time.time() - end)
            end = time.time()
            if i % 5 == 0:
                print(
                    f"Epoch: [{epoch}][{i:2d}/{len(loader)}]\tTime {batch_time.val:6.3f} ({batch_time.avg:6.3f})\t"
                    f"Data {data_time.val:6.3f} ({data_time.avg:6.3f})\tLoss {losses.val:.4e} ({losses.avg:.4e})",
                    flush=True,
                )
        log.info("* Finished epoch %d (loss %.4f)", epoch, losses.avg)
        acc = torch.tensor([float(torch.rand(1))])
        dist.all_reduce(acc)
        log.info(" * Acc@1 %.3f Acc@5 %.3f", 100 * acc.item() / world, 100 * min(1.0, 2 * acc.item() / world))
        log.info("*** Finished validating ***")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
