"""Filtering and sorting that skip polars' query when its answer is known: no row to drop, nothing to order.

A query costs ~0.1-0.3 ms of polars' planning and dispatch whatever its rows, and a small job's facts and rules ask
~40 of them of frames that are empty (the kinds of events it does not hold) or hold one row. The answer is then the
frame itself (same schema, same rows): frames are never changed in place in ncclpm, so it can be returned as is.
"""

from __future__ import annotations

from typing import Any

import polars as pl


def filtered(frame: pl.DataFrame, *predicates: Any, **constraints: Any) -> pl.DataFrame:
    """`frame.filter(...)`; an empty frame is its own answer."""
    return frame if frame.is_empty() else frame.filter(*predicates, **constraints)


def ordered(frame: pl.DataFrame, *by: Any, **options: Any) -> pl.DataFrame:
    """`frame.sort(...)`; a frame of at most one row is its own answer."""
    return frame if frame.height <= 1 else frame.sort(*by, **options)


IN_MEMORY_ROWS = 4096  # a lazy query over at most this many rows runs in memory (`engine_for`)


def engine_for(rows: int) -> str:
    """The engine for a lazy query over about `rows` rows. polars 2's default ("auto") is the streaming engine,
    whose set-up costs ~0.1-0.5 ms a query whatever the rows; a small frame is read sooner in memory, as the eager
    API reads it. A large one keeps the default (it streams the text path's big frames in morsels)."""
    return "in-memory" if rows <= IN_MEMORY_ROWS else "auto"
