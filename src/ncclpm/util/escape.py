"""Every escape ncclpm applies to text that came from the input, one function per output context.

Everything in a report may come from the uploader: log lines, file and archive member names, the job name, values
read from dumps and error files. This module is the one place that makes such text safe for where it goes:

- names (`clean_name`): one printable line - C0/C1 controls, escape sequences and bidi overrides removed, line
  breaks collapsed, undecodable bytes of a file name shown as `\\xe9`;
- a terminal (`terminal`, `terminal_json`): no escape sequence (colour, clear screen, window title, OSC 8 links)
  and no control character other than newline and tab reaches it;
- Markdown (`md_text`, `md_cell`, `md_span`, `md_code`, `md_block`, `md_prose`): no raw HTML, no link or image, no
  line break out of an inline field or a code span or block; backslash escapes, never HTML entities (log text in code
  spans and blocks is shown exactly as written);
- Slack mrkdwn (`slack_text`, `slack_code`): `& < >` as entities (no `<!channel>`, no `<url|link>`), one line;
- CSV (`csv_cell`): no formula (`=HYPERLINK(...)`) for a spreadsheet to run.
HTML is escaped by Jinja's autoescape; the templates' `finalize` (render/jinja.py) runs `plain` on every value.

No import from the rest of ncclpm: sources, renderers and triage all use it.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any

# ESC sequences (CSI, OSC, DCS/SOS/PM/APC strings, two-byte ones) and their 8-bit C1 forms.
_SEQUENCES = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]?"
    r"|\x1b\][^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"
    r"|\x1b[PX^_][^\x1b\x9c]*(?:\x1b\\|\x9c)?"
    r"|\x1b[ -~]?"
    r"|\x9b[0-?]*[ -/]*[@-~]?"
    r"|\x9d[^\x07\x9c]*[\x07\x9c]?"
)
# C0 except tab and newline, DEL, C1, bidi embeddings/overrides/isolates and marks, line/paragraph separators.
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_SEPARATORS = re.compile(r"\r\n|[\r\u2028\u2029\x0b\x0c\x85]")
_SURROGATE = re.compile(r"[\ud800-\udfff]")
# Every character a name must not carry (archives replace each with "?"): controls, bidi, separators, surrogates.
UNSAFE_IN_NAMES = re.compile(_CONTROLS.pattern[:-1] + r"\r\n\t\u2028\u2029\ud800-\udfff]")
_BREAKS = re.compile(r"\s*\n\s*")
_SHOWN_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # C0 but tab and newline, DEL, C1


class Escaped(str):
    """Text already escaped for the output format it is written into (templates do not escape it again)."""


def _str(value: Any) -> str:
    return "" if value is None else str(value)


def _surrogate(m: re.Match[str]) -> str:
    code = ord(m.group(0))
    return f"\\x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else "\ufffd"


def plain(value: Any) -> str:
    """Text without escape sequences and control characters (newline and tab kept; CR and other line
    separators become newlines), and without undecodable halves of characters."""
    text = _SEPARATORS.sub("\n", _str(value))
    text = _SEQUENCES.sub("", text)
    return _SURROGATE.sub(_surrogate, _CONTROLS.sub("", text))


def controls_shown(value: Any) -> str:
    """Text for a terminal with its control characters (ESC sequences, carriage returns, bells) shown as `?`
    (the diff's texts: where a value had one is part of what differs)."""
    return _SHOWN_CONTROLS.sub("?", "" if value is None else str(value))


def one_line(value: Any) -> str:
    """`plain` on one line: every line break (with the blanks around it) becomes one space."""
    return _BREAKS.sub(" ", plain(value)).replace("\t", " ")


def clean_name(value: Any) -> str:
    """A file, member or job name as a label: one printable line. Undecodable bytes of a file name (Python's
    surrogate escapes) are shown as `\\xe9`, so two names that differ only there stay different; invisible
    format characters (zero-width spaces, BOM, bidi marks) are dropped and other spaces become a space."""
    text = "".join(
        " " if (cat := unicodedata.category(c)) == "Zs" else "" if cat == "Cf" else c for c in one_line(value)
    )
    return text.strip() or "?"


# ---------------------------------------------------------------------------------------------------- terminal


def terminal(value: Any) -> str:
    """Text for a terminal: no escape sequence, no control character but newline and tab."""
    return plain(value)


_JSON_UNSAFE = re.compile(r"[\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029]")


def terminal_json(text: str) -> str:
    """JSON text for a terminal: the characters `json.dumps(ensure_ascii=False)` leaves raw that a terminal
    acts on (C1 controls such as the 8-bit CSI, bidi overrides) as `\\uXXXX` - the same JSON value."""
    return _JSON_UNSAFE.sub(lambda m: f"\\u{ord(m.group(0)):04x}", text)


# ---------------------------------------------------------------------------------------------------- Markdown

_BACKTICKS = re.compile(r"`+")

# Markdown outside code is escaped with backslashes, never with entities: `\<` renders `<` and opens no tag,
# `\&` keeps `&lt;` from being decoded, and the raw text stays readable in a terminal (no `&lt;` in it).
_MD_ENTITY = re.compile(r"&(?=#?\w+;)")
_MD_BLOCK_START = re.compile(r"^(\s*)([#>])")  # a heading or a quote where a value starts a line (after `- `)


def _md_outside_code(text: str, block: bool = True) -> str:
    """Text outside any code span: backslashes and backticks escaped (neither can start anything), no HTML or
    autolink (`<` escaped), no entity (`&` escaped where it would start one), no link or image (`](` broken), no
    heading or quote (a leading `#`, `>` escaped - unless `block` is False: a table cell holds inline content
    only); nothing else changed."""
    text = text.replace("\\", "\\\\").replace("`", "\\`").replace("<", "\\<")
    text = _MD_ENTITY.sub(r"\\&", text).replace("](", "]\\(")
    if not block:
        return text
    return _MD_BLOCK_START.sub(r"\1\\\2", text, count=1)


def md_text(value: Any) -> Escaped:
    """Input text in Markdown prose: one line, no HTML, no link or image, backticks that open no code span."""
    return Escaped(_md_outside_code(one_line(value)))


def md_cell(value: Any, width: int = 160) -> Escaped:
    """`md_text` in a table cell: `|` escaped, cut to `width` characters before escaping."""
    return Escaped(_md_outside_code(one_line(value)[:width], block=False).replace("|", "\\|"))


def md_span(value: Any, width: int | None = None, cell: bool = False) -> Escaped:
    """Input text inside a `code span`: one line, backticks made `'` (they would end the span); `|` escaped in
    a table cell (GFM splits cells before it sees code spans). Cut like Jinja's `truncate(width, True)`."""
    text = one_line(value).replace("`", "'")
    if width is not None and len(text) > width + 5:
        text = text[: width - 3] + "..."
    return Escaped(text.replace("|", "\\|") if cell else text)


def md_code(value: Any, width: int | None = None, cell: bool = False) -> Escaped:
    """Input text as a whole code span, shown exactly as written (CommonMark renders a code span's content
    literally: no HTML, no entity, no emphasis): one line, delimited by a backtick run longer than any inside it,
    padded with a space when the text starts or ends with a backtick. Cut at a word boundary to `width` with `…`;
    in a table cell `|` is escaped (GFM splits cells before it sees code spans, and renders a backslash-pipe as a
    pipe)."""
    text = one_line(value)
    if width is not None and len(text) > width:
        cut = text[:width].rsplit(" ", 1)[0]
        text = (cut if len(cut) > width // 2 else text[:width]) + " …"
    fence = "`" * max([1] + [len(m.group(0)) + 1 for m in _BACKTICKS.finditer(text)])
    pad = " " if text[:1] == "`" or text[-1:] == "`" or (text[:1] == " " and text[-1:] == " " and text.strip()) else ""
    out = f"{fence}{pad}{text}{pad}{fence}" if text else "` `"
    return Escaped(out.replace("|", "\\|") if cell else out)


def md_block(value: Any, indent: str = "    ") -> Escaped:
    """Input text as an indented code block: every line (CR and other separators included) indented, so none
    can end the block."""
    return Escaped(("\n" + indent).join(plain(value).split("\n")))


def md_fenced(lines: Any, info: str = "") -> Escaped:
    """Input lines as a fenced code block whose fence is longer than any run of backticks in them: no line can
    close it early."""
    body = [plain(line).replace("\n", " ") for line in lines]
    fence = "`" * max([3] + [len(m.group(0)) + 1 for line in body for m in _BACKTICKS.finditer(line)])
    return Escaped("\n".join([fence + info, *body, fence]))


# A code span as CommonMark reads it: a run of N backticks, then text, then the next run of exactly N backticks.
_CODE_SPAN = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)")


# ------------------------------------------------------------------------------------------------------- prose
# ncclpm's own sentences (summaries, explanations, fixes, why-nots, the story, the diff's reasons) mark code - a
# value, a setting, a command, a quoted log line - with backticks, as Markdown does. Every format renders them
# from the same split (`prose_parts`): Markdown keeps the spans, HTML makes them <code>, Slack keeps them as its
# own code spans, the terminal shows them between ‘ ’. A backtick that opens no span is no code: it becomes `'`.

TEXT_QUOTES = ("\u2018", "\u2019")  # how the terminal report marks code (‘x’): `tests/rendered.py` reads it so


def prose_parts(value: Any) -> list[tuple[bool, str]]:
    """A sentence of ncclpm's own as (is_code, text) parts, on one line: the code spans' content without their
    backticks (CommonMark's padding space dropped), the rest with any stray backtick made `'`."""
    text = one_line(value)
    parts: list[tuple[bool, str]] = []
    pos = 0
    for m in _CODE_SPAN.finditer(text):
        if m.start() > pos:
            parts.append((False, text[pos : m.start()].replace("`", "'")))
        body = m.group(2)
        if body.startswith(" ") and body.endswith(" ") and body.strip():
            body = body[1:-1]
        parts.append((True, body))
        pos = m.end()
    if pos < len(text):
        parts.append((False, text[pos:].replace("`", "'")))
    return parts


def cut_prose(value: Any, limit: int) -> str:
    """Prose cut to about `limit` characters at a word boundary with `…`, never inside a code span (a span that
    would be cut is dropped whole, or cut inside and closed again when it is the first thing)."""
    text = one_line(value)
    if len(text) <= limit:
        return text
    out, size = [], 0
    for code, part in prose_parts(text):
        piece = f"`{part}`" if code else part
        if size + len(piece) <= limit:
            out.append(piece)
            size += len(piece)
            continue
        room = limit - size
        if code and not out and room > 8:
            out.append(f"`{part[: room - 3].rstrip()}…`")
        elif not code and room > 0:
            cut = part[:room].rsplit(" ", 1)[0] if " " in part[:room] else ""
            out.append(cut)
        break
    return "".join(out).rstrip() + (" …" if not "".join(out).endswith("…`") else "")


def text_prose(value: Any) -> str:
    """Prose for a terminal: code spans between ‘ ’ (a backtick shows as a backtick there)."""
    left, right = TEXT_QUOTES
    return "".join(f"{left}{part}{right}" if code else part for code, part in prose_parts(value))


def slack_prose(value: Any) -> Escaped:
    """Prose as Slack mrkdwn: spans kept as Slack's own code spans (a backtick inside one made `'`), `& < >` as
    entities everywhere."""
    out = []
    for code, part in prose_parts(value):
        part = part.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
        out.append(f"`{part.replace('`', chr(39))}`" if code else part)
    return Escaped("".join(out))


def html_prose(value: Any) -> Escaped:
    """Prose as HTML: everything escaped, code spans as <code>."""
    import html  # (its entity tables cost every run ~2 ms: only the HTML report needs it)

    out = []
    for code, part in prose_parts(value):
        part = html.escape(part, quote=False)
        out.append(f"<code>{part}</code>" if code else part)
    return Escaped("".join(out))


def md_prose(value: Any, width: int | None = None, cell: bool = False) -> Escaped:
    """ncclpm's own prose (`prose_parts`: summaries, fixes, explanations): its `code spans` as code spans (each
    fenced to fit its content), the rest escaped like `md_text` - the prose may quote host names or values from the
    logs. In a table cell: cut to `width` (never inside a span), `|` escaped."""
    text = cut_prose(value, width) if width is not None else one_line(value)
    out = []
    for i, (code, part) in enumerate(prose_parts(text)):
        out.append(md_code(part) if code else _md_outside_code(part, block=i == 0 and not cell))
    joined = "".join(out)
    return Escaped(joined.replace("|", "\\|") if cell else joined)


# ------------------------------------------------------------------------------------------------------- Slack


def slack_text(value: Any) -> Escaped:
    """Slack mrkdwn text: one line, `& < >` as the entities Slack asks for (no `<!channel>`, no `<url|x>`), and no
    ``` that would open a code block over the rest of the message (a single backtick is a rule's inline code)."""
    text = _BACKTICKS3.sub(lambda m: "'" * len(m.group(0)), one_line(value))
    return Escaped(text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;"))


_BACKTICKS3 = re.compile(r"`{3,}")


def slack_code(value: Any) -> Escaped:
    """Text for a Slack ``` block: lines kept, backticks made `'` (they could end the block), then escaped."""
    text = plain(value).replace("`", "'")
    return Escaped(text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;"))


# --------------------------------------------------------------------------------------------------------- CSV

FORMULA_START = r"^[=+\-@\t\r\uff1d\uff0b\uff0d\uff20]"  # also for polars (export.csv_safe)
_FORMULA = re.compile(FORMULA_START)


def csv_cell(value: Any) -> Any:
    """A CSV cell no spreadsheet runs as a formula: text starting with `= + - @` (or their full-width forms), tab
    or CR gets a leading `'` (OWASP's advice); other values unchanged."""
    if isinstance(value, str) and _FORMULA.match(value):
        return "'" + value
    return value
