"""Batch triage: many failed jobs -> one table (a row per job) and a Markdown summary.

`find_jobs(paths)` tells jobs apart (`jobs.py`), `triage_job(path)` diagnoses one and returns its row
(`worker.py`, the function both the local process pool and Ray run), `run_local` / `run_ray` run them
(`runner.py`), `to_frame` / `write_table` build and write the table (`table.py`), `render_summary` writes the
summary with unexplained failures clustered by signature (`summary.py`, `signature.py`).
"""

from ncclpm.triage.jobs import JobRef, find_jobs
from ncclpm.triage.runner import Interrupted, run_local, run_ray
from ncclpm.triage.summary import render_summary
from ncclpm.triage.table import TABLE_SCHEMA, to_frame, write_table
from ncclpm.triage.worker import triage_job

__all__ = [
    "TABLE_SCHEMA",
    "Interrupted",
    "JobRef",
    "find_jobs",
    "render_summary",
    "run_local",
    "run_ray",
    "to_frame",
    "triage_job",
    "write_table",
]
