"""Fuzz targets shared by the CI property tests (tests/test_fuzz.py) and the long run (scripts/fuzz_long.py).

Each target takes bytes or text, runs one parser stage, and returns a plain, comparable summary; it must
never raise. The seeds are real lines and real dumps from tests/cases.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import polars as pl

from ncclpm.api import catalog
from ncclpm.ingest.extract import extract_events, parse_lines
from ncclpm.ingest.flight_recorder import load_fr_dumps
from ncclpm.ingest.lines import read_kept_lines
from ncclpm.sources.discover import Source

CASES = Path(__file__).resolve().parent / "cases"


@lru_cache(maxsize=1)
def seed_lines() -> list[str]:
    """Up to 400 real lines that some catalog pattern matches."""
    out: list[str] = []
    anchors = catalog().anchors
    for log in sorted(CASES.glob("*/input/**/*.log")):
        for line in log.read_text(errors="replace").splitlines():
            if any(a in line for a in anchors):
                out.append(line)
    return sorted(set(out))[:400]


@lru_cache(maxsize=1)
def seed_dumps() -> list[bytes]:
    dumps = sorted(CASES.glob("*/input/fr/raw/fr_trace_rank_*")) + sorted(CASES.glob("*/input/fr/json/*.json"))
    return [p.read_bytes() for p in dumps[:12]]


def parse_text(data: bytes) -> tuple:
    """bytes of a log file -> (events summary, warnings)."""
    warnings: list[str] = []
    kept = read_kept_lines([Source("fuzz.log", "text", data=data)], catalog().anchors, warnings)
    events = extract_events(parse_lines(kept, catalog()), catalog())
    return tuple(events.select("line", "event", "rank").rows()), tuple(warnings)


def load_dump(data: bytes) -> tuple:
    """bytes of a dump -> (entries summary, warnings)."""
    fr = load_fr_dumps([("fuzz_dump_rank_3", data)])
    rows = fr.entries.select("rank", "group_key", "collective_seq_id", "op").rows() if fr.entries.height else []
    return tuple(rows), fr.warnings


def mutate(data: bytes, flips: list[tuple[int, int]], cut: int | None) -> bytes:
    buf = bytearray(data)
    for pos, val in flips:
        if buf:
            buf[pos % len(buf)] = val
    return bytes(buf[:cut] if cut is not None else buf)


def frame_equal(a: pl.DataFrame, b: pl.DataFrame) -> bool:
    return a.equals(b)
