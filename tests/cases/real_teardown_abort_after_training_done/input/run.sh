#!/bin/bash
export OMP_NUM_THREADS=1
torchrun --nproc_per_node=2 --log-dir torchrun_logs --tee 3 teardown_abort.py
