"""The contract every stage reads: the `Tables` of one job, their schemas (`schema.py`), the declared event kinds
(`kinds.py`) and the flight-recorder load (`fr.py`). Ingest builds them (`ingest/build.py`); analysis, the rules,
the report and `ncclpm diff` read them; nothing here reads a file or judges.

Tables: `lines` (prefiltered, envelope resolved), `events` (typed catalog matches + torchelastic error files),
`tracebacks`, `elastic` (torchrun failure summary entries), `ranks` (one row per rank: what it last did, whether
and where it timed out, its first error, how it exited), and, when the job holds flight-recorder dumps, `fr`
(loaded dumps; their cross-rank matching is the analysis stage's: `ncclpm.analysis.analyse`); in `extra`:
`stacks` (every frame of every stack dump), NCCL communicators and warnings, `settings` (the environment variables
the job sets), `code_settings`, `stack_words` (lines kept only because they hold a word of the distributed stack,
parsers/scope.toml: read to tell a job's log from other text, never as events). Code and configuration files are
not evidence: they only feed `code_settings` and `settings`, and are listed in `code_sources`, not in `sources`.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import polars as pl

from ncclpm.tables.kinds import K

if TYPE_CHECKING:
    from ncclpm.tables.fr import FRLoad

_FEW_EVENTS = 4096  # `Tables._rows_of_kind` numbers up to this many events' rows in Python

# Derived tables in `Tables.extra`, and every name a rule may list in `needs` (checked when a rule is defined;
# `fr_analysis` is the analysis stage's matching of the dumps: `Analysis.has`).
EXTRA_TABLES = ("nccl_comms", "nccl_warnings", "nccl_addresses", "settings", "stacks", "code_settings", "stack_words")
TABLE_NAMES = frozenset(
    {"lines", "events", "tracebacks", "elastic", "ranks", "fr_entries", "fr_analysis", *EXTRA_TABLES}
)


@dataclass(frozen=True)
class Tables:
    """Everything read from one job: the lines, events and derived tables the analysis and the rules read."""

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
    extra: dict[str, pl.DataFrame] = field(default_factory=dict)
    nccl_log: bool = False  # the job holds NCCL's own log (NCCL_DEBUG output)
    line_prefix: str = ""  # the catalog's envelopes as a Python regex (reports strip them from quoted lines)
    code_sources: tuple[str, ...] = ()  # code and configuration files, read for settings only

    def has(self, name: str) -> bool:
        """True when the table exists and holds rows (rules declare what they need)."""
        if name == "fr_entries":
            return self.fr is not None and not self.fr.compact.is_empty()
        frame = getattr(self, name, None)
        if frame is None:
            frame = self.extra.get(name)
        return isinstance(frame, pl.DataFrame) and not frame.is_empty()

    def has_kinds(self, *kinds: str) -> bool:
        """Whether any event is of one of `kinds` (declared kinds only), without building a frame."""
        return any(k in self._rows_of_kind for k in K.check(*kinds, where="Tables.has_kinds"))

    def kinds(self, *kinds: str) -> pl.DataFrame:
        """Events of the given kinds (declared kinds only: a misspelt one raises `UnknownKind`), in table order.
        Each answer is kept: the facts and rules of a job ask for the same kinds ~40 times (frames are not changed
        in place, so one frame serves every asker)."""
        held = self._of_kinds.get(kinds)
        if held is not None:
            return held
        wanted = dict.fromkeys(K.check(*kinds, where="Tables.kinds"))
        rows = [self._rows_of_kind[k] for k in wanted if k in self._rows_of_kind]
        got = self.events[rows[0] if len(rows) == 1 else pl.concat(rows).sort()] if rows else self.events.clear()
        self._of_kinds[kinds] = got
        return got

    @functools.cached_property
    def _of_kinds(self) -> dict[tuple[str, ...], pl.DataFrame]:
        return {}

    @functools.cached_property
    def _rows_of_kind(self) -> dict[str, pl.Series]:
        """The events' row numbers by kind: rules ask for kinds ~60 times, and each filter read every event (~70 ms
        of a 160k-event job's rules)."""
        if self.events.height <= _FEW_EVENTS:  # (a partition is a query a kind: ~7 a small job)
            by_kind: dict[str | None, list[int]] = {}
            for row, kind in enumerate(self.events.get_column("kind").to_list()):
                by_kind.setdefault(kind, []).append(row)
            return {k: pl.Series("row", rows, dtype=pl.UInt32) for k, rows in by_kind.items()}  # type: ignore[misc]
        rows = self.events.select("kind", pl.int_range(pl.len(), dtype=pl.UInt32).alias("row"))
        return {key[0]: part["row"] for key, part in rows.partition_by("kind", as_dict=True).items()}
