#!/bin/bash
# fine-tune launcher (node pool a100-pcie)
IMAGE=registry.internal/llm/ft:2024.06
docker run --gpus all --rm \
  -e NCCL_DEBUG=INFO \
  -e OMP_NUM_THREADS=8 \
  -v /data:/data -v $PWD:/workspace/ft \
  $IMAGE \
  torchrun --standalone --nproc_per_node=8 --tee 3 /workspace/ft/train.py --config configs/ft7b.yaml
