"""A DDP script written for GPU nodes (backend nccl, .cuda()) run where torch is a CPU-only build."""
import os

import torch
import torch.distributed as dist

local_rank = int(os.environ["LOCAL_RANK"])
print(f"rank{os.environ['RANK']}: torch {torch.__version__} cuda={torch.version.cuda}", flush=True)
dist.init_process_group(backend="nccl")
torch.cuda.set_device(local_rank)
model = torch.nn.Linear(8, 8).cuda()
