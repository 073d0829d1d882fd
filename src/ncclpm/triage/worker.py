"""The per-job function of batch triage: diagnose one job (folder, archive or file) and return its table row.

The same function runs in the local process pool and as a Ray task, so it takes and returns plain values
(a path string in, a dict of str/int/float/list/None out) and never raises: a job that cannot be read or
that breaks the analysis is a row with `error` set. Archives are read in memory by `sources/archives.py`
(never extracted).
"""

from __future__ import annotations

import re
import time
import zlib
from typing import Any

from ncclpm.sources.discover import SourceKind
from ncclpm.tables.schema import Category
from ncclpm.triage.signature import signature, strip_prefix

# For jobs no rule explains, the catalog has by definition not recognised the error: look at the raw text.
_STRONG = re.compile(r"\b(?:FATAL|Fatal|ERROR|[A-Z]\w*(?:Error|Exception)\b|error:|panic|Segmentation fault|Aborted)")
_WEAK = re.compile(r"(?i)\b(?:error|failed|failure|abort\w*|killed|cannot|unable)\b")
_CONSEQUENCE = re.compile(
    r"ChildFailedError|failed \(exitcode|Traceback|Sending process|SIGTERM|exitcode|Root Cause|"
    r"torch\.distributed\.elastic|errors/__init__|^\W*$"
)
RAW_SCAN_BYTES = 4 << 20

ROW_KEYS = (
    "job",
    "category",
    "confidence",
    "band",
    "rule",
    "action",
    "culprit_ranks",
    "culprit_hosts",
    "failing_op",
    "failing_seq",
    "world_size",
    "torch_version",
    "nccl_version",
    "top_evidence",
    "top_evidence_text",
    "top_error",
    "signature",
    "summary",
    "n_sources",
    "n_warnings",
    "error",
    "seconds",
    "baseline",  # "new" / "seen" against `triage --baseline OLD` (set by the caller, not the worker)
)
MAX_TEXT = 400


def empty_row(job: str) -> dict[str, Any]:
    return dict.fromkeys(ROW_KEYS) | {"job": job, "culprit_ranks": [], "culprit_hosts": []}


def _raw_error(job: Any) -> str | None:
    """The first line of the job's text sources that reads like an error (strong words first), skipping the
    launcher's generic consequences (ChildFailedError, 'failed (exitcode: 1)', SIGTERM...)."""
    weak: str | None = None
    for src in job.of_kind(SourceKind.TEXT):
        try:
            text = src.read_head(RAW_SCAN_BYTES).decode("utf-8", "replace")  # an 800 MB log: its head only
        except (OSError, ValueError, EOFError, zlib.error):
            continue
        for line in text.splitlines():
            if _CONSEQUENCE.search(line):
                continue
            if _STRONG.search(line):
                return line
            if weak is None and _WEAK.search(line):
                weak = line
    return weak


def _top_error(tables: Any, d: Any, job: Any) -> str | None:
    """The message a human would quote: the first exception of the job (tracebacks, by time); for a job no rule
    explains, the first error-looking raw line; else the first error event or the first line the diagnosis
    relies on."""
    import polars as pl

    tb = tables.tracebacks.filter(pl.col("detail").fill_null("") != "")
    tb = tb.filter(~pl.col("error_type").fill_null("").str.ends_with("ChildFailedError"))
    if not tb.is_empty():
        r = tb.sort("ts", "source", "line", nulls_last=True).row(0, named=True)
        return f"{r['error_type']}: {r['detail']}"
    if d.category == Category.UNKNOWN and (raw := _raw_error(job)):
        return raw
    errors = tables.events.filter(pl.col("severity") == "error")
    if not errors.is_empty():
        return str(errors.sort("ts", "source", "line", nulls_last=True)["text"][0])
    evidence = d.decisive or d.primary.evidence
    return evidence[0].text if evidence else None


def _fill(row: dict[str, Any], tables: Any, d: Any, job: Any) -> None:
    fc = d.failing_collective or {}
    ev = (d.decisive or d.primary.evidence or (None,))[0]
    top = _top_error(tables, d, job)
    row.update(
        category=str(d.category),
        confidence=round(float(d.confidence), 3),
        band=d.band,
        rule=d.primary.rule,
        action=str(d.action),
        culprit_ranks=[int(r) for r in d.culprit_ranks],
        culprit_hosts=[str(h)[:MAX_TEXT] for h in d.culprit_hosts],
        failing_op=fc.get("op"),
        failing_seq=fc.get("seq"),
        world_size=d.world_size,
        torch_version=d.versions.get("torch"),
        nccl_version=d.versions.get("nccl"),
        top_evidence=None if ev is None else f"{ev.file}:{ev.line}" if ev.line is not None else ev.file,
        top_evidence_text=None if ev is None else strip_prefix(ev.text)[:MAX_TEXT],
        top_error=None if top is None else strip_prefix(top)[:MAX_TEXT],
        signature=signature(top),
        summary=d.summary[:MAX_TEXT],
        n_sources=d.n_sources,
        n_warnings=len(d.warnings),
    )
    if d.n_sources == 0:
        reason = d.warnings[0] if d.warnings else "nothing readable"
        row.update(error=reason[:MAX_TEXT], signature=signature(reason))


def triage_job(path: str, name: str | None = None) -> dict[str, Any]:
    """Diagnose the job at `path`; the row is keyed `name` (default: the path). Never raises."""
    start = time.perf_counter()
    row = empty_row(name or path)
    try:
        from ncclpm.api import catalog
        from ncclpm.engine import diagnose_tables
        from ncclpm.ingest.build import build_tables
        from ncclpm.sources.discover import collect

        job = collect([path])
        tables = build_tables(job, catalog())
        _fill(row, tables, diagnose_tables(tables), job)
    except Exception as exc:  # one bad job is a row with an error, never the end of the run
        message = f"{type(exc).__name__}: {exc}"
        row.update(category=str(Category.UNKNOWN), error=message[:MAX_TEXT], signature=signature(message))
    row["seconds"] = round(time.perf_counter() - start, 3)
    return row
