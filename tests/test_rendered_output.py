"""Every report and diff format as a reader sees it (`tests/rendered.py`): Markdown through CommonMark, HTML in headless
Chromium, Slack by Slack's rules, the terminal report by its layout. Outside code nothing shows a backtick or a
backslash: no code span left unrendered, nothing escaped twice (`\\`3 s\\``), no empty code span."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import pytest

from ncclpm.api import diagnose, diff
from ncclpm.render import render
from ncclpm.render.diff import render_diff
from tests.rendered import (
    BROWSER,
    browser_doms,
    html_outside_code,
    md_outside_code,
    md_to_html,
    mrkdwn_outside_code,
    stray_marks,
    text_outside_code,
)

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = sorted(p for p in (ROOT / "sample_logs").iterdir() if p.is_dir())
CASES = [
    ROOT / "tests" / "cases" / name / "input"
    for name in (
        "stacks__checkpoint_pyspy_with_logs",
        "issue4_ib_error_one_host",
        "issue4_settings_do_nothing",
        "excerpt_ib_async_port_error",
        "rank_crash__exception_4ranks",
        "issue4_slurm_time_limit",
        "real_teardown_abort_after_training_done",
        "real_dataloader_stall_split_files",
        "excerpt_ib_port_error_one_host",
    )
]
PAIRS = sorted(p.parent for p in (ROOT / "tests" / "diff_cases").glob("*/expected.toml"))
FORMATS = ("md", "html", "text", "slack", "slack-json")


@cache
def _report(job: Path) -> object:
    return diagnose([job], name=job.parent.name if job.name == "input" else job.name)


@cache
def _diff(pair: Path) -> object:
    return diff([pair / "good"], [pair / "bad"])


def _outside(fmt: str, text: str) -> str:
    if fmt == "md":
        return md_outside_code(text)
    if fmt == "html":
        return html_outside_code(text)
    if fmt == "slack":
        return mrkdwn_outside_code(text)
    if fmt == "slack-json":
        payload = json.loads(text)
        texts = [payload["text"]]
        for block in payload["blocks"]:
            texts += [block["text"]["text"]] if "text" in block else [e["text"] for e in block.get("elements", [])]
        return "\n".join(mrkdwn_outside_code(t) for t in texts)
    return text_outside_code(text)


def _renders() -> list[tuple[str, str, str]]:
    """(what, format, rendered) for every report and diff in every format."""
    out = []
    for job in [*SAMPLES, *CASES]:
        for fmt in FORMATS:
            out.append(
                (f"diagnose {job.parent.name if job.name == 'input' else job.name}", fmt, render(_report(job), fmt))
            )
    for pair in PAIRS:
        for fmt in FORMATS:
            out.append((f"diff {pair.name}", fmt, render_diff(_diff(pair), fmt)))
    return out


@pytest.fixture(scope="module")
def renders() -> list[tuple[str, str, str]]:
    return _renders()


def test_no_backtick_or_backslash_outside_code_in_any_format(renders) -> None:
    bad = []
    for what, fmt, text in renders:
        for line in stray_marks(_outside(fmt, text)):
            bad.append(f"{what} -f {fmt}: {line[:160]}")
    assert not bad, "\n".join(bad[:40])


def test_markdown_has_no_empty_code_span(renders) -> None:
    empty = [what for what, fmt, text in renders if fmt == "md" and "<code></code>" in md_to_html(text)]
    assert not empty, empty


@pytest.mark.skipif(BROWSER is None, reason="chromium is not installed (apt-get install chromium): pages not opened")
def test_html_as_chromium_reads_it(renders, tmp_path: Path) -> None:
    pages = [(what, text) for what, fmt, text in renders if fmt == "html"]
    doms = browser_doms([text for _, text in pages], tmp_path)
    bad = []
    for (what, _), dom in zip(pages, doms, strict=True):
        bad += [f"{what}: {line[:160]}" for line in stray_marks(html_outside_code(dom))]
        assert "<code></code>" not in dom, what
    assert not bad, "\n".join(bad[:40])
