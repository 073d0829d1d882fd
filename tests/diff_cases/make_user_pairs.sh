#!/bin/bash
# Makes the user-style GOOD/BAD run pairs of tests/diff_cases: each run folder is what a user keeps beside a run -
# the launch script (run.sh: exports and the torchrun line), the job's code (train.py, user_job/), what run.sh
# records (pip_freeze.txt, env.txt, collect_env.txt where it does) and the console (train.log). GOOD and BAD are
# the same job launched twice on this machine (torch 2.13.0+cpu, gloo) with ONE change each.
# Usage: bash make_user_pairs.sh OUT [pair ...]
#   pairs: pg_timeout_env grad_norm_flag num_samples numpy_upgrade master_port gloo_ifname flaky
# Env: PYBIN (venv bin with torch 2.13.0 and numpy 1.26.4), PYBIN_NP2 (the same with numpy 2.x, for numpy_upgrade).
# copy_pairs.py then copies OUT/<pair>/{good,bad} into tests/diff_cases/<pair>/ (user-style files kept as they are).
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=$(mkdir -p "$1" && cd "$1" && pwd); shift
SEL="${*:-pg_timeout_env grad_norm_flag num_samples numpy_upgrade master_port gloo_ifname flaky}"
want() { [[ " $SEL " == *" $1 "* ]]; }
PYBIN=${PYBIN:-/work/venvs/torch213/bin}
PYBIN_NP2=${PYBIN_NP2:-/work/venvs/torch213np2/bin}

# run.sh as a user writes it. Args: timeout_s num_samples ifname port script_args record(freeze|env|collect_env)
write_run_sh() {
  local dir=$1 timeout=$2 samples=$3 ifname=$4 port=$5 args=$6 record=$7
  {
    echo '#!/bin/bash'
    echo '# Train on the 2 CPU processes of this machine (gloo).'
    echo 'set -e'
    echo "export PG_TIMEOUT_S=$timeout"
    echo "export NUM_SAMPLES=$samples"
    echo "export GLOO_SOCKET_IFNAME=$ifname"
    echo 'export OMP_NUM_THREADS=1'
    case $record in
      freeze) echo 'pip freeze > pip_freeze.txt' ;;
      env) echo "env | grep -E '^(PG_|NUM_|GLOO_|NCCL_|TORCH_|OMP_|MASTER_|CUDA_)' | sort > env.txt" ;;
      collect_env) echo 'python -m torch.utils.collect_env > collect_env.txt 2>&1' ;;
    esac
    echo "torchrun --nproc_per_node=2 --master_port=$port train.py $args"
  } > "$dir/run.sh"
}

# One run: a fresh folder with run.sh and train.py, run as `bash run.sh > train.log 2>&1` with PATH on $2.
run() {
  local dir=$1 bin=$2
  mkdir -p "$dir"
  cp "$HERE/user_job/train.py" "$dir/train.py"
  (cd "$dir" && PATH="$bin:$PATH" timeout 300 bash run.sh > train.log 2>&1; echo "exit $?" > "$dir/.exit")
  echo "$dir: $(cat "$dir/.exit")"
}

pair() { rm -rf "$OUT/$1"; mkdir -p "$OUT/$1/good" "$OUT/$1/bad"; }

if want pg_timeout_env; then # the env var train.py reads as the process group's timeout: 60 s vs 10 s
  pair pg_timeout_env
  write_run_sh "$OUT/pg_timeout_env/good" 60 20000 lo 29531 "--epochs 2" env
  write_run_sh "$OUT/pg_timeout_env/bad" 10 20000 lo 29531 "--epochs 2" env
  run "$OUT/pg_timeout_env/good" "$PYBIN"; run "$OUT/pg_timeout_env/bad" "$PYBIN"
fi

if want grad_norm_flag; then # a script flag that makes rank 0 alone run an extra all_reduce
  pair grad_norm_flag
  write_run_sh "$OUT/grad_norm_flag/good" 60 20000 lo 29532 "--epochs 2" freeze
  write_run_sh "$OUT/grad_norm_flag/bad" 60 20000 lo 29532 "--epochs 2 --log-grad-norm" freeze
  run "$OUT/grad_norm_flag/good" "$PYBIN"; run "$OUT/grad_norm_flag/bad" "$PYBIN"
fi

if want num_samples; then # how much data rank 0 prepares before the barrier: 20k samples (~2 s) vs 400k (~40 s)
  pair num_samples
  write_run_sh "$OUT/num_samples/good" 30 20000 lo 29533 "--epochs 2" env
  write_run_sh "$OUT/num_samples/bad" 30 400000 lo 29533 "--epochs 2" env
  run "$OUT/num_samples/good" "$PYBIN"; run "$OUT/num_samples/bad" "$PYBIN"
fi

if want numpy_upgrade; then # the same job in an environment rebuilt with numpy 2 (train.py uses np.float_)
  pair numpy_upgrade
  write_run_sh "$OUT/numpy_upgrade/good" 60 20000 lo 29534 "--epochs 2" freeze
  write_run_sh "$OUT/numpy_upgrade/bad" 60 20000 lo 29534 "--epochs 2" freeze
  run "$OUT/numpy_upgrade/good" "$PYBIN"; run "$OUT/numpy_upgrade/bad" "$PYBIN_NP2"
fi

if want master_port; then # --master_port 29535 vs 29536, which another process holds
  pair master_port
  write_run_sh "$OUT/master_port/good" 60 20000 lo 29535 "--epochs 1" env
  write_run_sh "$OUT/master_port/bad" 60 20000 lo 29536 "--epochs 1" env
  run "$OUT/master_port/good" "$PYBIN"
  "$PYBIN/python" -c 'import socket,time; s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("", 29536)); s.listen(); time.sleep(120)' &
  HOLDER=$!; sleep 1
  run "$OUT/master_port/bad" "$PYBIN"
  kill "$HOLDER"
fi

if want gloo_ifname; then # GLOO_SOCKET_IFNAME=lo vs an interface this machine does not have
  pair gloo_ifname
  write_run_sh "$OUT/gloo_ifname/good" 60 20000 lo 29537 "--epochs 1" collect_env
  write_run_sh "$OUT/gloo_ifname/bad" 60 20000 eth1 29537 "--epochs 1" collect_env
  run "$OUT/gloo_ifname/good" "$PYBIN"; run "$OUT/gloo_ifname/bad" "$PYBIN"
fi

if want flaky; then # nothing changed; in BAD rank 1 is SIGKILLed from outside during epoch 2 (as the OOM killer does)
  pair flaky
  write_run_sh "$OUT/flaky/good" 60 20000 lo 29538 "--epochs 2" freeze
  write_run_sh "$OUT/flaky/bad" 60 20000 lo 29538 "--epochs 2" freeze
  run "$OUT/flaky/good" "$PYBIN"
  run "$OUT/flaky/bad" "$PYBIN" &
  LAUNCH=$!
  for _ in $(seq 900); do # up to 90 s for epoch 2 to start
    grep -q "epoch 2 step 4" "$OUT/flaky/bad/train.log" 2>/dev/null && break
    sleep 0.1
  done
  pid=""
  for p in $(pgrep -f "train.py" || true); do # rank 1 of this run: its folder, RANK=1 in its environment
    [ "$(readlink "/proc/$p/cwd" 2>/dev/null)" = "$OUT/flaky/bad" ] || continue
    tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | grep -qx 'RANK=1' && pid=$p
  done
  if [ -n "$pid" ]; then echo "make_user_pairs: kill -9 $pid (rank 1)"; kill -9 "$pid"; fi
  wait $LAUNCH
fi
