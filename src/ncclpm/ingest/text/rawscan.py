"""Find the lines worth parsing in a text's raw bytes, without splitting the text into lines first.

Every line that holds an anchor is found in one pass over the whole text - by the C module's many-literal matcher
(`_textcut.c`, a shift-or filter: ~2x the rate of the regex) when it is built, else by one regex (the anchors as
one alternation, run by polars' Rust engine; `hit_line_regex`, the reference); only those lines - and, for
re-joining wrapped lines, the lines around them - are cut out, with their exact line numbers (newlines counted
between hits; in C without the GIL, when built). Splitting every line into a frame first cost as much as the
search itself, for the ~1 % of lines that are kept.

Two ways of reading lines are reproduced exactly, so the kept lines do not depend on the reader:
- polars' (`read_lines`/`scan_lines`): a trailing `\\r` is dropped and a text ending in a newline has no empty
  last line;
- Python's (`str.split("\\n")`), used for small texts re-joined whole (`unwrap.unwrap_lines`): `\\r` kept, and a
  final newline leaves an empty last line.
"""

from __future__ import annotations

import os
from array import array
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import polars as pl

try:  # built by hatch_build.py when a C compiler is there
    from ncclpm.ingest.text import _textcut  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - depends on the install
    _textcut = None
_C_API = ("Block", "Matcher", "scan_cut", "utf8", "trim", "newlines")
if _textcut is not None and not all(hasattr(_textcut, name) for name in _C_API):
    _textcut = None  # a module built from older sources (an editable checkout not reinstalled): the Python path

Bytes = bytes | memoryview  # a text's bytes: Python's, or a view of a block
Block = Any  # `_textcut.Block`: a group's texts in one block of memory (bytes-like, with `__arrow_c_array__`)

_ESCAPED = {c: "\\" + c for c in "\\.+*?()|[]{}^$"}  # regex metacharacters, one by one (~10x a re.sub)


@lru_cache(maxsize=8)
def anchor_regex(anchors: tuple[str, ...]) -> str:
    """The anchors as one alternation of escaped literals. Rust's regex engine runs it as a SIMD literal search:
    ~30 % less CPU than `contains_any` (Aho-Corasick) over the same 176 anchors, same lines kept."""
    return _alternation(anchors)


def _alternation(anchors: tuple[str, ...], between: str = "") -> str:
    """The anchors, longest first, as escaped literals with `between` between any two characters of each."""
    return "|".join(between.join(_ESCAPED.get(c, c) for c in a) for a in sorted(set(anchors), key=len, reverse=True))


@lru_cache(maxsize=8)
def hit_line_regex(anchors: tuple[str, ...], across_newlines: bool = False) -> str:
    """A whole line holding an anchor. `across_newlines`: an anchor may also be cut by newlines anywhere (a text
    hard-wrapped inside an anchor); such a match spans lines, and the caller then reads the text the slow way."""
    body = _alternation(anchors, between="\n?") if across_newlines else anchor_regex(anchors)
    return f"[^\\n]*(?:{body})[^\\n]*"


def utf8_text(data: bytes) -> pl.Series | None:
    """`data` as a one-row string Series; None when it is not valid UTF-8 (validated in Rust, no Python str)."""
    try:
        return pl.Series([data], dtype=pl.Binary).cast(pl.String)
    except pl.exceptions.ComputeError:  # "invalid utf8"
        return None


@dataclass
class Rows:
    """Lines cut out of texts: which text (index in its group), 1-based line number, text, holds an anchor."""

    text: list[int] = field(default_factory=list)
    line: list[int] = field(default_factory=list)
    raw: list[str] = field(default_factory=list)
    hit: list[bool] = field(default_factory=list)

    def frame(self) -> pl.DataFrame:
        return pl.DataFrame(
            {"text": self.text, "line": self.line, "raw": self.raw, "hit": self.hit},
            schema={"text": pl.UInt32(), "line": pl.Int64(), "raw": pl.String(), "hit": pl.Boolean()},
        )


def _polars_line(raw: bytes) -> str:
    """A line as polars reads it: one trailing carriage return dropped."""
    return (raw[:-1] if raw.endswith(b"\r") else raw).decode("utf-8")


