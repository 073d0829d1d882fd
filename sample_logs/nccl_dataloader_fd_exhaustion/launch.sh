#!/bin/bash
export NCCL_DEBUG=WARN
export MU_TRAIN_WORKERS=8
export MU_DL_TIMEOUT=600
python -m torch.distributed.run --nproc_per_node=2 --redirects 3 train.py --batch_size 4 2>&1 | tee train.log
