#!/bin/bash
# torch 2.13.0+cpu, gloo: three ranks on this machine; rank 2 makes its hidden layer wider (SHAPE=1).
cd "$(dirname "$0")"
SHAPE=1 torchrun --nproc-per-node=3 --master-port=29872 --tee 3 ddp_mismatch.py > input/torchrun.log 2>&1
