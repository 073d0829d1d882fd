"""Slack: one message, verdict first, culprit, the decisive line in a code block, the top fix; Slack's escaping
of & < > everywhere user text appears; backticks in log text cannot close the code block; always short."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from ncclpm.api import diagnose
from ncclpm.render import render
from ncclpm.render.slack import MAX_CHARS, escape, render_slack, slack_payload
from ncclpm.rules.base import Evidence

ROOT = Path(__file__).resolve().parents[1]
SLOW = ROOT / "sample_logs" / "nccl_rank0_sample_generation"
CASES = sorted(p for p in (ROOT / "tests" / "cases").glob("*/input"))[:12]


@pytest.fixture(scope="module")
def slow():
    return diagnose([SLOW])


def test_verdict_first_then_culprit_line_and_fix(slow) -> None:
    text = render_slack(slow)
    first = text.splitlines()[0]
    assert "*slow_rank_work*" in first and "conclusive" in first
    assert "*Culprit:* rank 0" in text and "ALLREDUCE #6764" in text
    assert "```\n[default0]:[Epoch 10] Generating sample images...\n```" in text
    assert "*Top fix:* Move the slow rank-local work" in text
    assert text.index("*Culprit:*") < text.index("```") < text.index("*Top fix:*")


def test_escaping_and_backticks(slow) -> None:
    line = "x <!channel> & <http://evil|click> ```oops``` `tick` > done"
    bad = dataclasses.replace(
        slow,
        job="<job&name>",
        decisive=(Evidence("a<b>.log", 3, line, 0),),
        primary=dataclasses.replace(slow.primary, summary="A <b>bold</b> & *claim*", fixes=("Set `X=<1>` & retry",)),
    )
    text = render_slack(bad)
    assert "<" not in text and ">" not in text.replace("&gt;", "")
    assert "&lt;!channel&gt; &amp; &lt;http://evil|click&gt;" in text
    assert "&lt;job&amp;name&gt;" in text and "a&lt;b&gt;.log" in text
    block = text.split("```\n", 1)[1].split("\n```", 1)[0]
    assert "`" not in block and "'''oops'''" in block
    assert text.count("```") == 2, "the code block is opened and closed exactly once"
    assert "Set `X=&lt;1&gt;` &amp; retry" in text, "rule prose keeps its inline code"


def test_huge_lines_and_1024_ranks_fit_one_message(slow) -> None:
    ranks = tuple(range(1024))
    huge = "E" * 100_000 + "\n" + "line\n" * 5000
    d = dataclasses.replace(
        slow,
        decisive=(Evidence("x" * 5000, 1, huge, 0),),
        primary=dataclasses.replace(slow.primary, culprit_ranks=ranks, summary="s" * 20_000, fixes=("f" * 20_000,)),
    )
    text = render_slack(d)
    assert len(text) < MAX_CHARS < 4000
    assert "ranks 0–1023 (1024)" in text and text.count("```") == 2
    payload = slack_payload(d)
    assert all(len(b["text"]["text"]) <= 3000 for b in payload["blocks"] if b["type"] == "section")


@pytest.mark.parametrize("case", CASES, ids=[c.parent.name for c in CASES])
def test_every_case_is_short_and_escaped(case: Path) -> None:
    d = diagnose([case])
    text = render(d, "slack")
    assert len(text) < 3000 and str(d.category) in text.splitlines()[0]
    assert "<" not in text and ">" not in text.replace("&gt;", "")


def test_block_kit_is_built_in_python(slow) -> None:
    payload = json.loads(render(slow, "slack-json"))
    assert payload == slack_payload(slow)
    types = [b["type"] for b in payload["blocks"]]
    assert types == ["section", "section", "section", "section", "context"]
    assert payload["text"].startswith("slow_rank_work: Rank 0")
    assert "```" in payload["blocks"][2]["text"]["text"]


def test_escape_is_slacks_three_characters() -> None:
    assert escape("a & b < c > d \"e\" 'f'") == "a &amp; b &lt; c &gt; d \"e\" 'f'"
