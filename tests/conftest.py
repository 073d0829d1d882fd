"""Session hooks: one line saying how many tests were skipped for lack of the shared corpus (tests/shared.py)."""

from __future__ import annotations

import pytest

from tests.shared import ABSENT, SHARED


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    skipped = terminalreporter.stats.get("skipped", [])
    absent = sum(1 for r in skipped if ABSENT in str(getattr(r, "longrepr", "")))
    if absent or SHARED is None:
        terminalreporter.write_line(
            f"{absent} tests skipped: shared corpus absent (put it at ../shared beside the checkout, or set "
            "NCCLPM_SHARED)"
        )
