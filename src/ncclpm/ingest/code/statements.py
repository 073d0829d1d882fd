"""Cut a code or configuration file into logical statements, the unit the code readings apply to.

Python: a statement spans its open brackets, triple-quoted strings and `\\` continuations; comments are
dropped, the text of triple-quoted strings is blanked (docs and help texts are prose, not settings) and a
statement that is only a string (a docstring) is dropped. Shell and Dockerfiles: `\\` continuations; comments
dropped except scheduler directives (`#SBATCH`, `#PBS`, `#BSUB`). YAML: a list item with its indented keys
(`- name: X` + `value: Y`). TOML and JSON: one line each. Notebooks: the code cells, each one Python, with
`!cmd` and `%env` lines as shell. Physical lines are stripped and joined with one space; each statement keeps
where every physical line starts, so a match anywhere in it maps back to its line.
"""

from __future__ import annotations

import json
import re
from bisect import bisect_right
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from ncclpm.util.structure import load_json

_SCHEDULER = re.compile(r"^#(?:SBATCH|PBS|BSUB)\s")
_STRING_ONLY = re.compile(r"""^[rbuRBU]{0,2}(?:"|')""")
_MAGIC = re.compile(r"^\s*(?:!|%env\b)")
MAX_MISSES = 16  # notebook source lines not found in the file before the search stops (each costs a pass)


@dataclass(frozen=True)
class Statement:
    """One logical statement of a code file (continuation lines joined), with its physical lines for quoting."""

    text: str
    lang: str  # python | shell | yaml | toml | json | dockerfile
    lines: tuple[int, ...]  # physical line numbers (1-based)
    starts: tuple[int, ...]  # offset in `text` where each physical line begins
    raw: tuple[str, ...]  # the physical lines, for quoting

    def line_at(self, offset: int) -> tuple[int, str]:
        """(line number, physical line) holding the character at `offset` of `text`."""
        i = max(0, bisect_right(self.starts, offset) - 1)
        return self.lines[i], self.raw[i]


def strip_comment(line: str) -> str:
    """A shell / YAML / TOML line without its `#` comment (a `#` that starts a word outside quotes). One pass:
    a line of many `#` and an odd quote stays linear."""
    quote = None
    escaped = False
    for i, ch in enumerate(line):
        if escaped:
            escaped = False
        elif ch == "\\" and quote != "'":
            escaped = True
        elif quote is not None:
            quote = None if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i]
    return line


class _Parts:
    """The physical lines of the statement being read. Past `limit` characters (joined as `_join` joins them) they
    are let go as they come and the statement is not built: the caller would drop it (a 4 MB `\\` continuation or
    bracket is a data literal, not a setting), and keeping its lines cost 80 bytes of memory per byte of file."""

    __slots__ = ("items", "limit", "over", "size")

    def __init__(self, limit: int | None) -> None:
        self.items: list[tuple[int, str, str]] = []
        self.limit, self.size, self.over = limit, 0, False

    def __bool__(self) -> bool:
        return self.over or bool(self.items)

    def add(self, no: int, kept: str, raw: str) -> None:
        if self.over:
            return
        self.size += bool(self.size) + len(kept.strip())  # (the length of the text `_join` would build)
        if self.limit is not None and self.size > self.limit:
            self.items, self.over = [], True
            return
        self.items.append((no, kept, raw))

    def take(self, lang: str) -> Statement | None:
        st = None if self.over else _join(self.items, lang)
        self.items, self.size, self.over = [], 0, False
        return st


def _join(parts: list[tuple[int, str, str]], lang: str) -> Statement | None:
    """parts: (line number, kept text, raw line). Joined once (a statement of 100,000 lines is linear)."""
    pieces: list[str] = []
    starts: list[int] = []
    size = 0
    for _, kept, _ in parts:
        piece = kept.strip()
        if size:
            pieces.append(" ")
            size += 1
        starts.append(size)
        pieces.append(piece)
        size += len(piece)
    text = "".join(pieces)
    if not text.strip():
        return None
    return Statement(text, lang, tuple(p[0] for p in parts), tuple(starts), tuple(p[2].strip() for p in parts))


def _scan_python(line: str, quote: str | None, depth: int) -> tuple[str, str | None, int]:
    """Kept text of one physical line (comments dropped, triple-quoted text blanked), with the triple-quote
    state and bracket depth after it."""
    out: list[str] = []
    i, single = 0, None
    while i < len(line):
        ch = line[i]
        if quote is not None:
            if line.startswith(quote, i):
                out.append(quote)
                i, quote = i + 3, None
                continue
            i += 1
            continue
        if single is not None:
            out.append(ch)
            if ch == "\\" and i + 1 < len(line):
                out.append(line[i + 1])
                i += 2
                continue
            single = None if ch == single else single
        elif line.startswith(('"""', "'''"), i):
            quote = line[i : i + 3]
            out.append(quote)
            i += 3
            continue
        elif ch in "\"'":
            single = ch
            out.append(ch)
        elif ch == "#":
            break
        else:
            depth += (ch in "([{") - (ch in ")]}")
            out.append(ch)
        i += 1
    return "".join(out), quote, max(0, depth)


