"""Warnings folded for people (the terminal's stderr, the reports' notes; the JSON keeps every one): the same
complaint about many files is one line that names them (`12 empty files in torchrun_logs/1f2e.../attempt_0:
0/stderr.log, 1/stderr.log, ... (+9 more)`), not twelve lines.

A warning about a file reads `NAME: REASON` (sources/discover.py, ingest/...). Warnings whose REASON is the same
word for word fold together when there are at least `FOLD_AT` of them; anything else is kept as it is, in order."""

from __future__ import annotations

import posixpath

FOLD_AT = 3
SHOWN = 3


def _split(warning: str) -> tuple[str, str] | None:
    """(file name, reason) of `NAME: REASON`, or None (a warning about no file in particular)."""
    name, sep, reason = warning.rpartition(": ")
    if not sep or not name or not reason or " " in name.strip() or name.endswith(":"):
        return None
    return name, reason


def _names(names: list[str]) -> str:
    """`in DIR: a, b, c (+n more)` for names under one folder, else `: a, b, c (+n more)`."""
    folder = posixpath.commonpath(names) if all("/" in n for n in names) else ""
    if folder in names:  # (one name is the folder itself: no common folder to factor out)
        folder = ""
    shown = [posixpath.relpath(n, folder) if folder else n for n in names[:SHOWN]]
    more = f" (+{len(names) - SHOWN} more)" if len(names) > SHOWN else ""
    return (f" in {folder}: " if folder else ": ") + ", ".join(shown) + more


def _folded(reason: str, names: list[str]) -> str:
    """`12 empty files in DIR: a, b, c (+9 more)`; `not valid UTF-8; ... (4 files: a, b, c (+1 more))`."""
    if reason.endswith(" file") and len(reason.split()) <= 3:
        return f"{len(names)} {reason}s{_names(names)}"
    return f"{reason} ({len(names)} files{_names(names)})"


def fold_warnings(warnings: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """`warnings` with the same reason about `FOLD_AT` or more files folded into one line, at the first one's place."""
    by_reason: dict[str, list[str]] = {}
    for w in warnings:
        if (parts := _split(w)) is not None:
            by_reason.setdefault(parts[1], []).append(parts[0])
    out: list[str] = []
    done: set[str] = set()
    for w in dict.fromkeys(warnings):
        parts = _split(w)
        if parts is None or len(by_reason[parts[1]]) < FOLD_AT:
            out.append(w)
        elif parts[1] not in done:
            done.add(parts[1])
            names = list(dict.fromkeys(by_reason[parts[1]]))
            out.append(_folded(parts[1], names))
    return tuple(out)
