"""The Jinja environment for report templates (loaded from the shipped `templates/` directory)."""

from __future__ import annotations

from datetime import datetime
from functools import lru_cache
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape

from ncclpm.clamp import duration_text
from ncclpm.model import Diagnosis
from ncclpm.render.rankview import rank_groups
from ncclpm.resources import data_dir


def _duration_ms(ms: Any) -> str:
    return duration_text(ms)


def _ts(value: Any) -> str:
    if isinstance(value, datetime):
        return value.strftime("%m-%d %H:%M:%S") if value.year > 1970 else value.strftime("%H:%M:%S")
    return "" if value is None else str(value)


def _md_text(value: Any) -> str:
    """Log-derived text outside code: `<`, `>` and `&` as entities, so no renderer sees raw HTML in it."""
    text = "" if value is None else str(value)
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _md_cell(value: Any, width: int = 160) -> str:
    text = "" if value is None else str(value)
    return _md_text(text.replace("|", "\\|").replace("\n", " ")[:width])


@lru_cache(maxsize=1)
def environment() -> Environment:
    env = Environment(
        loader=FileSystemLoader(str(data_dir("templates"))),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=select_autoescape(enabled_extensions=("html", "html.j2"), default_for_string=False),
    )
    env.filters.update(duration_ms=_duration_ms, ts=_ts, md_cell=_md_cell, md_text=_md_text)
    return env


def render_template(name: str, d: Diagnosis, **extra: Any) -> str:
    return environment().get_template(name).render(d=d, groups=rank_groups(d), **extra)
