"""Build the `Tables` of a job (`ncclpm.tables`) from its `Job`: every source read once, by its reader (`text/`,
`flight_recorder/`, `stacks/`, `code/`), then the derived tables of `extra`."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import polars as pl

from ncclpm.ingest.bounds import bound
from ncclpm.ingest.catalog import Catalog
from ncclpm.ingest.code.settings import code_settings_table
from ncclpm.ingest.readings import apply_readings
from ncclpm.ingest.settings import settings_table
from ncclpm.ingest.stacks.build import build_stacks, pid_rank_map
from ncclpm.ingest.text.errorfiles import read_error_files
from ncclpm.ingest.text.extract import extract_events, lines_table, parse_lines, source_columns
from ncclpm.ingest.text.lines import after_last_error, read_kept_lines
from ncclpm.ingest.text.multiline import (
    parse_elastic_summaries,
    rank_summary_blocks,
    stitch_tracebacks,
    traceback_record_ranks,
)
from ncclpm.ingest.text.native import watchdog_aborts
from ncclpm.ingest.text.nccl import (
    fill_launched_ranks,
    fill_line_ranks,
    fill_ranks,
    has_nccl_log,
    launched_ranks,
    nccl_addresses,
    nccl_comms,
    nccl_warnings,
    rank_map,
)
from ncclpm.ingest.text.ranks import build_ranks, world_size, world_size_is_declared
from ncclpm.ingest.text.rawscan import only_words
from ncclpm.sources.discover import Job, SourceKind
from ncclpm.tables import EXTRA_TABLES, Tables
from ncclpm.tables.schema import EVENTS_SCHEMA, empty

if TYPE_CHECKING:
    from ncclpm.tables.fr import FRLoad


def _read_dumps(job: Job, warnings: list[str], columns: str) -> FRLoad | None:
    dumps = job.of_kind(SourceKind.FR)
    if not dumps:
        return None
    from ncclpm.ingest.flight_recorder.load import load_fr_dumps

    # each dump's bytes are read when the loader gets to it (one dump in memory at a time)
    fr = load_fr_dumps([(src.name, src.read_bytes) for src in dumps], columns=columns)
    warnings.extend(fr.warnings)
    return fr


def _date_yearless(frames: tuple[pl.DataFrame, ...], elastic: pl.DataFrame) -> tuple[pl.DataFrame, ...]:
    """glog stamps (`E204 16:42:57`) carry no year and are read in 1970 when no line of their file's kind is dated;
    torchrun's failure summary and error files are: their year dates the rest (tables never export 1970)."""
    stamps = pl.concat([elastic["ts"], frames[-1]["ts"]]).drop_nulls()
    years = stamps.dt.year().filter(stamps.dt.year() > 1970)
    if years.is_empty() or not any((f["ts"].dt.year() == 1970).any() for f in frames):
        return frames
    shift = f"{int(years.max()) - 1970}y"  # type: ignore[arg-type]
    redate = pl.when(pl.col("ts").dt.year() == 1970).then(pl.col("ts").dt.offset_by(shift)).otherwise(pl.col("ts"))
    return tuple(f.with_columns(redate.alias("ts")) for f in frames)


def split_stack_words(parsed: pl.DataFrame, catalog: Catalog) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The lines kept only because they hold a word of the distributed stack (scope.toml), apart: they tell a job's
    log from other text (analysis/scope.py) and are read for nothing else, so every other table is what it would be
    without them. A line holding any other anchor, or kept for another reason (the line after a bare `Last error:`),
    stays a line."""
    if parsed.is_empty() or not catalog.stack_anchors:
        return parsed, empty({"source": pl.String(), "line": pl.Int64(), "message": pl.String()})
    words = only_words(parsed["raw"], tuple(catalog.stack_anchors), tuple(catalog.read_anchors))
    parsed = parsed.with_columns((words & ~after_last_error()).alias("_words"))
    words = parsed.filter(pl.col("_words")).select("source", "line", "message")
    return parsed.filter(~pl.col("_words")).drop("_words"), words


def build_tables(job: Job, catalog: Catalog, *, fr_columns: str = "analysis") -> Tables:
    """Read every source of the job once and build all tables (`fr_columns`: see `load_fr_dumps`)."""
    warnings = list(job.warnings)
    per_line = functools.partial(source_columns, catalog=catalog)
    kept = read_kept_lines(
        job.of_kind(SourceKind.TEXT), catalog.anchors, warnings, catalog.line_start_regex(), per_line
    )
    parsed, stack_words = split_stack_words(parse_lines(kept, catalog), catalog)
    del kept  # the lines as read: parsed holds what is used of them (~50 MB less at the peak of a 1 GB job)
    parsed = bound(parsed, warnings)
    elastic = parse_elastic_summaries(parsed)
    parsed = traceback_record_ranks(rank_summary_blocks(parsed, elastic))
    error_files = apply_readings(read_error_files(job.of_kind(SourceKind.ERROR_FILE), warnings), catalog.kinds)
    events = pl.concat([extract_events(parsed, catalog), error_files], how="vertical").cast(EVENTS_SCHEMA)  # type: ignore[arg-type]
    events = watchdog_aborts(bound(events, warnings))
    comms = nccl_comms(events)
    process_ranks = rank_map(comms)
    launched = launched_ranks(events)
    events = fill_launched_ranks(fill_ranks(events, process_ranks), launched)
    lines = fill_launched_ranks(fill_line_ranks(lines_table(parsed), process_ranks), launched, lines=True)
    lines, events = _date_yearless((lines, events), elastic)
    fr = _read_dumps(job, warnings, fr_columns)
    pid_ranks = functools.partial(pid_rank_map, lines, events, elastic, process_ranks)  # (only for a job with stacks)
    stacks = build_stacks(job, lines, pid_ranks, fr, warnings)
    code = job.of_kind(SourceKind.CODE)
    code_settings = code_settings_table(code, warnings)
    evidence = [s for s in job.sources if s.kind != SourceKind.CODE]
    if not evidence:
        only_code = f" ({len(code)} code file{'s' if len(code) != 1 else ''} read for settings only)" if code else ""
        warnings.append(f"no readable log, error file, flight-recorder or stack dump found{only_code}")
    return Tables(
        job_name=job.name,
        lines=lines,
        events=events,
        tracebacks=stitch_tracebacks(parsed),
        elastic=elastic,
        ranks=build_ranks(lines, events, elastic, comms),
        world_size=world_size(events, elastic, fr),
        world_size_declared=world_size_is_declared(events, fr),
        sources=tuple(s.name for s in evidence),
        warnings=tuple(warnings),
        fr=fr,
        extra=dict(
            zip(
                EXTRA_TABLES,
                (
                    comms,
                    nccl_warnings(events),
                    nccl_addresses(lines),
                    settings_table(events, code_settings),
                    stacks,
                    code_settings,
                    stack_words,
                ),
                strict=True,
            )
        ),
        nccl_log=has_nccl_log(lines),
        line_prefix=catalog.prefix_regex(),
        code_sources=tuple(s.name for s in code),
    )
