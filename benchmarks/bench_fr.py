"""Benchmark flight-recorder loading + cross-rank matching on synthetic dumps.

Usage: PYTHONPATH=src python benchmarks/bench_fr.py [--ranks 64 256 1024] [--entries 2000] [--runs 3]
       [--fault never_joined] [--torch-python /tmp/torchenv/bin/python] [--no-fr-trace]

For each size it writes the dumps to a temp dir, then times (median of --runs):
  decode  — the restricted unpickler alone over every file, one process (the floor: pure pickle decoding),
  load 1p — `load_fr_dumps` forced to one process (decode + column extraction + polars tables),
  load    — `load_fr_dumps` as shipped (worker processes above `fr_decode._POOL_MIN_BYTES`),
  analyze — `analyze_fr`,
and, when a Python with torch is available (``--torch-python`` or the current one), PyTorch's
``python -m torch.distributed.flight_recorder.fr_trace <dir>`` (torch is not a dependency; skipped if absent),
and compares the culprit ranks each tool names. Prints a markdown table.
"""

from __future__ import annotations

import argparse
import gc
import io
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ncclpm.analysis.fr_match import analyze_fr
from ncclpm.ingest import fr_decode
from ncclpm.ingest.flight_recorder import _NoGlobalsUnpickler, load_fr_dumps
from ncclpm.synth.fr_dumps import FAULTS, culprit_rank, generate


def _read(folder: Path) -> list[tuple[str, bytes]]:
    return [(p.name, p.read_bytes()) for p in sorted(folder.iterdir())]


def _decode_all(items: list[tuple[str, bytes]]) -> None:
    gc.disable()
    try:
        for _, data in items:
            _NoGlobalsUnpickler(io.BytesIO(data)).load()
    finally:
        gc.enable()


def _load_one_process(items: list[tuple[str, bytes]]) -> object:
    old = fr_decode._POOL_MIN_BYTES
    fr_decode._POOL_MIN_BYTES = 1 << 62
    try:
        return load_fr_dumps(items)
    finally:
        fr_decode._POOL_MIN_BYTES = old


def _timed(fn, runs: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(runs):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
        gc.collect()
    return statistics.median(times), out


def _torch_python(explicit: str | None) -> str | None:
    for py in ([explicit] if explicit else []) + [sys.executable]:
        ok = subprocess.run(
            [py, "-c", "import torch.distributed.flight_recorder.fr_trace"], capture_output=True, check=False
        )
        if ok.returncode == 0:
            return py
    return None


def _fr_trace(py: str, folder: Path) -> tuple[float, str]:
    t = time.perf_counter()
    res = subprocess.run(
        [py, "-m", "torch.distributed.flight_recorder.fr_trace", str(folder)],
        capture_output=True,
        text=True,
        check=False,
        timeout=3600,
    )
    dt = time.perf_counter() - t
    text = res.stdout + res.stderr
    found = re.search(r"missing ranks: \{([\d, ]+)\}", text) or re.search(r"Culprit rank (\d+)", text)
    if found:  # fr_trace's first finding (it may print one per group)
        return dt, found.group(1).replace(" ", "")
    last = text.strip().splitlines()[-1][:60] if text.strip() else "(no output)"
    return dt, f"exit {res.returncode}: {last}"


def bench(n_ranks: int, n_entries: int, fault: str, runs: int, torch_py: str | None) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for name, data in generate(n_ranks, n_entries, 3, fault).items():
            (folder / name).write_bytes(data)
        items = _read(folder)
        mb = sum(len(b) for _, b in items) / 1e6
        decode, _ = _timed(lambda: _decode_all(items), runs)
        load1_s, _ = _timed(lambda: _load_one_process(items), runs)
        load_s, load = _timed(lambda: load_fr_dumps(items), runs)
        ana_s, ana = _timed(lambda: analyze_fr(load), runs)
        row = {
            "ranks": n_ranks,
            "entries": n_entries * n_ranks,
            "MB": mb,
            "decode": decode,
            "load1": load1_s,
            "load": load_s,
            "analyze": ana_s,
            "culprits": ",".join(map(str, ana.culprit_ranks)),
            "expected": culprit_rank(n_ranks, fault),
            "fr_trace": None,
            "fr_culprits": "-",
        }
        if torch_py:
            row["fr_trace"], row["fr_culprits"] = _fr_trace(torch_py, folder)
        return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, nargs="+", default=[64, 256, 1024])
    ap.add_argument("--entries", type=int, default=2000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--fault", choices=FAULTS, default="never_joined")
    ap.add_argument("--torch-python", default=None)
    ap.add_argument("--no-fr-trace", action="store_true", help="skip PyTorch's fr_trace (minutes at 1024 ranks)")
    a = ap.parse_args()
    torch_py = None if a.no_fr_trace else _torch_python(a.torch_python)
    print(f"fault={a.fault}; fr_trace: {torch_py or 'torch not available, skipped'}\n")
    print(
        "| ranks | entries | MB | decode floor s | load 1 process s | load s | analyze s | load+analyze s "
        "| culprits (expected) | fr_trace s | fr_trace culprits |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---|")
    for n in a.ranks:
        r = bench(n, a.entries, a.fault, a.runs, torch_py)
        fr = f"{r['fr_trace']:.2f}" if r["fr_trace"] is not None else "-"
        print(
            f"| {r['ranks']} | {r['entries']} | {r['MB']:.0f} | {r['decode']:.2f} | {r['load1']:.2f} "
            f"| {r['load']:.2f} "
            f"| {r['analyze']:.2f} | {r['load'] + r['analyze']:.2f} | {r['culprits']} ({r['expected']}) "
            f"| {fr} | {r['fr_culprits']} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
