"""Rank 1 checks its loss each step and calls sys.exit(1) when it is NaN (a guard many scripts have), mid-training."""
import datetime, math, sys
import torch, torch.distributed as dist

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=20))
rank = dist.get_rank()
for step in range(1, 6):
    t = torch.ones(4) * rank
    dist.all_reduce(t)
    loss = float("nan") if (rank == 1 and step == 3) else 1.0 / step
    if math.isnan(loss):
        print(f"[rank{rank}] step {step}: loss is NaN, stopping", flush=True)
        sys.exit(1)
    print(f"[rank{rank}] step {step} loss {loss:.4f}", flush=True)
dist.destroy_process_group()
