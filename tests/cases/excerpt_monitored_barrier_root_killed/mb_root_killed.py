"""Three ranks, gloo. Ranks 1 and 2 enter dist.monitored_barrier(timeout=20 s); rank 0 (the barrier's root) is
SIGKILLed (as the OOM killer would) before it gets there. What a non-root rank reports when the root dies."""
import datetime
import os
import signal
import time

import torch.distributed as dist

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=30))
rank = dist.get_rank()
print(f"rank{rank}: init done, world={dist.get_world_size()}", flush=True)
if rank == 0:
    print("rank0: building the evaluation cache...", flush=True)
    time.sleep(2)
    os.kill(os.getpid(), signal.SIGKILL)
dist.monitored_barrier(timeout=datetime.timedelta(seconds=20))
print(f"rank{rank}: passed the barrier", flush=True)
