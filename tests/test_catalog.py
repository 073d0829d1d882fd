"""Every catalog example must parse to what it promises; every counterexample must not match."""

from __future__ import annotations

import polars as pl
import pytest

from ncclpm.ingest.catalog import CatalogError, _check_regex, load_catalog
from ncclpm.ingest.extract import extract_events, parse_lines

CATALOG = load_catalog()
ENVELOPE_KEYS = {"rank", "level", "host", "pid", "message"}


def _parse(line: str) -> tuple[pl.DataFrame, pl.DataFrame]:
    kept = pl.DataFrame({"source": ["example.log"], "line": [1], "raw": [line]})
    parsed = parse_lines(kept, CATALOG)
    return parsed, extract_events(parsed, CATALOG)


PATTERN_CASES = [
    pytest.param(p, ex, id=f"{p.id}#{i}") for p in CATALOG.patterns for i, ex in enumerate(p.examples)
]
COUNTER_CASES = [
    pytest.param(p, line, id=f"{p.id}!{i}") for p in CATALOG.patterns for i, line in enumerate(p.counterexamples)
]
ENVELOPE_CASES = [
    pytest.param(e, ex, id=f"{e.id}#{i}") for e in CATALOG.envelopes for i, ex in enumerate(e.examples)
]


def _check_envelope(parsed: pl.DataFrame, expect: dict, skip: frozenset[str] = frozenset()) -> None:
    row = parsed.row(0, named=True)
    for key in (ENVELOPE_KEYS & expect.keys()) - skip:
        assert row[key] == expect[key], f"{key}: {row[key]!r} != {expect[key]!r}"


@pytest.mark.parametrize(("pattern", "example"), PATTERN_CASES)
def test_pattern_example(pattern, example) -> None:
    parsed, events = _parse(example.line)
    mine = events.filter(pl.col("event") == pattern.id)
    assert mine.height == 1, f"{pattern.id} did not match its example"
    _check_envelope(parsed, example.expect, skip=frozenset(pattern.fields))
    row = mine.row(0, named=True)
    for key, want in example.expect.items():
        if key not in ENVELOPE_KEYS or key in pattern.fields:
            assert row[key] == want, f"{key}: {row[key]!r} != {want!r}"


@pytest.mark.parametrize(("pattern", "line"), COUNTER_CASES)
def test_pattern_counterexample(pattern, line) -> None:
    _, events = _parse(line)
    assert events.filter(pl.col("event") == pattern.id).is_empty()


@pytest.mark.parametrize(("envelope", "example"), ENVELOPE_CASES)
def test_envelope_example(envelope, example) -> None:
    parsed, _ = _parse(example.line)
    _check_envelope(parsed, example.expect)


def test_every_pattern_has_an_example_and_anchor_in_prefilter() -> None:
    anchors = set(CATALOG.anchors)
    for p in CATALOG.patterns:
        assert p.examples and set(p.anchors) <= anchors


@pytest.mark.parametrize("rx", [r"(?<=a)b", r"(?!x)y", r"(a)\1"])
def test_unsupported_regex_is_refused_with_a_pointer_to_the_dialect(rx: str) -> None:
    with pytest.raises(CatalogError, match="Rust regex dialect"):
        _check_regex(rx, "t")
