"""Three ranks wrap a model in DDP; rank 2 builds it from another config (MODEL_VARIANT) with one more layer, or
(with SHAPE=1) with a wider hidden layer: DDP's check of the parameters across ranks refuses it at construction."""
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
rank = dist.get_rank()
hidden = 64 if (rank == 2 and os.environ.get("SHAPE")) else 32
layers = [torch.nn.Linear(16, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 4)]
if rank == 2 and not os.environ.get("SHAPE"):
    layers += [torch.nn.Linear(4, 4)]  # the extra head of another config
model = DDP(torch.nn.Sequential(*layers))
print(f"rank{rank}: model wrapped", flush=True)
dist.destroy_process_group()
