"""Re-join log lines a terminal or a copy cut at a fixed width, in files as well as pastes.

A hard wrap cuts a long line at column W wherever it falls - often mid-token: `...NumelOut=524290048, Timeo` +
`ut(ms)=600000) ran for 600055 milliseconds`. Catalog patterns need the whole line, so a kept (anchored) line
is glued to the physical line after it when all of these hold:
- it is at least `MIN_WIDTH` long and ends inside a token (a letter, digit, `_`, a bracket, `=`, `,` or `.`),
  or one space after one;
- the next line does not start like a log line (an envelope's head: `[rank3]:`, `[E1218 `, `host:pid:tid
  [dev]`, ISO time...; or a traceback line) and starts inside a token too, or with a bracket or quote, after at
  most one space (not indented);
- the next line is shorter than W (a tail, not another full line);
- W is a width the file cuts at: at least two such cut lines share it, or it is a terminal's usual width.
Only the anchored line and the one after it are looked at: the rest of the file is never materialised.

Small texts (what users copy out of a terminal) are re-joined whole before the prefilter (`unwrap_lines`), so a
line cut into several pieces - or cut inside an anchor - is read too: the wrap width is the length most lines
end at when the next line continues them, and every piece of exactly that width is glued to the next.
"""

from __future__ import annotations

import functools
import itertools
import re
from collections import Counter

import polars as pl

from ncclpm.ingest.envelopes import to_python

MIN_WIDTH = 60
TERMINAL_WIDTHS = (80, 94, 100, 120, 132, 160, 200)
# A cut falls inside a token or next to one space (`...[Rank 1] Watchdog` + ` caught collective...`, `peer
# 10.0.0.2<47838` + `> with status=12`, `...cpp:828] ` + `[Rank 1] Watchdog...`): one space at the cut is allowed
# on either side, the piece may end with a bracket, and the tail may open with a bracket or quote (a line opening
# like an envelope, `[rank3]:`, is never a tail); an indented line (two spaces, a tab) never continues another.
_ENDS_IN_TOKEN = r"[\w()\[\]=,.:/-] ?$"
_STARTS_IN_TOKEN = r"^ ?[\w()\[\]<>=,.:/'\"-]"
# A line that starts with a timestamp (syslog `Nov 14 03:12:44 `, dmesg `[2419876.551211] `, ISO) begins a record:
# host logs have no envelope, and two kernel lines of one length would otherwise read as a line and its tail.
# A bare `kernel: ` head (journalctl -k -o cat, a dmesg copy whose time was cut off) starts a record too.
_STAMP = r"(?:[A-Z][a-z]{2} [ \d]\d \d{2}:\d{2}:\d{2} |\[\s*\d+\.\d+\] |\d{4}-\d{2}-\d{2}[T ]\d{2}:|kernel: )"
# c10's `Exception raised from <function> at <file>:<line>` opens the C++ stack torch prints under an error message
_RECORD_START = rf"^(?:Traceback \(most|\s+File \"|\s*$|Exception raised from |{_STAMP})"
_RECORD_START_PY = re.compile(rf"Traceback \(most|\s+File \"|Exception raised from |{_STAMP}")
# A line that opens with the same word as the line above is the next record of a fixed-format log (`Epoch: [3][5/20]`
# under `Epoch: [3][0/20]`, every line as long as the last), not the tail of a cut one.
_FIRST_WORD = r"^(\S{4,})"
_FIRST_WORD_PY = re.compile(_FIRST_WORD)
_ENDS_IN_TOKEN_PY = re.compile(_ENDS_IN_TOKEN)
_STARTS_IN_TOKEN_PY = re.compile(_STARTS_IN_TOKEN)
_RULE_PY = re.compile(r"[=*#~\s-]+")  # a rule line of a summary block (`=====`) is complete as it is
# For texts without log envelopes (stack dumps, code): only their own layout says where a line starts.
NO_ENVELOPE = re.compile(r"(?!)")


