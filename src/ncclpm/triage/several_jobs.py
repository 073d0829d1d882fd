"""Several jobs given to `ncclpm diagnose` as one: a folder of 60 job folders (plus a stray `x.log` and an empty
`rank0/`), an archive of job folders, two runs side by side. Read as one job they give one confident verdict for
60 failures. `diagnose` asks this module after reading the job, and stops when the answer is yes.

A folder is a separate job when it sits where the sources part ways (below the folders they all share) and is
not named like a part of one job (`logs`, `fr`, `attempt_0`, `node3`, `rank12`, a number - `jobs.PART_OF_A_JOB`).
The evidence is the rank: one job has one rank 3, so two such folders that both hold rank 3 are two runs. Ranks
that come only from torchrun's per-rank folder (`attempt_0/3/stderr.log`) are local ranks and are not evidence:
two nodes of one job both have an `attempt_0/0/`. Dumps are not evidence either (`fr/raw/` and `fr/json/` are
one job's dumps twice). Nodes of one job hold different global ranks, so a multi-node job is never taken for
several jobs; a folder of jobs whose logs name no rank at all is not detected (nothing tells it apart).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import polars as pl

from ncclpm.triage.jobs import PART_OF_A_JOB

_TORCHRUN_LOCAL = re.compile(r"(?:^|/)attempt_\d+/(\d+)/[^/]+$")


@dataclass(frozen=True)
class SeveralJobs:
    """`jobs`: the folders (as in the source names) that are separate jobs; `rank` is held by two of them,
    `holders` are a source of each; `loose`: sources in none of the jobs (strays)."""

    prefix: str
    jobs: tuple[str, ...]
    rank: int
    holders: tuple[str, str]
    loose: tuple[str, ...]


def _parts(name: str) -> list[str]:
    return name.replace("!/", "/").split("/")


def _common_folders(names: list[list[str]]) -> list[str]:
    common = names[0][:-1]
    for parts in names[1:]:
        n = 0
        while n < min(len(common), len(parts) - 1) and common[n] == parts[n]:
            n += 1
        common = common[:n]
    return common


def several_jobs(sources: tuple[str, ...] | list[str], events: pl.DataFrame) -> SeveralJobs | None:
    """The separate jobs among `sources`, when two of them hold the same rank; None for one job."""
    if len(sources) < 2:
        return None
    split = {s: _parts(s) for s in sources}
    prefix = _common_folders(list(split.values()))
    job_of = {
        s: parts[len(prefix)]
        for s, parts in split.items()
        if len(parts) > len(prefix) + 1 and not PART_OF_A_JOB.match(parts[len(prefix)])
    }
    if len(set(job_of.values())) < 2:
        return None
    ranked = events.filter(pl.col("rank").is_not_null()).select("source", "rank").unique().sort("source", "rank")
    holders: dict[int, dict[str, str]] = {}
    for source, rank in ranked.iter_rows():
        job = job_of.get(source)
        local = _TORCHRUN_LOCAL.search(source)
        if job is None or (local is not None and int(local.group(1)) == rank):
            continue
        holders.setdefault(rank, {}).setdefault(job, source)
    shared = sorted((r, h) for r, h in holders.items() if len(h) >= 2)
    if not shared:
        return None
    rank, by_job = shared[0]
    first, second = sorted(by_job)[:2]
    tokens = re.split(r"(!/|/)", by_job[first])  # the shared folders as written (`jobs.tar!/jobs`)
    return SeveralJobs(
        prefix="".join(tokens[: 2 * len(prefix) - 1]) if prefix else "",
        jobs=tuple(sorted(set(job_of.values()))),
        rank=rank,
        holders=(by_job[first], by_job[second]),
        loose=tuple(sorted(s for s in sources if s not in job_of)),
    )


def describe(found: SeveralJobs, root: str | None = None, limit: int = 4) -> str:
    """One line: how many jobs, which, and the evidence (`root`: what the source names are relative to)."""
    shown = found.jobs if len(found.jobs) <= limit + 1 else (*found.jobs[:limit], f"... {found.jobs[-1]}")
    names = ", ".join(shown)
    where = f"{found.prefix} holds" if found.prefix else f"{root or 'the input'} holds"
    return (
        f"{where} {len(found.jobs)} separate jobs ({names}), not one: rank {found.rank} is in "
        f"{found.holders[0]} and in {found.holders[1]}, and one job has only one rank {found.rank}"
    )
