"""The query-free shortcuts of `util/frames.py` and the shared empty frames of `tables/schema.py` give what polars
gives."""

from __future__ import annotations

import polars as pl

from ncclpm.tables.schema import EVENTS_SCHEMA, empty
from ncclpm.util.frames import filtered, ordered


def test_filtered_and_ordered_are_filter_and_sort() -> None:
    frame = pl.DataFrame({"a": [3, None, 1, 2], "b": ["x", "y", None, "z"]})
    for rows in (frame.clear(), frame.head(1), frame):
        for pred in (pl.col("a") > 1, pl.col("b").is_not_null()):
            assert filtered(rows, pred).equals(rows.filter(pred), null_equal=True)
        for by, opts in ((("a",), {"nulls_last": True}), (("b", "a"), {"descending": [True, False]})):
            got = ordered(rows, *by, **opts)
            assert got.equals(rows.sort(*by, **opts), null_equal=True) and got.schema == rows.schema


def test_empty_frames_are_shared_per_schema() -> None:
    assert empty(EVENTS_SCHEMA) is empty(dict(EVENTS_SCHEMA)) and empty(EVENTS_SCHEMA).schema == EVENTS_SCHEMA
    us, ns = empty({"ts": pl.Datetime("us")}), empty({"ts": pl.Datetime("ns")})
    assert us.schema["ts"] == pl.Datetime("us") and ns.schema["ts"] == pl.Datetime("ns") and us.is_empty()


def test_readings_of_no_event_are_the_query_s() -> None:
    """`apply_readings` answers an empty events table that already holds its columns without a query: the frame
    a query gives (here: made to run by a missing `victim` column)."""
    from ncclpm.api import catalog
    from ncclpm.ingest.readings import apply_readings

    kinds = catalog().kinds
    got = apply_readings(empty(EVENTS_SCHEMA), kinds)
    queried = apply_readings(empty(EVENTS_SCHEMA).drop("victim"), kinds)
    assert got.schema == EVENTS_SCHEMA and queried.select(got.columns).schema == got.schema and queried.is_empty()
