"""The one `Tables` object every rule reads, and how it is built from a `Job`.

Tables (schemas in `schema.py`): `lines` (prefiltered, envelope resolved), `events` (typed catalog
matches + torchelastic error files), `tracebacks`, `elastic` (torchrun failure summary entries), `ranks`
(one row per rank: what it last did, whether and where it timed out, its first error, how it exited), and,
when the job holds flight-recorder dumps, `fr` (loaded dumps; `fr_analysis`, their cross-rank matching, is
computed by the analysis stage: `ncclpm.analysis.analysed`); in
`extra`: `stacks` (every frame of every stack dump, `ingest/stacks.py`), NCCL communicators and warnings,
settings, `code_settings`. Code and configuration files are not evidence: they only feed `code_settings`
(`code_settings.py`) and the settings table, and are listed in `code_sources`, not in `sources`.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import polars as pl

from ncclpm.ingest.bounds import bound
from ncclpm.ingest.catalog import Catalog
from ncclpm.ingest.code_settings import code_settings_table
from ncclpm.ingest.errorfiles import read_error_files
from ncclpm.ingest.extract import extract_events, lines_table, parse_lines, source_columns
from ncclpm.ingest.lines import read_kept_lines
from ncclpm.ingest.multiline import parse_elastic_summaries, rank_summary_blocks, stitch_tracebacks
from ncclpm.ingest.nccl import (
    fill_line_ranks,
    fill_ranks,
    has_nccl_log,
    nccl_addresses,
    nccl_comms,
    nccl_warnings,
    rank_map,
)
from ncclpm.ingest.ranks import build_ranks, world_size, world_size_is_declared
from ncclpm.ingest.readings import apply_readings
from ncclpm.ingest.settings import settings_table
from ncclpm.ingest.stacks import build_stacks, pid_rank_map
from ncclpm.kinds import K
from ncclpm.schema import EVENTS_SCHEMA
from ncclpm.sources.discover import Job, SourceKind

if TYPE_CHECKING:
    from ncclpm.analysis.fr_match import FRAnalysis
    from ncclpm.ingest.flight_recorder import FRLoad

# Derived tables in `Tables.extra`, and every name a rule may list in `needs` (checked when a rule is defined).
EXTRA_TABLES = ("nccl_comms", "nccl_warnings", "nccl_addresses", "settings", "stacks", "code_settings")
TABLE_NAMES = frozenset(
    {"lines", "events", "tracebacks", "elastic", "ranks", "fr_entries", "fr_analysis", *EXTRA_TABLES}
)


@dataclass(frozen=True)
class Tables:
    job_name: str
    lines: pl.DataFrame
    events: pl.DataFrame
    tracebacks: pl.DataFrame
    elastic: pl.DataFrame
    ranks: pl.DataFrame
    world_size: int | None
    world_size_declared: bool
    sources: tuple[str, ...]
    warnings: tuple[str, ...]
    fr: FRLoad | None = None
    fr_analysis: FRAnalysis | None = None  # the cross-rank verdict on `fr`: filled by analysis.analysed()
    extra: dict[str, pl.DataFrame] = field(default_factory=dict)
    nccl_log: bool = False  # the job holds NCCL's own log (NCCL_DEBUG output)
    line_prefix: str = ""  # the catalog's envelopes as a Python regex (reports strip them from quoted lines)
    code_sources: tuple[str, ...] = ()  # code and configuration files, read for settings only
    # Facts the rules derive from these tables, computed once (`rules._memo.per_job`); every Tables has its own.
    memo: dict[tuple, Any] = field(default_factory=dict, init=False, repr=False, compare=False)

    def has(self, name: str) -> bool:
        """True when the table exists and holds rows (rules declare what they need)."""
        if name == "fr_entries":
            return self.fr is not None and not self.fr.compact.is_empty()
        if name == "fr_analysis":
            return self.fr_analysis is not None
        frame = getattr(self, name, None)
        if frame is None:
            frame = self.extra.get(name)
        return isinstance(frame, pl.DataFrame) and not frame.is_empty()

    def kinds(self, *kinds: str) -> pl.DataFrame:
        """Events of the given kinds (declared kinds only: a misspelt one raises `UnknownKind`), in table order."""
        wanted = dict.fromkeys(K.check(*kinds, where="Tables.kinds"))
        rows = [self._rows_of_kind[k] for k in wanted if k in self._rows_of_kind]
        if not rows:
            return self.events.clear()
        return self.events[rows[0] if len(rows) == 1 else pl.concat(rows).sort()]

    @functools.cached_property
    def _rows_of_kind(self) -> dict[str, pl.Series]:
        """The events' row numbers by kind: rules ask for kinds ~60 times, and each filter read every event (~70 ms
        of a 160k-event job's rules)."""
        rows = self.events.select("kind", pl.int_range(pl.len(), dtype=pl.UInt32).alias("row"))
        return {key[0]: part["row"] for key, part in rows.partition_by("kind", as_dict=True).items()}


def _read_dumps(job: Job, warnings: list[str], columns: str) -> FRLoad | None:
    dumps = job.of_kind(SourceKind.FR)
    if not dumps:
        return None
    from ncclpm.ingest.flight_recorder import load_fr_dumps

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


def build_tables(job: Job, catalog: Catalog, *, fr_columns: str = "analysis") -> Tables:
    """Read every source of the job once and build all tables (`fr_columns`: see `load_fr_dumps`)."""
    warnings = list(job.warnings)
    per_line = functools.partial(source_columns, catalog=catalog)
    kept = read_kept_lines(
        job.of_kind(SourceKind.TEXT), catalog.anchors, warnings, catalog.line_start_regex(), per_line
    )
    parsed = parse_lines(kept, catalog)
    del kept  # the lines as read: parsed holds what is used of them (~50 MB less at the peak of a 1 GB job)
    parsed = bound(parsed, warnings)
    elastic = parse_elastic_summaries(parsed)
    parsed = rank_summary_blocks(parsed, elastic)
    error_files = apply_readings(read_error_files(job.of_kind(SourceKind.ERROR_FILE), warnings), catalog.kinds)
    events = pl.concat([extract_events(parsed, catalog), error_files], how="vertical").cast(EVENTS_SCHEMA)  # type: ignore[arg-type]
    events = bound(events, warnings)
    comms = nccl_comms(events)
    process_ranks = rank_map(comms)
    events = fill_ranks(events, process_ranks)
    lines = fill_line_ranks(lines_table(parsed), process_ranks)
    lines, events = _date_yearless((lines, events), elastic)
    fr = _read_dumps(job, warnings, fr_columns)
    stacks = build_stacks(job, lines, pid_rank_map(lines, events, elastic, process_ranks), fr, warnings)
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
                ),
                strict=True,
            )
        ),
        nccl_log=has_nccl_log(lines),
        line_prefix=catalog.prefix_regex(),
        code_sources=tuple(s.name for s in code),
    )