def rejoin_wrapped(lf: pl.LazyFrame, hit: pl.Expr, line_start: str) -> pl.LazyFrame:
    """The lines where `hit` holds (plus nothing else), each glued to its wrapped tail when it has one. `lf` holds
    (source, line, raw), the lines of each source in order. `line_start` is the envelopes' head regex (polars
    dialect): a line starting with one is never a tail; without it nothing is re-joined."""
    if not line_start:
        return lf.filter(hit)
    kept = lf.with_columns(hit.alias("_hit")).filter(pl.col("_hit") | pl.col("_hit").shift(1).fill_null(False))
    raw, nxt = pl.col("raw"), pl.col("raw").shift(-1)
    width = raw.str.len_chars()
    tail = (
        pl.col("_hit")
        & (pl.col("source").shift(-1) == pl.col("source"))
        & (pl.col("line").shift(-1) == pl.col("line") + 1)
        & (width >= MIN_WIDTH)
        & raw.str.contains(_ENDS_IN_TOKEN)
        & nxt.str.contains(_STARTS_IN_TOKEN).fill_null(False)
        & ~nxt.str.contains(f"^(?:{line_start})" if line_start else "^$").fill_null(True)
        & ~nxt.str.contains(_RECORD_START).fill_null(True)
        & (nxt.str.len_chars() < width)
        & (nxt.str.extract(_FIRST_WORD) != raw.str.extract(_FIRST_WORD)).fill_null(True)
    )
    shared = pl.col("_cut").count().over("source", "_cut") >= 2  # materialised keys: an expression key miscounts
    glue = pl.col("_cut").is_not_null() & (shared | pl.col("_cut").is_in(TERMINAL_WIDTHS))
    return (
        kept.with_columns(pl.when(tail).then(width).alias("_cut"))
        .with_columns(glue.alias("_glue"))
        .with_columns(
            pl.when(pl.col("_glue")).then(pl.concat_str(raw, nxt)).otherwise(raw).alias("raw"),
            pl.col("_glue").shift(1).fill_null(False).alias("_tail"),
        )
        .filter(pl.col("_hit") & ~pl.col("_tail"))
        .drop("_hit", "_cut", "_glue", "_tail")
    )


def hard_wrap_width(lines: list[str], start: re.Pattern[str]) -> int | None:
    """The width a text was hard-wrapped at, if it was: the length most lines end at when the next line
    continues them (does not start like a log line, is not blank, does not start with a space)."""
    cuts = Counter(len(a) for a, b in itertools.pairwise(lines) if len(a) >= MIN_WIDTH and _continues(b, start))
    if not cuts:
        return None
    width, n = cuts.most_common(1)[0]
    return width if n >= 2 or width in TERMINAL_WIDTHS else None


def unwrap_lines(lines: list[str], start: re.Pattern[str]) -> list[tuple[int, str]]:
    """(first physical line number, re-joined text) for a hard-wrapped text; every line as is otherwise."""
    width = hard_wrap_width(lines, start)
    out: list[tuple[int, str]] = []
    piece = ""  # the previous physical line
    for number, line in enumerate(lines, start=1):
        if out and width is not None and len(piece) == width and joins(piece, line, start):
            out[-1] = (out[-1][0], out[-1][1] + line)
        else:
            out.append((number, line))
        piece = line
    return out


def joins(line: str, tail: str, start: re.Pattern[str]) -> bool:
    """`tail` may be glued to `line` when a text is re-joined whole: `line` looks cut at its end and `tail` looks
    like its continuation (in a chain of pieces cut at one width, the next piece may be as long as the cut one)."""
    return may_join(line, tail) and not start.match(tail)


def may_join(line: str, tail: str) -> bool:
    """`joins` but for the line start (`start`): what is checked first, before the envelopes' head regex is compiled
    in Python (~6-10 ms) for the pairs that pass."""
    return (
        len(line) >= MIN_WIDTH
        and len(tail) <= len(line)
        and _could_continue(tail)
        and bool(_ENDS_IN_TOKEN_PY.search(line) and _STARTS_IN_TOKEN_PY.match(tail))
        and not _RULE_PY.fullmatch(line)
        and not _repeats_head(line, tail)
        and not _same_first_word(line, tail)
    )


_DIGITS = re.compile(r"\d+")
HEAD = 12  # characters of two lines' starts compared (numbers aside) to tell two records from a line and its tail


def _repeats_head(line: str, tail: str) -> bool:
    """`tail` starts the way `line` does, numbers aside (`kernel: NVRM: Xid ...` twice, ` 3  /opt/nccl/lib/...` then
    ` 4  /opt/nccl/lib/...`): the next record of the same kind, whatever their lengths - a wrapped line's
    continuation does not begin with the line's own head."""
    a, b = _DIGITS.sub("#", line[:HEAD]), _DIGITS.sub("#", tail[:HEAD])
    return a == b and len(a.strip()) >= HEAD // 2


def _same_first_word(line: str, tail: str) -> bool:
    a, b = _FIRST_WORD_PY.match(line), _FIRST_WORD_PY.match(tail)
    return a is not None and b is not None and a.group(1) == b.group(1)


def _continues(line: str, start: re.Pattern[str]) -> bool:
    return _could_continue(line) and not start.match(line)


def _could_continue(line: str) -> bool:
    """`_continues` but for the line start."""
    indented = line[:1] == "\t" or line[:2].isspace()
    return bool(line) and not indented and not _RECORD_START_PY.match(line)


@functools.lru_cache(maxsize=8)
def python_start(line_start: str) -> re.Pattern[str]:
    """The envelopes' head regex (polars dialect) as a compiled Python pattern anchored at the line start."""
    return re.compile(f"^(?:{to_python(line_start)})")
