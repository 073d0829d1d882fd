#!/bin/bash
# Train on the 2 CPU processes of this machine (gloo).
set -e
export PG_TIMEOUT_S=60
export NUM_SAMPLES=20000
export GLOO_SOCKET_IFNAME=lo
export OMP_NUM_THREADS=1
pip freeze > pip_freeze.txt
torchrun --nproc_per_node=2 --master_port=29538 train.py --epochs 2
