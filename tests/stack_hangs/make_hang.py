"""Run hang_train.py under torchrun, and while its ranks hang dump every rank's stacks the ways users do.

    python tests/stack_hangs/make_hang.py MODE OUT_DIR [--nproc 4] [--odd 2] [--pg-timeout 240]

MODE is checkpoint | dataloader | collective (see hang_train.py). While the job hangs, for each rank pid:
  py-spy dump --pid P                 -> OUT/dumps/pyspy/<pid>.txt
  py-spy dump --pid P --json          -> OUT/dumps/pyspy_json/<pid>.json
  py-spy dump --pid P --locals        -> OUT/dumps/pyspy_locals/<pid>.txt
  py-spy dump --pid P --native        -> OUT/dumps/pyspy_native/<pid>.txt
  py-spy dump --pid P --subprocesses  -> OUT/dumps/pyspy_subprocesses/<pid>.txt (dataloader: workers too)
  kill -USR1 P  (faulthandler -> the rank's stderr, i.e. torchrun_logs/.../stderr.log and console.log)
  kill -USR2 P  (faulthandler -> OUT/faulthandler_rank<R>.txt)
  gdb -p P -batch -ex 'thread apply all bt' [-ex 'thread apply all py-bt'] -> OUT/dumps/gdb/<pid>.txt
then waits for the process-group timeout to end the job (its logs then hold the symptom), and rewrites the
absolute paths of this machine to neutral ones in every text file (see SOURCE.md of the cases).
Tools: PYBIN (default /work/torchvenv/bin) for torchrun and py-spy, PYGDB for CPython's gdb extension.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
PYBIN = Path(os.environ.get("PYBIN", "/work/torchvenv/bin"))
PYGDB = os.environ.get("PYGDB", "/root/.pyenv/versions/3.11.7/bin/python3.11-gdb.py")
READY = {
    "checkpoint": r"saving checkpoint",
    "dataloader": r"read stalls",
    "collective": r"entering step \d+ \(odd rank\)",
}


def rank_pids(console: Path) -> dict[int, int]:
    found = re.findall(r"\] rank(\d+): pid (\d+) world", console.read_text(errors="replace"))
    return {int(r): int(p) for r, p in found}


def run(cmd: list[str], out: Path, timeout: float = 180) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    with out.open("wb") as fh:
        proc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, timeout=timeout, check=False)
    print(f"  {' '.join(cmd[:4])} ... -> {out.name} rc={proc.returncode} {time.time() - t0:.1f}s", flush=True)


def dump_all(out: Path, pids: dict[int, int], mode: str) -> None:
    spy = str(PYBIN / "py-spy")
    for rank, pid in sorted(pids.items()):
        print(f"rank {rank} pid {pid}", flush=True)
        run([spy, "dump", "--pid", str(pid)], out / "dumps/pyspy" / f"{pid}.txt")
        run([spy, "dump", "--pid", str(pid), "--json"], out / "dumps/pyspy_json" / f"{pid}.json")
        run([spy, "dump", "--pid", str(pid), "--locals"], out / "dumps/pyspy_locals" / f"{pid}.txt")
        run([spy, "dump", "--pid", str(pid), "--native"], out / "dumps/pyspy_native" / f"{pid}.txt")
        if mode == "dataloader":
            run([spy, "dump", "--pid", str(pid), "--subprocesses"], out / "dumps/pyspy_subprocesses" / f"{pid}.txt")
        os.kill(pid, signal.SIGUSR1)
        os.kill(pid, signal.SIGUSR2)
    for pid in sorted(pids.values()):
        gdb = ["gdb", "-p", str(pid), "-batch", "-ex", "thread apply all bt"]
        if Path(PYGDB).exists():
            gdb[4:4] = ["-ex", f"source {PYGDB}"]
            gdb += ["-ex", "thread apply all py-bt"]
        run(gdb, out / "dumps/gdb" / f"{pid}.txt", timeout=300)


NEUTRAL = [
    (str(HERE), "/workspace/stack-hangs"),
    (str(PYBIN.parent), "/opt/venv"),
    ("/root/.pyenv/versions/3.11.7", "/usr/local"),
    ("/work/torchvenv", "/opt/venv"),
    ("/root/", "/home/user/"),
]


def neutralise(out: Path) -> None:
    for path in out.rglob("*"):
        if not path.is_file() or path.suffix == ".pt":
            continue
        text = path.read_bytes().decode("utf-8", errors="surrogateescape")
        new = text.replace(str(out), "/workspace/run")
        for old, repl in NEUTRAL:
            new = new.replace(old, repl)
        if new != text:
            path.write_bytes(new.encode("utf-8", errors="surrogateescape"))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=sorted(READY))
    ap.add_argument("out", type=Path)
    ap.add_argument("--nproc", type=int, default=4)
    ap.add_argument("--odd", type=int, default=2)
    ap.add_argument("--pg-timeout", type=float, default=240)
    ap.add_argument("--settle", type=float, default=6, help="seconds to let the other ranks reach their wait")
    ap.add_argument("--script", default="hang_train.py", help="hang_train.py, or debug_server_hang.py")
    ap.add_argument("--no-dumps", action="store_true", help="take no dumps (the debug server takes its own)")
    args = ap.parse_args()
    out = args.out.resolve()
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    env = dict(
        os.environ,
        HANG_MODE=args.mode,
        HANG_RANK=str(args.odd),
        HANG_OUT=str(out),
        HANG_PG_TIMEOUT_S=str(args.pg_timeout),
        HANG_STALL_S=str(args.pg_timeout * 3),
    )
    cmd = [
        str(PYBIN / "torchrun"),
        f"--nproc_per_node={args.nproc}",
        "--log-dir",
        str(out / "torchrun_logs"),
        "--tee",
        "3",
        str(HERE / args.script),
    ]
    (out / "command.txt").write_text(" ".join(cmd) + "\n")
    console = out / "console.log"
    with console.open("wb") as fh:
        job = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env, cwd=out)
    deadline = time.time() + 300
    while time.time() < deadline and job.poll() is None:
        text = console.read_text(errors="replace")
        if re.search(READY[args.mode], text) and len(rank_pids(console)) == args.nproc:
            break
        time.sleep(1)
    else:
        sys.exit(f"job ended or never hung (rc={job.poll()}); see {console}")
    time.sleep(args.settle)
    t0 = time.time()
    if not args.no_dumps:
        dump_all(out, rank_pids(console), args.mode)
    print(f"dumps took {time.time() - t0:.0f}s; waiting for the job to end", flush=True)
    rc = job.wait(timeout=args.pg_timeout * 4)
    (out / "exit_code.txt").write_text(f"{rc}\n")
    neutralise(out)
    print(f"job exit code {rc}; output in {out}")


if __name__ == "__main__":
    main()
