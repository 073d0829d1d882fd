"""A gloo job launched with GLOO_SOCKET_IFNAME naming an interface this host does not have (eth9)."""
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
t = torch.ones(2)
dist.all_reduce(t)
print(f"rank{dist.get_rank()}: all_reduce ok {t.tolist()}", flush=True)
