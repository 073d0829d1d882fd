import datetime
import torch
import torch.distributed as dist


def save_checkpoint(step: int) -> None:
    # rank 0 shares the checkpoint path with the others... but only rank 0 calls this
    names = [f"/tmp/ckpt/step_{step}.pt"]
    dist.broadcast_object_list(names, src=0)
    torch.save({"step": step}, "/tmp/ckpt_mismatch.pt")


def main() -> None:
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=30))
    rank = dist.get_rank()
    grad = torch.ones(25)
    for step in range(3):
        dist.all_reduce(grad)  # the training step's gradient sync
        if step == 1 and rank == 0:
            save_checkpoint(step)
    print(f"rank {rank} done")


main()
