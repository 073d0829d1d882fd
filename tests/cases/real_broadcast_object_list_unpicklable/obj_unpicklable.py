"""Rank 0 broadcasts a config with broadcast_object_list; the config holds an open file handle (unpicklable)."""
import datetime, io
import torch, torch.distributed as dist

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=15))
rank = dist.get_rank()
for step in range(1, 3):
    t = torch.ones(4) * rank
    dist.all_reduce(t)
    print(f"[rank{rank}] step {step} done", flush=True)
if rank == 0:
    cfg = [{"lr": 0.1, "log": open("/tmp/obj_log.txt", "w")}]
else:
    cfg = [None]
dist.broadcast_object_list(cfg, src=0)
print(f"[rank{rank}] got config {cfg[0]['lr']}", flush=True)
dist.destroy_process_group()
