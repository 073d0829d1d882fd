"""Rank 0 hosts the c10d store (plain launch, env://) and is SIGKILLed while preprocessing; rank 1 waits
for rank 0's "data ready" key in the store. What rank 1 prints is what a survivor sees when the store's
host dies (torch >= 2.2: `Failed to recv, got 0 bytes. Connection was likely closed...`)."""
import datetime
import os
import signal
import time

import torch.distributed as dist

rank = int(os.environ["RANK"])
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
print(f"rank{rank}: init done, world={dist.get_world_size()}", flush=True)
store = dist.distributed_c10d._get_default_store()
if rank == 0:
    print("rank0: preprocessing dataset shards...", flush=True)
    time.sleep(2)
    os.kill(os.getpid(), signal.SIGKILL)  # stands in for the host's OOM killer
else:
    print(f"rank{rank}: waiting for rank 0 to publish the dataset", flush=True)
    store.get("dataset_ready")
