"""The events table's order is fixed: a pattern's several rows on one line (one per network device NCCL lists, one
per duplicate GPU it names) come out in the order matched, run after run. The anti/semi joins and sorts that put the
NCCL messages' readings beside the patterns' rows once reordered them at random (2-3 orders in 8 runs of these
cases), so a report or a digest of the tables could differ between two runs of the same job."""

from __future__ import annotations

from pathlib import Path

import pytest

from ncclpm.api import build

CASES = Path(__file__).parent / "cases"


@pytest.mark.parametrize("case", ["issue4_duplicate_gpu", "issue4_ib_error_one_host"])
def test_events_come_out_in_one_order(case: str) -> None:
    first = build([CASES / case / "input"]).events
    for _ in range(5):
        assert build([CASES / case / "input"]).events.equals(first)