def cut_rows(
    rows: Rows,
    index: int,
    data: bytes,
    lines: list[str],
    first_line: int,
    *,
    previous: bool,
    following: bool,
    python_lines: bool,
) -> None:
    """Append to `rows` the hit lines `lines` (the regex matches, in order) of the text `data`, each once, in line
    order, with their exact line numbers; also the line before (`previous`) and the line after (`following`) each
    hit: what re-joining wrapped lines looks at. A hit line's first occurrence after the previous hit is that line
    itself: an earlier occurrence would be inside a line holding an anchor too, i.e. an earlier hit. Lines are read
    as Python splits them (`python_lines`: `\\r` kept, a final newline leaves an empty last line) or as polars does."""
    text, number_col, raw_col, hit_col = rows.text, rows.line, rows.raw, rows.hit
    decode = (lambda b: b.decode("utf-8")) if python_lines else _polars_line
    find, count, rfind, size = data.find, data.count, data.rfind, len(data)
    pos, number, last = 0, first_line, first_line - 1  # last: the last line number appended for this text
    n0 = len(number_col)
    for line in lines:
        raw = line.encode("utf-8")
        at = find(raw, pos)
        number += count(b"\n", pos, at)
        end = at + len(raw)
        if previous and at > 0 and number - 1 > last:  # the line before
            number_col.append(number - 1)
            raw_col.append(decode(data[rfind(b"\n", 0, at - 1) + 1 : at - 1]))
            hit_col.append(False)
        if number == last:  # already there as the line after the previous hit
            hit_col[-1] = True
        else:
            number_col.append(number)
            raw_col.append(line if python_lines else _polars_line(raw))
            hit_col.append(True)
        last = number
        if following and end < size and (python_lines or end + 1 < size):  # the line after
            nxt = find(b"\n", end + 1)
            number_col.append(number + 1)
            raw_col.append(decode(data[end + 1 : size if nxt < 0 else nxt]))
            hit_col.append(False)
            last = number + 1
        pos = end
    text.extend([index] * (len(number_col) - n0))


def native() -> bool:
    """Whether the hit lines are cut out by the C module (``NCCLPM_TEXT_PYTHON=1`` in the environment: never)."""
    return _textcut is not None and not os.environ.get("NCCLPM_TEXT_PYTHON")


def new_block(capacity: int) -> Block | None:
    """A block of memory for a group's texts (`_textcut.Block`: read into reused memory, imported by polars without
    a copy), or None without the C module: the texts are then Python bytes."""
    return _textcut.Block(capacity) if native() else None


def trim_blocks() -> None:
    """Free the blocks kept for reuse, and the blocks in use as they are freed (until one is made again): the read
    is over, their memory is better given back before the tables."""
    if _textcut is not None:
        _textcut.trim()


def matcher(anchors: tuple[str, ...]) -> Any:
    """The anchors compiled for `scan_cut` (`_textcut.Matcher`), or None: no C module, `NCCLPM_TEXT_PYTHON=1`, or
    an anchor the matcher does not take (empty, or holding a newline); the regex then finds the hit lines."""
    return _compiled(anchors) if native() else None


@lru_cache(maxsize=8)
def _compiled(anchors: tuple[str, ...]) -> Any:
    if not anchors or any(not a or "\n" in a for a in anchors):
        return None
    return _textcut.Matcher(list(anchors))


def scan_cut(
    compiled: Any, data: list[Bytes], first_lines: list[int], whole: list[bool], *, following: bool
) -> tuple[pl.DataFrame, set[int]]:
    """`cut_group`'s rows and slow texts, the hit lines found by the C matcher (`matcher`) instead of the regex, in
    one pass without the GIL: the same lines as `hit_line_regex` finds (the tests compare both)."""
    text, line, hit, raw, slow = _textcut.scan_cut(compiled, data, first_lines, whole, following)
    return _frame(text, line, hit, raw), set(slow)


