"""Two torchrun agents ("nodes", one worker each). Rank 0 (on the node that did not host the rendezvous store, no
restarts) raises after a few steps; its agent ends and closes the rendezvous. Rank 1 then loses its peer in the
next collective; node 1's agent (restarts left) tries to re-join the rendezvous and finds it closed."""
import datetime

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
t = torch.ones(4)
dist.all_reduce(t)
print(f"rank{rank}: step 3", flush=True)
