#!/bin/bash
# GLOO_SOCKET_IFNAME=eth9 torchrun --standalone --nproc-per-node 2 train_gloo.py > console.log 2>&1
cd "$(dirname "$0")"
GLOO_SOCKET_IFNAME=eth9 /work/torchvenv/bin/torchrun --standalone --nproc-per-node 2 train_gloo.py > console.log 2>&1
