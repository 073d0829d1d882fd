#!/bin/bash
# 3 plain processes (no torchrun); per-rank rank<i>.stdout/.stderr, everything in console.log
cd "$(dirname "$0")"
PYBIN=/work/torchvenv/bin MASTER_PORT=29851 bash /work/shared/corpus/real-gloo/_common/plain_ranks.sh 3 mb_root_killed.py > console.log 2>&1
