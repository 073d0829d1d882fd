"""Wording every report format shares (Markdown, text, HTML, Slack): the verdict's facts line, the story's times,
the culprit and its hosts. Plain text out: each renderer escapes it for its own format."""

from __future__ import annotations

from datetime import datetime

from ncclpm.model import Diagnosis, rank_span
from ncclpm.util.durations import duration_text, human_duration


def culprit_text(d: Diagnosis) -> str:
    """`rank 0 on gpu-node-17`, `ranks 8–11 on gpu-a03`, `gpu-c02` (a node with no rank known), or ``."""
    hosts = ", ".join(d.culprit_hosts)
    if d.culprit_ranks:
        return rank_span(d.culprit_ranks) + (f" on {hosts}" if hosts else "")
    return f"host {hosts}" if hosts else ""


def collective_text(d: Diagnosis) -> str:
    fc = d.failing_collective
    if not fc:
        return ""
    out = (fc.get("op") or "a collective") + (f" #{fc['seq']}" if fc.get("seq") is not None else "")
    if fc.get("timeout_ms"):
        seconds = int(fc["timeout_ms"]) / 1000 if str(fc["timeout_ms"]).isdigit() else None
        out += f" (timeout {human_duration(seconds) if seconds is not None else duration_text(fc['timeout_ms'])})"
    return out


def world_text(d: Diagnosis) -> str:
    if not d.world_size:
        return ""
    if d.world_size_declared:
        return f"world size {d.world_size}"
    return f"at least {d.world_size} rank{'s' if d.world_size != 1 else ''} seen"


def facts_line(d: Diagnosis) -> list[str]:
    """The verdict's one-line facts: confidence, culprit, collective, world, versions, files."""
    parts = [f"Confidence {d.confidence:.2f} ({d.band})"]
    culprit = culprit_text(d)
    parts += [f"culprit {culprit}"] if culprit else []
    parts += [f"stopped in {c}"] if (c := collective_text(d)) else []
    parts += [w] if (w := world_text(d)) else []
    parts += [", ".join(f"{k} {v}" for k, v in sorted(d.versions.items()))] if d.versions else []
    files = f"{d.n_sources} file{'s' if d.n_sources != 1 else ''} read"
    if d.code_files:
        n = len(d.code_files)
        files += f" (+{n} code file{'s' if n != 1 else ''} read for settings only)"
    return [*parts, files]


def story_date(d: Diagnosis) -> str:
    """The date of the story when it has one (a log without a year has none)."""
    days = {m.ts.date() for m in d.story if isinstance(m.ts, datetime) and m.ts.year > 1970}
    return days.pop().isoformat() if len(days) == 1 else ""


def story_times(d: Diagnosis) -> list[str]:
    """Each moment's time as shown: `16:42:57`, with milliseconds when two moments share a second, the date when
    the story spans days, `≈` for a derived time, `` when the line has none."""
    stamps = [m.ts for m in d.story if isinstance(m.ts, datetime)]
    seconds = [s.replace(microsecond=0) for s in stamps]
    fine = any(seconds.count(s) > 1 for s in seconds) and any(s.microsecond for s in stamps)
    days = len({s.date() for s in stamps}) > 1
    out = []
    for m in d.story:
        if not isinstance(m.ts, datetime):
            out.append("")
            continue
        text = m.ts.strftime("%H:%M:%S.%f")[:12] if fine and m.ts.microsecond else m.ts.strftime("%H:%M:%S")
        text = (m.ts.strftime("%m-%d ") if days else "") + text
        out.append(("≈" if m.approx else "") + text)
    return out
