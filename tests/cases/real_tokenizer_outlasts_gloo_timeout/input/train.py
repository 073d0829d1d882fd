import datetime
import os
import time

import torch
import torch.distributed as dist
from tqdm import tqdm


def tokenize(shard: int, rank: int) -> list[int]:
    out = []
    # every rank tokenises its own shard; rank 0's is the big one
    for i in tqdm(range(shard), desc="Running tokenizer on dataset", unit=" examples", disable=False):
        time.sleep(0.05)
        out.append(i * rank)
    return out


def main():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=20))
    rank = dist.get_rank()
    data = tokenize(2000 if rank == 0 else 10, rank)
    print(f"[rank{rank}] tokenised {len(data)} examples", flush=True)
    total = torch.tensor([float(len(data))])
    dist.all_reduce(total)
    print(f"[rank{rank}] step 0 examples {total.item()}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
