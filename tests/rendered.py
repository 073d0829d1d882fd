"""Reports as a reader sees them, for tests: Markdown through a CommonMark parser (markdown-it-py, GFM tables on),
HTML as a browser reads it (headless Chromium's DOM), Slack mrkdwn by Slack's rules (``` blocks and `spans` are
code, nothing else is special, a backslash is a backslash), the terminal report by its own layout (the quoted log
lines of EVIDENCE and the stack tree are code, inline code is between ‘ ’). Each `*_outside_code` gives the text a
reader sees outside code, where neither a backtick nor a backslash has any business.

Chromium is Debian's `chromium` (`.ci/run` installs it); `BROWSER` is None without it (the tests that need it skip).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from html.parser import HTMLParser
from pathlib import Path

from markdown_it import MarkdownIt

BROWSER = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
)
CODE_TAGS = {"code", "pre"}
HIDDEN_TAGS = {"style", "script", "head"}


def browser_dom(page: Path, timeout: float = 180) -> str:
    """The DOM Chromium builds from `page` (a fresh profile each time, nothing from the network)."""
    assert BROWSER is not None, "chromium is not installed"
    with tempfile.TemporaryDirectory() as profile:
        res = subprocess.run(
            [BROWSER, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--dump-dom", page.resolve().as_uri()],
            capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
        )  # fmt: skip
    assert res.returncode == 0 and "</html>" in res.stdout, res.stderr[-2000:]
    return res.stdout


_BODY = re.compile(r"<body[^>]*>(.*)</body>", re.S | re.I)
_PAGE_MARK = "ncclpm-page-{}"


def browser_doms(pages: list[str], workdir: Path) -> list[str]:
    """The DOM Chromium builds for each page's body, all read in one launch (a launch costs 1-6 s on a busy
    machine, the reports' pages are two dozen): one document holds the bodies in turn, each after a marker comment.
    A body is complete HTML, so it parses there as it would alone; one that left an element open would show in the
    pieces after it, never hide (the markers must all come back at the top level)."""
    bodies = []
    for i, page in enumerate(pages):
        found = _BODY.search(page)
        assert found, f"page {i} has no <body>"
        bodies.append(f"<!--{_PAGE_MARK.format(i)}-->{found.group(1)}")
    doc = workdir / "pages.html"
    doc.write_text(f'<!doctype html><html><head><meta charset="utf-8"></head><body>{"".join(bodies)}</body></html>')
    dom = browser_dom(doc)
    pieces = re.split(r"<!--ncclpm-page-\d+-->", dom)
    assert len(pieces) == len(pages) + 1, "a page's body swallowed the markers after it"
    return pieces[1:]


class _Outside(HTMLParser):
    """The text of an HTML document outside <code>/<pre> (and outside <style>, <script>, <head>)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.depth = {"code": 0, "hidden": 0}
        self.out: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in CODE_TAGS:
            self.depth["code"] += 1
        elif tag in HIDDEN_TAGS:
            self.depth["hidden"] += 1

    def handle_endtag(self, tag: str) -> None:
        if tag in CODE_TAGS:
            self.depth["code"] = max(0, self.depth["code"] - 1)
        elif tag in HIDDEN_TAGS:
            self.depth["hidden"] = max(0, self.depth["hidden"] - 1)

    def handle_data(self, data: str) -> None:
        if not self.depth["code"] and not self.depth["hidden"]:
            self.out.append(data)


def html_outside_code(html: str) -> str:
    parser = _Outside()
    parser.feed(html)
    return "\n".join(parser.out)


def md_to_html(md: str) -> str:
    return MarkdownIt("commonmark").enable("table").render(md)


def md_outside_code(md: str) -> str:
    return html_outside_code(md_to_html(md))


_SLACK_BLOCK = re.compile(r"```.*?```", re.S)
_SLACK_SPAN = re.compile(r"`[^`\n]+`")


def mrkdwn_outside_code(text: str) -> str:
    return _SLACK_SPAN.sub(" ", _SLACK_BLOCK.sub(" ", text))


_TEXT_SPAN = re.compile("\u2018[^\u2018\u2019]*\u2019", re.S)
CODE_SECTIONS = ("EVIDENCE", "WHERE EACH RANK WAS STUCK")


def text_outside_code(text: str) -> str:
    """The terminal report without its code: under the EVIDENCE and stack-tree headings the lines indented by four
    spaces (quoted log lines, the tree), and anywhere the spans between ‘ ’."""
    kept, section = [], ""
    for line in text.split("\n"):
        if line and not line.startswith(" ") and line.upper() == line and any(c.isalpha() for c in line):
            section = line.strip()
        if section.startswith(CODE_SECTIONS) and line.startswith("    "):
            continue
        kept.append(line)
    return _TEXT_SPAN.sub(" ", "\n".join(kept))


def stray_marks(text: str) -> list[str]:
    """The lines of `text` (outside code) that show a backtick or a backslash."""
    return [line.strip() for line in text.split("\n") if "`" in line or "\\" in line]
