"""Render a `Diagnosis` in a given format. JSON is `to_dict()`; the others go through Jinja templates."""

from __future__ import annotations

import json
from collections.abc import Callable

from ncclpm.model import Diagnosis
from ncclpm.render.jinja import render_template


def render_json(d: Diagnosis) -> str:
    return json.dumps(d.to_dict(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def render_markdown(d: Diagnosis) -> str:
    return render_template("report.md", d)


def render_html(d: Diagnosis) -> str:
    from ncclpm.render.html import render_html as html

    return html(d)


def render_slack(d: Diagnosis) -> str:
    from ncclpm.render.slack import render_slack as slack

    return slack(d)


def render_slack_json(d: Diagnosis) -> str:
    from ncclpm.render.slack import render_slack_json as slack_json

    return slack_json(d)


RENDERERS: dict[str, Callable[[Diagnosis], str]] = {
    "md": render_markdown,
    "json": render_json,
    "html": render_html,
    "slack": render_slack,
    "slack-json": render_slack_json,
}


def render(d: Diagnosis, fmt: str = "md") -> str:
    try:
        return RENDERERS[fmt](d)
    except KeyError:
        raise ValueError(f"unknown format {fmt!r} (known: {', '.join(sorted(RENDERERS))})") from None
