#!/bin/bash
# 4x RTX 3090, DDP
export NCCL_DEBUG=INFO
export NCCL_DEBUG_SUBSYS=ALL
export NCCL_TIMEOUT=3600
export NCCL_ASYNC_ERROR_HANDLING=1
export NCCL_SOCKET_IFNAME=^docker0,lo
torchrun --nproc_per_node=4 train_mlm.py --model weighted --per_device_batch_size 192 --grad_accum 2
