"""Which paths are jobs. A PATH given to `ncclpm triage` is one job when it is a file (an archive - `.tar`,
`.tar.gz`/`.tgz`, `.tar.zst`, `.tar.bz2`, `.tar.xz`, `.zip` - or a single log) or a folder that looks like one
job; it is a folder of jobs when it holds archives and folders none of which is named like a part of one job.
"Named like a part of one job": `logs`, `fr`, `torchrun_logs`, `traces`, `dumps`, `stdout`/`stderr`, `attempt_0`,
`node3`, `rank12`, `host-a7`, a Kubernetes pod `myjob-worker-3`... or a number of at most 3 digits for a folder
(torchrun's per-rank `--log-dir` folders; a longer number is a Slurm job id: a job). So:

    triage/2025-11/job-1.tar.gz, job-2.zip, job-3/ (a folder with console.log)  -> a folder of 3 jobs
    job-3/console.log, job-3/logs/...                                          -> one job (a loose log)
    job-4/node0/..., job-4/node1/...                                           -> one job (node folders)

A folder of many jobs stays one when a few stray things sit beside them: with at least `MIN_JOBS_FOR_STRAYS` jobs,
up to one stray (a loose `x.log`, a `logs/` folder) per `STRAY_RATIO` jobs is skipped with a warning - 60 jobs'
logs are never merged into one verdict because of one file. Empty folders and empty files are ignored.
A folder of jobs may hold folders of jobs (by month, by team), up to `MAX_DEPTH` levels. Hidden entries and
`README*`/`*.md` notes are ignored when deciding. Archives are recognised by content (magic bytes) or, when the
content is unreadable, by their name - so a corrupt `job.tar.gz` is still a job (that gets an error row).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ncclpm.analysis.identity import PART_NAME
from ncclpm.sources.archives import archive_kind
from ncclpm.util.escape import clean_name

MAX_DEPTH = 3
MIN_JOBS_FOR_STRAYS = 10
STRAY_RATIO = 10
EMPTY_SCAN_ENTRIES = 10_000  # entries looked at to tell whether a folder holds any file
ARCHIVE_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.zst", ".tzst", ".tar.bz2", ".tbz2", ".tar.xz", ".txz", ".zip")
PART_OF_A_JOB = PART_NAME  # `analysis/identity.py`: a number of 4 digits or more is a job id, not a local rank
ARCHIVED_PART = re.compile(
    rf"^(?:{PART_NAME.pattern[4:-2]})(?:{'|'.join(re.escape(s) for s in ARCHIVE_SUFFIXES)})$", re.IGNORECASE
)
NOTES = re.compile(r"^(?:readme.*|.*\.md|.*\.parquet|.*\.ndjson|.*\.csv)$", re.IGNORECASE)


@dataclass(frozen=True)
class JobRef:
    """One job to triage: `name` is how it appears in the table, `path` where the worker reads it."""

    name: str
    path: str


def is_archive(path: Path) -> bool:
    if path.name.lower().endswith(ARCHIVE_SUFFIXES):
        return True
    try:
        with path.open("rb") as fh:
            head = fh.read(65536)
    except OSError:
        return False
    return archive_kind(path.name, head) not in (None, "gz")


def holds_no_file(folder: Path) -> bool:
    """True for a folder with no file anywhere below it (an empty `rank0/` left by a launcher)."""
    stack, seen = [folder], 0
    while stack:
        try:
            with os.scandir(stack.pop()) as it:
                for e in it:
                    seen += 1
                    if seen > EMPTY_SCAN_ENTRIES or not e.is_dir(follow_symlinks=False):
                        return False
                    stack.append(Path(e.path))
        except OSError:
            return False
    return True


def _is_empty(entry: Path) -> bool:
    try:
        if entry.is_dir() and not entry.is_symlink():
            return holds_no_file(entry)
        return entry.is_file() and entry.stat().st_size == 0 and not entry.name.lower().endswith(ARCHIVE_SUFFIXES)
    except OSError:
        return False


def _is_a_job(entry: Path) -> bool:
    if entry.is_symlink():
        return False
    if entry.is_dir():
        return not PART_OF_A_JOB.match(entry.name)
    return entry.is_file() and is_archive(entry) and not ARCHIVED_PART.match(entry.name)


def _entries(folder: Path) -> list[Path]:
    try:
        return sorted(e for e in folder.iterdir() if not e.name.startswith(".") and not NOTES.match(e.name))
    except OSError:
        return []


def split_folder(folder: Path) -> tuple[list[Path], list[Path]] | None:
    """(jobs, skipped) when `folder` is a folder of jobs, else None (it is one job). Empty entries have no say."""
    entries = _entries(folder)
    empty = [e for e in entries if _is_empty(e)]
    jobs = [e for e in entries if e not in empty and _is_a_job(e)]
    strays = [e for e in entries if e not in empty and e not in jobs]
    if not jobs:
        return None
    if strays and (len(jobs) < MIN_JOBS_FOR_STRAYS or len(strays) * STRAY_RATIO > len(jobs)):
        return None
    return jobs, sorted(strays + empty)


def is_folder_of_jobs(folder: Path) -> bool:
    """True when `folder` holds jobs (archives, folders not named like a part of one job), give or take a few
    strays beside many jobs."""
    return split_folder(folder) is not None


def _expand(path: Path, depth: int, warnings: list[str]) -> Iterable[JobRef]:
    split = split_folder(path) if path.is_dir() and depth < MAX_DEPTH else None
    if split is not None:
        jobs, strays = split
        for stray in strays:
            what = ("an empty " if _is_empty(stray) else "a ") + ("folder" if stray.is_dir() else "file")
            warnings.append(f"{clean_name(stray)}: {what} beside {len(jobs)} jobs in a folder of jobs - skipped")
        for child in jobs:
            yield from _expand(child, depth + 1, warnings)
        return
    yield JobRef(clean_name(path), str(path.resolve()) if path.exists() else str(path))


def find_jobs(paths: Iterable[str | Path], warnings: list[str] | None = None) -> list[JobRef]:
    """Every job under `paths`, in a stable order (a path that does not exist is kept: it becomes an error row).
    Strays skipped in a folder of jobs are appended to `warnings`."""
    warnings = [] if warnings is None else warnings
    seen: dict[str, JobRef] = {}
    names: set[str] = set()
    for p in paths:
        for job in _expand(Path(p), 0, warnings):
            if job.path in seen:
                continue
            name, n = job.name, 1
            while name in names:  # `rank3.log` and `rank3.log\n` print alike: keep the rows apart
                n += 1
                name = f"{job.name} ({n})"
            names.add(name)
            seen[job.path] = JobRef(name, job.path)
    return list(seen.values())
