"""Time reading stack dumps and merging them: N ranks' `py-spy dump --native` texts (and the same as faulthandler
blocks inside the ranks' logs), built from the real dumps of tests/cases/stacks__checkpoint_native_locals.

Usage: PYTHONPATH=src python benchmarks/bench_stacks.py [--ranks 256 1024 4096] [--runs 3] [--dir DIR]
Rank r gets rank 0's dump (waiting in all_reduce) with its pid changed, except rank N // 3, which gets rank 2's
dump (in torch.save). Prints, median of --runs: files and MB, the time of `build_tables` (discover + every
table: for the log variant mostly the text path over 200 progress lines per rank), of `build_stacks` alone (the
stacks table from the dumps or the logs' kept lines), of the stack-tree merge, of the rules and report facts,
and the verdict (which must name rank N // 3).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
CASE = ROOT / "tests" / "cases" / "stacks__checkpoint_native_locals" / "input"


def make_job(folder: Path, ranks: int, fmt: str) -> int:
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    waiting = (CASE / "native_rank0.txt").read_text()
    odd = (CASE / "native_rank2.txt").read_text()
    size = 0
    for r in range(ranks):
        text = (odd if r == ranks // 3 else waiting).replace("17503", str(100000 + r)).replace("17505", str(100000 + r))
        if fmt == "log":  # faulthandler-like frames inside a per-rank log: the kept-lines path
            lines = [f"[rank{r}]: step {i} loss 0.5" for i in range(200)]
            frames = [ln.strip() for ln in text.splitlines() if ln.startswith("    ") and ":" in ln]
            lines.append(f"[rank{r}]:Current thread 0x00007f{r:010x} (most recent call first):")
            for fr in frames:
                func, _, loc = fr.rpartition(" (")
                file, _, line = loc.rstrip(")").rpartition(":")
                if line.isdigit():
                    lines.append(
                        f'[rank{r}]:  File "/opt/venv/lib/python3.11/site-packages/{file}", line {line} in {func}'
                    )
            text = "\n".join(lines) + "\n"
            name = f"rank{r}.log"
        else:
            name = f"pyspy_rank{r}.txt"
        (folder / name).write_text(text)
        size += len(text)
    return size


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, nargs="+", default=[256, 1024, 4096])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--dir", type=Path, default=Path("/tmp/ncclpm-bench-stacks"))
    args = ap.parse_args()
    from ncclpm.analysis.stack_tree import build_stack_tree
    from ncclpm.engine import diagnose_tables
    from ncclpm.ingest.build import build_tables
    from ncclpm.ingest.catalog import load_catalog
    from ncclpm.ingest.stacks.build import build_stacks
    from ncclpm.sources.discover import collect

    catalog = load_catalog()
    print("| input | MB | build_tables | build_stacks | stack tree | rules + facts | verdict |")
    print("|---|---|---|---|---|---|---|")
    for fmt in ("py-spy", "log"):
        for n in args.ranks:
            size = make_job(args.dir, n, fmt)
            tables, stacks, trees, diags = [], [], [], []
            for _ in range(args.runs):
                t0 = time.perf_counter()
                job = collect([args.dir])
                t = build_tables(job, catalog)
                t1 = time.perf_counter()
                build_stacks(job, t.lines, {}, t.fr, [])
                t2 = time.perf_counter()
                build_stack_tree(t.extra["stacks"])
                t3 = time.perf_counter()
                d = diagnose_tables(t)
                t4 = time.perf_counter()
                tables.append(t1 - t0)
                stacks.append(t2 - t1)
                trees.append(t3 - t2)
                diags.append(t4 - t3)
            med = [f"{statistics.median(x):.2f} s" for x in (tables, stacks, trees, diags)]
            verdict = f"{d.category}, {list(d.culprit_ranks)}"
            print(f"| {n} ranks, {fmt} | {size / 1e6:.1f} | {' | '.join(med)} | {verdict} |", flush=True)
    shutil.rmtree(args.dir, ignore_errors=True)


if __name__ == "__main__":
    main()
