"""The Jinja environment for report templates (loaded from the shipped `templates/` directory).

Escaping is not left to each template line. `finalize` runs on every value a template prints: in Markdown
templates (`*.md`) a value is escaped with `escape.md_text` unless a filter already escaped it for its context
(`md_span`, `md_cell`, `md_block`, `md_prose`, `md_quote`, `md_fenced` return `escape.Escaped`); in HTML templates
Jinja's autoescape does the escaping and `finalize` removes control characters and escape sequences; Slack values
come escaped from render/slack.py. A field added to a template later is escaped without anyone remembering to.
"""

from __future__ import annotations

from datetime import datetime
from functools import lru_cache
from typing import Any

from jinja2 import Environment, pass_context
from jinja2.runtime import Context
from markupsafe import Markup

from ncclpm.model import Diagnosis
from ncclpm.render.rankview import rank_groups, rank_table
from ncclpm.render.template_code import new_environment, read_snapshot
from ncclpm.render.words import facts_line, story_date, story_times
from ncclpm.util import escape
from ncclpm.util.durations import duration_text
from ncclpm.util.folding import fold_warnings
from ncclpm.util.resources import data_dir


def _duration_ms(ms: Any) -> str:
    return duration_text(ms)


def _ts(value: Any) -> str:
    if isinstance(value, datetime):
        return value.strftime("%m-%d %H:%M:%S") if value.year > 1970 else value.strftime("%H:%M:%S")
    return "" if value is None else str(value)


def _md_quote(e: Any) -> escape.Escaped:
    """One evidence line: where (file:line, rank) and where else it was printed, then the line itself as an indented
    code block (shown as written)."""
    where = escape.md_text(e.file) + (f":{e.line}" if e.line is not None else "")
    rank = f" (rank {e.rank})" if e.rank is not None else ""
    also = ""
    if e.also:
        also = f" — ×{len(e.also) + 1}, also {escape.md_text(', '.join(e.also))}"
    return escape.Escaped(f"{where}{rank}{also}\n\n    {escape.md_block(e.text)}")


def _ts_full(value: Any) -> str:
    """A date and time to the minute (`2025-11-14 03:12`), "" for none."""
    return value.strftime("%Y-%m-%d %H:%M") if isinstance(value, datetime) else ""


@pass_context
def _finalize(ctx: Context, value: Any) -> Any:
    if value is None or isinstance(value, bool | int | float | escape.Escaped | Markup):
        return value
    if (ctx.name or "").endswith(".md"):
        return escape.md_text(value)
    return escape.plain(value)


@pass_context
def _prose(ctx: Context, value: Any) -> Any:
    """ncclpm's own prose in the template's format (`escape.prose_parts`: one split, one renderer per format)."""
    name = ctx.name or ""
    if name.endswith(".md"):
        return escape.md_prose(value)
    if name.endswith(".mrkdwn"):
        return escape.slack_prose(value)
    if name.endswith((".html", ".html.j2")):
        return Markup(escape.html_prose(value))
    return escape.text_prose(value)


@lru_cache(maxsize=1)
def environment() -> Environment:
    filters = {
        "duration_ms": _duration_ms,
        "ts": _ts,
        "ts_full": _ts_full,
        "md_text": escape.md_text,
        "md_cell": escape.md_cell,
        "md_span": escape.md_span,
        "md_code": escape.md_code,
        "md_block": escape.md_block,
        "md_prose": escape.md_prose,
        "md_fenced": escape.md_fenced,
        "md_quote": _md_quote,
        "plain": escape.controls_shown,  # the diff's templates
        "prose": _prose,
        "folded": fold_warnings,
    }
    return new_environment(data_dir("templates"), _finalize, filters, read_snapshot())


def render_template(name: str, d: Diagnosis, **extra: Any) -> str:
    context = {
        "groups": rank_groups(d),
        "table": rank_table(d),
        "facts": facts_line(d),
        "times": story_times(d),
        "story_date": story_date(d),
        "verbose": False,
    }
    return environment().get_template(name).render(d=d, **(context | extra))
