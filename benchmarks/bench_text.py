"""Time `ncclpm diagnose` on a large generated job against grep counting the same anchors.

Usage: python benchmarks/bench_text.py [--ranks 512 --mb-per-rank 2 --dir /tmp/ncclpm-bench-job]
Prints MB/s of ncclpm (whole command: start-up, scan, parse, rules, report) and of `grep -E` / `grep -F`
over the same literal anchors, the ratio, and ncclpm's peak memory. The page cache is warmed first.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


def timed(cmd: list[str], runs: int) -> tuple[float, str]:
    times, out = [], ""
    for _ in range(runs):
        t = time.perf_counter()
        out = subprocess.run(cmd, capture_output=True, text=True, check=False).stdout
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


def peak_rss_mb(cmd: list[str]) -> float:
    res = subprocess.run(["/usr/bin/time", "-f", "%M", *cmd], capture_output=True, text=True, check=False)
    return int(res.stderr.strip().splitlines()[-1]) / 1024


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, default=512)
    ap.add_argument("--mb-per-rank", type=float, default=2.0)
    ap.add_argument("--dir", type=Path, default=Path("/tmp/ncclpm-bench-job"))
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    if not args.dir.exists():
        subprocess.run(
            [
                sys.executable,
                str(ROOT / "benchmarks" / "gen_text_job.py"),
                str(args.dir),
                "--ranks",
                str(args.ranks),
                "--mb-per-rank",
                str(args.mb_per_rank),
            ],
            check=True,
        )
    from ncclpm.ingest.catalog import load_catalog

    anchors = load_catalog().anchors
    (args.dir.parent / "anchors.fixed").write_text("\n".join(anchors) + "\n")
    (args.dir.parent / "anchors.ere").write_text(
        "\n".join(re.sub(r"([\\.^$|?*+()\[\]{}])", r"\\\1", a) for a in anchors) + "\n"
    )
    size_mb = sum(p.stat().st_size for p in args.dir.rglob("*") if p.is_file()) / 1e6
    subprocess.run(["cat", *map(str, sorted(args.dir.rglob("*.log")))], stdout=subprocess.DEVNULL, check=False)
    nc = [sys.executable, "-m", "ncclpm", "diagnose", str(args.dir), "-f", "json"]
    t_nc, out = timed(nc, args.runs)
    t_ere, _ = timed(["grep", "-r", "-c", "-E", "-f", str(args.dir.parent / "anchors.ere"), str(args.dir)], args.runs)
    t_fix, _ = timed(["grep", "-r", "-c", "-F", "-f", str(args.dir.parent / "anchors.fixed"), str(args.dir)], args.runs)
    rss = peak_rss_mb(nc)
    verdict = re.search(r'"category": "(\w+)"', out)
    print("| input | ncclpm | grep -E | grep -F | ncclpm / grep -E | ncclpm / grep -F | ncclpm peak RSS | verdict |")
    print("|---|---|---|---|---|---|---|---|")
    print(
        f"| {args.ranks} ranks, {size_mb:.0f} MB | {t_nc:.2f} s ({size_mb / t_nc:.0f} MB/s) | {t_ere:.2f} s "
        f"({size_mb / t_ere:.0f} MB/s) | {t_fix:.2f} s ({size_mb / t_fix:.0f} MB/s) | {t_ere / t_nc:.2f} | "
        f"{t_fix / t_nc:.2f} | {rss:.0f} MB | {verdict.group(1) if verdict else '?'} |"
    )


if __name__ == "__main__":
    main()
