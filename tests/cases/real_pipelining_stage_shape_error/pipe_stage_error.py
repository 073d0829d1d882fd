"""torch.distributed.pipelining on gloo: 2 stages; stage 1's layer is built for another hidden size than stage 0 sends."""
import datetime
import torch, torch.distributed as dist
from torch.distributed.pipelining import PipelineStage, ScheduleGPipe

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=20))
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
if rank == 0:
    mod = torch.nn.Linear(16, 32)
else:
    mod = torch.nn.Linear(24, 4)  # expects 24 features, stage 0 sends 32
stage = PipelineStage(mod, rank, world, torch.device("cpu"))
sched = ScheduleGPipe(stage, n_microbatches=2, loss_fn=lambda out, y: ((out - y) ** 2).mean())
x, y = torch.randn(4, 16), torch.randn(4, 4)
for step in range(1, 3):
    if rank == 0:
        sched.step(x)
    else:
        sched.step(target=y)
    print(f"[rank{rank}] step {step} done", flush=True)
dist.destroy_process_group()
