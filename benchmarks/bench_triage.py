"""Triage of many archived jobs: wall and CPU time of `ncclpm triage DIR -j N`, interleaved with a baseline
checkout, and where a job's CPU time goes inside a worker.

Usage:
    python -m tests.synth.make_jobs /tmp/jobs1000 --n 1000      # 1,000 archives of the test cases (16 MB)
    python benchmarks/bench_triage.py /tmp/jobs1000 [--runs 3] [--workers 2] [--baseline OTHER_CHECKOUT]
    python benchmarks/bench_triage.py /tmp/jobs1000 --phases 100 [--runs 3] [--baseline OTHER_CHECKOUT]

The first form runs the whole command as a user does (a fresh process that spawns its workers), this checkout
and the baseline one after the other, `runs` times; it prints each run's wall time, CPU time (user + system of
the command and its workers: `wait4`), peak RSS of the parent and the load average, then the medians. The rows
(`-o X.ndjson`, the `seconds` column aside) must be the same for every run of every checkout: it says so.

`--phases N` reads N jobs in one process as a pool worker does (`POLARS_MAX_THREADS=1`, the first job untimed: it
pays for the imports' first use), and prints the CPU time per job (`resource.getrusage`, every thread) of each
step: opening the archive and finding its sources, reading the text, the events, the other tables, the analysis
and rules, the report's parts, the row - `runs` rounds, the two checkouts alternating which goes first, medians.
CPU time stays comparable on a loaded machine; wall time does not.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_ENTRY = (
    "import sys; sys.path.insert(0, sys.argv.pop(1)); sys.argv[0] = 'ncclpm'\n"
    "import importlib, tomllib\n"
    "module, _, function = tomllib.load(open(sys.argv.pop(1), 'rb'))['project']['scripts']['ncclpm'].partition(':')\n"
    "entry = getattr(importlib.import_module(module), function)\n"
    "entry() if function == 'run' else entry(prog_name='ncclpm')\n"
)  # the checkout's own console entry (its pyproject.toml's [project.scripts]), as a user runs `ncclpm`

_PHASES = r"""
import collections, functools, json, os, resource, sys
sys.path.insert(0, sys.argv[1])
os.environ.setdefault("POLARS_MAX_THREADS", "1")
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
t0 = cpu()
import polars
t1 = cpu()
import ncclpm.engine as E, ncclpm.ingest.build as B, ncclpm.sources.discover as D, ncclpm.triage.worker as W
from ncclpm.triage import find_jobs
t2 = cpu()
acc = collections.Counter()
def timed(mod, name, label):
    f = getattr(mod, name)
    @functools.wraps(f)
    def w(*a, **k):
        t = cpu()
        try:
            return f(*a, **k)
        finally:
            acc[label] += cpu() - t
    setattr(mod, name, w)
timed(D, "collect", "open")
timed(B, "read_kept_lines", "text")
timed(B, "extract_events", "events")
timed(B, "build_tables", "tables")
timed(E, "analyse", "analysis")
timed(E, "evaluate", "rules")
timed(E, "diagnose_facts", "diagnose")  # (diagnose_tables = analyse, then this: both ways of calling it counted once)
timed(W, "_fill", "row")
jobs = find_jobs([sys.argv[2]], [])[: int(sys.argv[3])]
t3 = cpu()
W.triage_job(jobs[0].path, jobs[0].name)
t4 = cpu()
acc.clear()
for j in jobs[1:]:
    W.triage_job(j.path, j.name)
