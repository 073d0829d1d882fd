"""transformers' `main_process_first` pattern (same code shape): rank 0 tokenises a dataset alone while the
other ranks wait at a barrier; the barrier's timeout (gloo, 8 s here) is shorter than the work."""
import contextlib, datetime, time
import torch.distributed as dist

@contextlib.contextmanager
def main_process_first(desc="work"):
    if dist.get_rank() != 0:
        dist.barrier()
    yield
    if dist.get_rank() == 0:
        dist.barrier()

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=8))
rank = dist.get_rank()
with main_process_first(desc="dataset map tokenization"):
    if rank == 0:
        print("Running tokenizer on dataset", flush=True)
        time.sleep(20)
print(f"rank {rank} done", flush=True)
dist.destroy_process_group()