def newlines(data: Bytes | bytearray, start: int, end: int) -> int:
    """How many newlines data[start:end] holds: in C (SSE2, without the GIL; ~6x `bytes.count`) when built."""
    if _textcut is not None:
        return int(_textcut.newlines(data, start, end))
    return (data if isinstance(data, bytes | bytearray) else bytes(data)).count(b"\n", start, end)


FEW_LINES = (
    4096  # up to this many lines, per-line Python beats a polars query's fixed cost (`only_words`, `_pattern_rows`)
)


def holds_any(raw: pl.Series, anchors: tuple[str, ...]) -> pl.Series:
    """Whether each string of `raw` holds one of `anchors` (`str.contains_any`): by the C matcher, compiled once
    per anchor set, when it is built (polars builds its Aho-Corasick automaton at every call: ~2 ms for the ~900
    anchors of the lines read, per group of lines). For a few strings: each is a text of its own."""
    compiled = matcher(anchors)
    if compiled is None or raw.null_count() or raw.is_empty():
        return raw.str.contains_any(list(anchors))
    texts = [s.encode("utf-8") for s in raw.to_list()]
    text, _, hit, _, _ = _textcut.scan_cut(compiled, texts, [1] * len(texts), [False] * len(texts), False)
    found, hits = array("I"), array("B")
    found.frombytes(text)
    hits.frombytes(hit)
    holding = {t for t, h in zip(found, hits, strict=True) if h}
    return pl.Series(raw.name, [i in holding for i in range(len(texts))], dtype=pl.Boolean)


def only_words(raw: pl.Series, words: tuple[str, ...], read: tuple[str, ...]) -> pl.Series:
    """Whether each line of `raw` holds one of `words` (the stack's) and none of `read` (the anchors of the lines
    read): the few lines holding a word are looked at for the others (`holds_any`). The words too are looked for by
    the C matcher in a job of few lines (polars built its automaton of the ~80 words at each call: ~1 ms, twice a
    job); `str.contains_any` reads the many lines of a large one faster than their Python strings are made."""
    holds_word = holds_any(raw, words) if raw.len() <= FEW_LINES else raw.str.contains_any(list(words))
    at = holds_word.arg_true()
    if at.is_empty():
        return holds_word
    return holds_word.scatter(at, ~holds_any(raw.gather(at), read))


def all_utf8(data: list[Bytes]) -> bool:
    """Whether every text is valid UTF-8, checked in C without a copy (`_textcut.utf8`; the C module is there
    whenever `matcher` gives a matcher)."""
    return bool(_textcut.utf8(data))


def cut_group(
    data: list[Bytes], hits: list[list[str]], first_lines: list[int], whole: list[bool], *, following: bool
) -> tuple[pl.DataFrame, set[int]]:
    """The rows (`Rows.frame()`) cut out of a group of texts (bytes-like), and the texts left to the slow path: a
    text read whole (`whole`: Python's lines, the line before each hit too) where a hit line holds a newline (an
    anchor cut by one). `hits`: each text's hit lines, the regex matches in order (`cut_rows`, text by text)."""
    rows, slow_set = Rows(), set()
    for i, (d, lines, first, w) in enumerate(zip(data, hits, first_lines, whole, strict=True)):
        if w and any("\n" in line for line in lines):
            slow_set.add(i)
            continue
        cut_rows(rows, i, bytes(d), lines, first, previous=w, following=following, python_lines=w)
    return rows.frame(), slow_set


def _frame(text: bytes, line: bytes, hit: bytes, raw: bytes) -> pl.DataFrame:
    """`Rows.frame()` from the C module's arrays and its rows' texts joined by newlines (a row never holds one)."""
    texts, lines, hits = array("I"), array("q"), array("B")
    texts.frombytes(text)
    lines.frombytes(line)
    hits.frombytes(hit)
    raws = (
        pl.Series([raw], dtype=pl.Binary).cast(pl.String).str.split("\n").explode()
        if hits
        else pl.Series([], dtype=pl.String)
    )
    return pl.DataFrame(
        [
            pl.Series("text", texts, dtype=pl.UInt32),
            pl.Series("line", lines, dtype=pl.Int64),
            raws.alias("raw"),
            pl.Series("hit", hits, dtype=pl.UInt8).cast(pl.Boolean),
        ]
    )