t5 = cpu()
n = len(jobs) - 1
out = {"import polars": t1 - t0, "import ncclpm": t2 - t1, "first job": t4 - t3, "per job": (t5 - t4) / n}
out |= {k: v / n for k, v in acc.items()}
tables, diagnose = out.pop("tables", 0.0), out.pop("diagnose", 0.0)
out["other_tables"] = tables - out.get("text", 0.0) - out.get("events", 0.0)
out["report"] = diagnose - out.get("rules", 0.0)
out["rest"] = out["per job"] - tables - out.get("analysis", 0.0) - diagnose - out.get("open", 0.0) - out.get("row", 0.0)
print(json.dumps(out))
"""


STEPS = {
    "import polars": "importing polars (once per worker)",
    "import ncclpm": "importing ncclpm (once per worker)",
    "first job": "the worker's first job (once per worker)",
    "per job": "each later job, in all:",
    "open": "  opening the archive, finding the sources",
    "text": "  reading the text (scan, kept lines, per-line columns)",
    "events": "  events (patterns, readings, NCCL messages)",
    "other_tables": "  the other tables (ranks, stacks, dumps, settings...)",
    "analysis": "  analysis (the facts computed up front)",
    "rules": "  rules (and the facts they ask for)",
    "report": "  the report's parts (evidence, rank rows, story...)",
    "row": "  the row (top error, times, hosts, recurrence)",
    "rest": "  the rest",
}


def _run(src: Path, jobs: Path, workers: int, out: Path) -> dict:
    cmd = [
        sys.executable,
        "-c",
        _ENTRY,
        str(src),
        str(src.parent / "pyproject.toml"),
        "triage",
        str(jobs),
        "-j",
        str(workers),
        "-q",
        "-o",
        str(out),
    ]
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{src}: triage failed ({proc.returncode}): {proc.stderr.read().decode()[-2000:]}")
    proc.stderr.close()
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    for r in rows:
        r.pop("seconds", None)
    return {
        "wall": wall,
        "cpu": usage.ru_utime + usage.ru_stime,  # the command and every worker it waited for
        "rss_mb": usage.ru_maxrss / 1024,  # the largest of them
        "load": os.getloadavg()[0],
        "rows": json.dumps(rows, sort_keys=True),
    }


def _phases(src: Path, jobs: Path, n: int) -> dict:
    got = subprocess.run(
        [sys.executable, "-c", _PHASES, str(src), str(jobs), str(n)], capture_output=True, text=True, check=True
    )
    return json.loads(got.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("jobs", type=Path, help="a folder of job archives (tests.synth.make_jobs)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--baseline", type=Path, help="another checkout of ncclpm (its C modules built) to interleave")
    ap.add_argument("--phases", type=int, default=0, help="CPU time per step over this many jobs, in one process")
    args = ap.parse_args()
    sides = {"this": ROOT / "src"}
    if args.baseline is not None:
        sides["baseline"] = args.baseline.resolve() / "src"
    if args.phases:
        rounds: dict[str, list[dict]] = {name: [] for name in sides}
        for i in range(args.runs):  # the sides alternate which goes first: a load that changes hits both alike
            for name, src in list(sides.items())[:: 1 if i % 2 == 0 else -1]:
                rounds[name].append(_phases(src, args.jobs, args.phases))
                per_job = rounds[name][-1]["per job"] * 1000
                print(f"round {i + 1} {name:8s} {per_job:6.1f} ms a job  load {os.getloadavg()[0]:.2f}", flush=True)
        got = {n: {k: statistics.median(r.get(k, float("nan")) for r in rs) for k in STEPS} for n, rs in rounds.items()}
        print(
            f"CPU ms per job ({args.phases - 1} jobs after a first one, one process, POLARS_MAX_THREADS=1; "
            f"medians of {args.runs} rounds)"
        )
        print(f"{'step':58s}" + "".join(f"{n:>10s}" for n in got))
        for key, label in STEPS.items():
            print(f"{label:58s}" + "".join(f"{got[n][key] * 1000:10.1f}" for n in got))
        return
    results: dict[str, list[dict]] = {name: [] for name in sides}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.runs):
            for name, src in sides.items():
                r = _run(src, args.jobs, args.workers, Path(tmp) / f"{name}{i}.ndjson")
                results[name].append(r)
                print(
                    f"run {i + 1} {name:8s} wall {r['wall']:6.1f} s  CPU {r['cpu']:6.1f} s  "
                    f"peak {r['rss_mb']:5.0f} MB  load {r['load']:.2f}",
                    flush=True,
                )
    every = {r["rows"] for rs in results.values() for r in rs}
    print("rows: " + ("the same in every run" if len(every) == 1 else f"{len(every)} different tables!"))
    for name, rs in results.items():
        wall = statistics.median(r["wall"] for r in rs)
        cpu = statistics.median(r["cpu"] for r in rs)
        print(f"{name:8s} median wall {wall:6.1f} s, CPU {cpu:6.1f} s ({len(rs)} runs, -j {args.workers})")


if __name__ == "__main__":
    main()
