"""How much of a triage job, and of a tiny job's start, is polars' own fixed cost (issue 28's last two goals).

    python benchmarks/bench_polars_share.py /tmp/scale4_jobs1000 [--jobs 61]

Three measures, each in a fresh process with POLARS_MAX_THREADS=1 (as each worker of `triage -j 2` runs):
- polars' import, CPU seconds (the floor of any run of the command that reads a job);
- polars' fixed cost of one eager query on a 20-row frame (filter, select, join, group_by, sort), CPU microseconds,
  against the same filter done on the Series (no query plan);
- a triage worker's later jobs under cProfile (the first job untimed, as in bench_triage.py --phases), their time
  split into polars (its Python API and its Rust calls), waiting for the scan threads (which run the C matcher and
  polars' per-line columns), ncclpm's own Python, and the rest (the standard library, isinstance checks polars
  makes, zlib...). cProfile inflates Python-heavy parts; the shares are indicative, the query counts exact.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

_IMPORT = "import time\nt = time.process_time()\nimport polars\nprint(time.process_time() - t)"

_MICRO = r"""
import json, time
import polars as pl
df = pl.DataFrame({"a": list(range(20)), "b": [str(i) for i in range(20)]})
e = pl.col("a") > 3
def t(f, n=2000):
    f()
    s = time.process_time()
    for _ in range(n):
        f()
    return (time.process_time() - s) / n * 1e6
out = {
    "filter": t(lambda: df.filter(e)),
    "select": t(lambda: df.select(pl.col("a") + 1)),
    "join": t(lambda: df.join(df, on="a", how="left")),
    "group_by": t(lambda: df.group_by("a").agg(pl.len())),
    "sort": t(lambda: df.sort("a")),
    "Series filter (no plan)": t(lambda: df.get_column("a").filter(df.get_column("a") > 3)),
}
print(json.dumps(out))
"""

_PROFILE = r"""
import cProfile, json, pstats, sys
import polars
import ncclpm.triage.worker as W
from ncclpm.triage import find_jobs
jobs = find_jobs([sys.argv[1]], [])[: int(sys.argv[2])]
W.triage_job(jobs[0].path, jobs[0].name)
pr = cProfile.Profile()
pr.enable()
for j in jobs[1:]:
    W.triage_job(j.path, j.name)
pr.disable()
shares = {"polars": 0.0, "waiting for the scan threads": 0.0, "ncclpm's Python": 0.0, "the rest": 0.0}
queries = 0
for (path, _, name), (_, calls, own, _, _) in pstats.Stats(pr).stats.items():
    if "/polars/" in path or "builtins.Py" in name or name in ("{collect_all}", "{concat_df}", "{concat_lf}"):
        shares["polars"] += own
        if name in ("<method 'collect' of 'builtins.PyLazyFrame' objects>", "{collect_all}"):
            queries += calls
    elif "acquire" in name:
        shares["waiting for the scan threads"] += own
    elif "/ncclpm/" in path:
        shares["ncclpm's Python"] += own
    else:
        shares["the rest"] += own
n = len(jobs) - 1
print(json.dumps({"jobs": n, "queries a job": queries / n} | {k: v / n * 1000 for k, v in shares.items()}))
"""


def _run(code: str, *args: str) -> str:
    env = dict(os.environ, POLARS_MAX_THREADS="1")
    got = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, check=True, env=env)
    return got.stdout.strip().splitlines()[-1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("jobs", help="a folder of archived jobs (tests.synth.make_jobs)")
    ap.add_argument("--jobs", dest="n", type=int, default=61, help="jobs read by the profiled worker (first untimed)")
    ap.add_argument("--runs", type=int, default=5, help="fresh processes for the import's median")
    args = ap.parse_args()
    imports = sorted(float(_run(_IMPORT)) for _ in range(args.runs))
    print(f"importing polars: {imports[len(imports) // 2]:.3f} s CPU (median of {args.runs}; min {imports[0]:.3f})")
    print("one eager query on a 20-row frame, CPU microseconds:")
    for name, us in json.loads(_run(_MICRO)).items():
        print(f"  {name:<26} {us:7.1f}")
    prof = json.loads(_run(_PROFILE, args.jobs, str(args.n)))
    total = sum(v for k, v in prof.items() if k not in ("jobs", "queries a job"))
    jobs, queries = prof.pop("jobs"), prof.pop("queries a job")
    print(f"a triage job under cProfile ({jobs} jobs): {total:.1f} ms, {queries:.0f} queries")
    for name, ms in prof.items():
        print(f"  {name:<30} {ms:6.1f} ms  {ms / total:5.1%}")


if __name__ == "__main__":
    main()
