#!/bin/bash
# Two torchrun agents on this machine, as two nodes of one job (c10d rendezvous); each writes its console.
cd "$(dirname "$0")"
T=/work/torchvenv/bin/torchrun
A="--nnodes=2 --nproc-per-node=1 --rdzv-backend=c10d --rdzv-endpoint=127.0.0.1:29833 --rdzv-id=eb1 --tee 3"
$T $A --node-rank 0 exit_barrier.py > node0.log 2>&1 &
sleep 1
$T $A --node-rank 1 exit_barrier.py > node1.log 2>&1 &
wait
