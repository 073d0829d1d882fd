"""FSDP2 (fully_shard) on CPU/gloo; rank 1's data shard is shorter: it leaves the training loop one step early and
goes on to its end of training, while rank 0 runs one more step."""
import datetime, time
import torch, torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=15))
rank = dist.get_rank()
mesh = init_device_mesh("cpu", (dist.get_world_size(),))
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
for layer in model:
    if isinstance(layer, torch.nn.Linear):
        fully_shard(layer, mesh=mesh)
fully_shard(model, mesh=mesh)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
batches = 4 if rank == 0 else 3
for step in range(1, batches + 1):
    loss = model(torch.randn(2, 8)).sum()
    loss.backward()
    opt.step(); opt.zero_grad()
    print(f"[rank{rank}] step {step} loss {loss.item():.4f}", flush=True)
print(f"[rank{rank}] training done, writing metrics", flush=True)
time.sleep(40)  # post-training work (metrics upload)
dist.destroy_process_group()
