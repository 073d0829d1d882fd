"""DCP save where one rank's state_dict holds an object that cannot be pickled (a lambda in an extra_state)."""
import datetime, os
import torch, torch.distributed as dist
import torch.distributed.checkpoint as dcp

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=20))
rank = dist.get_rank()
model = torch.nn.Linear(8, 8)
for step in range(1, 4):
    t = torch.ones(4) * rank
    dist.all_reduce(t)
    print(f"[rank{rank}] step {step} loss {1.0 / step:.4f}", flush=True)
state = {"model": model.state_dict(), "step": 3}
if rank == 1:
    state["sched"] = {"lr_lambda": lambda e: 0.9**e}  # a LambdaLR-style callable: not picklable
print(f"[rank{rank}] saving checkpoint to /tmp/dcp_ckpt/step_3", flush=True)
dcp.save(state, checkpoint_id="/tmp/dcp_ckpt/step_3")
print(f"[rank{rank}] saved", flush=True)
dist.destroy_process_group()
