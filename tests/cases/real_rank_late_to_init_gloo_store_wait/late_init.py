"""Rank 1 prepares its data shard before init_process_group and takes longer than the group's timeout; rank 0 waits
in init_process_group."""
import datetime, os, time
import torch, torch.distributed as dist

rank = int(os.environ["RANK"])
if rank == 1:
    print(f"[rank{rank}] building vocabulary cache ...", flush=True)
    time.sleep(45)
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=15))
t = torch.ones(4)
dist.all_reduce(t)
print(f"[rank{rank}] all_reduce {t[0].item()}", flush=True)
dist.destroy_process_group()
