"""torchelastic error files (`error.json`, written by `@record` / TORCHELASTIC_ERROR_FILE) → events rows.

Shape: `{"message": {"message": "<Type>: <msg>", "extraInfo": {"py_callstack": "...", "timestamp": "<unix s>"}}}`
(older files put a plain string in "message"). The rank comes from the path (`attempt_0/<local_rank>/error.json`,
`error_rank3.json`). A malformed file is a warning, never an error.
"""

from __future__ import annotations

import contextlib
import re
from datetime import UTC, datetime

import polars as pl

from ncclpm.sources.discover import Source
from ncclpm.tables.kinds import K
from ncclpm.tables.schema import EVENT_FIELDS, EVENTS_SCHEMA, empty
from ncclpm.util.structure import load_json

_RANK_IN_PATH = re.compile(r"(?:attempt_\d+/(\d+)/[^/]+$|rank[_-]?(\d+)[^/\d]*$)", re.IGNORECASE)
_EXC = re.compile(r"^(?P<type>(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*)(?::\s?(?P<msg>.*))?$", re.DOTALL)


def _row(src: Source, doc: dict) -> dict | None:
    msg = doc.get("message")
    info: dict = {}
    if isinstance(msg, dict):
        info = msg.get("extraInfo")
        msg = msg.get("message")
    if not isinstance(info, dict):  # a hand-edited or foreign file: extraInfo may be anything
        info = {}
    if not isinstance(msg, str):
        return None
    m = _RANK_IN_PATH.search(src.name.replace("\\", "/"))
    digits = (m.group(1) or m.group(2)) if m else ""
    rank = int(digits) if digits and len(digits) <= 9 else None  # the rank column is Int32
    exc = _EXC.match(msg.strip().splitlines()[0] if msg.strip() else "")
    ts = None
    with contextlib.suppress(ValueError, OverflowError, OSError):
        ts = datetime.fromtimestamp(int(str(info.get("timestamp", "")).strip()), tz=UTC).replace(tzinfo=None)
    row = dict.fromkeys(EVENTS_SCHEMA.keys())
    row |= {
        "source": src.name,
        "line": 1,
        "rank": rank,
        "ts": ts,
        "level": "E",
        "event": "elastic.error_file",
        "kind": K.exception,
        "severity": "error",
        "text": msg.strip()[:2000],
        "error_type": exc["type"] if exc else None,
        "detail": (exc["msg"] or "").strip()[:2000] if exc else None,
    }
    return row


def read_error_files(sources: list[Source], warnings: list[str]) -> pl.DataFrame:
    rows = []
    for src in sources:
        try:
            doc = load_json(src.read_bytes().decode("utf-8", errors="replace"))  # nesting and integers bounded
            row = _row(src, doc) if isinstance(doc, dict) else None
        except (OSError, ValueError, RecursionError) as exc:
            warnings.append(f"{src.name}: unreadable torchelastic error file ({exc}) - skipped")
            continue
        if row is None:
            warnings.append(f"{src.name}: JSON without a torchelastic error message - skipped")
        else:
            rows.append(row)
    assert set(EVENT_FIELDS) <= set(EVENTS_SCHEMA)
    return pl.DataFrame(rows, schema=EVENTS_SCHEMA) if rows else empty(EVENTS_SCHEMA)
