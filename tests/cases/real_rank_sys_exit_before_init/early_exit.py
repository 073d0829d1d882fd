"""Rank 1 finds its data shard missing and calls sys.exit(1) before joining the process group."""
import datetime, os, sys
import torch, torch.distributed as dist

rank = int(os.environ["RANK"])
shard = f"/tmp/shards/part-{rank:05d}.bin"
if rank == 1 and not os.path.exists(shard):
    print(f"shard {shard} not found, exiting", file=sys.stderr, flush=True)
    sys.exit(1)
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=20))
t = torch.ones(4)
dist.all_reduce(t)
print(f"[rank{rank}] all_reduce {t[0].item()}", flush=True)
dist.destroy_process_group()
