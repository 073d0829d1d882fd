"""torchrun --max-restarts 1: attempt 0 fails on rank 1 (bad batch), the restart fails on rank 0 (resume file)."""
import datetime, os
import torch, torch.distributed as dist

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=15))
rank = dist.get_rank()
attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
if attempt > 0 and rank == 0:
    torch.load("/tmp/no_such_ckpt/last.pt")  # resume from a checkpoint that was never written
for step in range(1, 4):
    x = torch.ones(4) * rank
    if attempt == 0 and rank == 1 and step == 2:
        raise ValueError(f"batch {step} has 3 labels for 4 samples")
    dist.all_reduce(x)
    print(f"[rank{rank}] attempt {attempt} step {step} done", flush=True)
dist.destroy_process_group()
