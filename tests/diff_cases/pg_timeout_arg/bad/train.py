"""Rank 1 spends 20 s once in epoch 1 preparing a shard; the process-group timeout comes from --pg-timeout."""
import argparse, datetime, os, time
import torch, torch.distributed as dist, torch.nn as nn

p = argparse.ArgumentParser()
p.add_argument("--pg-timeout", type=int, default=1800, help="process group timeout in seconds")
p.add_argument("--epochs", type=int, default=3)
args = p.parse_args()

def main():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=args.pg_timeout))
    rank = dist.get_rank()
    model = nn.Linear(8, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(args.epochs):
        if rank == 1 and epoch == 1:
            print(f"[rank{rank}] preparing shard for epoch {epoch}", flush=True)
            time.sleep(20)
        for it in range(5):
            loss = nn.functional.mse_loss(model(torch.randn(4, 8)), torch.randn(4, 2))
            opt.zero_grad(); loss.backward()
            for q in model.parameters():
                dist.all_reduce(q.grad)
            opt.step()
            print(f"[rank{rank}] epoch {epoch} step {it} loss {loss.item():.3f}", flush=True)
    print(f"[rank{rank}] training done", flush=True)
    dist.destroy_process_group()

if __name__ == "__main__":
    main()
