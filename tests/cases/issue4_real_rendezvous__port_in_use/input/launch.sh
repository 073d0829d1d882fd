#!/bin/bash
# Usage: launch.sh OUT_DIR  (env: MASTER_ADDR, MASTER_PORT, per-rank overrides R0_*/R1_*)
set -u
OUT=$1; mkdir -p "$OUT"
PY=/opt/venv/bin/python
for r in 0 1; do
  addr_var="R${r}_MASTER_ADDR"; port_var="R${r}_MASTER_PORT"
  RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r MASTER_ADDR=${!addr_var:-$MASTER_ADDR} MASTER_PORT=${!port_var:-$MASTER_PORT} \
    timeout 60 $PY /workspace/rdzv/init_job.py > "$OUT/rank$r.stdout" 2> "$OUT/rank$r.stderr" &
done
wait
