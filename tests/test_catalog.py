"""Every catalog example must parse to what it promises; every counterexample must not match."""

from __future__ import annotations

import pytest

from ncclpm.ingest.catalog import CatalogError, _check_regex, load_catalog
from ncclpm.ingest.selftest import check_counterexample, check_envelope_example, check_pattern_example

CATALOG = load_catalog()

PATTERN_CASES = [pytest.param(p, ex, id=f"{p.id}#{i}") for p in CATALOG.patterns for i, ex in enumerate(p.examples)]
COUNTER_CASES = [
    pytest.param(p, line, id=f"{p.id}!{i}") for p in CATALOG.patterns for i, line in enumerate(p.counterexamples)
]
ENVELOPE_CASES = [pytest.param(e, ex, id=f"{e.id}#{i}") for e in CATALOG.envelopes for i, ex in enumerate(e.examples)]


@pytest.mark.parametrize(("pattern", "example"), PATTERN_CASES)
def test_pattern_example(pattern, example) -> None:
    assert check_pattern_example(CATALOG, pattern, example) == []


@pytest.mark.parametrize(("pattern", "line"), COUNTER_CASES)
def test_pattern_counterexample(pattern, line) -> None:
    assert check_counterexample(CATALOG, pattern, line) == []


@pytest.mark.parametrize(("envelope", "example"), ENVELOPE_CASES)
def test_envelope_example(envelope, example) -> None:
    assert check_envelope_example(CATALOG, envelope, example) == []


def test_every_pattern_has_an_example_and_its_anchors_are_prefiltered() -> None:
    anchors = set(CATALOG.anchors)
    for p in CATALOG.patterns:
        assert p.examples and set(p.anchors) <= anchors


@pytest.mark.parametrize("rx", [r"(?<=a)b", r"(?!x)y", r"(a)\1"])
def test_unsupported_regex_is_refused_with_a_pointer_to_the_dialect(rx: str) -> None:
    with pytest.raises(CatalogError, match="Rust regex dialect"):
        _check_regex(rx, "t")


def test_a_field_that_is_not_an_events_column_is_refused(tmp_path) -> None:
    (tmp_path / "bad.toml").write_text(
        "[[pattern]]\nid='x.y'\nkind='exception'\nanchor='a'\nregex='''a(?<nope>\\d)'''\nfields={nope='i64'}\n"
        "[[pattern.example]]\nline='a1'\n"
    )
    with pytest.raises(CatalogError, match="not an events column"):
        load_catalog((tmp_path,))


def test_a_pattern_supersedes_only_declared_kinds(tmp_path) -> None:
    (tmp_path / "bad.toml").write_text(
        "[[pattern]]\nid='x.y'\nkind='cuda_oom'\nanchor='a'\nregex='''a(?<detail>\\d)'''\nfields={detail='str'}\n"
        "supersedes=['cuda_eror']\n[[pattern.example]]\nline='a1'\n"
    )
    with pytest.raises(CatalogError, match=r"cuda_eror.*did you mean 'cuda_error'"):
        load_catalog((tmp_path,))


def test_a_superseded_reading_is_dropped_from_the_same_line() -> None:
    from ncclpm.ingest.selftest import parse_one

    _, events = parse_one(CATALOG, "include/alloc.h:228 NCCL WARN Cuda failure 2 'out of memory'")
    assert "cuda_oom" in events["kind"].to_list() and "cuda_error" not in events["kind"].to_list()
    _, events = parse_one(CATALOG, "[rank5]: RuntimeError: CUDA error: an illegal memory access was encountered")
    assert "cuda_error" in events["kind"].to_list()


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("60s", 60_000),
        ("10000ms", 10_000),
        ("900 seconds", 900_000),
        ("29:55", 1_795_000),
        ("1:01:03", 3_663_000),
        ("2h", 7_200_000),
        ("abc", None),
        ("99999999999999999999s", None),
    ],
)
def test_durations_are_read_into_milliseconds(text: str, ms: int | None) -> None:
    import polars as pl

    from ncclpm.ingest.text.extract import typed

    assert pl.select(typed(pl.lit(text), "ms")).item() == ms


def test_a_message_that_names_its_own_rank_fills_the_rank() -> None:
    from ncclpm.ingest.selftest import parse_one

    line = (
        "[7] is setting up NCCL communicator and retrieving ncclUniqueId from [0] via c10d key-value store by key "
        "'0', but store->get('0') got error: Socket Timeout"
    )
    _, events = parse_one(CATALOG, line)
    row = events.filter(events["kind"] == "store_error").row(0, named=True)
    assert row["rank"] == 7 and row["subject_rank"] == 0


def test_an_envelope_level_table_without_a_named_group_is_refused(tmp_path) -> None:
    (tmp_path / "envelopes.toml").write_text(
        "[[envelope]]\nid='x.e'\nslot='viewer'\nregex='''E\\\\s{2}'''\nlevel={default='E'}\n"
    )
    with pytest.raises(CatalogError, match="needs a named group"):
        load_catalog((tmp_path,))


def test_the_shipped_regexes_compile_in_polars() -> None:
    """`load_catalog` skips this at start-up for the shipped catalog (it costs ~0.1 s); it is checked here."""
    cat = load_catalog(compile_shipped=True)
    assert [p.regex for p in cat.patterns] == [p.regex for p in CATALOG.patterns]
