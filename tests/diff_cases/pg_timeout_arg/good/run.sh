#!/bin/bash
export OMP_NUM_THREADS=1
torchrun --nproc_per_node=2 train.py --pg-timeout 60
