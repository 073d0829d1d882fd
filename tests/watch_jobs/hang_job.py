"""A small DDP-style job (torchrun, gloo, CPU) whose one rank blocks on purpose, for `ncclpm watch`'s tests.

WATCH_MODE picks what rank WATCH_RANK does at step WATCH_STEP while the others enter the gradient all_reduce:
  lock    : it waits for a lock that a stalled background thread holds (a deadlock on the rank's own lock)
  busy    : it spins in a Python loop (a busy rank: 100% CPU, no progress)
  save    : it saves a checkpoint to storage whose writes stall (a hung network mount)
  healthy : nothing - every rank runs WATCH_STEPS steps and the job ends
The process-group timeout (WATCH_PG_TIMEOUT_S) is generous: the watcher must catch the hang long before it fires.
WATCH_FAULTHANDLER=1 registers faulthandler on SIGUSR1 (the stacks go to the rank's stderr); WATCH_DEBUG_PORT starts
torch's debug server (torch.distributed.debug, torch >= 2.10; its frontend on rank 0 needs `tabulate`).
"""

import datetime
import faulthandler
import os
import signal
import threading
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.elastic.multiprocessing.errors import record

MODE = os.environ.get("WATCH_MODE", "lock")
ODD = int(os.environ.get("WATCH_RANK", "1"))
STEP = int(os.environ.get("WATCH_STEP", "3"))
STEPS = int(os.environ.get("WATCH_STEPS", "6"))
STALL_S = float(os.environ.get("WATCH_STALL_S", "600"))
OUT = os.environ.get("WATCH_OUT", ".")


def log(msg):
    print(f"[{datetime.datetime.now().isoformat(timespec='milliseconds')}] rank{os.environ.get('RANK')}: {msg}", flush=True)  # fmt: skip


STATE_LOCK = threading.Lock()


def stalled_holder():
    with STATE_LOCK:
        time.sleep(STALL_S)


def wait_for_state_lock():
    log("updating shared state")
    threading.Thread(target=stalled_holder, daemon=True, name="holder").start()
    time.sleep(0.2)
    with STATE_LOCK:
        pass


def spin_until_converged():
    log("refining the schedule")
    end = time.monotonic() + STALL_S
    x = 0
    while time.monotonic() < end:
        x += 1
    return x


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


def train_step(model, opt, x, y):
    loss = nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)
    opt.step()
    return loss.item()


@record
def main():
    if os.environ.get("WATCH_FAULTHANDLER") == "1":
        faulthandler.register(signal.SIGUSR1, all_threads=True)
    timeout = datetime.timedelta(seconds=float(os.environ.get("WATCH_PG_TIMEOUT_S", "120")))
    dist.init_process_group("gloo", timeout=timeout)
    rank = dist.get_rank()
    if os.environ.get("WATCH_DEBUG_PORT"):
        from torch.distributed.debug import start_debug_server

        start_debug_server(port=int(os.environ["WATCH_DEBUG_PORT"]))
    log(f"pid {os.getpid()} world {dist.get_world_size()} init_process_group(gloo, timeout={timeout.total_seconds()}s)")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 8))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(1, STEPS + 1):
        if rank == ODD and step == STEP:
            if MODE == "lock":
                wait_for_state_lock()
            elif MODE == "busy":
                spin_until_converged()
            elif MODE == "save":
                save_checkpoint(model, step)
        x, y = torch.randn(16, 32), torch.randn(16, 8)
        loss = train_step(model, opt, x, y)
        log(f"step {step} loss {loss:.4f}")
        time.sleep(0.05)
    log("training done")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
