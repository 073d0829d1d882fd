#!/bin/bash
export OMP_NUM_THREADS=1
torchrun --nproc_per_node=3 --log-dir torchrun_logs --tee 3 imagenet_stall.py
