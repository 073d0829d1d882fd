"""Polars' allocator and streaming settings for the job at hand, chosen before polars loads (it reads them once).

A job made mostly of flight-recorder dumps holds one compact table for the whole analysis and runs a few group_bys
over all of it: jemalloc handing freed pages back at once (``dirty_decay_ms:0``; polars' default keeps them 0.5 s)
and smaller streaming morsels (each morsel's hashed keys cost ~100 bytes a row while a group_by runs) keep its peak
at the table plus polars' fixed cost (`benchmarks/README.md`, Flight recorder: 256 ranks x 2000 entries, peak
-20 MB for +5-10 % CPU).  The text path streams its input chunk after chunk: returning each chunk's pages to the
kernel only to fault them in again costs it +17 % CPU, so a text job keeps polars' defaults.  A setting already in
the environment (the user's) is left alone.
"""

from __future__ import annotations

import os
import sys

from ncclpm.sources.discover import Job, SourceKind

FR_SETTINGS = {"_RJEM_MALLOC_CONF": "dirty_decay_ms:0", "POLARS_IDEAL_MORSEL_SIZE": "16384"}


def _bytes(job: Job) -> tuple[int, int]:
    """The job's bytes in flight-recorder dumps and in everything else (on disk: a .gz counts compressed)."""
    dumps = rest = 0
    for s in job.sources:
        if s.kind == SourceKind.FR:
            dumps += s.size()
        else:
            rest += s.size()
    return dumps, rest


def mostly_dumps(job: Job) -> bool:
    """Whether flight-recorder dumps are most of the job's bytes."""
    dumps, rest = _bytes(job)
    return dumps > rest


SMALL_JOB_BYTES = 4 * 1024**2
# Below this a job's queries are tiny: polars' thread pool saves nothing on them, and its idle threads spin between
# queries on the other core (a 21-line log: 0.36 -> 0.31 s CPU, 0.324 -> 0.313 s wall, quiet, 21 interleaved runs).
SMALL_SETTINGS = {"POLARS_MAX_THREADS": "1"}


def tune_for(job: Job | None, stdin_bytes: int = 0) -> bool:
    """Give polars the flight-recorder settings when `job` is mostly dumps (True then), one thread when the job
    (or text pasted on stdin, `job` None) is small. Too late once polars is loaded: it does nothing then."""
    if "polars" in sys.modules:
        return False
    dumps, rest = _bytes(job) if job is not None else (0, 0)  # (each source's size read once: a stat per file)
    if stdin_bytes + dumps + rest < SMALL_JOB_BYTES:
        for key, value in SMALL_SETTINGS.items():
            os.environ.setdefault(key, value)
    if dumps <= rest:
        return False
    for key, value in FR_SETTINGS.items():
        os.environ.setdefault(key, value)
    return True
