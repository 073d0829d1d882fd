#!/bin/bash
# "NCCL timeout fixes" applied after the first failure
export NCCL_TIMEOUT=300
export NCCL_BLOCKING_WAIT=1
export NCCL_DEBUG=INFO
export NCCL_IB_DISABLE=1
export NCCL_P2P_DISABLE=1
export TORCH_NCCL_TRACE_BUFFER_SIZE=1000
CUDA_VISIBLE_DEVICES=0,1,2,3 torchrun --nproc_per_node=4 \
  tools/MVB_supervised_with_gaussian_mask/strong_baseline_mvb_with_gaussian.py \
  --config tools/MVB_supervised_with_gaussian_mask/mvb_config.yaml --launcher pytorch
