"""Output injection, round two (issue 13, items 15-17): every field that comes from the input is escaped for the
format it is written in - Markdown, HTML, Slack, a terminal, CSV - wherever it sits in the report.

Two ways in. A real job whose inputs carry the payloads where users' files carry text: a log line, file and archive
names, a flight-recorder dump's `profiling_name` and `comm_lib_version`, a settings script's name, an `error.json`
message with blank lines, the job name. And every string of a real `Diagnosis` replaced by the payload, so a field
added to a report later is covered without anyone adding it here. Markdown is parsed with markdown-it (CommonMark
+ GFM tables), HTML with the standard library parser: the test looks at what a reader would get, not at bytes.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import pickle
import shutil
import tarfile
from enum import Enum
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from markdown_it import MarkdownIt

from ncclpm.api import diagnose
from ncclpm.cli import main
from ncclpm.render import RENDERERS, render
from ncclpm.triage import render_summary, to_frame, write_table
from ncclpm.triage.worker import empty_row

ROOT = Path(__file__).resolve().parents[1]
CASE = ROOT / "tests" / "cases" / "rank0_slow_work__torchrun_3ranks" / "input"
EVIL = "evil.example"
PAYLOAD = (
    "x\n# Forged heading\n\n![pixel](http://evil.example/p.png) [click](http://evil.example/l) "
    "<img src=x onerror=alert(1)> <script>alert(2)</script> <!channel> <http://evil.example|here> ```\n"
    "\x1b]0;pwned title\x07\x1b[2J\x1b]8;;http://evil.example\x1b\\link\x1b]8;;\x1b\\\x9b2J\u202egnp.exe"
    '=HYPERLINK("http://evil.example","x") | `tick` y'
)
URL_ATTRS = {"href", "src", "action", "formaction", "xlink:href", "poster", "srcset", "style", "content"}
TERMINAL_BAD = ("\x1b", "\x9b", "\x07", "\u202e")


def md_tokens(text: str) -> list[Any]:
    """Every token (inline children included) of `text` as CommonMark + GFM tables read it."""
    out = []
    for tok in MarkdownIt("commonmark").enable("table").parse(text):
        out.append(tok)
        out.extend(tok.children or [])
    return out


def assert_safe_markdown(text: str) -> None:
    tokens = md_tokens(text)
    assert not [t for t in tokens if t.type == "image"], "an image from the input"
    links = [t.attrs.get("href", "") for t in tokens if t.type == "link_open"]
    assert not [h for h in links if EVIL in str(h)], links
    html = [t.content for t in tokens if t.type in ("html_inline", "html_block")]
    assert html == [], html
    headings = [tokens[i + 1].content for i, t in enumerate(tokens) if t.type == "heading_open"]
    assert not [h for h in headings if h.startswith(("Forged", "Verdict"))], headings  # no line of its own
    for bad in TERMINAL_BAD:
        assert bad not in text, repr(bad)


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[str] = []
        self.attrs: list[tuple[str, str, str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.attrs += [(tag, k, v or "") for k, v in attrs]

    handle_startendtag = handle_starttag


def assert_safe_html(text: str) -> None:
    page = _Page()
    page.feed(text)
    assert not {"script", "img", "iframe", "object", "embed"} & set(page.tags)
    assert not [a for a in page.attrs if a[1].startswith("on")]
    assert not [a for a in page.attrs if a[1] in URL_ATTRS and EVIL in a[2]]
    for bad in TERMINAL_BAD:
        assert bad not in text, repr(bad)


def _outside_slack_code(text: str) -> str:
    parts = text.split("```")
    return "".join(parts[::2])


def assert_safe_slack(text: str) -> None:
    for raw in ("<img", "<script", "<!channel>", "<http://"):
        assert raw not in text, raw
    assert "# Forged heading" not in _outside_slack_code(text).splitlines()
    for bad in TERMINAL_BAD:
        assert bad not in text, repr(bad)


def assert_safe(fmt: str, text: str) -> None:
    if fmt == "md":
        assert_safe_markdown(text)
    elif fmt == "html":
        assert_safe_html(text)
    elif fmt == "slack":
        assert_safe_slack(text)
    elif fmt == "text":  # a terminal: no escape sequence, no control character, no bidi override of the input's
        for bad in TERMINAL_BAD:
            assert bad not in text, repr(bad)
    elif fmt == "slack-json":
        payload = json.loads(text)
        assert_safe_slack(json.dumps(payload, ensure_ascii=False))
        for block in payload["blocks"]:
            for part in [block.get("text"), *block.get("elements", [])]:
                if part:
                    assert_safe_slack(part["text"])
    else:
        json.loads(text)


# ------------------------------------------------------------------------------- every string of a Diagnosis


NOT_TEXT = {"line_prefix"}  # the catalog's envelope regex, carried for strip_prefix: code, not input


def _poison(value: Any) -> Any:
    """`value` with every string in it replaced by the payload (enums, numbers and dates kept)."""
    container = isinstance(value, str | dict | list | tuple) or dataclasses.is_dataclass(value)
    if isinstance(value, Enum) or not container:
        return value
    if isinstance(value, str):
        return value + " " + PAYLOAD
    if isinstance(value, dict):
        return {k: _poison(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_poison(v) for v in value)
    fields = [f for f in dataclasses.fields(value) if f.init and f.name not in NOT_TEXT]
    return dataclasses.replace(value, **{f.name: _poison(getattr(value, f.name)) for f in fields})


@pytest.fixture(scope="module")
def poisoned():
    case = ROOT / "tests" / "cases" / "rank0_slow_work__torchrun_3ranks_ddp_debug_detail_segfault" / "input"
    return _poison(diagnose([case if case.is_dir() else CASE]))


@pytest.mark.parametrize("fmt", sorted(RENDERERS))
def test_every_string_of_a_diagnosis_is_escaped_in_every_format(poisoned, fmt: str) -> None:
    assert_safe(fmt, render(poisoned, fmt))


# ---------------------------------------------------------------------------------- the same through a real job


def _dump_with(profiling_name: str, version: str) -> bytes:
    from ncclpm.ingest.flight_recorder.decode import _NoGlobalsUnpickler

    dump = _NoGlobalsUnpickler(io.BytesIO((CASE / "fr" / "raw" / "fr_trace_rank_1").read_bytes())).load()
    dump["comm_lib_version"] = version
    for entry in dump["entries"]:
        entry["profiling_name"] = profiling_name
    return pickle.dumps(dump)


@pytest.fixture(scope="module")
def hostile_job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    job = tmp_path_factory.mktemp("inject") / "job"
    shutil.copytree(CASE, job)
    line = PAYLOAD.replace("\n", " ")
    with (job / "rank1.log").open("a") as fh:
        fh.write(f"[rank1]: RuntimeError: DataLoader timed out after 5 seconds {line}\n")
    (job / "fr" / "raw" / "fr_trace_rank_1").write_bytes(_dump_with("nccl:all_reduce " + PAYLOAD, PAYLOAD))
    (job / "launch <img src=x onerror=alert(3)>.sh").write_text("export NCCL_TIMEOUT=300\ntorchrun train.py\n")
    error = {"message": {"message": "RuntimeError: boom\n\n<img src=x onerror=alert(4)>\n\n# Verdict: forged\n"}}
    (job / "torchrun_logs" / "error.json").parent.mkdir(exist_ok=True)
    (job / "torchrun_logs" / "error.json").write_text(json.dumps(error))
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        data = f"[rank2]: RuntimeError: DataLoader timed out after 5 seconds {line}\n".encode()
        info = tarfile.TarInfo("logs/x\n# Forged heading\n![p](http://evil.example/q.png).log")
        info.size = len(data)
        tf.addfile(info, io.BytesIO(data))
    (job / "upload\n# Forged heading.tar").write_bytes(buf.getvalue())
    return job


@pytest.mark.parametrize("fmt", sorted(RENDERERS))
def test_a_job_carrying_markup_in_every_input_field(hostile_job: Path, tmp_path: Path, fmt: str) -> None:
    out = tmp_path / "report"
    name = "job\n# Forged heading <img src=x onerror=alert(5)>"
    res = CliRunner().invoke(main, ["diagnose", str(hostile_job), "--name", name, "-f", fmt, "-o", str(out)])
    assert res.exit_code == 0, res.output
    text = out.read_text(encoding="utf-8")
    assert_safe(fmt, text)
    if fmt == "md":
        assert text.splitlines()[0].startswith("# NCCL post-mortem: job # Forged heading")  # one line, escaped


def test_the_stack_tree_fence_cannot_be_closed_by_a_frame(poisoned) -> None:
    from ncclpm.util.escape import md_fenced

    block = md_fenced(["a ``` b", "````", "ok"])
    fence = block.splitlines()[0]
    assert len(fence) == 5 and block.splitlines()[-1] == fence
    assert [t.type for t in md_tokens(block)] == ["fence"]


# ----------------------------------------------------------------------------------------- triage outputs


def _rows() -> list[dict]:
    rows = []
    for i, name in enumerate(
        ["jobs/a\n# Forged heading", f"jobs/<img src=x onerror=alert({EVIL})>", "=cmd|' /C calc'!A0"]
    ):
        rows.append(
            empty_row(name)
            | {
                "category": "unknown",
                "confidence": 0.2,
                "failing_op": f"ALLREDUCE {PAYLOAD}",
                "top_error": f'=HYPERLINK("http://{EVIL}","click") {i}',
                "top_evidence": "a.log:3",
                "top_evidence_text": PAYLOAD,
                "signature": f"@SUM(1+1) {PAYLOAD}",
                "summary": "-2+3",
            }
        )
    return rows


def test_the_triage_summary_escapes_job_names_and_signatures() -> None:
    frame = to_frame(_rows())
    assert_safe_markdown(render_summary(frame))


def test_csv_cells_never_start_a_formula(tmp_path: Path) -> None:
    out = tmp_path / "t.csv"
    write_table(to_frame(_rows()), out)
    cells = [c for row in csv.reader(out.open(newline="")) for c in row]
    assert [c for c in cells if c[:1] in ("=", "+", "-", "@")] == []
    assert '\'=HYPERLINK("http://evil.example","click") 0' in cells


def test_tables_csv_cells_never_start_a_formula(tmp_path: Path) -> None:
    job = tmp_path / "job"
    job.mkdir()
    (job / "rank1.log").write_text('=HYPERLINK("http://evil.example") [rank1]: RuntimeError: DataLoader timed out\n')
    (job / "rank2.log").write_text("[rank2]: RuntimeError: DataLoader timed out after 5 seconds\n")
    res = CliRunner().invoke(main, ["tables", str(job), "-t", "lines", "-o", str(tmp_path / "lines.csv")])
    assert res.exit_code == 0, res.output
    cells = [c for row in csv.reader((tmp_path / "lines.csv").open(newline="")) for c in row]
    assert [c for c in cells if c[:1] in ("=", "+", "-", "@")] == []


# --------------------------------------------------------------------------------------------- the terminal


@pytest.mark.parametrize("fmt", ["md", "slack", "json", "slack-json"])
def test_nothing_printed_acts_on_the_terminal(hostile_job: Path, fmt: str) -> None:
    res = CliRunner().invoke(main, ["diagnose", str(hostile_job), "-f", fmt])
    assert res.exit_code == 0, res.output
    for bad in TERMINAL_BAD:
        assert bad not in res.output, (bad, fmt)
    if fmt in ("json", "slack-json"):
        json.loads(res.stdout)


def test_warnings_on_stderr_never_act_on_the_terminal(tmp_path: Path) -> None:
    job = tmp_path / "job"
    job.mkdir()
    (job / "rank2.log").write_text("[rank2]: RuntimeError: DataLoader timed out after 5 seconds\n")
    (job / "empty\x1b]0;pwned\x07\x1b[2J.log").write_bytes(b"")
    (job / "junk\x9b2J.bin").write_bytes(bytes(range(256)) * 40)
    res = CliRunner().invoke(main, ["diagnose", str(job)])
    assert res.exit_code == 0
    assert "empty.log: empty file" in res.output
    for bad in TERMINAL_BAD:
        assert bad not in res.output, bad
