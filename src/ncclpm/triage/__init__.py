"""Batch triage: many failed jobs -> one table (a row per job) and a Markdown summary.

`find_jobs(paths)` tells jobs apart (`jobs.py`), `triage_job(path)` diagnoses one and returns its row
(`worker.py`, the function both the local process pool and Ray run), `run_local` / `run_ray` run them
(`runner.py`), `to_frame` / `write_table` build and write the table (`table.py`), `render_summary` writes the
summary with unexplained failures clustered by signature (`summary.py`, `signature.py`).
"""

from __future__ import annotations

import importlib
from typing import Any

# Loaded on first use: `diagnose` imports `triage.jobs` to suggest how to triage several jobs, and must not pay
# for the runner, the table writer and the summary's jinja2 (~25 ms of a tiny job's start).
_WHERE = {
    "JobRef": "jobs",
    "find_jobs": "jobs",
    "Interrupted": "runner",
    "run_local": "runner",
    "run_ray": "runner",
    "render_summary": "summary",
    "TABLE_SCHEMA": "table",
    "to_frame": "table",
    "write_table": "table",
    "triage_job": "worker",
}
__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
    globals()[name] = value
    return value
