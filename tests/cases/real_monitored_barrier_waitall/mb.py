import datetime, os, time
import torch.distributed as dist
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
r = dist.get_rank()
if r == 1:
    time.sleep(20)  # rank 1 busy (e.g. a checkpoint) while the others reach the monitored barrier
dist.monitored_barrier(timeout=datetime.timedelta(seconds=5), wait_all_ranks=os.environ.get("WAIT_ALL") == "1")
print(f"rank {r} passed")
