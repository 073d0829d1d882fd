"""Generate a large synthetic job folder: N ranks, per-rank logs full of NCCL_DEBUG=INFO noise and training
progress, with one rank saving a checkpoint while the others time out at a barrier.

Usage: python benchmarks/gen_text_job.py OUT_DIR --ranks 512 --mb-per-rank 2
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

NOISE = [
    "{host}:{pid}:{tid} [{dev}] NCCL INFO Channel {c:02d}/32 : {r}[{dev}] -> {n}[{ndev}] via P2P/CUMEM/read",
    "{host}:{pid}:{tid} [{dev}] NCCL INFO Channel {c:02d}/0 : {r}[{dev}] -> {n}[{ndev}] [send] via NET/IB/0/GDRDMA",
    "{host}:{pid}:{tid} [{dev}] NCCL INFO Connected all rings, use ring PXN 0 GDR 1",
    "{host}:{pid}:{tid} [{dev}] NCCL INFO threadThresholds 8/8/64 | 4096/8/64 | 512 | 512",
    "{host}:{pid}:{tid} [{dev}] NCCL INFO 24 coll channels, 24 collnet channels, 16 nvls channels, 32 p2p channels, "
    "32 p2p channels per peer",
    "{host}:{pid}:{tid} [{dev}] NCCL INFO Trees [0] {n}/-1/-1->{r}->{p} [1] {n}/-1/-1->{r}->{p}",
    "{host}:{pid}:{tid} [{dev}] NCCL INFO Ring {c:02d} : {p} -> {r} -> {n}",
    "{host}:{pid}:{tid} [{dev}] NCCL INFO P2P Chunksize set to 524288",
]


def rank_log(rank: int, world: int, target_bytes: int, culprit: int, rng: random.Random) -> str:
    host, dev = f"node{rank // 8:03d}", rank % 8
    pid = 10000 + rank
    out = [
        f"{host}:{pid}:{pid} [{dev}] NCCL INFO ncclCommInitRank comm 0x55d0a8c1e2b0 rank {rank} nranks {world} "
        f"cudaDev {dev} nvmlDev {dev} busId {dev}1000 commId 0x4f8a2c19d37e0b21 - Init COMPLETE"
    ]
    # Same number of steps on every rank, so every rank's collectives share sequence numbers.
    size, step = 0, 0
    n_steps = max(1, target_bytes // 16_500)
    while step < n_steps:
        for _ in range(200):
            line = rng.choice(NOISE).format(
                host=host,
                pid=pid,
                tid=pid + rng.randint(1, 99),
                dev=dev,
                ndev=(dev + 1) % 8,
                c=rng.randint(0, 31),
                r=rank,
                n=(rank + 1) % world,
                p=(rank - 1) % world,
            )
            out.append(line)
            size += len(line) + 1
        step += 1
        line = f"[rank{rank}]: step {step} loss {rng.random():.4f} lr 3.0e-04 tokens/s 48211"
        out.append(line)
        size += len(line) + 1
    if rank == culprit:
        out.append(f"[rank{rank}]: Saving checkpoint to /ckpt/step_{step} (shard {rank})")
    else:
        out.append(
            f"[rank{rank}]:[E1122 10:00:0{rank % 10}.123456789 ProcessGroupNCCL.cpp:688] [Rank {rank}] Watchdog "
            f"caught collective operation timeout: WorkNCCL(SeqNum={step * 3 + 1}, OpType=ALLREDUCE, NumelIn=1, "
            f"NumelOut=1, Timeout(ms)=600000) ran for 600012 milliseconds before timing out."
        )
    return "\n".join(out) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--ranks", type=int, default=512)
    ap.add_argument("--mb-per-rank", type=float, default=2.0)
    ap.add_argument("--culprit", type=int, default=137)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(0)
    for r in range(args.ranks):
        text = rank_log(r, args.ranks, int(args.mb_per_rank * 1e6), args.culprit % args.ranks, rng)
        (args.out / f"rank_{r}.log").write_text(text)


if __name__ == "__main__":
    main()
