"""A small DDP-style training job that hangs on purpose, so its ranks can be stack-dumped while they wait.

Run under torchrun (gloo, CPU). HANG_MODE picks what the odd rank (HANG_RANK) does at step HANG_STEP while
the others enter the gradient all_reduce of `train_step`:
  checkpoint : it saves a checkpoint to storage that stalls (the writer sleeps, like a hung NFS mount)
  dataloader : its DataLoader worker blocks reading sample HANG_INDEX, so its main thread waits in __next__
  collective : it runs `evaluate`, which calls all_gather - a different collective from another call site
Every rank registers faulthandler: SIGUSR1 writes all threads' stacks to stderr (into torchrun's per-rank
stderr.log), SIGUSR2 to faulthandler_rank<R>.txt in HANG_OUT. The process-group timeout (HANG_PG_TIMEOUT_S)
ends the job after the dumps were taken.
"""

import datetime
import faulthandler
import os
import signal
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.elastic.multiprocessing.errors import record
from torch.utils.data import DataLoader, Dataset

MODE = os.environ.get("HANG_MODE", "checkpoint")
ODD = int(os.environ.get("HANG_RANK", "2"))
STEP = int(os.environ.get("HANG_STEP", "3"))
STALL_S = float(os.environ.get("HANG_STALL_S", "600"))
OUT = os.environ.get("HANG_OUT", ".")


def log(msg):
    print(f"[{datetime.datetime.now().isoformat(timespec='milliseconds')}] rank{os.environ.get('RANK')}: {msg}", flush=True)  # fmt: skip


class StalledWriter:
    """A file whose writes stall, like a checkpoint directory on a hung network mount."""

    def __init__(self, path):
        self.f = open(path, "wb")  # noqa: SIM115 - a file object torch.save writes into

    def write(self, data):
        time.sleep(STALL_S)
        return self.f.write(data)

    def flush(self):
        self.f.flush()


def save_checkpoint(model, step):
    log(f"saving checkpoint for step {step}")
    torch.save({"model": model.state_dict(), "step": step}, StalledWriter(os.path.join(OUT, f"ckpt_{step}.pt")))


class Samples(Dataset):
    def __init__(self, rank):
        self.rank = rank

    def __len__(self):
        return 4096

    def __getitem__(self, i):
        if self.rank == ODD and i == STEP * 8:
            print(f"worker pid {os.getpid()}: sample {i} read stalls", flush=True)
            time.sleep(STALL_S)
        g = torch.Generator().manual_seed(i)
        return torch.randn(32, generator=g), torch.randn(8, generator=g)


def train_step(model, opt, x, y):
    loss = nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)
    opt.step()
    return loss.item()


def evaluate(model, world):
    scores = [torch.zeros(4) for _ in range(world)]
    dist.all_gather(scores, torch.ones(4))
    return scores


@record
def main():
    faulthandler.register(signal.SIGUSR1, file=sys.stderr, all_threads=True)
    rank_hint = os.environ.get("RANK", "x")
    fh_file = open(os.path.join(OUT, f"faulthandler_rank{rank_hint}.txt"), "w")  # noqa: SIM115 - open for the whole run
    faulthandler.register(signal.SIGUSR2, file=fh_file, all_threads=True)
    timeout = float(os.environ.get("HANG_PG_TIMEOUT_S", "120"))
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=timeout))
    rank, world = dist.get_rank(), dist.get_world_size()
    log(f"pid {os.getpid()} world {world} mode {MODE}")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 8))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(Samples(rank), batch_size=8, num_workers=2 if MODE == "dataloader" else 0)
    for step, (x, y) in enumerate(loader, 1):
        if step == STEP and rank == ODD:
            log(f"entering step {step} (odd rank)")
            if MODE == "checkpoint":
                save_checkpoint(model, step)
            elif MODE == "collective":
                evaluate(model, world)
        elif step == STEP:
            log(f"entering step {step}")
        loss = train_step(model, opt, x, y)
        log(f"step {step} loss {loss:.4f}")
        if step >= STEP + 2:
            break
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
