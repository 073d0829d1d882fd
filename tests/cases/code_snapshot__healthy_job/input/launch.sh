#!/bin/bash
# smoke test after the driver upgrade (see code/train.py)
export TORCH_NCCL_TRACE_BUFFER_SIZE=2000
export TORCH_NCCL_DUMP_ON_TIMEOUT=1
python code/retry.py torchrun --standalone --nproc_per_node=2 code/train.py 2>&1 | tee console.log
