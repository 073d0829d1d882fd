"""Rank 0 takes long in a DCP save (a slow filesystem); the other ranks time out in the save's own collective."""
import datetime, os, time
import torch, torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import FileSystemWriter

class SlowWriter(FileSystemWriter):
    def write_data(self, plan, planner):
        if dist.get_rank() == 0:
            time.sleep(40)  # a slow network filesystem
        return super().write_data(plan, planner)

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
rank = dist.get_rank()
model = torch.nn.Linear(8, 8)
for step in range(1, 4):
    t = torch.ones(4) * rank
    dist.all_reduce(t)
    print(f"[rank{rank}] step {step} loss {1.0 / step:.4f}", flush=True)
print(f"[rank{rank}] saving checkpoint step_3", flush=True)
dcp.save({"model": model.state_dict()}, storage_writer=SlowWriter("/tmp/dcp_slow/step_3"))
print(f"[rank{rank}] saved", flush=True)
dist.destroy_process_group()
