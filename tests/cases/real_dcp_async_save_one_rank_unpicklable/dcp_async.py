"""dcp.async_save every 2 steps; on rank 1 the state dict holds an object that cannot be pickled."""
import datetime
import torch, torch.distributed as dist
import torch.distributed.checkpoint as dcp

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=20))
rank = dist.get_rank()
model = torch.nn.Linear(8, 8)
pending = None
for step in range(1, 6):
    t = torch.ones(4) * rank
    dist.all_reduce(t)
    print(f"[rank{rank}] step {step} loss {1.0 / step:.4f}", flush=True)
    if step % 2 == 0:
        if pending is not None:
            pending.result()
        state = {"model": model.state_dict(), "step": step}
        if rank == 1:
            state["sampler"] = (lambda: step)  # a closure: not picklable
        print(f"[rank{rank}] async checkpoint step {step}", flush=True)
        pending = dcp.async_save(state, checkpoint_id=f"/tmp/dcp_async/step_{step}")
pending.result()
dist.destroy_process_group()
