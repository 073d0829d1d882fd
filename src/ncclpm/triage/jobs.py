"""Which paths are jobs. A PATH given to `ncclpm triage` is one job when it is a file (an archive - `.tar`,
`.tar.gz`/`.tgz`, `.tar.zst`, `.tar.bz2`, `.tar.xz`, `.zip` - or a single log) or a folder that looks like one
job; it is a folder of jobs when it holds nothing but archives and folders, none of which is named like a part
of one job. "Named like a part of one job": `logs`, `fr`, `torchrun_logs`, `traces`, `dumps`, `stdout`/`stderr`,
`attempt_0`, `node3`, `rank12`, `host-a7`... or a bare number (torchrun's per-rank `--log-dir` folders). So:

    triage/2025-11/job-1.tar.gz, job-2.zip, job-3/ (a folder with console.log)  -> a folder of 3 jobs
    job-3/console.log, job-3/logs/...                                          -> one job (a loose log)
    job-4/node0/..., job-4/node1/...                                           -> one job (node folders)

A folder of jobs may hold folders of jobs (by month, by team), up to `MAX_DEPTH` levels. Hidden entries and
`README*`/`*.md` notes are ignored when deciding. Archives are recognised by content (magic bytes) or, when the
content is unreadable, by their name - so a corrupt `job.tar.gz` is still a job (that gets an error row).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ncclpm.sources.archives import archive_kind

MAX_DEPTH = 3
ARCHIVE_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.zst", ".tzst", ".tar.bz2", ".tbz2", ".tar.xz", ".txz", ".zip")
PART_OF_A_JOB = re.compile(
    r"^(?:logs?|fr|flight[_-]?recorder|traces?|dumps?|torchrun[_-]?logs|stdout|stderr|outputs?|err|out|"
    r"(?:attempt|node|host|rank|worker|proc|task|gpu)[_-]?\d+|\d+)$",
    re.IGNORECASE,
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


def is_folder_of_jobs(folder: Path) -> bool:
    """True when every entry is an archive or a folder, and no folder is named like a part of one job."""
    try:
        entries = [e for e in folder.iterdir() if not e.name.startswith(".") and not NOTES.match(e.name)]
    except OSError:
        return False
    if not entries:
        return False
    for e in entries:
        if e.is_symlink():
            return False
        if e.is_dir():
            if PART_OF_A_JOB.match(e.name):
                return False
        elif not (e.is_file() and is_archive(e)):
            return False
    return True


def _expand(path: Path, depth: int) -> Iterable[JobRef]:
    if path.is_dir() and depth < MAX_DEPTH and is_folder_of_jobs(path):
        for child in sorted(path.iterdir()):
            if not child.name.startswith(".") and not NOTES.match(child.name):
                yield from _expand(child, depth + 1)
        return
    yield JobRef(str(path), str(path.resolve()) if path.exists() else str(path))


def find_jobs(paths: Iterable[str | Path]) -> list[JobRef]:
    """Every job under `paths`, in a stable order (a path that does not exist is kept: it becomes an error row)."""
    seen: dict[str, JobRef] = {}
    for p in paths:
        for job in _expand(Path(p), 0):
            seen.setdefault(job.path, job)
    return list(seen.values())
