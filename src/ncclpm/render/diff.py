"""Render a `DiffReport` (`ncclpm diff`): Markdown, plain text, HTML and Slack through `templates/diff.*`, JSON and
Slack Block Kit built in Python. Reads only the diff model (`ncclpm.diff_model`)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from ncclpm import __version__
from ncclpm.diff_model import DiffReport
from ncclpm.render.jinja import environment
from ncclpm.util.escape import controls_shown

SLACK_MAX = 3000
SLACK_DIFFS = 5


def _template(name: str, **ctx: Any) -> str:
    return environment().get_template(name).render(**ctx)


def render_md(r: DiffReport) -> str:
    return _template("diff.md", r=r)


def render_text(r: DiffReport) -> str:
    return _template("diff.txt", r=r)


def render_html(r: DiffReport) -> str:
    return _template("diff.html", r=r, version=__version__)


def render_json(r: DiffReport) -> str:
    return json.dumps(r.to_dict(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def _slack_escape(value: Any, limit: int = 300) -> str:
    text = " ".join(controls_shown(value).split()).replace("`", "'")
    text = text if len(text) <= limit else text[: limit - 1] + "…"
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def slack_view(r: DiffReport, limit: int = 300) -> dict[str, Any]:
    """The escaped, capped fields the Slack template lays out."""
    return {
        "good_job": _slack_escape(r.good.job, 120),
        "bad_job": _slack_escape(r.bad.job, 120),
        "bad_category": _slack_escape(r.bad.category),
        "bad_band": r.bad.band,
        "bad_summary": _slack_escape(r.bad.summary, limit),
        "compared": r.compared,
        "relevant": [
            {
                "what": _slack_escape(d.what, 120),
                "relevance": d.relevance,
                "good": _slack_escape(d.good if d.good is not None else "not seen", 100),
                "bad": _slack_escape(d.bad if d.bad is not None else "not seen", 100),
                "why": _slack_escape(d.why, limit),
            }
            for d in r.relevant[:SLACK_DIFFS]
        ],
        "n_other": len(r.differences) - min(len(r.relevant), SLACK_DIFFS),
    }


def render_slack(r: DiffReport) -> str:
    limit = 300
    while True:
        text = _template("diff.mrkdwn", s=slack_view(r, limit)).strip() + "\n"
        if len(text) <= SLACK_MAX or limit < 60:
            return text[:SLACK_MAX]
        limit //= 2


def render_slack_json(r: DiffReport) -> str:
    tpl = environment().get_template("diff.mrkdwn")
    ctx = tpl.new_context({"s": slack_view(r)})
    blocks = {name: "".join(tpl.blocks[name](ctx)).strip()[:SLACK_MAX] for name in ("verdict", "differences", "footer")}
    payload = {
        "text": _slack_escape(f"diff: BAD {r.bad.category}: {r.bad.summary}", 200),
        "blocks": [
            {"type": "section", "text": {"type": "mrkdwn", "text": blocks["verdict"]}},
            {"type": "section", "text": {"type": "mrkdwn", "text": blocks["differences"]}},
            {"type": "context", "elements": [{"type": "mrkdwn", "text": blocks["footer"]}]},
        ],
    }
    return json.dumps(payload, indent=2, ensure_ascii=False) + "\n"


DIFF_RENDERERS: dict[str, Callable[[DiffReport], str]] = {
    "md": render_md,
    "text": render_text,
    "html": render_html,
    "json": render_json,
    "slack": render_slack,
    "slack-json": render_slack_json,
}


def render_diff(r: DiffReport, fmt: str = "md") -> str:
    try:
        return DIFF_RENDERERS[fmt](r)
    except KeyError:
        raise ValueError(f"unknown format {fmt!r} (known: {', '.join(sorted(DIFF_RENDERERS))})") from None
