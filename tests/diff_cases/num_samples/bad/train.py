"""Train a small model data-parallel on CPU (torch.distributed, gloo): the job `run.sh` launches.

Settings: PG_TIMEOUT_S (the process group's timeout, seconds), NUM_SAMPLES (how many samples rank 0 prepares
before training), --epochs/--steps/--batch-size, --log-grad-norm (log the global gradient norm each step).
"""

import argparse
import datetime
import logging
import os
import socket
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn

log = logging.getLogger("train")


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--steps", type=int, default=8, help="steps per epoch")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--log-grad-norm", action="store_true", help="log the global gradient norm")
    return p.parse_args()


def prepare_data(num_samples):
    """Tokenise and cache the dataset (rank 0 only; the others read the cache)."""
    done = 0
    while done < num_samples:
        chunk = min(10_000, num_samples - done)
        time.sleep(chunk / 10_000)  # ~1 s per 10k samples
        done += chunk
        if done % 50_000 == 0 or done == num_samples:
            log.info("preprocessing: %d/%d samples", done, num_samples)


def evaluate(model):
    """Validation pass over the held-out set (rank 0)."""
    log.info("running evaluation ...")
    time.sleep(15)
    scores = torch.rand(100)
    accuracy = np.float_(scores.mean().item())
    log.info("evaluation done: accuracy %.3f", accuracy)


def main():
    args = parse_args()
    timeout = datetime.timedelta(seconds=int(os.environ.get("PG_TIMEOUT_S", "1800")))
    dist.init_process_group("gloo", timeout=timeout)
    rank, world = dist.get_rank(), dist.get_world_size()
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s [rank{rank}] %(levelname)s %(message)s")
    if rank == 0:
        log.info("torch %s numpy %s on %s, world size %d", torch.__version__, np.__version__, socket.gethostname(), world)
        prepare_data(int(os.environ.get("NUM_SAMPLES", "20000")))
    dist.barrier()

    torch.manual_seed(rank)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 8))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for epoch in range(1, args.epochs + 1):
        for step in range(1, args.steps + 1):
            x, y = torch.randn(args.batch_size, 32), torch.randn(args.batch_size, 8)
            loss = nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            for p in model.parameters():
                dist.all_reduce(p.grad)
                p.grad /= world
            if args.log_grad_norm and rank == 0:
                norm = torch.stack([p.grad.norm() for p in model.parameters()]).norm().reshape(1)
                dist.all_reduce(norm)
                log.info("grad norm %.4f", norm.item() / world)
            opt.step()
            if rank == 0 and step % 4 == 0:
                log.info("epoch %d step %d loss %.4f", epoch, step, loss.item())
            time.sleep(0.2)
        if rank == 0 and epoch == 1:
            evaluate(model)
        dist.barrier()
    if rank == 0:
        log.info("training done")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
