"""Regenerate everything generated from the code, in one command (from the checkout, with ncclpm installed):

    python scripts/regenerate.py            # rewrite what is stale
    python scripts/regenerate.py --check    # only say what is stale (exit 1); the tests check the same

- `src/ncclpm/ruledocs/rules_index.json`: what `ncclpm rules` and `ncclpm explain RULE` print, from the registry
- README.md's rule table (between `<!-- rules:begin -->` and `<!-- rules:end -->`): the registry in the order of
  `precedence.py`, with why each rule stands there
- docs/VOCABULARY.md: what ncclpm reads of each producer's vocabulary, per area (scripts/vocab/vocabulary_doc.py)
- docs/REAL_ISSUES.md's tables, when the shared corpus is present (`../shared`, or NCCLPM_SHARED); the only slow
  one (every real case is diagnosed), skipped with `--fast`

Golden reports (tests/golden) are not generated from the code: they are what the reports must stay, changed on
purpose with `NCCLPM_UPDATE_GOLDEN=1 python -m pytest tests/test_golden.py`. The catalogs' and templates'
snapshots are written by the build (hatch_build.py), never committed.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # `tests.real_issues` lives in the checkout


def _rules_index() -> tuple[Path, Callable[[str], str]]:
    from ncclpm.ruledocs.index import INDEX, generate

    return Path(INDEX), lambda _old: generate()


def _readme() -> tuple[Path, Callable[[str], str]]:
    from ncclpm.ruledocs.readme import update_readme

    return ROOT / "README.md", update_readme


def _vocabulary() -> tuple[Path, Callable[[str], str]]:
    spec = importlib.util.spec_from_file_location("vocabulary_doc", ROOT / "scripts" / "vocab" / "vocabulary_doc.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # (its dataclasses look their module up)
    spec.loader.exec_module(module)
    return module.DOC, lambda _old: module.generate()


def _real_issues() -> tuple[Path, Callable[[str], str]] | None:
    from tests.real_issues import DOC, corpus_dir, doc_with, run_all

    if corpus_dir() is None:
        print("docs/REAL_ISSUES.md: skipped (no shared corpus: ../shared or NCCLPM_SHARED)")
        return None
    return DOC, lambda old: doc_with(run_all(), old)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only report what is stale (exit 1 if anything is)")
    parser.add_argument("--fast", action="store_true", help="skip docs/REAL_ISSUES.md (it diagnoses every case)")
    args = parser.parse_args(argv)
    targets = [_rules_index(), _readme(), _vocabulary(), *([] if args.fast else [_real_issues()])]
    stale = []
    for target in targets:
        if target is None:
            continue
        path, make = target
        old = path.read_text(encoding="utf-8") if path.exists() else ""
        new = make(old)
        name = path.relative_to(ROOT)
        if new == old:
            print(f"{name}: up to date")
            continue
        stale.append(name)
        if not args.check:
            path.write_text(new, encoding="utf-8")
        print(f"{name}: {'stale' if args.check else 'rewritten'}")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    raise SystemExit(main())
