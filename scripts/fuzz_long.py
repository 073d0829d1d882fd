"""The long fuzz run (done once, by hand): the CI property targets of tests/test_fuzz.py with a big budget.

Usage: python scripts/fuzz_long.py [EXAMPLES_PER_TARGET]   (default 3000)
Prints, per target, how many examples ran, how long it took, and whether any raised or was nondeterministic.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from hypothesis import HealthCheck, given, settings

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.test_fuzz import TARGETS


def _run(strategy, check, n: int) -> tuple[int, str]:
    seen = {"n": 0}

    @settings(max_examples=n, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(strategy)
    def run(value) -> None:
        seen["n"] += 1
        assert check(value)

    try:
        run()
        return seen["n"], "ok"
    except Exception as exc:  # report and go on with the other targets
        return seen["n"], f"FAILED: {type(exc).__name__}: {exc}"[:300]


def main(n: int) -> int:
    failures = 0
    for name, (strategy, check) in TARGETS.items():
        start = time.perf_counter()
        count, status = _run(strategy, check, n)
        failures += status != "ok"
        print(f"{name:28} {count:6d} examples {time.perf_counter() - start:7.1f} s  {status}", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 3000))
