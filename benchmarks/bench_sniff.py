"""CPU cost of telling code from logs (`sources/code.py`) on every text file of a job.

Usage: python benchmarks/bench_sniff.py [DIR] - DIR defaults to a 512-rank job made by gen_text_job.py (0.2 MB per
rank: only the 64 KB head of each file is looked at). Reports the CPU time (process time, min and median of 10
runs) of `code_language` over the heads, and per file; the verdicts found (all None for a job of logs).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from ncclpm.sources.code import code_language
from ncclpm.sources.discover import HEAD_BYTES


def main() -> None:
    if len(sys.argv) > 1:
        root = Path(sys.argv[1])
    else:
        root = Path(tempfile.mkdtemp(prefix="ncclpm-sniff-"))
        gen = Path(__file__).with_name("gen_text_job.py")
        subprocess.run([sys.executable, str(gen), str(root), "--ranks", "512", "--mb-per-rank", "0.2"], check=True)
    heads = []
    for f in sorted(p for p in root.rglob("*") if p.is_file()):
        with f.open("rb") as fh:
            heads.append((str(f.relative_to(root)), fh.read(HEAD_BYTES)))
    runs = []
    for _ in range(10):
        start = time.process_time()
        kinds = Counter(code_language(n, h, len(h) >= HEAD_BYTES) for n, h in heads)
        runs.append(time.process_time() - start)
    runs.sort()
    print(f"{len(heads)} files: min {runs[0] * 1000:.1f} ms, median {runs[5] * 1000:.1f} ms CPU")
    print(f"per file: {runs[0] / len(heads) * 1e6:.0f} us; kinds: {dict(kinds)}")


if __name__ == "__main__":
    main()
