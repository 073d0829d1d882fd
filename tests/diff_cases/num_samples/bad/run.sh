#!/bin/bash
# Train on the 2 CPU processes of this machine (gloo).
set -e
export PG_TIMEOUT_S=30
export NUM_SAMPLES=400000
export GLOO_SOCKET_IFNAME=lo
export OMP_NUM_THREADS=1
env | grep -E '^(PG_|NUM_|GLOO_|NCCL_|TORCH_|OMP_|MASTER_|CUDA_)' | sort > env.txt
torchrun --nproc_per_node=2 --master_port=29533 train.py --epochs 2
