#!/bin/bash
# torch 2.13.0+cpu, gloo: three ranks on this machine; rank 2 adds a layer (ddp_mismatch.py).
cd "$(dirname "$0")"
torchrun --nproc-per-node=3 --master-port=29871 --tee 3 ddp_mismatch.py > input/torchrun.log 2>&1
