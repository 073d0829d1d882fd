"""Bounds on structured input (JSON, TOML, notebooks, py-spy `--json`), checked before a parser builds anything.

A 1.2 KB `config.toml` of 600-deep arrays, or a 300-byte py-spy dump whose `pid` is 2**70, is not a config or a
dump: it is a corrupt or hostile file. Python's parsers recurse once per level (`tomllib` in Python, `json` in C
against the interpreter's recursion limit) and build integers of any size, so both are checked first:
- nesting: the brackets outside strings and comments are counted in one linear pass (string methods, no Python
  loop over characters); past `MAX_NESTING` levels the file is refused before it is parsed (`TooDeep`). Real
  configs nest a few levels, py-spy dumps six, notebooks four;
- integers: JSON integers are read through a hook that keeps a value past Int64 as its digits (`Huge`), counted, so
  the caller can name the file in a warning and use the rest (`load_json`). Callers then bound each field to
  what it can mean (`clamp.py`: a rank, a pid, a line number).
No import from the rest of ncclpm.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

MAX_NESTING = 64  # levels of brackets: configs nest < 10, py-spy --json 6, notebooks 4, flight-recorder JSON 8
INT64 = (-(2**63), 2**63 - 1)

_NOT_SPECIAL = bytes(b for b in range(256) if b not in b'[]{}"')
_AS_PARENS = bytes.maketrans(b"[{]}", b"(())")
_STRING = re.compile(rb'"[^"]*"?')


class TooDeep(ValueError):
    """The input nests more than `MAX_NESTING` levels: refused before it is parsed."""


def _brackets_outside_strings(text: str) -> str:
    """The brackets of `text` outside double-quoted strings, as `(` and `)`, found with string methods only (C
    speed): escaped backslashes and quotes removed (left to right, as a JSON lexer reads them), everything but
    brackets and quotes dropped, then the strings."""
    data = text.encode("utf-8", errors="replace")
    if b"\\" in data:
        data = data.replace(b"\\\\", b"").replace(b'\\"', b"")
    return _STRING.sub(b"", data.translate(_AS_PARENS, _NOT_SPECIAL)).decode("ascii")


def nesting_exceeds(brackets: str, limit: int = MAX_NESTING) -> bool:
    """True when `brackets` (only `(` and `)`) nest deeper than `limit`. An opening bracket never closed counts
    (a parser recurses into it before it fails). Linear: at most `limit` passes of `str.replace`, each removing
    the innermost pairs; a run of `limit + 1` openings ends it at once."""
    if brackets.count("(") <= limit:
        return False
    if "(" * (limit + 1) in brackets:
        return True
    passes = 0
    while passes < limit:
        reduced = brackets.replace("()", "")
        if reduced == brackets:
            break
        brackets, passes = reduced, passes + 1
    if "()" in brackets:
        return True  # a pair still nested below `limit` levels
    # left: unmatched brackets, each open one above groups at most `passes` deep
    return brackets.count("(") + passes > limit


def json_too_deep(text: str, limit: int = MAX_NESTING) -> bool:
    if text.count("[") + text.count("{") <= limit:
        return False  # (the common case: no pass over the strings needed)
    return nesting_exceeds(_brackets_outside_strings(text), limit)


def toml_too_deep(text: str, limit: int = MAX_NESTING) -> bool:
    """As `json_too_deep`; brackets in `'literal'` strings and comments are counted too (an over-count: such a
    file is only read line by line, as any TOML file is for settings)."""
    return json_too_deep(text, limit)


class Huge:
    """An integer of a JSON input that does not fit Int64, kept as its digits (never a number)."""

    __slots__ = ("digits",)

    def __init__(self, digits: str) -> None:
        self.digits = digits if len(digits) <= 24 else f"{digits[:12]}...({len(digits)} digits)"

    def __repr__(self) -> str:
        return self.digits


@dataclass
class Blanked:
    """Integers a JSON reader left blank because they do not fit Int64 (`load_json`)."""

    count: int = 0
    examples: list[str] = field(default_factory=list)

    def add(self, digits: str) -> None:
        self.count += 1
        if len(self.examples) < 2:
            self.examples.append(digits if len(digits) <= 24 else f"{digits[:12]}...({len(digits)} digits)")


def load_json(text: str, blanked: Blanked | None = None, limit: int = MAX_NESTING) -> Any:
    """`json.loads`, refusing input nested deeper than `limit` (`TooDeep`) before parsing; an integer past Int64
    is never built: it is a `Huge` (counted in `blanked`), which no reader takes for a number. Raises ValueError
    for what is not JSON."""
    if json_too_deep(text, limit):
        raise TooDeep(f"nested more than {limit} levels deep")
    out = Blanked() if blanked is None else blanked

    def integer(digits: str) -> int | Huge:
        if len(digits) <= 18:  # (always within Int64)
            return int(digits)
        value = int(digits) if len(digits) <= 20 else None
        if value is None or not INT64[0] <= value <= INT64[1]:
            out.add(digits)
            return Huge(digits)
        return value

    try:
        return json.loads(text, parse_int=integer)
    except RecursionError as exc:  # (not reached within `limit`; kept so a parser change cannot end the job)
        raise TooDeep("nested too deep") from exc


def within(value: Any, low: int, high: int) -> int | None:
    """`value` when it is an int (not a bool) in [low, high], else None."""
    if isinstance(value, int) and not isinstance(value, bool) and low <= value <= high:
        return value
    return None
