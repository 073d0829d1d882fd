"""Undo what chat apps and ticket systems do to a log pasted into them, so `ncclpm diagnose -` reads it like the
file it came from.

Input: the pasted text. Output: the same text with, in this order,
1. CRLF line ends made LF;
2. HTML entities decoded - only `&gt; &lt; &amp; &quot; &apos; &nbsp;` and numeric ones (`&#39;`, `&#x27;`), so a
   URL's `&copy=1` survives; a double-escaped paste (`&amp;gt;`) is decoded twice;
3. smart quotes, typographic dashes, ellipses, non-breaking and zero-width spaces made ASCII;
4. chat quote markers (`> `, `> > `) removed - only when most non-blank lines carry one (a quoted block);
5. Markdown code fences (```` ``` ````, ```` ```text ````, `~~~`) and Jira `{code}`/`{noformat}` lines removed,
   and a fence glued to a line (Slack's ```` ```[rank0]: ...``` ````) cut off; then the indentation
   common to every line (a Markdown indented code block) removed;
6. lines re-wrapped at a fixed width joined back (`_unwrap`, below).

Re-joining wrapped lines is the only step that can change a real log, so it is conservative. The wrap width W
is the longest line; a paste is taken as wrapped only when 60 <= W <= 160 (raw NCCL/torch logs nearly always
hold longer lines: every watchdog timeout line is ~250 characters) and at least two lines pass the test below
(one is enough for a hard wrap at a round width). A line is glued onto the previous one only when
- it does not start like a log line: the head of any envelope of the catalog (`[rank3]:`, `[default0]:`,
  `[E1218 ...`, glog `W1122 08:37:48.001 ...`, an ISO timestamp, `host:pid:tid [dev]`, `srun -l`'s `12: `, Ray's
  `(pid=1)`, MPI's `[1,0]<stdout>:`, and any envelope added with `--patterns`), `Traceback`, `  File "`, an
  exception name (`RuntimeError:`), a `====`/`----` rule, a blank line;
- and the previous line was cut by the wrapper: exactly W long (a hard wrap - glued as is, even when the
  continuation starts with a space), or - for a word wrap - the continuation's first word would not have fit
  after it (`len(prev) + 1 + len(word) > W`: a greedy wrapper breaks exactly there) and the continuation does
  not start with a space (glued with one space unless the previous line kept its trailing space).
The mode: a hard wrap cuts at a round width (80, 72, 100, 120...) and most lines that continue are exactly that
long; anything else is a word wrap (whose real width may be a little more than the longest line). Known
limits: a word wrap collapses runs of spaces at the break into one; a single line word-wrapped into two whose
first part happens to be exactly 80 long is glued back without its space.
"""

from __future__ import annotations

import functools
import itertools
import re

from ncclpm.sources.discover import looks_binary

MAX_WRAP = 160
MIN_WRAP = 60
HARD_WIDTHS = frozenset({64, 70, 72, 76, 78, 79, 80, 100, 120, 132})  # columns terminals and tools cut at

_ENTITY = re.compile(r"&(?:gt|lt|amp|quot|apos|nbsp|#\d{1,7}|#[xX][0-9a-fA-F]{1,6});")
_NAMED = {"gt": ">", "lt": "<", "amp": "&", "quot": '"', "apos": "'", "nbsp": "\u00a0"}
_CHARS = str.maketrans(
    {
        "\u2018": "'",
        "\u2019": "'",
        "\u201a": "'",
        "\u201b": "'",
        "\u2032": "'",
        "\u201c": '"',
        "\u201d": '"',
        "\u201e": '"',
        "\u201f": '"',
        "\u2033": '"',
        "\u2010": "-",
        "\u2011": "-",
        "\u2012": "-",
        "\u2013": "-",
        "\u2014": "-",
        "\u2015": "-",
        "\u2212": "-",
        "\u00a0": " ",
        "\u2007": " ",
        "\u202f": " ",
        "\u2009": " ",
        "\u200a": " ",
        "\u200b": None,
        "\u200c": None,
        "\u200d": None,
        "\u2060": None,
        "\ufeff": None,
        "\u2026": "...",
    }
)
_QUOTE = re.compile(r"^(?:[ \t]?>[ \t]?)+")
_FENCE_LINE = re.compile(r"^\s*(?:```+|~~~+)[\w+-]*\s*$|^\s*\{(?:code|noformat)(?::[^}]*)?\}\s*$")
# What starts a log line besides an envelope (the envelopes' own starts come from the catalog, see `starts`).
_OWN_STARTS = (
    r"\s*$",  # blank
    r"\[?\d{2}:\d{2}:\d{2}[.,]\d+",  # bare time of day
    r"Traceback \(most",  # traceback head
    r'  File "',  # traceback frame
    r"(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Warning|Interrupt|Exit|Failure)\b",  # exception name
    r"[=*#~-]{4,}",  # rules of torchrun's failure summary
    r"(?:During handling|The above exception)",  # chained tracebacks
)


@functools.lru_cache(maxsize=8)
def starts(envelope_heads: str) -> re.Pattern[str]:
    """Whether a line starts like a log line: an envelope's head (`Catalog.head_regex()`: `[rank3]:`,
    `[E1218 `, glog, ISO timestamps, `host:pid:tid [dev]`, srun, Ray, MPI...) or one of `_OWN_STARTS`."""
    return re.compile("^(?:" + "|".join((envelope_heads, *_OWN_STARTS)) + ")")


def _decode_entities(text: str) -> str:
    def one(m: re.Match[str]) -> str:
        body = m.group(0)[1:-1]
        if body.startswith("#"):
            code = int(body[2:], 16) if body[1:2] in "xX" else int(body[1:])
            return chr(code) if 0 < code < 0x110000 and not 0xD800 <= code < 0xE000 else m.group(0)
        return _NAMED[body]

    passes = 2 if re.search(r"&amp;(?:gt|lt|quot|amp|#\d+);", text) else 1
    for _ in range(passes):
        text = _ENTITY.sub(one, text)
    return text


