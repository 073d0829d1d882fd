"""Peak memory and CPU of reading a large Docker json-file container log (`sources/container_logs.py`).

Usage: python benchmarks/bench_container.py [--mb 500 --file /tmp/ncclpm-bench-docker/0123abcd-json.log --runs 3]
                                            [--baseline OTHER_SRC_DIR]
The log (generated once: `gen_text_job.rank_log`'s NCCL INFO noise and training progress, one record a write, `<`
escaped as Docker does, every 50th line written in two pieces - a partial record - and a few lines in three) is
read by `ncclpm.api.build` in a child process; the table shows each run's wall time, CPU (user + system) and peak
RSS (from `wait4`) against the file's size. `--baseline` adds another source tree (put first on PYTHONPATH) to the
interleaved runs, for A/B comparisons.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gen_text_job import rank_log

CHILD = "import sys; from ncclpm.api import build; t = build([sys.argv[1]]); print(t.events.height)"


def _record(text: str, stream: str, i: int) -> str:
    time = f"2024-05-01T12:{i // 60 % 60:02d}:{i % 60:02d}.{i % 10**9:09d}Z"
    rec = json.dumps({"log": text, "stream": stream, "time": time}, ensure_ascii=False, separators=(",", ":"))
    return rec.replace("<", "\\u003c").replace(">", "\\u003e") + "\n"


def generate(path: Path, mb: float) -> None:
    """A Docker json-file log of about `mb` MB."""
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = random.Random(0)
    i, size = 0, 0
    with path.open("w", encoding="utf-8") as out:
        while size < mb * 1e6:
            for line in rank_log(i % 8, 8, 2_000_000, 5, rng).splitlines():
                stream = "stderr" if "NCCL" in line or "rank" in line else "stdout"
                if i % 50 == 7:  # a write without its newline: two records
                    recs = [_record(line[:30], stream, i), _record(line[30:] + "\n", stream, i)]
                elif i % 997 == 3:
                    recs = [
                        _record(line[:10] + "é", stream, i),
                        _record("ü", stream, i),
                        _record(line + "\n", stream, i),
                    ]
                else:
                    recs = [_record(line + "\n", stream, i)]
                for rec in recs:
                    out.write(rec)
                    size += len(rec)
                i += 1


def run(src: Path | None, log: Path) -> tuple[float, float, float, str]:
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = str(src)
    t = time.perf_counter()
    with subprocess.Popen([sys.executable, "-c", CHILD, str(log)], stdout=subprocess.PIPE, env=env, text=True) as p:
        out = p.stdout.read().strip() if p.stdout else ""
        _, _, usage = os.wait4(p.pid, 0)
        p.returncode = 0
    return time.perf_counter() - t, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=float, default=500)
    ap.add_argument("--file", type=Path, default=Path("/tmp/ncclpm-bench-docker/0123abcd-json.log"))
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--baseline", type=Path, help="another source tree (its src/), run interleaved")
    args = ap.parse_args()
    if not args.file.exists():
        generate(args.file, args.mb)
    size_mb = args.file.stat().st_size / 1e6
    variants = {"this": None} | ({"baseline": args.baseline} if args.baseline else {})
    got: dict[str, list[tuple[float, float, float, str]]] = {k: [] for k in variants}
    for _ in range(args.runs):
        for name, src in variants.items():
            got[name].append(run(src, args.file))
            w, c, r, out = got[name][-1]
            print(f"{name:9s} wall {w:6.1f} s  CPU {c:6.1f} s  peak RSS {r:7.0f} MB ({r / size_mb:.2f}x)  events {out}")
    print(f"file: {size_mb:.0f} MB; load {os.getloadavg()[0]:.1f}")
    for name, runs in got.items():
        w, c, r = (statistics.median(x[k] for x in runs) for k in range(3))
        print(f"{name:9s} median wall {w:.1f} s, CPU {c:.1f} s, peak RSS {r:.0f} MB ({r / size_mb:.2f}x the file)")


if __name__ == "__main__":
    main()
