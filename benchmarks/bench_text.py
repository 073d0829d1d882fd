"""Time `ncclpm diagnose` on a large generated job against grep and ripgrep counting the same anchors.

Usage: python benchmarks/bench_text.py [--ranks 512 --mb-per-rank 2 --dir /tmp/ncclpm-bench-job --runs 3]
                                      [--baseline OTHER_CHECKOUT]
Runs are interleaved (ncclpm, grep -E, grep -F, rg, ncclpm, ...) after a warm-up read of every file; the table
shows median wall time, MB/s, median CPU time (user + system, less sensitive to a loaded machine), ncclpm's
speed as a ratio of each tool's (by wall and by CPU), then ncclpm's speed against grep -E's run by run (each pair
of the same round), ncclpm's peak RSS (each run's, from `wait4`) against the input size, and the load average.
The anchor lists are written beside the job (`DIR.anchors.fixed`, `DIR.anchors.ere`). ripgrep is Debian's
`ripgrep` (skipped when absent). `--baseline` adds another checkout's ncclpm (its `src/` first on PYTHONPATH) to
the interleaved runs, for A/B comparisons.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, float, float, str]:
    """(wall, CPU of the child (user + system), its peak RSS in MB, stdout)."""
    t = time.perf_counter()
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env) as proc:
        out = proc.stdout.read() if proc.stdout else ""
        _, _, usage = os.wait4(proc.pid, 0)
        proc.returncode = 0  # reaped here: Popen must not wait for it again
    wall = time.perf_counter() - t
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, default=512)
    ap.add_argument("--mb-per-rank", type=float, default=2.0)
    ap.add_argument("--dir", type=Path, default=Path("/tmp/ncclpm-bench-job"))
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--baseline", type=Path, help="another checkout of ncclpm to run interleaved (A/B)")
    args = ap.parse_args()
    if not args.dir.exists():
        gen = [sys.executable, str(ROOT / "benchmarks" / "gen_text_job.py"), str(args.dir)]
        subprocess.run([*gen, "--ranks", str(args.ranks), "--mb-per-rank", str(args.mb_per_rank)], check=True)
    from ncclpm.ingest.catalog import load_catalog

    anchors = load_catalog().anchors
    fixed, ere = (args.dir.parent / f"{args.dir.name}.anchors.{kind}" for kind in ("fixed", "ere"))
    fixed.write_text("\n".join(anchors) + "\n")
    ere.write_text("\n".join(re.sub(r"([\\.^$|?*+()\[\]{}])", r"\\\1", a) for a in anchors) + "\n")
    files = sorted(str(p) for p in args.dir.rglob("*") if p.is_file())
    size_mb = sum(os.path.getsize(p) for p in files) / 1e6
    subprocess.run(["cat", *files], stdout=subprocess.DEVNULL, check=False)
    tools = {
        "ncclpm": [sys.executable, "-m", "ncclpm", "diagnose", str(args.dir), "-f", "json"],
        "grep -E": ["grep", "-r", "-c", "-E", "-f", str(ere), str(args.dir)],
        "grep -F": ["grep", "-r", "-c", "-F", "-f", str(fixed), str(args.dir)],
    }
    if shutil.which("rg"):
        tools["rg"] = ["rg", "-c", "-F", "-f", str(fixed), str(args.dir)]
    envs = {name: None for name in tools}
    if args.baseline:
        tools["baseline"] = tools["ncclpm"]
        envs["baseline"] = {**os.environ, "PYTHONPATH": str(args.baseline.resolve() / "src")}
    times: dict[str, list[tuple[float, float]]] = {k: [] for k in tools}
    peaks: dict[str, list[float]] = {k: [] for k in tools}
    verdict, loads = "?", []
    for _ in range(args.runs):
        for name, cmd in tools.items():
            wall, cpu, peak, out = run(cmd, envs[name])
            times[name].append((wall, cpu))
            peaks[name].append(peak)
            if name == "ncclpm":
                found = re.search(r'"category": "(\w+)"', out)
                verdict = found.group(1) if found else "?"
        loads.append(os.getloadavg()[0])
    med = {k: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v)) for k, v in times.items()}
    print(f"input: {args.ranks} ranks, {size_mb:.0f} MB in {len(files)} files; medians of {args.runs} interleaved runs")
    print(f"load average during the runs: {statistics.median(loads):.1f}; ncclpm verdict: {verdict}\n")
    print("| tool | wall s | MB/s | CPU s | ncclpm speed / tool speed (wall) | same, by CPU |")
    print("|---|---:|---:|---:|---:|---:|")
    nw, nc = med["ncclpm"]
    for name, (w, c) in med.items():
        print(f"| {name} | {w:.2f} | {size_mb / w:.0f} | {c:.2f} | {w / nw:.2f} | {c / nc:.2f} |")
    print()
    grep_e = [w for w, _ in times["grep -E"]]
    per_run = [g / w for (w, _), g in zip(times["ncclpm"], grep_e, strict=True)]
    print(f"ncclpm speed / grep -E speed by wall, run by run: {', '.join(f'{r:.2f}' for r in per_run)}")
    for name in ("ncclpm", "baseline") if args.baseline else ("ncclpm",):
        low, high = min(peaks[name]), max(peaks[name])
        print(f"{name} peak RSS over the {args.runs} runs: {low:.0f}-{high:.0f} MB = ", end="")
        print(f"{low / size_mb:.2f}-{high / size_mb:.2f} x the input")


if __name__ == "__main__":
    main()