def python_statements(
    lines: Iterable[tuple[int, str]], magics: bool = False, limit: int | None = None
) -> Iterator[Statement]:
    parts = _Parts(limit)
    quote: str | None = None
    depth = 0
    for no, raw in lines:
        if magics and not parts and _MAGIC.match(raw):
            if st := _join([(no, raw.strip().lstrip("!%"), raw)], "shell"):
                yield st
            continue
        kept, quote, depth = _scan_python(raw, quote, depth)
        continued = kept.rstrip().endswith("\\")
        if continued:
            kept = kept.rstrip()[:-1]
        parts.add(no, kept, raw)
        if quote is None and depth == 0 and not continued:
            st = parts.take("python")
            if st is not None and not _STRING_ONLY.match(st.text):
                yield st
    if parts and (st := parts.take("python")) is not None and not _STRING_ONLY.match(st.text):
        yield st


def shell_statements(
    lines: Iterable[tuple[int, str]], lang: str = "shell", limit: int | None = None
) -> Iterator[Statement]:
    parts = _Parts(limit)
    for no, raw in lines:
        s = raw.strip()
        kept = s if _SCHEDULER.match(s) else strip_comment(raw).rstrip()
        continued = kept.endswith("\\")
        parts.add(no, kept[:-1] if continued else kept, raw)
        if not continued and (st := parts.take(lang)):
            yield st
    if parts and (st := parts.take(lang)):
        yield st


def yaml_statements(lines: Iterable[tuple[int, str]], limit: int | None = None) -> Iterator[Statement]:
    parts = _Parts(limit)
    item_indent = -1
    for no, raw in lines:
        kept = strip_comment(raw).rstrip()
        if not kept.strip():
            continue
        indent = len(kept) - len(kept.lstrip())
        if parts and item_indent >= 0 and indent > item_indent and not kept.lstrip().startswith("- "):
            parts.add(no, kept, raw)  # a key of the list item above
            continue
        if parts and (st := parts.take("yaml")):
            yield st
        parts.add(no, kept, raw)
        item_indent = indent if kept.lstrip().startswith("- ") else -1
    if parts and (st := parts.take("yaml")):
        yield st


def line_statements(lines: Iterable[tuple[int, str]], lang: str, limit: int | None = None) -> Iterator[Statement]:
    for no, raw in lines:
        kept = strip_comment(raw) if lang == "toml" else raw
        parts = _Parts(limit)
        parts.add(no, kept, raw)
        if st := parts.take(lang):
            yield st


def _cell_lines(text: str) -> Iterator[list[tuple[int, str]]]:
    """Source lines of each code cell, numbered with the file line that holds them when it can be found (a
    pretty-printed notebook has one source line per file line), else with the line of the last one found. Found
    by a cursor that only moves forward through the file, so the search is linear: each source line is looked for
    after the previous one (as JSON writes it, escaped, with and without `\\uXXXX`), and after MAX_MISSES lines
    that are not found (a notebook written some other way) the rest keep the last line found."""
    doc = load_json(text)  # nesting bounded before parsing (`structure.TooDeep`, a ValueError)
    pos, line, misses = 0, 1, 0
    for cell in doc.get("cells", []) if isinstance(doc, dict) else []:
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        src = cell.get("source", "")
        src = "".join(s for s in src if isinstance(s, str)) if isinstance(src, list) else str(src)
        numbered = []
        for source_line in src.splitlines():
            if source_line.strip() and misses < MAX_MISSES:
                at = _find_json_string(text, source_line, pos)
                if at < 0:
                    misses += 1
                else:
                    line += text.count("\n", pos, at)
                    pos = at
            numbered.append((line, source_line))
        yield numbered


def _find_json_string(text: str, value: str, start: int) -> int:
    """Where `value`, written as a JSON string's content, first appears in `text` from `start` (-1: nowhere)."""
    found = [
        at
        for needle in {json.dumps(value)[1:-1], json.dumps(value, ensure_ascii=False)[1:-1]}
        if (at := text.find(needle, start)) >= 0
    ]
    return min(found, default=-1)


def statements(text: str, lang: str, limit: int | None = None) -> Iterator[Statement]:
    """Logical statements of a whole file in `lang` (one of sources.code.LANGUAGES); with `limit`, only those of
    at most `limit` characters (a longer one is never built)."""
    numbered = enumerate(text.splitlines(), 1)
    if lang == "python":
        yield from python_statements(numbered, limit=limit)
    elif lang in ("shell", "dockerfile"):
        yield from shell_statements(numbered, lang, limit)
    elif lang == "yaml":
        yield from yaml_statements(numbered, limit)
    elif lang == "notebook":
        for cell in _cell_lines(text):
            if cell and re.match(r"\s*%%(?:bash|sh)\b", cell[0][1]):
                yield from shell_statements(cell[1:], limit=limit)
            else:
                yield from python_statements(cell, magics=True, limit=limit)
    else:
        yield from line_statements(numbered, lang, limit)
