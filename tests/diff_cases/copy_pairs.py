"""Copy the runs made by make_pairs.sh (and make_user_pairs.sh) into tests/diff_cases/<pair>/{good,bad}, keeping what a user would hand
to ncclpm: the console, the job wrapper's run.meta, torchrun's per-rank logs and error files, and the flight-
recorder dumps exactly as torch wrote them (fr/raw). Left out: the corpus harness' own analysis (fr_trace/) and
its rewritten dump copies (fr/fixed, fr/json). Files are copied byte for byte.

Usage: python copy_pairs.py OUT [pair ...]
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
KEEP = ("console.log", "run.meta", "collect_env.txt", "torchrun_logs", "fr/raw")
# make_user_pairs.sh's runs: what a user keeps beside a run (launch script, code, what it records, the console)
KEEP += ("run.sh", "train.py", "train.log", "pip_freeze.txt", "env.txt")


def copy_run(src: Path, dst: Path) -> None:
    if dst.exists():
        shutil.rmtree(dst)
    for item in KEEP:
        path = src / item
        if path.is_dir():
            shutil.copytree(path, dst / item)
        elif path.is_file():
            (dst / item).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, dst / item)


def main(out: str, *pairs: str) -> None:
    root = Path(out)
    for pair in pairs or sorted(p.name for p in root.iterdir() if (p / "good").is_dir()):
        for side in ("good", "bad"):
            copy_run(root / pair / side, HERE / pair / side)
        print(f"copied {pair}")


if __name__ == "__main__":
    main(*sys.argv[1:])
