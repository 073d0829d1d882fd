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
from ncclpm.triage.recurrence import recurrence
from ncclpm.triage.signature import signature, strip_prefix
from ncclpm.triage.times import job_times
from ncclpm.util.frames import filtered

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
    "started_at",  # the earliest dated line of the job (`times.py`)
    "failed_at",  # the time of the first decisive event: the failure's time from the logs, null where they give none
    "failed_clock",  # an undated failure's time as the logs write it (`11-22 08:37:58`: a glog stamp has no year)
    "duration_s",  # failed_at - started_at, on the logs' own clock
    "own_hosts",  # culprit hosts named by their own evidence (Xid, ECC, IB port errors), not only by a rank on them
    "attempts",  # launches the logs show (torchrun restarts, `attempt_N/`, requeue/restart folders): 1 for none
    "restart_storm",  # every attempt failed the same way with no progress between them (`recurrence.py`)
    "storm_attempts",  # how many of the last attempts failed the same way with no progress (a storm: 2 or more)
    "storm_node_hours",  # node-hours of the failed attempts, where the logs give times
    "hosts_every_attempt",  # hosts suspected in every attempt of a storm
    "report",  # the job's own HTML report, a file name in `triage --reports DIR`
    "baseline",  # "new" / "seen" against `triage --baseline OLD` (set by the caller, not the worker)
)
MAX_TEXT = 400


def empty_row(job: str) -> dict[str, Any]:
    return dict.fromkeys(ROW_KEYS) | {
        "job": job,
        "culprit_ranks": [],
        "culprit_hosts": [],
        "own_hosts": [],
        "hosts_every_attempt": [],
    }


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

    tb = filtered(
        tables.tracebacks,
        (pl.col("detail").fill_null("") != "") & ~pl.col("error_type").fill_null("").str.ends_with("ChildFailedError"),
    )
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


def own_hosts(tables: Any, d: Any) -> list[str]:
    """Hosts the root cause blames from the host's own evidence: the hosts of its host-level lines (Xid, lost GPU,
    ECC, NVML, fabric, a lost node, InfiniBand errors: the syslog host a kernel line names, else the host of the rank
    that printed it, else a culprit host its file's path is filed under). A culprit host not in this list is blamed
    only because a culprit rank ran on it (or because a finding names it from another host's words: a peer that
    closed the connection)."""
    import polars as pl

    from ncclpm.tables.kinds import K
    from ncclpm.triage.recurrence import HOST_KINDS, host_level

    lines = tables.kinds(*HOST_KINDS, K.network_error)  # the kinds' rows are indexed: most jobs have none
    refs = [(e.file, e.line) for e in (*d.primary.evidence, *d.decisive) if e.line is not None]
    if lines.is_empty() or not refs:
        return []
    wanted = pl.DataFrame(
        {"source": [r[0] for r in refs], "line": [r[1] for r in refs]},
        schema={"source": pl.String(), "line": pl.Int64()},
    )
    lines = lines.filter(host_level()).join(wanted.unique(), on=["source", "line"], how="semi")
    host_of = {r["rank"]: r.get("host") for r in d.ranks}
    named = set()
    culprits = set(d.culprit_hosts)
    for r in lines.select("source", "node", "host", "rank").iter_rows(named=True):
        host = r["node"] or r["host"] or host_of.get(r["rank"])
        if not host:  # a bare dmesg line: the host a folder of its path is named after (node-diag/gpu-a07/...)
            host = next((p for p in re.split(r"[/!]", r["source"]) if p in culprits), None)
        if host:
            named.add(str(host))
    return sorted(named)


def _fill(row: dict[str, Any], tables: Any, d: Any, job: Any, identity: Any = None) -> None:
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
        own_hosts=[str(h)[:MAX_TEXT] for h in own_hosts(tables, d)],
        **job_times(tables, d),
        **recurrence(tables, d, identity),
    )
    if d.n_sources == 0:
        reason = d.warnings[0] if d.warnings else "nothing readable"
        row.update(error=reason[:MAX_TEXT], signature=signature(reason))


def report_name(job: str) -> str:
    """A file name for a job's own HTML report: the job's name reduced to safe characters, plus a short hash of
    the whole name (two jobs never share a report; no name can climb out of the reports folder)."""
    import hashlib

    base = re.sub(r"[^A-Za-z0-9._-]+", "_", job).strip("._-")[-60:].strip("._-") or "job"
    return f"{base}-{hashlib.sha1(job.encode('utf-8', 'surrogateescape')).hexdigest()[:8]}.html"


def _write_report(d: Any, reports: str, row: dict[str, Any]) -> None:
    """The job's own HTML report in `reports` (a folder the CLI checked); its file name goes in the row."""
    from pathlib import Path

    from ncclpm.render import render
    from ncclpm.util.outfile import write_text

    name = report_name(row["job"])
    write_text(Path(reports) / name, render(d, "html"), force=True)
    row["report"] = name


def triage_job(
    path: str,
    name: str | None = None,
    select: tuple[str, ...] = (),
    ignore: tuple[str, ...] = (),
    patterns: tuple[str, ...] = (),
    reports: str | None = None,
) -> dict[str, Any]:
    """Diagnose the job at `path`; the row is keyed `name` (default: the path). `select`/`ignore`: rule ids, as
    `diagnose` takes them; `patterns`: extra catalog folders; `reports`: a folder to write the job's own HTML
    report in. Never raises."""
    start = time.perf_counter()
    row = empty_row(name or path)
    try:
        from pathlib import Path

        from ncclpm.api import catalog
        from ncclpm.engine import analyse, diagnose_facts
        from ncclpm.ingest.build import build_tables
        from ncclpm.sources.discover import collect

        job = collect([path])
        tables = build_tables(job, catalog(tuple(Path(p) for p in patterns)))
        facts = analyse(tables)
        d = diagnose_facts(facts, select, ignore)
        _fill(row, tables, d, job, facts.identity)
        if reports is not None and d.n_sources:
            _write_report(d, reports, row)
    except Exception as exc:  # one bad job is a row with an error, never the end of the run
        message = f"{type(exc).__name__}: {exc}"
        row.update(category=str(Category.UNKNOWN), error=message[:MAX_TEXT], signature=signature(message))
    row["seconds"] = round(time.perf_counter() - start, 3)
    return row
