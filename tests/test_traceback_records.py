"""A log record that embeds a traceback lends its rank to the traceback's unprefixed lines (and only to them)."""

from __future__ import annotations

import polars as pl

from ncclpm.ingest.text.multiline import traceback_record_ranks
from ncclpm.tables.schema import LINES_SCHEMA

_FRAME = '  File "/app/scheduler.py", line 12, in run'


def _lines(rows: list[tuple[int, int | None, str]]) -> pl.DataFrame:
    return pl.DataFrame(
        [
            {"source": "s.log", "line": n, "rank": r, "host": "h1" if r is not None else None, "message": m}
            for n, r, m in rows
        ],
        schema={k: LINES_SCHEMA[k] for k in ("source", "line", "rank", "host")} | {"message": pl.String()},
    ).with_columns(pl.lit(None, pl.Boolean).alias("rank_local"), pl.lit(None, pl.Int64).alias("pid"))


def _ranks(rows: list[tuple[int, int | None, str]]) -> list[int | None]:
    return traceback_record_ranks(_lines(rows)).sort("line")["rank"].to_list()


def test_the_records_frames_and_exception_take_its_rank() -> None:
    rows = [
        (5, 1, "Scheduler hit an exception: Traceback (most recent call last):"),
        (6, None, _FRAME),
        (8, None, "ValueError: Model architectures ['X'] are not supported for now."),
        (10, None, "Received sigquit from a child process. It usually means the child failed."),
    ]
    assert _ranks(rows) == [1, 1, 1, None]
    assert traceback_record_ranks(_lines(rows)).sort("line")["host"].to_list() == ["h1", "h1", "h1", None]


def test_a_traceback_of_its_own_or_far_away_is_not_the_records() -> None:
    own_head = [
        (5, 1, "Scheduler hit an exception: Traceback (most recent call last):"),
        (6, None, "Traceback (most recent call last):"),
        (7, None, _FRAME),
        (8, None, "RuntimeError: boom"),
    ]
    assert _ranks(own_head) == [1, None, None, None]
    far = [(5, 1, "Scheduler hit an exception: Traceback (most recent call last):"), (40, None, "RuntimeError: boom")]
    assert _ranks(far) == [1, None]
    # a ranked traceback head at the start of the message: its own lines carry their prefixes
    prefixed = [(5, 1, "Traceback (most recent call last):"), (6, None, "RuntimeError: boom")]
    assert _ranks(prefixed) == [1, None]


def test_the_record_ends_at_its_exception() -> None:
    rows = [
        (5, 2, "Scheduler hit an exception: Traceback (most recent call last):"),
        (6, None, _FRAME),
        (7, None, "RuntimeError: first"),
        (8, None, "ValueError: another process's line"),
    ]
    assert _ranks(rows) == [2, 2, 2, None]


def test_the_failed_collectives_stack_takes_the_watchdogs_rank() -> None:
    """torch 2.5+'s `Stack trace of the failed collective:` record: its `#i func from file:line` lines are its own,
    a later unprefixed line that is not such a frame is not."""
    rows = [
        (3, 5, "[PG ID 0 PG GUID 0(default_pg) Rank 5] Stack trace of the failed collective: "),
        (
            4,
            None,
            "#0 all_reduce from /opt/conda/lib/python3.10/site-packages/torch/distributed/distributed_c10d.py:2501",
        ),
        (5, None, "#1 log_metrics from /workspace/train.py:152"),
        (6, None, "RuntimeError: another process's error"),
    ]
    assert _ranks(rows) == [5, 5, 5, None]
