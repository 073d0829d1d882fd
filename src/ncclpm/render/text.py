"""The terminal report (`-f text`): the verdict and the action first, what happened with times, the evidence
lines, why not the others, the facts, what to do - compact, wrapped to the terminal, coloured when asked.

Every value from the input goes through `escape.one_line`/`escape.plain` (no escape sequence or control character
of its own reaches the terminal) before the renderer adds its own SGR colour codes; without `color` the text has
no escape sequence at all. Markdown stays the format for files and pipes; this one is for people at a terminal.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass

from ncclpm.model import Diagnosis
from ncclpm.render.rankview import rank_table
from ncclpm.render.words import facts_line, story_date, story_times
from ncclpm.util.escape import TEXT_QUOTES, one_line, plain, text_prose
from ncclpm.util.folding import fold_warnings

WIDTH = 100
BAND_COLOUR = {"conclusive": "1;31", "likely": "1;33", "possible": "1"}


@dataclass(frozen=True)
class _Paint:
    on: bool

    def __call__(self, text: str, code: str) -> str:
        return f"\x1b[{code}m{text}\x1b[0m" if self.on and text.strip() else text


def _wrap(text: str, width: int, indent: str, first: str | None = None) -> list[str]:
    return textwrap.wrap(
        one_line(text),
        width=max(width, 40),
        initial_indent=indent if first is None else first,
        subsequent_indent=indent,
        break_long_words=False,
        break_on_hyphens=False,
    ) or [first or indent]


def _heading(p: _Paint, title: str, extra: str = "") -> list[str]:
    return ["", p(title.upper(), "1") + (f"  {p(extra, '2')}" if extra else "")]


def _verdict(d: Diagnosis, p: _Paint, width: int) -> list[str]:
    head = f"{p(one_line(d.category), BAND_COLOUR.get(d.band, '1'))}  {d.band} {d.confidence:.2f}"
    out = [head, *_wrap(text_prose(d.summary), width, "")]
    hosts = f" {', '.join(d.culprit_hosts)}" if d.culprit_hosts and d.action == "exclude_node" else ""
    out += [p(line, "1;36") for line in _wrap(f"→ {d.action}{hosts} — {text_prose(d.action_reason)}", width, "  ")]
    out += [p(line, "2") for line in _wrap(" · ".join(facts_line(d)[1:]), width, "")]  # confidence is in the heading
    return out


def _story(d: Diagnosis, p: _Paint, width: int) -> list[str]:
    if not d.story:
        return []
    times = story_times(d)
    pad = max(len(t) for t in times) if any(times) else 0
    out = _heading(p, "What happened", story_date(d))
    for m, when in zip(d.story, times, strict=True):
        ref = f"  ({', '.join(m.refs)})" if m.refs else ""
        lines = _wrap(text_prose(m.text) + ref, width, " " * (pad + 4), first=" " * (pad + 4))
        lines[0] = "  " + p(when.rjust(pad), "1") + "  " + lines[0][pad + 4 :]
        out += lines
    return out


def _evidence(d: Diagnosis, p: _Paint, width: int) -> list[str]:
    out = _heading(p, "Evidence")
    for e in d.decisive:
        where = e.ref + (f"  rank {e.rank}" if e.rank is not None else "")
        also = f"  ×{len(e.also) + 1}, also {', '.join(e.also)}" if e.also else ""
        out += ["  " + p(one_line(where), "36") + p(one_line(also), "2")]
        out += ["    " + line for line in plain(e.text).split("\n")[:8]]
    return out if d.decisive else []


def _why_not(d: Diagnosis, p: _Paint, width: int) -> list[str]:
    if not d.rivals and not d.ruled_out:
        return []
    out = _heading(p, "Why not the others")
    items = [(r.finding.category, r.finding.rule, r.why_not) for r in d.rivals]
    items += [(r.category, r.rule, r.why_not) for r in d.ruled_out]
    for category, rule, why in items:
        first = f"  ✗ {category} ({rule}): "
        lines = _wrap(text_prose(why), width, "    ", first=first)
        lines[0] = "  " + p(f"✗ {one_line(category)}", "33") + lines[0][len(category) + 4 :]
        out += lines
    return out


def _bullets(title: str, items: tuple[str, ...], p: _Paint, width: int, numbered: bool = False) -> list[str]:
    if not items:
        return []
    out = _heading(p, title)
    for i, item in enumerate(items, 1):
        mark = f"  {i}. " if numbered else "  • "
        out += _wrap(text_prose(item), width, " " * len(mark), first=mark)
    return out


STACK_LINES = 12


def _stacks(d: Diagnosis, p: _Paint, width: int) -> list[str]:
    """The merged stack tree, compact: at most STACK_LINES lines, each cut to the width (the full tree is in -f md
    and html); the odd branch in red."""
    st = d.stack_tree
    if not st or not st.get("lines"):
        return []
    source = "flight recorder" if st.get("source") == "fr" else one_line(", ".join(map(str, st.get("formats") or ())))
    out = _heading(p, "Where each rank was stuck", source)
    tree = [one_line(line) for line in st["lines"]]
    for line in tree[:STACK_LINES]:
        line = line if len(line) <= width - 4 else line[: width - 5] + "…"
        out.append(p("    " + line, "31") if "◀" in line else "    " + line)
    if len(tree) > STACK_LINES:
        out.append(f"    … {len(tree) - STACK_LINES} more lines (-f md)")
    if d.stack_check:
        out += _wrap(text_prose(d.stack_check), width, "  ")
    return out


def _ranks(d: Diagnosis, p: _Paint, width: int) -> list[str]:
    table = rank_table(d)
    if table is None:
        return []
    cells = [[one_line(c) for c in row] for row in table.rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(table.head)]
    out = _heading(p, "Ranks")
    out.append("  " + p("  ".join(h.ljust(w) for h, w in zip(table.head, widths, strict=True)).rstrip(), "2"))
    for row, role in zip(cells, table.roles, strict=True):
        line = "  " + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
        out.append(p(line, "31") if role == "culprit" else line)
    left, right = TEXT_QUOTES
    for ranks, what, text in table.notes:
        out += _wrap(f"{ranks}, {what}: {left}{text}{right}", width, "      ", first="    ")
    return out


def render_text(d: Diagnosis, verbose: bool = False, color: bool = False, width: int = WIDTH) -> str:
    p = _Paint(color)
    lines = [p(f"ncclpm · {one_line(d.job)}", "2"), *_verdict(d, p, width)]
    lines += _story(d, p, width)
    lines += _evidence(d, p, width)
    lines += _why_not(d, p, width)
    lines += _bullets("Connected facts", d.connected, p, width)
    lines += _bullets("Fixes", d.primary.fixes, p, width, numbered=True)
    lines += _bullets("Don't", d.primary.dont, p, width)
    lines += _bullets("Verify", d.primary.verify, p, width)
    lines += _stacks(d, p, width)
    lines += _ranks(d, p, width)
    notes = fold_warnings(d.warnings) + (tuple(f"not evaluated: {n}" for n in d.not_evaluated) if verbose else ())
    lines += _bullets("Notes", notes, p, width)
    rule = one_line(d.primary.rule)
    explain = text_prose(f"`ncclpm explain {rule}`")
    lines += ["", p(f"{rule} {one_line(d.primary.name)} · {explain} · -f md for the full report", "2")]
    return "\n".join(lines) + "\n"
