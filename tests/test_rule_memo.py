"""Facts several rules share are computed once per tables (`rules._memo.per_job`), never across tables."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import polars as pl

from ncclpm.api import build
from ncclpm.rules._facts import exceptions_not_victim, victim_lines
from ncclpm.rules._memo import per_job

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "sample_logs" / "nccl_rank0_sample_generation"


def test_a_fact_is_computed_once_per_tables_and_afresh_for_other_tables() -> None:
    t = build([SAMPLE])
    assert victim_lines(t) is victim_lines(t)
    assert exceptions_not_victim(t, ["nccl_warn"]) is exceptions_not_victim(t, ["nccl_warn"])  # a list, as a tuple
    other = replace(t, events=t.events.head(0))
    assert other.memo == {} and victim_lines(other).is_empty()
    assert not victim_lines(t).is_empty()  # the first tables' fact is untouched


def test_arguments_are_part_of_the_key() -> None:
    calls: list[tuple] = []

    @per_job
    def rows(t, n: int, *, tail: bool = False) -> pl.DataFrame:
        calls.append((n, tail))
        return t.events.tail(n) if tail else t.events.head(n)

    t = build([SAMPLE])
    assert rows(t, 2).equals(t.events.head(2)) and rows(t, 2, tail=True).equals(t.events.tail(2))
    rows(t, 2)
    rows(t, 3)
    assert calls == [(2, False), (2, True), (3, False)]
