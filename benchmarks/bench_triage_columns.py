"""What the fleet columns cost a triage job: `failed_at`/`started_at`/`duration_s`, `own_hosts` and the
recurrence columns, computed from the job's tables and diagnosis (no log read again).

    PYTHONPATH=src python benchmarks/bench_triage_columns.py [--rounds 3] [--limit 60]

Interleaved A/B in one process on the test cases: each round triages every case once with the columns (A) and
once with them stubbed out (B), in alternating order; CPU time (process_time) per job, and the columns' own time
measured inside A.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import ncclpm.triage.worker as worker
from ncclpm.triage.recurrence import NONE

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--limit", type=int, default=60)
    args = ap.parse_args()
    cases = sorted(p / "input" for p in (ROOT / "tests" / "cases").iterdir() if (p / "input").is_dir())[: args.limit]
    real = (worker.job_times, worker.recurrence, worker.own_hosts)
    spent = [0.0]

    def timed(fn):
        def inner(*a, **k):
            t = time.process_time()
            try:
                return fn(*a, **k)
            finally:
                spent[0] += time.process_time() - t

        return inner

    def with_columns(on: bool) -> None:
        if on:
            worker.job_times, worker.recurrence, worker.own_hosts = (timed(f) for f in real)
        else:
            worker.job_times = lambda t, d: {"started_at": None, "failed_at": None, "failed_clock": None,
                                             "duration_s": None}  # fmt: skip
            worker.recurrence = lambda t, d: dict(NONE)
            worker.own_hosts = lambda t, d: []

    for c in cases[:5]:  # warm-up: imports, catalog, template caches
        worker.triage_job(str(c))
    a, b, own = [], [], []
    for r in range(args.rounds):
        for on in (True, False) if r % 2 == 0 else (False, True):
            with_columns(on)
            spent[0] = 0.0
            t = time.process_time()
            for c in cases:
                worker.triage_job(str(c))
            per_job = (time.process_time() - t) / len(cases)
            (a if on else b).append(per_job)
            if on:
                own.append(spent[0] / len(cases))
    print(f"{len(cases)} jobs x {args.rounds} rounds, CPU per job:")
    print(f"  A with the columns:    {statistics.median(a) * 1000:.1f} ms  ({', '.join(f'{x * 1000:.1f}' for x in a)})")
    print(f"  B without:             {statistics.median(b) * 1000:.1f} ms  ({', '.join(f'{x * 1000:.1f}' for x in b)})")
    print(f"  the columns' own time: {statistics.median(own) * 1000:.2f} ms per job")


if __name__ == "__main__":
    main()
