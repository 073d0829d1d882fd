#!/bin/bash
# Makes the real GOOD/BAD run pairs of tests/diff_cases with the real-gloo corpus scripts (torch, gloo, CPU).
# Each pair is the same job launched twice with ONE change (see each case's SOURCE.md).
# Usage: bash make_pairs.sh OUT [pair ...]      (pairs: ifname timeout world_size torch_version no_change)
# Env: PYBIN (torch 2.13 venv bin, default /work/torchvenv/bin), PYBIN2 (second torch version, for
# torch_version), CORPUS (default /work/shared/corpus/real-gloo). Runs are written to OUT/<pair>/{good,bad};
# copy_pairs.py then trims them into tests/diff_cases/.
set -u
OUT=$(mkdir -p "$1" && cd "$1" && pwd); shift
SEL="${*:-ifname timeout world_size torch_version no_change}"
want() { [[ " $SEL " == *" $1 "* ]]; }
export PYBIN=${PYBIN:-/work/torchvenv/bin}
C=${CORPUS:-/work/shared/corpus/real-gloo}
T=$C/_common/run_torchrun.sh

if want ifname; then # init, barrier, all_reduce on 2 ranks; gloo bound to lo vs to an interface that does not exist
  GLOO_SOCKET_IFNAME=lo SCEN_PG_TIMEOUT_S=10 bash $T $OUT/ifname/good 2 $C/init_rendezvous_failure/init_job.py
  GLOO_SOCKET_IFNAME=ib0 SCEN_PG_TIMEOUT_S=10 bash $T $OUT/ifname/bad 2 $C/init_rendezvous_failure/init_job.py
fi

if want timeout; then # rank 0 busy 15 s at step 4 while the others wait; process-group timeout 60 s vs 10 s
  SCEN_SLOW_S=15 SCEN_PG_TIMEOUT_S=60 bash $T $OUT/timeout/good 3 $C/rank0_slow_work/train_slow_rank0.py
  SCEN_SLOW_S=15 SCEN_PG_TIMEOUT_S=10 bash $T $OUT/timeout/bad 3 $C/rank0_slow_work/train_slow_rank0.py
fi

if want world_size; then # rank 1 skips the step-3 all_reduce: harmless on 1 rank, a hang on 2
  SCEN_MODE=skip SCEN_PG_TIMEOUT_S=10 bash $T $OUT/world_size/good 1 $C/mismatched_collectives/mismatch.py
  SCEN_MODE=skip SCEN_PG_TIMEOUT_S=10 bash $T $OUT/world_size/bad 2 $C/mismatched_collectives/mismatch.py
fi

if want torch_version; then # the same launch (torchrun --log-line-prefix-template) on torch 2.14.1 and on 2.13.0
  # Each run folder also gets collect_env.txt: `python -m torch.utils.collect_env` of the venv the job ran with,
  # as a job prologue records it.
  P2=${PYBIN2:?set PYBIN2 to the bin folder of a venv with another torch version}
  PYBIN=$P2 SCEN_PG_TIMEOUT_S=10 TORCHRUN_EXTRA='--log-line-prefix-template=[rank${rank}]:' \
    bash $T $OUT/torch_version/good 2 $C/init_rendezvous_failure/init_job.py
  $P2/python -m torch.utils.collect_env > $OUT/torch_version/good/collect_env.txt 2>&1
  SCEN_PG_TIMEOUT_S=10 TORCHRUN_EXTRA='--log-line-prefix-template=[rank${rank}]:' \
    bash $T $OUT/torch_version/bad 2 $C/init_rendezvous_failure/init_job.py
  $PYBIN/python -m torch.utils.collect_env > $OUT/torch_version/bad/collect_env.txt 2>&1
fi

if want no_change; then # the same job twice; in BAD, rank 2 is SIGKILLed from outside while it waits at the barrier
  SCEN_SLOW_S=6 SCEN_PG_TIMEOUT_S=30 bash $T $OUT/no_change/good 3 $C/rank0_slow_work/train_slow_rank0.py
  SCEN_SLOW_S=6 SCEN_PG_TIMEOUT_S=30 bash $T $OUT/no_change/bad 3 $C/rank0_slow_work/train_slow_rank0.py &
  LAUNCH=$!
  for _ in $(seq 600); do # up to 60 s for rank 2 to reach the barrier
    pid=$(sed -n 's/.*rank2 pid\([0-9]*\): waiting at dist.barrier().*/\1/p' $OUT/no_change/bad/console.log 2>/dev/null | head -1)
    [ -n "$pid" ] && break
    sleep 0.1
  done
  if [ -n "${pid:-}" ]; then sleep 1; echo "make_pairs: kill -9 $pid (rank 2)"; kill -9 "$pid"; fi
  wait $LAUNCH
fi
