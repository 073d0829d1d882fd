"""What is built once per catalog instead of once per job (issue 28, triage's fixed costs) gives what building it
every time gave: the readings of the kinds a job holds, the catalog's derived values, the patterns' plans."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from ncclpm.api import build, catalog
from ncclpm.ingest.catalog import load_catalog
from ncclpm.ingest.readings import apply_readings
from ncclpm.ingest.text.extract import _pattern_events
from ncclpm.tables.kinds import K, KindDecl, UnknownKind
from ncclpm.tables.schema import EVENT_FIELDS

CASES = Path(__file__).parent / "cases"


def _every_reading(events: pl.DataFrame, kinds: dict[str, KindDecl]) -> pl.DataFrame:
    """The reference: every declared reading evaluated on every event (what apply_readings did before)."""
    chains: dict[str, list[tuple[pl.Expr, object]]] = {}
    for decl in kinds.values():
        is_kind = pl.col("kind") == decl.name
        for r in decl.readings:
            cond = is_kind if r.when is None else is_kind & pl.col("text").str.contains(r.when)
            for attr, value in r.set.items():
                chains.setdefault(attr, []).append((cond, value))
    victim_kinds = [d.name for d in kinds.values() if d.victim]
    exprs = []
    for attr, branches in chains.items():
        expr = pl.when(branches[0][0]).then(pl.lit(branches[0][1], EVENT_FIELDS[attr]))
        for cond, value in branches[1:]:
            expr = expr.when(cond).then(pl.lit(value, EVENT_FIELDS[attr]))
        base = pl.col("kind").is_in(victim_kinds) if attr == "victim" else pl.col(attr)
        exprs.append(expr.otherwise(base).alias(attr))
    return events.with_columns(exprs).with_columns(pl.col("victim").fill_null(False))


def _case_events() -> pl.DataFrame:
    """The events of a spread of real cases, their read attributes blanked (as extraction leaves them)."""
    folders = sorted(p for p in CASES.glob("*/input") if p.is_dir())[::6]
    frames = [build([f]).events for f in folders]
    events = pl.concat([f for f in frames if not f.is_empty()], how="vertical")
    attrs = [a for a in ("victim", "net_class", "exhausted", "strength", "nccl_result") if a in events.columns]
    return events.with_columns(pl.lit(None, events.schema[a]).alias(a) for a in attrs)


@pytest.fixture(scope="module")
def case_events() -> pl.DataFrame:
    return _case_events()


def test_readings_of_the_kinds_present_equal_every_reading(case_events: pl.DataFrame) -> None:
    kinds = catalog().kinds
    assert case_events["kind"].n_unique() > 10
    for sample in (case_events, case_events.head(3), case_events.clear()):
        assert apply_readings(sample, kinds).equals(_every_reading(sample, kinds))


def test_readings_on_many_events_equal_every_reading(case_events: pl.DataFrame) -> None:
    many = pl.concat([case_events] * (10_001 // max(1, case_events.height) + 1))  # the path that picks the rows
    kinds = catalog().kinds
    assert apply_readings(many, kinds).equals(_every_reading(many, kinds))


def test_readings_follow_a_changed_kinds_declaration(case_events: pl.DataFrame) -> None:
    kinds = dict(catalog().kinds)
    apply_readings(case_events, kinds)
    for name in list(kinds)[:5]:  # fewer kinds: a plan of its own, not the cached one
        kinds.pop(name)
    assert apply_readings(case_events, kinds).equals(_every_reading(case_events, kinds))


def test_the_catalogs_derived_values_are_what_they_compute_and_copies() -> None:
    cat = load_catalog()
    assert cat.anchors == sorted(set(cat.read_anchors) | set(cat.stack_anchors))
    assert cat.read_anchors == sorted({a for p in cat.patterns for a in p.anchors} | set(cat.keep_anchors))
    first = cat.anchors
    first.append("changed by a caller")
    assert "changed by a caller" not in cat.anchors
    sources = cat.column_sources("ts")
    sources.clear()
    assert cat.column_sources("ts")
    assert cat.envelope_regex() == load_catalog().envelope_regex()


def test_a_pattern_plan_built_once_reads_what_a_fresh_one_reads() -> None:
    cat = catalog()
    parsed = build([CASES / "dataloader_hang__worker_sigkill" / "input"]).lines
    assert not parsed.is_empty()
    lines = parsed.with_columns(pl.lit(None, pl.String).alias(c) for c in ("raw", "tag_pg", "tag_pg_desc"))
    lines = lines.with_columns(pl.col("message").alias("raw")).lazy()
    for p in cat.patterns[:40]:
        once = _pattern_events(lines, p).collect()
        again = _pattern_events(lines, p).collect()
        assert once.equals(again)
        # among the lines holding one of its anchors, its regex alone matches the same lines
        held = lines.filter(pl.col("message").str.contains_any(list(p.anchors)))
        assert _pattern_events(held, p, anchored=True).collect().equals(once)


def test_a_declared_kind_read_twice_is_still_checked() -> None:
    assert K.nccl_warn == "nccl_warn" == K.nccl_warn
    with pytest.raises(UnknownKind):
        _ = K.no_such_kind_at_all
    with pytest.raises(UnknownKind):
        _ = K.no_such_kind_at_all
