#!/bin/bash
# v3: the eval at the end of each epoch kept timing out at 10 min -> raised the NCCL timeout to 30 min,
# and P2P off because of the hang last week (see #infra thread)
set -euo pipefail
export NCCL_DEBUG=INFO
export NCCL_TIMEOUT=1800
export NCCL_P2P_DISABLE=1
export NCCL_ASYNC_ERROR_HANDLING=1
export TORCH_NCCL_TRACE_BUFER_SIZE=20000   # flight recorder
export TORCH_NCCL_DUMP_ON_TIMEOUT=1
NCCL_IB_DISABLE=0 OMP_NUM_THREADS=8 torchrun --standalone --nproc_per_node=8 --tee 3 \
    train_seg.py --config configs/segformer_b5.yaml --eval-every-epoch 2>&1 | tee train.log
