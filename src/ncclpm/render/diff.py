"""Render a `DiffReport` (`ncclpm diff`): Markdown, plain text, HTML and Slack through `templates/diff.*`, JSON and
Slack Block Kit built in Python. Reads only the diff model (`ncclpm.diff_model`)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from ncclpm import __version__
from ncclpm.diff_model import DiffReport, Quote
from ncclpm.render.jinja import environment
from ncclpm.render.text import _Paint, _wrap
from ncclpm.util.escape import TEXT_QUOTES, controls_shown, cut_prose, one_line, slack_prose, text_prose

SLACK_MAX = 3000
SLACK_DIFFS = 5


def _template(name: str, **ctx: Any) -> str:
    return environment().get_template(name).render(**ctx)


def render_md(r: DiffReport) -> str:
    return _template("diff.md", r=r)


RELEVANCE_COLOUR = {"high": "1;31", "medium": "1;33", "low": "1", "none": "2"}


def _quoted(text: str | None, limit: int = 200) -> str:
    """A value or a log line inline in the terminal report: between ‘ ’, one line, cut."""
    left, right = TEXT_QUOTES
    body = one_line(text or "")
    return f"{left}{body if len(body) <= limit else body[: limit - 1] + '…'}{right}"


def _where(q: Quote) -> str:
    return one_line(q.file) + (f":{q.line}" if q.line is not None else "")


def render_text(r: DiffReport, color: bool = False, width: int = 100) -> str:
    """The diff for a terminal: the headline, what changed that can explain BAD's failure with the lines from both
    runs, the rest in one line each, BAD's diagnosis. Input text escaped (`one_line`) before the colour codes."""
    p = _Paint(color)
    out = [p("ncclpm diff", "2")]
    for label, s in (("GOOD", r.good), ("BAD ", r.bad)):
        verdict = f"{s.category} {s.confidence:.2f}" if s.failed else "no failure found"
        files = f"{s.sources} file{'s' if s.sources != 1 else ''}"
        out.append(f"  {p(label, '1')}  {one_line(s.job)}  [{one_line(verdict)}, {files}]")
    out += ["", *_wrap(text_prose(r.headline), width, "")]
    for n in r.notes:
        out += ["", *_wrap("note: " + text_prose(n), width, "      ", first="")]
    out += ["", p("DIFFERENCES THAT CAN EXPLAIN BAD'S FAILURE", "1")]
    for i, d in enumerate(r.relevant, 1):
        of = f" of {_quoted(d.of)}" if d.of else ""
        linked = p("  ← BAD's failure points at it", "31") if d.linked else ""
        head = f"{i:2d}. {p('[' + d.relevance.upper() + ']', RELEVANCE_COLOUR[d.relevance])} {one_line(d.what)}{of}: "
        head += f"{_value(d.good)} → {_value(d.bad)}{linked}"
        out.append(head)
        why = text_prose(d.why[:1].upper() + d.why[1:]) + "."
        why += f" It is {text_prose(d.controls)}." if d.controls else ""
        out += _wrap(why, width, "    ")
        for label, q in (("GOOD", d.good_evidence), ("BAD ", d.bad_evidence), ("read by", d.controls_evidence)):
            if q is not None:
                out += _wrap(f"{label} {_where(q)}: {_quoted(q.text)}", width, "        ", first="    ")
        if d.failure_evidence is not None:
            q = d.failure_evidence
            out += _wrap(f"BAD's failure {_where(q)}: {_quoted(q.text)}", width, "        ", first="    ")
        if d.also:
            out += _wrap("same change: " + one_line(", ".join(d.also[:8])), width, "      ", first="    ")
    if not r.relevant:
        out.append("  none")
    if r.irrelevant:
        out += ["", p("OTHER DIFFERENCES (cannot explain it)", "1")]
        for d in r.irrelevant:
            of = f" ({one_line(d.of)})" if d.of else ""
            line = f"- {one_line(d.what)}{of}: {_value(d.good, 60)} → {_value(d.bad, 60)} ({text_prose(d.why)})"
            out += _wrap(line, width, "    ", first="  ")
    if r.same:
        out += ["", p("SAME IN BOTH", "1")]
        out += _wrap(" · ".join(f"{one_line(w)} {_quoted(v, 60)}" for w, v in r.same), width, "  ", first="  ")
    b = r.bad
    out += ["", p(f"BAD'S DIAGNOSIS: {one_line(b.category)} ({b.band}, {b.confidence:.2f}, {one_line(b.rule)})", "1")]
    out += _wrap(text_prose(b.summary), width, "  ")
    for q in b.decisive:
        out += _wrap(f"{_where(q)}: {_quoted(q.text)}", width, "      ", first="  ")
    return "\n".join(out) + "\n"


def _value(v: str | None, limit: int = 120) -> str:
    return "(not seen)" if v is None else "(not set)" if v == NOT_SET else _quoted(v, limit)


NOT_SET = "not set"  # (the diff's word for a variable or argument the other run's files show unset)


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
        "bad_summary": slack_prose(cut_prose(controls_shown(r.bad.summary), limit)),
        "compared": r.compared,
        "relevant": [
            {
                "what": _slack_escape(d.what, 120),
                "relevance": d.relevance,
                "good": _slack_escape(d.good if d.good is not None else "not seen", 100),
                "bad": _slack_escape(d.bad if d.bad is not None else "not seen", 100),
                "why": slack_prose(cut_prose(controls_shown(d.why), limit)),
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


def render_diff(r: DiffReport, fmt: str = "md", *, color: bool = False, width: int = 100) -> str:
    """`r` in `fmt`; `color` (text only) adds ANSI colours, every input value escaped first."""
    if fmt == "text":
        return render_text(r, color=color, width=width)
    try:
        return DIFF_RENDERERS[fmt](r)
    except KeyError:
        raise ValueError(f"unknown format {fmt!r} (known: {', '.join(sorted(DIFF_RENDERERS))})") from None
