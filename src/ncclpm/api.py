"""Library entry points: build the tables of a job and diagnose it. The CLI is a thin layer over these."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from ncclpm.ingest.build import build_tables
from ncclpm.ingest.catalog import Catalog, load_catalog
from ncclpm.sources.discover import Job, collect
from ncclpm.sources.paste import normalise_paste_bytes
from ncclpm.tables import Tables

if TYPE_CHECKING:  # the rules and the reports are imported when used: `build` alone needs neither
    import polars as pl

    from ncclpm.diff_model import DiffReport
    from ncclpm.model import Diagnosis


@lru_cache(maxsize=8)
def catalog(extra_dirs: tuple[Path, ...] = ()) -> Catalog:
    return load_catalog(extra_dirs)


def build(
    paths: Iterable[str | Path] = (),
    *,
    stdin_bytes: bytes | None = None,
    patterns: tuple[Path, ...] = (),
    name: str | None = None,
    fr_columns: str = "analysis",
    job: Job | None = None,
) -> Tables:
    """Collect the job's sources and build every table (the analysis stage runs on them when they are diagnosed:
    `ncclpm.analysis.analyse`, once). Text on stdin is taken
    as pasted: chat and ticket damage (code fences, `&gt;`, smart quotes, lines re-wrapped at 80 columns) is
    undone first. ``fr_columns="all"`` keeps every flight-recorder column (the default keeps what the analysis
    reads). `job`: the sources already collected (`collect`), in place of `paths`, `stdin_bytes` and `name`."""
    cat = catalog(patterns)
    if job is None:
        if stdin_bytes is not None:
            stdin_bytes = normalise_paste_bytes(stdin_bytes, cat.head_regex())
        job = collect(paths, stdin_bytes=stdin_bytes, name=name)
    return build_tables(job, cat, fr_columns=fr_columns)


def read_lines(
    source: str, lines: Sequence[str], numbers: Sequence[int], *, patterns: tuple[Path, ...] = ()
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Some lines of one log, read as `build` reads a job's text: their `lines` rows (rank, host, pid, time, level,
    message) and `events` rows (kind and typed fields). `source` is the file's name as a job would call it
    (`attempt_0/3/stderr.log`, `rank3.log` give the rank); `numbers` the lines' numbers in it. For a log followed
    while it grows (`ncclpm watch`): no tracebacks, no cross-file facts, no analysis."""
    import polars as pl

    from ncclpm.ingest.text.extract import extract_events, lines_table, parse_lines

    cat = catalog(patterns)
    kept = pl.DataFrame(
        {"source": [source] * len(lines), "line": list(numbers), "raw": list(lines)},
        schema={"source": pl.String(), "line": pl.Int64(), "raw": pl.String()},
    )
    parsed = parse_lines(kept, cat)
    return lines_table(parsed), extract_events(parsed, cat)


def diagnose(
    paths: Iterable[str | Path] = (),
    *,
    stdin_bytes: bytes | None = None,
    patterns: tuple[Path, ...] = (),
    select: Iterable[str] = (),
    ignore: Iterable[str] = (),
    name: str | None = None,
) -> Diagnosis:
    """Diagnose one job: a folder, files, an archive, and/or pasted text."""
    from ncclpm.engine import diagnose_tables

    return diagnose_tables(build(paths, stdin_bytes=stdin_bytes, patterns=patterns, name=name), select, ignore)


def diff(
    good: Iterable[str | Path],
    bad: Iterable[str | Path],
    *,
    patterns: tuple[Path, ...] = (),
    stdin_bytes: bytes | None = None,
    stdin_side: str | None = None,
) -> DiffReport:
    """Compare a run that worked (GOOD) with one that failed (BAD); each side is a folder, files or an archive
    (`stdin_side` = "good" or "bad" reads that side's pasted text from `stdin_bytes`). A side that holds several
    jobs (`analysis/identity.py`) raises `SeveralJobsError`: a diff compares one run with one run."""
    from ncclpm.analysis import analyse
    from ncclpm.analysis.identity import SeveralJobsError, describe
    from ncclpm.diff import compare
    from ncclpm.engine import diagnose_facts

    runs = []
    for side, paths in (("good", good), ("bad", bad)):
        data = stdin_bytes if stdin_side == side else None
        paths = list(paths)
        facts = analyse(build(paths, stdin_bytes=data, patterns=patterns, name=None if paths else f"{side} (pasted)"))
        if facts.identity.several:
            root = str(paths[0]) if len(paths) == 1 else None
            raise SeveralJobsError(f"{side.upper()}: {describe(facts.identity, root)}")
        runs.append((facts, diagnose_facts(facts)))
    (good_a, good_d), (bad_a, bad_d) = runs
    return compare(good_a, good_d, bad_a, bad_d)
