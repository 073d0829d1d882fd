"""Start-up: wall and CPU time of small `ncclpm` commands, interleaved with a baseline checkout.

Usage: python benchmarks/bench_startup.py [--runs 21] [--baseline OTHER_CHECKOUT]

Each command runs as a fresh process, as a user runs it: each checkout through its own `ncclpm` console entry
(`[project.scripts]` in its pyproject.toml: `ncclpm.command:run`, `ncclpm.cli:run` before; `ncclpm.cli:main` in a
checkout without `run`), with its `src` first on `sys.path` (the baseline's C
modules are this checkout's when it has none built: they are the same sources). The tiny job is 21 lines of
`sample_logs/nccl_rank0_sample_generation` (a timeout, a checkpointing rank, torchrun's summary); the NCCL job is
a WARN and torch's exception quoting it, which loads NCCL's declared messages (parsers/nccl/). Bytecode is
written and warm (a first untimed run of each command), as after `pip install`. Prints the median and the
minimum of wall and CPU time (user + system of the child) and the load average.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_ENTRY = (
    "import sys; sys.path.insert(0, sys.argv.pop(1)); sys.argv[0] = 'ncclpm'\n"
    "from {module} import {function} as entry\n"
    "entry()\n"
)


def _entry(checkout: Path) -> str:
    """The code that runs the checkout's `ncclpm` console entry (its pyproject.toml's `[project.scripts]`)."""
    import tomllib

    target = tomllib.loads((checkout / "pyproject.toml").read_text(encoding="utf-8"))["project"]["scripts"]["ncclpm"]
    module, _, function = target.partition(":")
    if module == "ncclpm.cli" and function == "main":  # (a checkout without `run`: click's main needs a name)
        return (
            "import sys; sys.path.insert(0, sys.argv.pop(1))\nfrom ncclpm.cli import main\nmain(prog_name='ncclpm')\n"
        )
    return _ENTRY.format(module=module, function=function)


def _tiny_job(folder: Path) -> Path:
    src = ROOT / "sample_logs" / "nccl_rank0_sample_generation" / "slurm-48211.out"
    lines = src.read_text(encoding="utf-8").splitlines(keepends=True)[24:45]
    out = folder / "tiny.log"
    out.write_text("".join(lines), encoding="utf-8")
    return out


def _nccl_job(folder: Path) -> Path:
    """A rank's NCCL WARN and torch's exception quoting it (`Last error:`): the job that loads NCCL's declared
    messages (parsers/nccl/), which a job without such a line never does."""
    out = folder / "nccl.log"
    out.write_text(
        "node03:23440:23664 [3] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to 10.0.3.14<41524> failed : "
        "Connection refused\n"
        "node03:23440:23664 [3] NCCL INFO misc/socket.cc:567 -> 6\n"
        "[rank3]:Traceback (most recent call last):\n"
        '[rank3]:  File "/workspace/train.py", line 88, in <module>\n'
        "[rank3]:    dist.all_reduce(grad)\n"
        "[rank3]:torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/"
        "ProcessGroupNCCL.cpp:3690, unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version "
        "2.27.7\n"
        "[rank3]:ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error.\n"
        "[rank3]:Last error:\n"
        "[rank3]:socketStartConnect: Connect to 10.0.3.14<41524> failed : Connection refused\n",
        encoding="utf-8",
    )
    return out


def _one(checkout: Path, args: list[str], env: dict[str, str]) -> tuple[float, float]:
    code = _entry(checkout)
    start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-c", code, str(checkout / "src"), *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    _, _, usage = os.wait4(proc.pid, 0)
    return time.perf_counter() - start, usage.ru_utime + usage.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=21)
    ap.add_argument("--baseline", type=Path, help="another checkout of ncclpm to compare with")
    a = ap.parse_args()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}  # as after `pip install`
    with tempfile.TemporaryDirectory(prefix="ncclpm-startup-") as tmp:
        job = _tiny_job(Path(tmp))
        nccl = _nccl_job(Path(tmp))
        commands = {
            "diagnose a 21-line log (-f json)": ["diagnose", str(job), "-f", "json"],
            "diagnose an NCCL WARN + Last error (11 lines)": ["diagnose", str(nccl), "-f", "json"],
            "rules": ["rules"],
            "explain CR01": ["explain", "CR01"],
            "--help": ["--help"],
        }
        checkouts = {"this checkout": ROOT} | ({"baseline": a.baseline.resolve()} if a.baseline else {})
        if a.baseline:
            _borrow_c_modules(a.baseline.resolve())
        times: dict[tuple[str, str], list[tuple[float, float]]] = {}
        for checkout in checkouts.values():  # warm: bytecode written, files in the page cache
            for args in commands.values():
                _check(checkout, args, env)
        for _ in range(a.runs):
            for label, args in commands.items():
                for who, checkout in checkouts.items():
                    times.setdefault((label, who), []).append(_one(checkout, args, env))
    print(f"{a.runs} interleaved runs each; load average {os.getloadavg()[0]:.1f}; seconds\n")
    print("| command | checkout | wall median | wall min | CPU median | CPU min |")
    print("|---|---|---:|---:|---:|---:|")
    for (label, who), got in times.items():
        wall, cpu = [w for w, _ in got], [c for _, c in got]
        print(
            f"| {label} | {who} | {statistics.median(wall):.3f} | {min(wall):.3f} | "
            f"{statistics.median(cpu):.3f} | {min(cpu):.3f} |"
        )


def _check(checkout: Path, args: list[str], env: dict[str, str]) -> None:
    """Run the command once, untimed; stop unless it worked (a failing command is fast, and would be measured so:
    a stale or borrowed C module that no longer fits its Python code, for one)."""
    got = subprocess.run(
        [sys.executable, "-c", _entry(checkout), str(checkout / "src"), *args], capture_output=True, env=env
    )
    if got.returncode != 0 or not got.stdout:
        raise SystemExit(f"{checkout}: ncclpm {' '.join(args)} failed ({got.returncode}): {got.stderr[-400:]!r}")


def _borrow_c_modules(baseline: Path) -> None:
    """A baseline checkout without its C modules built gets this checkout's (the same sources, or the baseline
    would measure the pure-Python path)."""
    here, there = ROOT / "src" / "ncclpm", baseline / "src" / "ncclpm"
    for built in here.rglob("_*.so"):
        name = built.name.split(".")[0]
        for source in there.rglob(f"{name}.c"):  # wherever the baseline keeps that module's source
            target = source.with_name(built.name)
            if not target.exists():
                shutil.copy2(built, target)


if __name__ == "__main__":
    main()