def _strip_quotes(lines: list[str]) -> list[str]:
    filled = [ln for ln in lines if ln.strip()]
    quoted = [ln for ln in filled if _QUOTE.match(ln) and not ln.lstrip().startswith(">>>")]
    if not filled or len(quoted) < 0.6 * len(filled):
        return lines
    return [_QUOTE.sub("", ln, count=1) for ln in lines]


def _strip_fence_edges(line: str) -> str:
    """A fence glued to the start or the end of a line (```[rank0]: ...```) cut off. String methods, not a
    regex: a trailing-fence pattern backtracks over every run of backticks (60k of them took 28 s)."""
    stripped = line.lstrip()
    if stripped.startswith("```"):
        line = stripped.lstrip("`")
    tail = line.rstrip()
    if tail.endswith("```"):
        line = tail.rstrip("`")
    return line


def _strip_fences(lines: list[str]) -> list[str]:
    return [_strip_fence_edges(ln) for ln in lines if not _FENCE_LINE.match(ln)]


def _dedent(lines: list[str]) -> list[str]:
    """Remove the indentation every non-blank line shares (a Markdown indented code block); else no change."""
    indents = [ln[: len(ln) - len(ln.lstrip(" \t"))] for ln in lines if ln.strip()]
    margin = min(indents, key=len) if indents else ""
    if not all(i.startswith(margin) for i in indents):
        return lines
    return [ln[len(margin) :] if ln.startswith(margin) else ln for ln in lines] if margin else lines


def _continues(prev: str, line: str, width: int, hard: bool, start: re.Pattern[str]) -> str | None:
    """The separator to glue `line` onto `prev` with, or None when `line` is a line of its own."""
    if start.match(line) or not prev.strip() or _repeats_head(prev, line):
        return None
    first, head = line.split(" ", 1)[0], prev.split(" ", 1)[0]
    if len(first) >= 4 and first == head:
        return None  # the next record of a fixed-format log (`Epoch: [3][5/20]` under `Epoch: [3][0/20]`)
    if hard:
        return "" if len(prev) == width else None
    if line[:1].isspace() or _ruler(prev) or _ruler(line):
        return None  # a word wrap never splits at a ruler (`=====` around torchrun's summary): it has no spaces
    word = line.split(" ", 1)[0]
    if len(prev.rstrip()) + 1 + len(word) > width:
        return "" if prev.endswith(" ") else " "
    return None


_DIGITS = re.compile(r"\d+")
HEAD = 12  # characters of two lines' starts compared (numbers aside)


def _repeats_head(prev: str, line: str) -> bool:
    """`line` starts the way `prev` does, numbers aside (`GPU 0: NVIDIA A100...` then `GPU 1: ...`, two kernel Xid
    lines, two backtrace frames): the next record of a list, not the tail of a wrapped line."""
    a, b = _DIGITS.sub("#", prev[:HEAD]), _DIGITS.sub("#", line[:HEAD])
    return a == b and len(a.strip()) >= HEAD // 2


def _ruler(line: str) -> bool:
    """A line drawn with one character (`====`, `----`): a separator, never a piece of a wrapped sentence."""
    text = line.strip()
    return len(text) >= 8 and len(set(text)) == 1 and not text[0].isalnum()


def _wrap_width(lines: list[str], start: re.Pattern[str]) -> tuple[int, bool] | None:
    """(W, hard) when the text looks re-wrapped at W columns, else None."""
    width = max(map(len, lines), default=0)
    if not MIN_WRAP <= width <= MAX_WRAP:
        return None
    pairs = [(a, b) for a, b in itertools.pairwise(lines) if _continues(a, b, width, False, start) is not None]
    if not pairs:
        return None
    cut = sum(len(a) == width for a, _ in pairs)
    hard = width in HARD_WIDTHS and cut >= 0.6 * len(pairs)
    if len(pairs) < 2 and not hard:
        return None  # one short line after a long one is no evidence of a wrap (a `df -h` table, a banner)
    return width, hard


def _unwrap(lines: list[str], start: re.Pattern[str]) -> list[str]:
    found = _wrap_width(lines, start)
    if found is None:
        return lines
    width, hard = found
    out: list[str] = []
    last_piece = ""  # the previous physical line (out[-1] may already hold several)
    for line in lines:
        sep = _continues(last_piece, line, width, hard, start) if out else None
        if sep is None:
            out.append(line)
        else:
            out[-1] += sep + line
        last_piece = line
    return out


def normalise_paste(text: str, envelope_heads: str) -> str:
    """Text pasted from chat or a ticket, back to the log it was (see the module docstring). `envelope_heads`
    is the catalog's `head_regex()`: how the log lines of this job may start."""
    text = text.replace("\r\n", "\n")
    text = _decode_entities(text).translate(_CHARS)
    lines = _dedent(_strip_fences(_strip_quotes(text.split("\n"))))
    return "\n".join(_unwrap(lines, starts(envelope_heads)))


def normalise_paste_bytes(data: bytes, envelope_heads: str) -> bytes:
    """`normalise_paste` for stdin: binary input (an archive piped in) is left alone; undecodable bytes of a text
    are kept as they were (surrogateescape)."""
    if looks_binary(data[:8192]) or data[:2] in (b"\x1f\x8b", b"PK") or data[:4] == b"\x28\xb5\x2f\xfd":
        return data
    text = data.decode("utf-8", errors="surrogateescape")
    return normalise_paste(text, envelope_heads).encode("utf-8", errors="surrogateescape")
