"""Run the examples and counterexamples written in the catalogs (used by tests and `ncclpm catalog check`)."""

from __future__ import annotations

import polars as pl

from ncclpm.ingest.catalog import Catalog, Envelope, Example, Pattern
from ncclpm.ingest.text.extract import extract_events, parse_lines

ENVELOPE_KEYS = frozenset({"rank", "rank_local", "level", "host", "pid", "message"})


def parse_one(catalog: Catalog, line: str, *, messages: bool = False) -> tuple[pl.DataFrame, pl.DataFrame]:
    """One line's parse and events: what the catalog's patterns read (`messages`: and NCCL's declared messages)."""
    kept = pl.DataFrame({"source": ["example.log"], "line": [1], "raw": [line]})
    parsed = parse_lines(kept, catalog)
    return parsed, extract_events(parsed, catalog, messages=messages)


def _mismatches(row: dict, expect: dict, keys: set[str], where: str) -> list[str]:
    return [f"{where}: {k} = {row[k]!r}, expected {expect[k]!r}" for k in sorted(keys) if row[k] != expect[k]]


def check_pattern_example(catalog: Catalog, p: Pattern, ex: Example) -> list[str]:
    parsed, events = parse_one(catalog, ex.line)
    mine = events.filter(pl.col("event") == p.id)
    where = f"{p.origin}: {p.id} example {ex.line[:60]!r}"
    times = int(ex.expect.get("matches", 1))  # a `repeat` pattern's example may say how many matches the line has
    if mine.height != times:
        return [f"{where}: matched {mine.height} times, expected {times}"]
    left = sorted(set(events.filter(pl.col("kind").is_in(list(p.supersedes)))["kind"].to_list()))
    if left:
        return [f"{where}: superseded kinds {left} still read from the line"]
    env_keys = (ENVELOPE_KEYS & ex.expect.keys()) - set(p.fields)
    field_keys = set(ex.expect) - env_keys - {"matches"}
    return _mismatches(parsed.row(0, named=True), ex.expect, env_keys, where) + _mismatches(
        mine.row(0, named=True), ex.expect, field_keys, where
    )


def check_counterexample(catalog: Catalog, p: Pattern, line: str) -> list[str]:
    _, events = parse_one(catalog, line)
    hit = not events.filter(pl.col("event") == p.id).is_empty()
    return [f"{p.origin}: {p.id} counterexample matched: {line[:60]!r}"] if hit else []


def check_envelope_example(catalog: Catalog, e: Envelope, ex: Example) -> list[str]:
    parsed, _ = parse_one(catalog, ex.line)
    return _mismatches(
        parsed.row(0, named=True),
        ex.expect,
        set(ENVELOPE_KEYS & ex.expect.keys()),
        f"{e.origin}: {e.id} example {ex.line[:60]!r}",
    )


def run_examples(catalog: Catalog) -> list[str]:
    problems: list[str] = []
    for p in catalog.patterns:
        for ex in p.examples:
            problems += check_pattern_example(catalog, p, ex)
        for line in p.counterexamples:
            problems += check_counterexample(catalog, p, line)
    for e in catalog.envelopes:
        for ex in e.examples:
            problems += check_envelope_example(catalog, e, ex)
    return problems
