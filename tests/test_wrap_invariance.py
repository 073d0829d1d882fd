"""A terminal's hard wrap changes no verdict: every text-only case of tests/cases, its files cut at 80 and 120
columns the way a terminal copy cuts them (mid-token, next to a space, before a bracket), gets the category and
culprits it gets unwrapped - logs, torchrun summaries and stack dumps alike."""

from __future__ import annotations

from pathlib import Path

import pytest

from ncclpm.api import diagnose

CASES = Path(__file__).parent / "cases"
WIDTHS = (80, 120)
NOT_TEXT = {".pkl", ".json", ".gz", ".tar", ".zip", ".zst", ".tgz", ".bin"}


def _text_cases() -> list[str]:
    names = []
    for case in sorted(CASES.iterdir()):
        if case.name.startswith("wrapped_"):  # a collector's own file format: not cut or tagged again
            continue
        files = [p for p in (case / "input").rglob("*") if p.is_file()]
        if not files or any(p.suffix in NOT_TEXT or "trace" in p.name or "dump" in p.name for p in files):
            continue
        try:
            for p in files:
                p.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        names.append(case.name)
    return names


def _wrapped(src: Path, dst: Path, width: int) -> None:
    for p in (q for q in src.rglob("*") if q.is_file()):
        out = dst / p.relative_to(src)
        out.parent.mkdir(parents=True, exist_ok=True)
        pieces = []
        for line in p.read_text(encoding="utf-8").split("\n"):
            while len(line) > width:
                pieces.append(line[:width])
                line = line[width:]
            pieces.append(line)
        out.write_text("\n".join(pieces), encoding="utf-8")


@pytest.mark.parametrize("name", _text_cases())
def test_hard_wrap_keeps_the_verdict(name: str, tmp_path: Path) -> None:
    src = CASES / name / "input"
    want = diagnose([src])
    for width in WIDTHS:
        dst = tmp_path / f"w{width}"
        _wrapped(src, dst, width)
        got = diagnose([dst])
        assert (got.category, got.culprit_ranks) == (want.category, want.culprit_ranks), f"cut at {width} columns"


def test_the_cases_cover_wrapping() -> None:
    """The invariance is checked on enough real shapes to mean something."""
    assert len(_text_cases()) >= 30
