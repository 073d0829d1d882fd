"""Benchmark flight-recorder loading + cross-rank matching on synthetic dumps, against PyTorch's fr_trace.

Usage: python benchmarks/bench_fr.py [--ranks 256 1024 4096] [--entries 2000] [--runs 3] [--fault never_joined]
       [--baseline OTHER_CHECKOUT [--baseline-eager]] [--python-path] [--torch-python /work/torchvenv/bin/python]
       [--no-fr-trace] [--keep DIR] [--jemalloc dirty_decay_ms:0,muzzy_decay_ms:0] [--polars-defaults]

The child first collects the folder's sources and lets `ncclpm.ingest.polars_setup.tune_for` choose polars' settings
before polars loads, as `ncclpm diagnose` does (a job of dumps gets `FR_SETTINGS`); ``--polars-defaults`` also
runs this checkout without them.

The C decoder is used when built (editable installs build it; NCCLPM_FR_PYTHON=1 in the environment measures the
pure-Python path). ``--jemalloc CONF`` also runs this checkout with ``_RJEM_MALLOC_CONF=CONF`` (polars' allocator
settings, read when polars loads) to measure what an allocator setting does to the peak; the other runs get the
environment without it.

Each measurement runs in a fresh child process (peak RSS = its VmHWM: ``ru_maxrss`` would carry over the parent's RSS at
the fork, e.g. the freshly generated dumps): ``load_fr_dumps`` with the bytes read
lazily (as ``ncclpm diagnose`` does), then ``analyze_fr``; the child reports wall and CPU time of both, its RSS
after imports and its peak RSS.  Runs are interleaved (ncclpm, baseline checkout if given, fr_trace, ncclpm,
...), medians are printed with the ratios and the load average, and both tools' culprit ranks.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the synthetic-dump generator lives with the tests (not in the wheel)
from tests.synth.fr_dumps import FAULTS, culprit_rank, generate  # noqa: E402

_CHILD = r"""
import json, os, re, sys, time
sys.path.insert(0, sys.argv[1])
from pathlib import Path
tuned = False
if sys.argv[4] == "tuned":  # polars' settings chosen from the sources before polars loads, as `ncclpm diagnose` does
    try:
        from ncclpm.ingest.polars_setup import tune_for
        from ncclpm.sources.discover import collect
        tuned = tune_for(collect([sys.argv[2]]))
    except ImportError:  # a checkout before polars_setup
        pass
from ncclpm.analysis.fr_match import analyze_fr
from ncclpm.ingest.flight_recorder.load import load_fr_dumps
try:  # a checkout with the old worker pool: measured in one process (the pool was the same CPU, see README)
    from ncclpm.ingest.flight_recorder import decode as fr_decode
    fr_decode._POOL_MIN_BYTES = 1 << 62
except (ImportError, AttributeError):
    pass
rss = lambda key="VmRSS": int(re.search(key + r":\s+(\d+)", open("/proc/self/status").read()).group(1)) / 1024
base = rss()
paths = sorted(Path(sys.argv[2]).iterdir())
cpu = lambda: sum(os.times()[:4])
t0, c0 = time.perf_counter(), cpu()
lazy = sys.argv[3] == "lazy"  # a checkout before the streaming loader takes bytes, read up front as it did
load = load_fr_dumps([(p.name, p.read_bytes if lazy else p.read_bytes()) for p in paths])
t1, c1 = time.perf_counter(), cpu()
a = analyze_fr(load)
t2, c2 = time.perf_counter(), cpu()
print(json.dumps({"load": t1 - t0, "load_cpu": c1 - c0, "analyze": t2 - t1, "analyze_cpu": c2 - c1,
                  "base_mb": base, "peak_mb": rss("VmHWM"),
                  "culprits": list(a.culprit_ranks), "tuned": tuned}))
