"""Slack: the verdict as one mrkdwn message (`render_slack`) or as a Block Kit payload (`slack_payload`, a dict
built in Python - JSON is never produced by a template).

Slack's rules: `&`, `<`, `>` in user text become `&amp;`, `&lt;`, `&gt;` (so `<!channel>` or `<http://x|y>` in a
log line is shown, not acted on); inside a ``` code block a backtick could end the block, so log text gets
`'` for every backtick there. Every field is capped so the message stays far below Slack's 4,000 characters
(`MAX_CHARS`) whatever the job: 1024 ranks, 100 kB lines.
"""

from __future__ import annotations

import json
from typing import Any

from ncclpm.model import Diagnosis
from ncclpm.render.jinja import environment
from ncclpm.render.words import collective_text, culprit_text
from ncclpm.util.escape import cut_prose, one_line, plain, slack_code, slack_prose, slack_text

MAX_CHARS = 3000  # a Block Kit section holds 3,000 characters; Slack truncates messages at 4,000
LINE_CHARS = 700
PROSE_CHARS = 500
ICONS = {"conclusive": ":red_circle:", "likely": ":large_orange_circle:", "possible": ":white_circle:"}
BLOCKS = ("verdict", "facts", "evidence", "fix", "footer")


def escape(text: Any) -> str:
    """Input text for Slack: one line, `& < >` as entities (`escape.slack_text`, the one place it is done)."""
    return slack_text(text)


def _cut(text: Any, limit: int) -> str:
    text = one_line(text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _code(text: str, limit: int = LINE_CHARS) -> str:
    """Log text for a ``` block: at most 12 lines and `limit` characters, escaped (`escape.slack_code`)."""
    body = "\n".join(plain(text).splitlines()[:12])
    return slack_code(body if len(body) <= limit else body[: limit - 1] + "…")


def _world(d: Diagnosis) -> str:
    if not d.world_size:
        return ""
    return f"world size {d.world_size}" if d.world_size_declared else f"≥ {d.world_size} ranks"


def view(d: Diagnosis, line_chars: int = LINE_CHARS) -> dict[str, Any]:
    """The escaped, capped fields the template lays out."""
    ev = (d.decisive or d.primary.evidence or (None,))[0]
    where = ""
    if ev is not None:
        where = f"`{_cut(ev.file, 120).replace('`', chr(39))}" + (f":{ev.line}" if ev.line is not None else "") + "`"
        where = escape(where) + (f", rank {ev.rank}" if ev.rank is not None else "")
    return {
        "icon": ICONS.get(d.band, ""),
        "category": escape(d.category),
        "band": d.band,
        "confidence": f"{d.confidence:.2f}",
        "job": escape(_cut(d.job, 120)),
        "summary": slack_prose(cut_prose(d.summary, PROSE_CHARS)).replace("*", "∗"),  # inside *bold*
        "culprits": escape(culprit_text(d)),
        "action": escape(d.action),
        "action_hosts": escape(", ".join(d.culprit_hosts)) if d.action == "exclude_node" else "",
        "action_reason": slack_prose(cut_prose(d.action_reason, PROSE_CHARS)),
        "collective": escape(collective_text(d)),
        "world": _world(d),
        "line": _code(ev.text, line_chars) if ev is not None else "",
        "where": where,
        "fix": slack_prose(cut_prose(d.primary.fixes[0], PROSE_CHARS)) if d.primary.fixes else "",
        "more_fixes": max(len(d.primary.fixes) - 1, 0),
        "rule": escape(f"{d.primary.rule} {d.primary.name}"),
        "rule_id": escape(d.primary.rule),
    }


def _blocks(d: Diagnosis, line_chars: int) -> dict[str, str]:
    tpl = environment().get_template("slack.mrkdwn")
    ctx = tpl.new_context({"s": view(d, line_chars)})
    out = {name: "".join(tpl.blocks[name](ctx)).strip() for name in BLOCKS}
    if not view(d, line_chars)["line"]:
        out["evidence"] = ""
    if not d.primary.fixes:
        out["fix"] = ""
    return out


def render_slack(d: Diagnosis, verbose: bool = False) -> str:
    """The mrkdwn text of one Slack message, verdict first; always under MAX_CHARS."""
    line_chars = LINE_CHARS
    while True:
        text = environment().get_template("slack.mrkdwn").render(s=view(d, line_chars)).strip() + "\n"
        if len(text) <= MAX_CHARS or line_chars < 100:
            return text[:MAX_CHARS]
        line_chars //= 2


def slack_payload(d: Diagnosis) -> dict[str, Any]:
    """A Block Kit message: `text` is the notification fallback, one section per template block."""
    blocks = _blocks(d, LINE_CHARS)
    sections: list[dict[str, Any]] = [
        {"type": "section", "text": {"type": "mrkdwn", "text": blocks[name][:MAX_CHARS]}}
        for name in ("verdict", "facts", "evidence", "fix")
        if blocks[name]
    ]
    sections.append({"type": "context", "elements": [{"type": "mrkdwn", "text": blocks["footer"][:MAX_CHARS]}]})
    # the notification's text is mrkdwn too: the summary's code spans are Slack's, never cut open
    fallback = f"{escape(d.category)}: {slack_prose(cut_prose(d.summary, 200))}"
    return {"text": fallback, "blocks": sections}


def render_slack_json(d: Diagnosis) -> str:
    return json.dumps(slack_payload(d), indent=2, ensure_ascii=False) + "\n"
