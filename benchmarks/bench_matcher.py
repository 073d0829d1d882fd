"""CPU of the C matcher and line cutter alone (`_textcut.scan_cut`) over a job's big files, as the reader gives
them (8 MB blocks read as lines), one thread: the filter's cost without the rest of the read.

    python benchmarks/bench_matcher.py /tmp/scale4_text64 [--files N] [--runs R]

Run it with each checkout's python, interleaved; prints the best of R runs (CPU s, MB/s) and the rows cut out."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from ncclpm.api import catalog
from ncclpm.ingest.text import rawscan
from ncclpm.ingest.text.lines import CHUNK_BYTES


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("dir", type=Path)
    ap.add_argument("--files", type=int, default=0, help="the first N files only (0: all)")
    ap.add_argument("--runs", type=int, default=1)
    args = ap.parse_args()
    compiled = rawscan.matcher(tuple(catalog().anchors))
    files = sorted(args.dir.glob("*.log"))[: args.files or None]
    best, size, rows = float("inf"), 0, 0
    for _ in range(args.runs):
        spent, size, rows = 0.0, 0, 0
        for path in files:  # file by file: memory holds one
            data = path.read_bytes()
            size += len(data)
            blocks = [data[i : i + CHUNK_BYTES] for i in range(0, len(data), CHUNK_BYTES)]
            t = time.process_time()
            for block in blocks:
                rows += len(rawscan._textcut.scan_cut(compiled, [block], [1], [False], True)[2])
            spent += time.process_time() - t
        best = min(best, spent)
    mb = size / 1e6
    print(f"{mb:.0f} MB in {len(files)} files: scan_cut {best:.3f} s CPU ({mb / best:.0f} MB/s), {rows} rows")


if __name__ == "__main__":
    main()
