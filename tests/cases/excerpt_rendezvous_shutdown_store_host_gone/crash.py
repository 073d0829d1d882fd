"""Two torchrun agents ("nodes", one worker each). Both ranks train a few steps; rank 0 (on the node hosting the
rendezvous store) then raises. Its agent ends the job and exits, taking the store with it; node 1's agent, leaving,
cannot close the rendezvous any more (rank 1 was evaluating, outside any collective)."""
import datetime
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=30))
rank = dist.get_rank()
for step in range(3):
    t = torch.ones(4)
    dist.all_reduce(t)
    print(f"rank{rank}: step {step} loss {1.0 / (step + 1):.3f}", flush=True)
if rank == 0:
    raise ValueError("rank 0: corrupt sample in shard 17 (label index 9 out of range)")
print(f"rank{rank}: evaluating on the held-out set ...", flush=True)
time.sleep(20)
print(f"rank{rank}: eval done", flush=True)
