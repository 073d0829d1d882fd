#!/bin/bash
# Two torchrun agents on this machine, as two nodes of one job (c10d rendezvous). Node 1 starts first and hosts the
# store; node 0 has no restarts, node 1 has two.
cd "$(dirname "$0")"
T=${TORCHRUN:-torchrun}  # torch 2.13.0+cpu
A="--nnodes=2 --nproc-per-node=1 --rdzv-backend=c10d --rdzv-endpoint=127.0.0.1:29843 --rdzv-id=rc1 --tee 3"
$T $A --node-rank 1 --max-restarts=2 crash.py > node1.log 2>&1 &
sleep 2
$T $A --node-rank 0 --max-restarts=0 crash.py > node0.log 2>&1 &
wait
