"""Copy real-gloo corpus variants into tests/cases/<scenario>__<variant>/input as a user would have them.

Annotation files that only the corpus has (run.meta, fr_trace/, RUN.md, SOURCES.txt) are left out.
Usage: python tests/tools/import_corpus.py [../shared/corpus/real-gloo]
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

ANNOTATIONS = {"run.meta", "fr_trace", "RUN.md", "SOURCES.txt"}
ROOT = Path(__file__).resolve().parents[2]


def main(corpus: Path) -> None:
    for variant in sorted(p for p in corpus.glob("*/*") if p.is_dir() and not p.parent.name.startswith("_")):
        if not (variant / "console.log").exists():
            continue
        dest = ROOT / "tests" / "cases" / f"{variant.parent.name}__{variant.name}" / "input"
        if dest.exists():
            shutil.rmtree(dest)
        shutil.copytree(variant, dest, ignore=lambda _d, names: [n for n in names if n in ANNOTATIONS])
        for p in dest.rglob("*"):
            p.chmod(0o755 if p.is_dir() else 0o644)
        print(dest.relative_to(ROOT))


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT.parent / "shared" / "corpus" / "real-gloo")
