"""Render a `Diagnosis` in a given format. JSON is `to_dict()`; the others go through Jinja templates."""

from __future__ import annotations

import json
from collections.abc import Callable

from ncclpm.model import Diagnosis


def render_json(d: Diagnosis) -> str:
    return json.dumps(d.to_dict(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def render_markdown(d: Diagnosis, verbose: bool = False) -> str:
    from ncclpm.render.jinja import render_template  # jinja2 costs ~20 ms at start-up: only for what uses it

    return render_template("report.md", d, verbose=verbose)


def render_html(d: Diagnosis, verbose: bool = False) -> str:
    from ncclpm.render.html import render_html as html

    return html(d, verbose=verbose)


def render_text(d: Diagnosis, verbose: bool = False, color: bool = False, width: int = 100) -> str:
    from ncclpm.render.text import render_text as text

    return text(d, verbose=verbose, color=color, width=width)


def render_slack(d: Diagnosis) -> str:
    from ncclpm.render.slack import render_slack as slack

    return slack(d)


def render_slack_json(d: Diagnosis) -> str:
    from ncclpm.render.slack import render_slack_json as slack_json

    return slack_json(d)


RENDERERS: dict[str, Callable[[Diagnosis], str]] = {
    "md": render_markdown,
    "text": render_text,
    "json": render_json,
    "html": render_html,
    "slack": render_slack,
    "slack-json": render_slack_json,
}


VERBOSE = {"md", "text", "html"}  # formats with internals (rules not evaluated) shown only when asked


def render(d: Diagnosis, fmt: str = "md", *, verbose: bool = False, color: bool = False, width: int = 100) -> str:
    """`d` in `fmt`; `verbose` adds internals (rules not evaluated, rivals' own summaries); `color` (text only)
    adds ANSI colours - the renderer escapes every input value first, so only its own codes reach a terminal."""
    if fmt not in RENDERERS:
        raise ValueError(f"unknown format {fmt!r} (known: {', '.join(sorted(RENDERERS))})")
    if fmt == "text":
        return render_text(d, verbose=verbose, color=color, width=width)
    return RENDERERS[fmt](d, verbose=verbose) if fmt in VERBOSE else RENDERERS[fmt](d)
