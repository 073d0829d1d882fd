"""The long fuzz run (by hand, once in a while): every target of tests/test_fuzz.py with a big budget.

    python scripts/fuzz_long.py --jobs 2              # each target's long budget (TARGETS[...].long_examples)
    python scripts/fuzz_long.py --examples 500 --jobs 2 --targets dump_random_bytes,errorfile_type_confusion

Each example is checked like in CI - no exception escapes, the same input twice gives the same output - but with a
random seed (printed, so a run can be repeated with --seed) and shrinking on, so a failure comes with its smallest
input. Targets run in --jobs processes at low priority (nice 19). "Notices" are things that did not break the
property but are worth a look: a rule that raised inside the pipeline (the engine turns it into a warning).
Prints one line per target and exits 1 if any target failed; --json writes the same as a file.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
import traceback
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "src")]


def _notice(name: str, output: str) -> str | None:
    if name == "job_pipeline_mutated_case":
        failed = [w for w in json.loads(output).get("warnings", []) if w.startswith("rule ") and " failed: " in w]
        return failed[0][:200] if failed else None
    return None


def _cap_memory(extra_mb: int) -> None:
    """Address space capped at what the warmed-up process has plus `extra_mb`: a blow-up becomes a MemoryError
    (a finding) instead of a machine out of memory."""
    status = Path("/proc/self/status")
    if extra_mb > 0 and status.exists():
        import re
        import resource

        vm = int(re.search(r"VmSize:\s+(\d+) kB", status.read_text()).group(1)) << 10
        hard = resource.getrlimit(resource.RLIMIT_AS)[1]  # the soft limit only: the next target may raise it
        soft = vm + (extra_mb << 20)
        resource.setrlimit(resource.RLIMIT_AS, (soft if hard == resource.RLIM_INFINITY else min(soft, hard), hard))


def run_target(name: str, examples: int, seed: int, memory_mb: int = 0, trace_dir: str | None = None) -> dict:
    os.nice(19)
    from hypothesis import HealthCheck, given, settings
    from hypothesis import seed as hypothesis_seed
    from tests.test_fuzz import TARGETS

    target = TARGETS[name]
    count, notices = 0, {}

    @hypothesis_seed(seed)
    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        derandomize=False,
        suppress_health_check=list(HealthCheck),
        print_blob=True,
    )
    @given(target.strategy)
    def check(value: object) -> None:
        nonlocal count
        count += 1
        if trace_dir:  # the input being tried, kept when the process dies (a segfault, a Rust abort)
            Path(trace_dir, f"{name}.last").write_text(repr(value)[:1_000_000])
        first = target.run(value)
        assert target.run(value) == first, "same input, different output"
        if (note := _notice(name, first)) is not None:
            notices[note] = notices.get(note, 0) + 1

    start = time.perf_counter()
    try:
        target.run(target.known[0]) if target.known else None  # warm up (polars threads, seeds) before the cap
        _cap_memory(memory_mb)
        for known in target.known:
            assert target.run(known) == target.run(known), f"known input {known!r}: different output"
        check()
        status = "ok"
    except BaseException as exc:  # report it, go on with the other targets
        status = "FAILED: " + "".join(traceback.format_exception_only(exc)).strip()[-3000:]
    return {
        "target": name,
        "examples": count,
        "seconds": round(time.perf_counter() - start, 1),
        "seed": seed,
        "status": status,
        "notices": notices,
    }


def main() -> int:
    from tests.test_fuzz import TARGETS

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples", type=int, help="per target (default: each target's long budget)")
    ap.add_argument("--targets", help="comma-separated target names (default: all)")
    ap.add_argument("--jobs", type=int, default=1, help="processes (targets run in parallel)")
    ap.add_argument("--seed", type=int, default=random.SystemRandom().randrange(2**32))
    ap.add_argument("--json", type=Path, help="also write the results here")
    ap.add_argument("--trace-dir", help="write each target's current input to DIR/<target>.last")
    ap.add_argument("--memory-mb", type=int, default=2048, help="address space per process past the warm-up (0: none)")
    args = ap.parse_args()
    names = args.targets.split(",") if args.targets else list(TARGETS)
    print(f"seed {args.seed}, {len(names)} targets, {args.jobs} process(es)", flush=True)
    budget = {n: args.examples or TARGETS[n].long_examples for n in names}
    order = sorted(names, key=lambda n: -budget[n] * (5 if n.startswith(("parse", "log", "job")) else 1))
    results = []
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        futures = [pool.submit(run_target, n, budget[n], args.seed, args.memory_mb, args.trace_dir) for n in order]
        for fut in futures:
            r = fut.result()
            results.append(r)
            line = f"{r['target']:32} {r['examples']:7d} examples {r['seconds']:8.1f} s  {r['status'][:400]}"
            print(line, flush=True)
            for note, n in r["notices"].items():
                print(f"{'':32} notice x{n}: {note}", flush=True)
    total = sum(r["examples"] for r in results)
    failed = [r["target"] for r in results if r["status"] != "ok"]
    print(f"total {total} examples; {'failed: ' + ', '.join(failed) if failed else 'no failure'}")
    if args.json:
        args.json.write_text(json.dumps({"seed": args.seed, "results": results}, indent=2))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
