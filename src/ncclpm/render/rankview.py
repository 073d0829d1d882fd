"""Per-rank rows grouped for display: culprits and unusual ranks one by one, identical healthy ranks folded
into one row ("ranks 4-1023: waiting in ALLREDUCE #12"), so a 1024-rank job stays readable."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ncclpm.model import Diagnosis, rank_runs, rank_span, said

MAX_SINGLE_ROWS = 24
MAX_LABEL = 48


@dataclass(frozen=True)
class RankGroup:
    label: str
    ranks: tuple[int, ...]
    row: dict[str, Any]


def _span(ranks: list[int]) -> str:
    """[0, 1, 2, 5, 7, 8] -> "0-2, 5, 7-8"."""
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in rank_runs(ranks))


def _signature(row: dict[str, Any]) -> tuple:
    return (row["role"], row["timeout_op"], row["timeout_seq"], row["exit_code"], row["signal"], row["host"] is None)


def rank_groups(d: Diagnosis) -> list[RankGroup]:
    rows = list(d.ranks)
    if len(rows) <= MAX_SINGLE_ROWS:
        return [RankGroup(str(r["rank"]), (r["rank"],), r) for r in rows]
    culprits = [r for r in rows if r["role"] == "culprit"]
    singles = culprits if len(culprits) <= MAX_SINGLE_ROWS else []  # thousands of culprits fold like the rest
    rest: dict[tuple, list[dict[str, Any]]] = {}
    for r in rows:
        if not (r["role"] == "culprit" and singles):
            rest.setdefault(_signature(r), []).append(r)
    groups = [RankGroup(str(r["rank"]), (r["rank"],), r) for r in singles]
    for members in rest.values():
        ranks = sorted(m["rank"] for m in members)
        span = _span(ranks)
        span = span if len(span) <= MAX_LABEL else span[:MAX_LABEL].rsplit(",", 1)[0] + ", …"
        label = str(ranks[0]) if len(ranks) == 1 else f"{span} ({len(ranks)} ranks)"
        hosts = {m["host"] for m in members}
        row = members[0] if len(hosts) == 1 else {**members[0], "host": f"{len(hosts)} hosts"}
        groups.append(RankGroup(label, tuple(ranks), row))
    return sorted(groups, key=lambda g: g.ranks[0])


# ---------------------------------------------------------------------------------------------------- the table

NOTE_CHARS = 220
_DIGITS = re.compile(r"\d+")


@dataclass(frozen=True)
class RankTable:
    """The per-rank view as plain text cells (each renderer escapes them for its format): only the columns some
    row fills, short cells only; the long texts (first error, last activity) go below as `notes`, one per
    distinct message (ranks that said the same thing up to numbers share one)."""

    head: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    roles: tuple[str, ...]
    notes: tuple[tuple[str, str, str], ...]  # (ranks, what, text)


def clock(ts: Any) -> str:
    if not isinstance(ts, datetime):
        return ""
    return ts.strftime("%H:%M:%S")


def _exit(r: dict[str, Any]) -> str:
    if r.get("signal"):
        return f"{r['signal']} ({r['exit_code']})" if r.get("exit_code") is not None else str(r["signal"])
    return "" if r.get("exit_code") is None else f"code {r['exit_code']}"


def _waited(r: dict[str, Any]) -> str:
    if not r.get("timed_out"):
        return ""
    text = (r.get("timeout_op") or "a collective") + (
        f" #{r['timeout_seq']}" if r.get("timeout_seq") is not None else ""
    )
    return text + (f", NumelIn={r['timeout_numel_in']}" if r.get("timeout_numel_in") is not None else "")


def _fr(r: dict[str, Any]) -> str:
    if r.get("fr_last_op"):
        seq = f" #{r['fr_last_seq']}" if r.get("fr_last_seq") is not None else ""
        return f"{r['fr_last_op']}{seq} ({r.get('fr_last_state') or '?'})"
    return "no dump" if r.get("fr_dump") is False else ""


def _cells(g: RankGroup) -> dict[str, str]:
    r, single = g.row, len(g.ranks) == 1
    return {
        "rank": g.label,
        "host": r.get("host") or "",
        "pid": str(r["pid"]) if single and r.get("pid") is not None else "",
        "GPU": f"cuda:{r['cuda_dev']}" if single and r.get("cuda_dev") is not None else "",
        "NCCL": r.get("nccl_version") or "",
        "role": r.get("role") or "",
        "waited in": _waited(r),
        "enq./compl.": f"{r['last_enqueued']}/{r['last_completed']}" if r.get("last_enqueued") is not None else "",
        "flight recorder": _fr(r),
        "first error": clock(r.get("first_error_ts")),
        "ended": _exit(r),
        "last activity": clock(r.get("last_activity_ts")),
    }


def rank_table(d: Diagnosis) -> RankTable | None:
    groups = rank_groups(d)
    if not groups:
        return None
    cells = [_cells(g) for g in groups]
    versions = {c["NCCL"] for c in cells if c["NCCL"]}
    head = [k for k in cells[0] if any(c[k] for c in cells) and (k != "NCCL" or len(versions) > 1)]
    notes: dict[tuple[str, str, str], list[tuple[RankGroup, str]]] = {}
    for g in groups:
        for what, key in (("first error", "first_error"), ("last activity", "last_activity")):
            text = said(g.row.get(key), d.line_prefix, NOTE_CHARS) if g.row.get(key) else ""
            if text:  # the same message up to numbers folds - a culprit's never with the others' (its number matters)
                notes.setdefault((what, _DIGITS.sub("#", text), g.row.get("role") or ""), []).append((g, text))
    folded = []
    for (what, _, _), members in notes.items():
        ranks = sorted(r for g, _ in members for r in g.ranks)
        folded.append((rank_span(ranks), what, members[0][1]))
    return RankTable(
        head=tuple(head),
        rows=tuple(tuple(c[k] for k in head) for c in cells),
        roles=tuple(g.row.get("role") or "" for g in groups),
        notes=tuple(folded),
    )
