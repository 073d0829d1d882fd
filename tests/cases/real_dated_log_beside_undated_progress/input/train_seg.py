"""Segmentation-style loop: each rank writes its own log file (logging, timestamps) with eval summaries,
prints per-iteration progress to stdout (no timestamps). Rank 1's dataset becomes slow then stalls in epoch 2."""
import datetime, logging, os, sys, time
import torch, torch.distributed as dist, torch.nn as nn
from torch.utils.data import DataLoader, Dataset

rank = int(os.environ["RANK"])
os.makedirs("logs", exist_ok=True)
logger = logging.getLogger("seg")
logger.setLevel(logging.INFO)
fh = logging.FileHandler(f"logs/rank{rank}.log")
fh.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
logger.addHandler(fh)

class DS(Dataset):
    def __init__(self, epoch_ref): self.e = epoch_ref
    def __len__(self): return 64
    def __getitem__(self, i):
        if rank == 1 and self.e[0] == 2:
            time.sleep(0.4 if i < 24 else 60)
        return torch.randn(8), torch.randn(2)

def main():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=15))
    model = nn.Linear(8, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ep = [0]
    dl = DataLoader(DS(ep), batch_size=8, num_workers=0)
    for epoch in range(4):
        ep[0] = epoch
        for it, (x, y) in enumerate(dl):
            t0 = time.time()
            loss = nn.functional.mse_loss(model(x), y)
            opt.zero_grad(); loss.backward()
            for p in model.parameters():
                dist.all_reduce(p.grad)
            opt.step()
            print(f"epoch {epoch} iter {it}/8 loss={loss.item():.4f} time={time.time()-t0:.3f}", flush=True)
        logger.info("epoch %d done; running evaluation", epoch)
        logger.info("eval epoch %d: mIoU=%.3f", epoch, 0.3 + 0.1 * epoch)
        logger.info("Evaluation finished")
    dist.destroy_process_group()

if __name__ == "__main__":
    main()
