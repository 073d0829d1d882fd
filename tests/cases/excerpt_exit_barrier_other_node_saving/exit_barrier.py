"""Two torchrun agents ("nodes", one worker each). Both ranks train a few steps; rank 1 then spends 330 s on
its "final checkpoint" while rank 0 returns. Rank 0's agent waits at torchrun's exit barrier (300 s by
default) for the other agent and gives up: `Error waiting on exit barrier` / `DistStoreError: Timed out after
301 seconds waiting for clients. 1/2 clients joined.` - after the job ran, not at its start."""
import datetime
import os
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
rank = dist.get_rank()
for step in range(3):
    t = torch.ones(4)
    dist.all_reduce(t)
    print(f"rank{rank}: step {step} loss {1.0 / (step + 1):.3f}", flush=True)
if rank == 1:
    print("rank1: saving final checkpoint to /tmp/ckpt/final.pt ...", flush=True)
    time.sleep(float(os.environ.get("SAVE_SECONDS", "330")))
    print("rank1: checkpoint saved", flush=True)
print(f"rank{rank}: training done", flush=True)
