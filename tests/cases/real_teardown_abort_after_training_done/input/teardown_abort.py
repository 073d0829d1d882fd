"""Train to the end, then die at teardown (torch, gloo, CPU, 2 ranks under torchrun). Every rank finishes its steps
and logs `training done`; at exit rank 1 calls std::terminate from an atexit hook, as a background C++ thread left
joinable when the interpreter tears down does: libstdc++ prints `terminate called without an active exception` and
the process dies of SIGABRT."""

import atexit
import ctypes
import datetime
import logging
import os

import torch
import torch.distributed as dist
import torch.nn as nn

logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s [rank%(rank)s] %(message)s")
log = logging.LoggerAdapter(logging.getLogger("train"), {"rank": os.environ.get("RANK", "?")})


def leave_thread_joinable():
    ctypes.CDLL("libstdc++.so.6")._ZSt9terminatev()


def main():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    model = nn.Linear(16, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    steps = 30
    for step in range(1, steps + 1):
        loss = nn.functional.mse_loss(model(torch.randn(8, 16)), torch.randn(8, 4))
        opt.zero_grad()
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
        opt.step()
        if step % 10 == 0:
            log.info("step %d/%d loss %.4f", step, steps, loss.item())
    torch.save(model.state_dict(), f"final_rank{rank}.pt")
    log.info("saved final checkpoint final_rank%d.pt", rank)
    log.info("training done")
    if rank == 1:
        atexit.register(leave_thread_joinable)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
