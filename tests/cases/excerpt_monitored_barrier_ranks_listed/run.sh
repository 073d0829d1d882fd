#!/bin/bash
# torch 2.13.0+cpu, gloo: four ranks on this machine; ranks 1 and 3 sleep past a 3 s monitored barrier (barrier.py).
cd "$(dirname "$0")"
torchrun --nproc-per-node=4 --master-port=29874 --tee 3 barrier.py > console.log 2>&1
sed -n 20,26p console.log > input/rank0_traceback.log  # rank 0's traceback, as a user pastes it
