#!/bin/bash
# Two torchrun agents on this machine, as two nodes of one job (c10d rendezvous, node 0 hosts the store).
cd "$(dirname "$0")"
T=${TORCHRUN:-torchrun}  # torch 2.13.0+cpu
A="--nnodes=2 --nproc-per-node=1 --rdzv-backend=c10d --rdzv-endpoint=127.0.0.1:29841 --rdzv-id=sd1 --tee 3"
$T $A --node-rank 0 crash.py > node0.log 2>&1 &
sleep 1
$T $A --node-rank 1 crash.py > node1.log 2>&1 &
wait
