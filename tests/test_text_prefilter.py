"""The line prefilter: one regex alternation of the catalog anchors keeps exactly the lines `contains_any` keeps."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from ncclpm.api import catalog
from ncclpm.ingest.lines import anchor_regex
from ncclpm.sources.discover import _mostly_control

ROOT = Path(__file__).resolve().parents[1]


def test_anchor_regex_keeps_the_same_lines_as_contains_any() -> None:
    anchors = list(catalog().anchors)
    lines = [*anchors, *(f"x {a} y" for a in anchors), "a.b", "(x)", "[rank0]:", "\\", "a|b", "$HOME ^"]
    for p in sorted((ROOT / "tests" / "cases").rglob("*.log"))[:200]:
        lines += p.read_text(encoding="utf-8", errors="replace").splitlines()
    s = pl.Series(lines)
    assert s.str.contains(anchor_regex(tuple(anchors))).equals(s.str.contains_any(anchors))
    assert s.str.contains(anchor_regex(("a.b", "(x)", "a|b"))).sum() == 3  # metacharacters are literal


def test_control_byte_count_is_the_plain_definition() -> None:
    samples = [
        bytes(range(256)) * 32,
        b"log line\n" * 900,
        b"\x00" * 8192,
        b"\x01" * 9 + b"a" * 80,
        b"",
        b"\x1b[0m" * 50,
    ]
    for s in samples:
        slow = sum(1 for b in s if b < 9 or 13 < b < 32) > max(8, len(s) // 10)
        assert _mostly_control(s) == slow
