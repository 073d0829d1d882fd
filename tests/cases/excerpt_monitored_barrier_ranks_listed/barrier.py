"""Four ranks meet at a monitored barrier (wait_all_ranks=True, 3 s); ranks 1 and 3 are still writing their shard
of an evaluation file (a 10 s sleep) when the root gives up and names both."""
import datetime
import time

import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
if rank in (1, 3):
    print(f"rank{rank}: writing eval shard ...", flush=True)
    time.sleep(10)
dist.monitored_barrier(timeout=datetime.timedelta(seconds=3), wait_all_ranks=True)
print(f"rank{rank}: past the barrier", flush=True)
