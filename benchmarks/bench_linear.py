"""Linear time on hostile shapes (issue 27): one long statement in a code file, a minified notebook (each holding
a setting the code reader looks for, so that it reads them), a log that is one huge line (a tqdm bar written with
`\\r` only), and a job of hit-dense files.

Usage: python benchmarks/bench_linear.py [--sizes 1,2,4,8] [--huge 100,200,400] [--runs 2] [--baseline CHECKOUT]
       [--only shell,python,yaml,notebook,tqdm,job]

Each input is a job folder (the code file or notebook beside a small real log, so that `diagnose` reads it whole;
the tqdm log alone; 16 files of 120,000 progress lines) and is run through the whole command,
`python -m ncclpm diagnose DIR -f json -o FILE`, in a fresh process: wall time, CPU time (user + system, all
threads) and peak RSS of that process. With `--baseline`, the same command runs with PYTHONPATH=CHECKOUT/src (an
older checkout, its C modules built), interleaved run by run. Prints one line per input and size (medians); growth
is linear when doubling the size doubles the time.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOG = ROOT / "tests" / "cases" / "excerpt_cuda_error_out_of_memory" / "input" / "train.log"
MB = 1024 * 1024


def _with_log(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "train.log").write_bytes(LOG.read_bytes())
    return folder


def make(kind: str, size_mb: int, out: Path) -> Path:
    n = size_mb * MB
    if kind == "shell":  # one `\` continuation: a launch line of a million options
        job = _with_log(out)
        (job / "run.sh").write_text("#!/bin/bash\ntorchrun --nproc_per_node=8 \\\n" + "  --arg value \\\n" * (n // 16))
    elif kind == "python":  # one statement inside an open bracket
        job = _with_log(out)
        (job / "train.py").write_text(
            "import torch.distributed as dist\ndist.init_process_group('nccl', timeout=timedelta(seconds=60),\n"
            + "    a=1,\n" * (n // 9)
            + ")\n"
        )
    elif kind == "yaml":  # one list item with its keys
        job = _with_log(out)
        (job / "config.yaml").write_text("env:\n- name: NCCL_TIMEOUT\n" + "  key: NCCL_DEBUG\n" * (n // 18))
    elif kind == "notebook":  # minified: the whole notebook on one line
        job = _with_log(out)
        cells = [
            {"cell_type": "code", "source": [f"os.environ['NCCL_TIMEOUT'] = '{i}'\n" for i in range(99)], "outputs": []}
            for _ in range(n // 4000)
        ]
        (job / "train.ipynb").write_text(json.dumps({"cells": cells, "nbformat": 4}, separators=(",", ":")))
    elif kind == "tqdm":  # one line, `\r` between the bar's updates, the failure after it
        job = out
        job.mkdir(parents=True)
        seg = "Epoch 3:  45%|####5     | {}/99999 [01:23<01:40, 12.34it/s, loss=0.123]\r"
        block = "".join(seg.format(i) for i in range(1000))
        with (job / "train.log").open("w") as fh:
            for _ in range(n // len(block) + 1):
                fh.write(block)
            fh.write("\n[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n")
    elif kind == "job":  # 16 files of 120k progress lines (size ignored)
        job = out
        job.mkdir(parents=True)
        rng = random.Random(1)
        for r in range(16):
            with (job / f"rank{r}.log").open("w") as fh:
                fh.writelines(f"[rank{r}]: step {i} loss {rng.random():.4f} lr 3.0e-04\n" for i in range(120_000))
                if r == 5:
                    fh.write(f"[rank{r}]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n")
    else:
        raise SystemExit(f"unknown input {kind}")
    return job


def run(job: Path, src: Path | None, timeout: float) -> tuple[float, float, float, bool]:
    """(wall s, CPU s, peak RSS MB, finished) of one `ncclpm diagnose` in a fresh process."""
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = str(src)
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "ncclpm", "diagnose", str(job), "-f", "json", "-o", str(Path(tmp) / "r.json")]
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = start + timeout
        while True:
            pid, _, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() > deadline:
                proc.kill()
                _, _, usage = os.wait4(proc.pid, 0)
                return time.perf_counter() - start, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, False
            time.sleep(0.02)
    return time.perf_counter() - start, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, True


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1,2,4,8")
    ap.add_argument("--huge", default="", help="also these sizes (MB) for the tqdm line, e.g. 100,200,400")
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--only", default="shell,python,yaml,notebook,tqdm,job")
    ap.add_argument("--baseline", type=Path, help="an older checkout to compare with (its src/ on PYTHONPATH)")
    ap.add_argument("--timeout", type=float, default=600)
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s]
    sides: list[tuple[str, Path | None]] = [("now", None)]
    if args.baseline is not None:
        sides.append(("baseline", args.baseline / "src"))
    with tempfile.TemporaryDirectory(prefix="ncclpm-linear-") as tmp:
        for kind in args.only.split(","):
            kind_sizes = (
                [0]
                if kind == "job"
                else sizes + ([int(s) for s in args.huge.split(",") if s] if kind == "tqdm" else [])
            )
            for size in kind_sizes:
                job = make(kind, size, Path(tmp) / f"{kind}-{size}")
                results: dict[str, list[tuple[float, float, float, bool]]] = {name: [] for name, _ in sides}
                for _ in range(args.runs):
                    for name, src in sides:
                        results[name].append(run(job, src, args.timeout))
                label = "16 x 120k lines" if kind == "job" else f"{size} MB"
                parts = []
                for name, got in results.items():
                    wall = statistics.median(g[0] for g in got)
                    cpu = statistics.median(g[1] for g in got)
                    rss = max(g[2] for g in got)
                    note = "" if all(g[3] for g in got) else f" (killed after {args.timeout:.0f} s)"
                    parts.append(f"{name} {wall:7.2f} s wall {cpu:7.2f} s CPU {rss:6.0f} MB{note}")
                print(f"{kind:9s} {label:>16s}: " + " | ".join(parts), flush=True)
                subprocess.run(["rm", "-rf", str(job)], check=False)
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