"""


def _ncclpm(
    src: Path, folder: Path, lazy: bool = True, python_path: bool = False, jemalloc: str = "", tuned: bool = True
) -> dict:
    drop = ("NCCLPM_FR_PYTHON", "_RJEM_MALLOC_CONF", "POLARS_IDEAL_MORSEL_SIZE")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    if python_path:
        env["NCCLPM_FR_PYTHON"] = "1"
    if jemalloc:
        env["_RJEM_MALLOC_CONF"] = jemalloc
    res = subprocess.run(
        [sys.executable, "-c", _CHILD, str(src), str(folder), "lazy" if lazy else "eager", "tuned" if tuned else "-"],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    return json.loads(res.stdout)


def _torch_python(explicit: str | None) -> str | None:
    for py in [p for p in (explicit, "/work/torchvenv/bin/python", sys.executable) if p]:
        ok = subprocess.run(
            [py, "-c", "import torch.distributed.flight_recorder.fr_trace"], capture_output=True, check=False
        )
        if ok.returncode == 0:
            return py
    return None


def _fr_trace(py: str, folder: Path) -> tuple[float, str, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    res = subprocess.run(
        [py, "-m", "torch.distributed.flight_recorder.fr_trace", str(folder)],
        capture_output=True,
        text=True,
        check=False,
        timeout=7200,
    )
    dt = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    text = res.stdout + res.stderr
    found = re.search(r"missing ranks: \{([\d, ]+)\}", text) or re.search(r"Culprit rank (\d+)", text)
    if found:  # fr_trace's first finding (it may print one per group)
        return dt, found.group(1).replace(" ", ""), cpu
    last = text.strip().splitlines()[-1][:60] if text.strip() else "(no output)"
    return dt, f"exit {res.returncode}: {last}", cpu


def _med(rows: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in rows)


def bench(folder: Path, n_ranks: int, a: argparse.Namespace, torch_py: str | None) -> None:
    mb = sum(p.stat().st_size for p in folder.iterdir()) / 1e6
    new: list[dict] = []
    old: list[dict] = []
    pure: list[dict] = []
    with_conf: list[dict] = []
    defaults: list[dict] = []
    fr: list[tuple[float, str, float]] = []
    loads = []
    for i in range(a.runs):
        new.append(_ncclpm(ROOT / "src", folder))
        if a.python_path:
            pure.append(_ncclpm(ROOT / "src", folder, python_path=True))
        if a.jemalloc:
            with_conf.append(_ncclpm(ROOT / "src", folder, jemalloc=a.jemalloc, tuned=False))
        if a.polars_defaults:
            defaults.append(_ncclpm(ROOT / "src", folder, tuned=False))
        if a.baseline:
            old.append(_ncclpm(Path(a.baseline) / "src", folder, lazy=not a.baseline_eager))
        if torch_py and i < a.fr_trace_runs:
            fr.append(_fr_trace(torch_py, folder))
        loads.append(os.getloadavg()[0])
    runs = (
        ("ncclpm", new),
        ("ncclpm, polars' defaults", defaults),
        ("ncclpm, Python path", pure),
        (f"ncclpm, {a.jemalloc}", with_conf),
        ("baseline", old),
    )
    for label, rows in runs:
        if not rows:
            continue
        total = _med(rows, "load") + _med(rows, "analyze")
        cpu = _med(rows, "load_cpu") + _med(rows, "analyze_cpu")
        fr_s = statistics.median(t for t, _, _ in fr) if fr else None
        fr_cpu = statistics.median(c for _, _, c in fr) if fr else None
        print(
            f"| {label} | {n_ranks} | {n_ranks * a.entries} | {mb:.0f} | {_med(rows, 'load'):.2f} "
            f"| {_med(rows, 'analyze'):.2f} | {total:.2f} | {cpu:.2f} "
            f"| {_med(rows, 'peak_mb'):.0f} | {_med(rows, 'peak_mb') - _med(rows, 'base_mb'):.0f} "
            f"| {_med(rows, 'peak_mb') / mb:.2f} | {rows[0]['culprits']} ({culprit_rank(n_ranks, a.fault)}) "
            f"| {f'{fr_s:.1f} ({fr_cpu:.1f})' if fr_s else '-'} "
            f"| {f'{fr_s / total:.1f}x ({fr_cpu / cpu:.1f}x)' if fr_s else '-'} "
            f"| {fr[0][1] if fr else '-'} | {statistics.median(loads):.1f} |",
            flush=True,
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, nargs="+", default=[256, 1024])
    ap.add_argument("--entries", type=int, default=2000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--fault", choices=FAULTS, default="never_joined")
    ap.add_argument("--baseline", help="another checkout (its src/ is imported) to run interleaved")
    ap.add_argument(
        "--baseline-eager", action="store_true", help="the baseline predates lazy reading: give it the bytes up front"
    )
    ap.add_argument("--python-path", action="store_true", help="also run this checkout with NCCLPM_FR_PYTHON=1")
    ap.add_argument("--jemalloc", default="", help="also run this checkout with _RJEM_MALLOC_CONF set to this")
    ap.add_argument(
        "--polars-defaults",
        action="store_true",
        help="also run this checkout without the settings `ncclpm diagnose` gives polars for a job of dumps",
    )
    ap.add_argument("--torch-python", default=None)
    ap.add_argument("--fr-trace-runs", type=int, default=1, help="fr_trace takes minutes: runs of it per size")
    ap.add_argument("--no-fr-trace", action="store_true")
    ap.add_argument("--keep", type=Path, help="write the dumps under this folder and keep them")
    a = ap.parse_args()
    torch_py = None if a.no_fr_trace else _torch_python(a.torch_python)
    print(f"fault={a.fault}; fr_trace: {torch_py or 'skipped'}; times in s, memory in MB; medians of {a.runs}\n")
    print(
        "| tool | ranks | entries | dumps MB | load | analyze | load+analyze | CPU | peak RSS | peak - start RSS "
        "| peak / dumps | culprits (expected) | fr_trace wall (CPU) | fr_trace / this, wall (CPU) | fr_trace culprit "
        "| load avg |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---|---:|")
    for n in a.ranks:
        with tempfile.TemporaryDirectory() as tmp:
            folder = (a.keep / f"fr{n}") if a.keep else Path(tmp)
            folder.mkdir(parents=True, exist_ok=True)
            if not any(folder.iterdir()):
                for name, data in generate(n, a.entries, 3, a.fault).items():
                    (folder / name).write_bytes(data)
            bench(folder, n, a, torch_py)


if __name__ == "__main__":
    main()
