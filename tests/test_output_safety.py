"""Output safety: log text never becomes markup, and `-o` writes only where asked, never over a file without --force.

The hostile job carries markup in a log line, in a file name and in the job name: `<script>`, an `<img onerror>`, an
`<svg onload>`, a Markdown image, Slack's `<!channel>` and `<url|text>` controls, a `{{ }}` template expression.
The HTML page is parsed (not grepped) to check that none of it became an element, an attribute or a URL, and that
all of it is still shown as text.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from html.parser import HTMLParser
from pathlib import Path
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

import ncclpm.api
from ncclpm.api import diagnose
from ncclpm.cli import main
from ncclpm.render import RENDERERS, render

ROOT = Path(__file__).resolve().parents[1]
CASE = ROOT / "tests" / "cases" / "rank0_slow_work__torchrun_3ranks" / "input"
MARKUP = (
    '<script>alert(1)</script> <img src=x onerror=alert(2)> "><svg onload=alert(3)> {{ 7*7 }} '
    "![t](http://evil.example/p.png) <!channel> <http://evil.example|click> & &amp; </style><!--"
)
LINE = f"[rank1]: RuntimeError: DataLoader timed out after 5 seconds {MARKUP}\n"
BAD_NAME = "<img src=x onerror=alert(4)>.log"
JOB_NAME = '<script>alert("job")</script>'


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    job = tmp_path_factory.mktemp("xss") / "job"
    job.mkdir()
    (job / "rank1.log").write_text(LINE)
    (job / BAD_NAME).write_text("[rank2]: RuntimeError: DataLoader timed out after 5 seconds\n")
    d = diagnose([job], name=JOB_NAME)
    assert str(d.category) == "dataloader_hang" and 1 in d.culprit_ranks
    return SimpleNamespace(job=job, d=d)


@pytest.fixture(scope="module")
def one_line(tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    """Only the hostile line: it is the decisive line that Slack quotes."""
    job = tmp_path_factory.mktemp("xss1") / "job"
    job.mkdir()
    (job / "rank1.log").write_text(LINE)
    return SimpleNamespace(job=job, d=diagnose([job], name=JOB_NAME))


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[str] = []
        self.attrs: list[tuple[str, str, str]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.attrs += [(tag, k, v or "") for k, v in attrs]

    handle_startendtag = handle_starttag

    def handle_data(self, data: str) -> None:
        self.text.append(data)


@pytest.mark.skipif("html" not in RENDERERS, reason="the HTML report is not built yet")
def test_html_shows_log_markup_as_text_and_never_as_markup(hostile: SimpleNamespace) -> None:
    page = _Page()
    page.feed(render(hostile.d, "html"))
    assert not {"script", "img", "iframe", "object", "embed"} & set(page.tags), set(page.tags)
    assert [a for a in page.attrs if a[1].startswith("on")] == []
    assert [a for a in page.attrs if "javascript:" in a[2] or "evil.example" in a[2]] == []
    shown = "".join(page.text)
    for text in (
        "<script>alert(1)</script>",
        "<img src=x onerror=alert(2)>",
        "{{ 7*7 }}",
        "<!channel>",
        JOB_NAME,
        BAD_NAME,
    ):
        assert text in shown, text
    csp = [v for t, k, v in page.attrs if t == "meta" and k == "content" and "default-src" in v]
    assert csp and "default-src 'none'" in csp[0] and "script-src" not in csp[0], csp


def _slack_strings(fmt: str, d) -> list[str]:
    out = render(d, fmt)
    if fmt == "slack":
        return [out]
    strings: list[str] = []

    def walk(v: object) -> None:
        if isinstance(v, str):
            strings.append(v)
        elif isinstance(v, dict):
            for x in v.values():
                walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)

    walk(json.loads(out))
    return strings


@pytest.mark.skipif("slack" not in RENDERERS, reason="the Slack output is not built yet")
@pytest.mark.parametrize("fmt", ["slack", "slack-json"])
def test_slack_escapes_ampersand_and_angle_brackets(one_line: SimpleNamespace, fmt: str) -> None:
    """In Slack `<!channel>` pings everyone and `<url|text>` is a link: log text must arrive as `&lt;...&gt;`."""
    text = "\n".join(_slack_strings(fmt, one_line.d))
    for raw in ("<script", "<img", "<!channel>", "<http://evil.example", "<svg"):
        assert raw not in text, raw
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text and "&lt;!channel&gt;" in text
    assert "&amp; &amp;amp;" in text  # a literal '&amp;' in the log is shown as such, not decoded
    assert len(render(one_line.d, "slack")) < 4000


def _outside_code(md: str) -> str:
    md = re.sub(r"```.*?```", "", md, flags=re.DOTALL)
    md = "\n".join(line for line in md.splitlines() if not line.startswith(("    ", "\t")))
    return re.sub(r"`[^`\n]*`", "", md)


def test_markdown_keeps_log_markup_inside_code(hostile: SimpleNamespace) -> None:
    """Outside code a `<` is backslash-escaped (CommonMark shows `\\<` as `<` and opens no tag); no entity needed."""
    rest = _outside_code(render(hostile.d, "md")).replace("\\<", "")
    assert "<script" not in rest and "<img" not in rest, rest[:2000]


# ---------------------------------------------------------------------------------------------- -o / --force


def _run(*args: str) -> SimpleNamespace:
    res = CliRunner().invoke(main, list(args))
    assert "Traceback" not in res.output
    return SimpleNamespace(code=res.exit_code, output=res.output)


@pytest.fixture
def sealed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> SimpleNamespace:
    """An empty cwd and TMPDIR, and an empty output folder: anything written shows up in them."""
    cwd, tmp, out = tmp_path / "cwd", tmp_path / "tmpdir", tmp_path / "out"
    for p in (cwd, tmp, out):
        p.mkdir()
    monkeypatch.chdir(cwd)
    monkeypatch.setenv("TMPDIR", str(tmp))
    monkeypatch.setattr(tempfile, "tempdir", None)
    return SimpleNamespace(cwd=cwd, tmp=tmp, out=out, root=tmp_path)


def _no_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """Refusals must come before any work: reading the job would fail the test."""

    def boom(*_a: object, **_k: object) -> None:
        raise AssertionError("the job was read before the output was checked")

    monkeypatch.setattr(ncclpm.api, "diagnose", boom)
    monkeypatch.setattr(ncclpm.api, "build", boom)


def test_an_existing_report_is_never_overwritten_without_force(sealed, monkeypatch: pytest.MonkeyPatch) -> None:
    out = sealed.out / "report.md"
    out.write_text("keep me")
    before = os.stat(out)
    with monkeypatch.context() as m:
        _no_work(m)
        res = _run("diagnose", str(CASE), "-o", str(out))
    assert res.code == 2 and "--force" in res.output
    assert out.read_text() == "keep me" and os.stat(out).st_mtime_ns == before.st_mtime_ns
    res = _run("diagnose", str(CASE), "-o", str(out), "--force")
    assert res.code == 0 and out.read_text().startswith("# NCCL post-mortem")


def test_the_report_is_written_where_asked_and_nowhere_else(sealed) -> None:
    out = sealed.out / "report.json"
    res = _run("diagnose", str(CASE), "-f", "json", "-o", str(out))
    assert res.code == 0
    assert json.loads(out.read_text())["category"] == "slow_rank_work"
    assert [p.name for p in sealed.out.iterdir()] == ["report.json"]
    assert list(sealed.cwd.iterdir()) == [] and list(sealed.tmp.iterdir()) == []


@pytest.mark.parametrize("where", ["missing_folder", "a_folder", "dangling_symlink", "symlink_to_a_file"])
def test_a_bad_output_path_is_a_usage_error_and_creates_nothing(
    sealed, where: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = sealed.root / "elsewhere.md"
    out = {
        "missing_folder": sealed.out / "sub" / "r.md",
        "a_folder": sealed.out,
        "dangling_symlink": sealed.out / "link.md",
        "symlink_to_a_file": sealed.out / "link.md",
    }[where]
    if where == "dangling_symlink":
        out.symlink_to(target)  # -o onto it would write through the link, somewhere not asked for
    if where == "symlink_to_a_file":
        target.write_text("keep me")
        out.symlink_to(target)
    _no_work(monkeypatch)
    res = _run("diagnose", str(CASE), "-o", str(out))
    assert res.code == 2, res.output
    assert re.search(r"does not exist|exists; use --force|is a directory", res.output), res.output
    assert not (sealed.out / "sub").exists()
    assert (not target.exists()) if where == "dangling_symlink" else True
    assert target.read_text() == "keep me" if where == "symlink_to_a_file" else True
    assert list(sealed.cwd.iterdir()) == []


def test_tables_output_follows_the_same_rules(sealed) -> None:
    out = sealed.out / "events.csv"
    out.write_text("keep me")
    res = _run("tables", str(CASE), "-o", str(out))
    assert res.code == 2 and out.read_text() == "keep me"
    res = _run("tables", str(CASE), "-o", str(sealed.out / "sub" / "events.csv"))
    assert res.code == 2 and "does not exist" in res.output and not (sealed.out / "sub").exists()
    res = _run("tables", str(CASE), "-o", str(out), "--force")
    assert res.code == 0 and out.read_text().startswith("source,")
