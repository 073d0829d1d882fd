import os
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(16, 16)
        self.aux_head = nn.Linear(16, 4)  # only used when aux=True: its gradients never come

    def forward(self, x, aux=False):
        h = self.body(x)
        return self.aux_head(h) if aux else h


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = DDP(Net())
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(5):
        loss = model(torch.randn(8, 16)).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        print(f"[rank{rank}] step {step} loss {loss.item():.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
