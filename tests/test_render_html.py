"""The HTML report: self-contained, log text escaped (shown, never run), a per-rank timeline that reads for 8 and
for 1024 ranks, and - when Debian's chromium is installed - a real headless browser renders it without running
anything."""

from __future__ import annotations

import dataclasses
import re
import shutil
from datetime import timedelta
from pathlib import Path

import pytest

from ncclpm.api import diagnose
from ncclpm.model import Diagnosis
from ncclpm.render import render
from ncclpm.render.timeline import MAX_ROWS, build_timeline
from tests.rendered import BROWSER, browser_dom

ROOT = Path(__file__).resolve().parents[1]
CASES = ROOT / "tests" / "cases"
SLOW = ROOT / "sample_logs" / "nccl_rank0_sample_generation"
LATE = CASES / "nccl_slurm_late_rank0" / "input"
OOM8 = CASES / "nccl_cuda_oom_rank5" / "input"
CRASH = CASES / "rank_crash__exception_4ranks" / "input"
PAYLOAD = (
    "<script>document.body.setAttribute('data-pwned','1')</script>"
    "<img src=x onerror=document.body.setAttribute('data-pwned','2')> & loss is NaN"
)


def _big(n: int = 1024) -> Diagnosis:
    """A 1024-rank job made from the 4-rank late-joiner case: rank 0 culprit, the rest waiting, two SIGKILLed."""
    d = diagnose([LATE])
    base = {r["rank"]: r for r in d.ranks}
    rows = [dict(base[0])]
    for k in range(1, n):
        r = {**base[1 + k % 3], "rank": k, "host": f"node{k // 8:03d}"}
        if r["first_error_ts"] is not None:
            r["first_error_ts"] += timedelta(milliseconds=(k * 37) % 3000)
        if k in (517, 518):
            r.update(exit_code=-9, signal="SIGKILL")
        rows.append(r)
    return dataclasses.replace(d, ranks=tuple(rows), world_size=n, world_size_declared=True)


@pytest.fixture(scope="module")
def hostile_job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The 4-rank crash case with HTML/JS in the culprit's error message (in every file that quotes it)."""
    job = tmp_path_factory.mktemp("hostile") / "job"
    shutil.copytree(CRASH, job)
    for f in job.rglob("*"):
        if f.is_file() and b"loss is NaN" in (data := f.read_bytes()):
            f.write_bytes(data.replace(b"loss is NaN", PAYLOAD.encode()))
    return job


def _svg(html: str) -> str:
    return html[html.index("<svg") : html.index("</svg>")]


@pytest.mark.parametrize("job", [SLOW, LATE, OOM8, CRASH], ids=["slow", "late", "oom8", "crash"])
def test_page_is_self_contained(job: Path) -> None:
    html = render(diagnose([job]), "html")
    d = diagnose([job])
    assert html.startswith("<!DOCTYPE html>") and html.rstrip().endswith("</html>")
    assert str(d.category) in html and "<svg" in html
    assert "<script" not in html.lower()
    assert not re.search(r"""(?:src|href)\s*=|@import|url\(""", html), "nothing is loaded from anywhere"
    assert re.findall(r"https?://[^\s\"'<]+", html) == ["http://www.w3.org/2000/svg"]


def test_log_text_is_shown_not_run(hostile_job: Path) -> None:
    d = diagnose([hostile_job])
    assert str(d.category) == "rank_crash" and "<script>" in d.summary
    html = render(d, "html")
    assert "&lt;script&gt;document.body.setAttribute(&#39;data-pwned&#39;,&#39;1&#39;)&lt;/script&gt;" in html
    assert "<script" not in html and "<img" not in html and "&amp; loss is NaN" in html


def test_eight_ranks_one_row_each_culprit_marked() -> None:
    t = build_timeline(diagnose([OOM8]))
    assert t is not None and len(t.rows) == 8
    culprits = [r for r in t.rows if r.role == "culprit"]
    assert [r.label for r in culprits] == ["5"] and "OutOfMemoryError" in culprits[0].note
    assert not t.scaled, "only rank 5 has a timestamp: shown in order, not to scale"


def test_timed_picture_has_the_wait_and_the_watchdog() -> None:
    t = build_timeline(diagnose([SLOW]))
    assert t is not None and t.scaled and t.fire_x is not None and len(t.ticks) >= 3
    waiting = [r for r in t.rows if r.role == "waiting"]
    assert len(waiting) == 3
    for r in waiting:
        kinds = {m.kind: m for m in r.marks}
        assert {"wait", "timeout"} <= kinds.keys()
        assert kinds["wait"].x2 - kinds["wait"].x > 300, "a 10-minute wait spans most of the plot"
    culprit = next(r for r in t.rows if r.role == "culprit")
    assert "Generating sample images" in culprit.note, "no timestamp, but what it last said"


def test_1024_ranks_fold_into_a_few_rows() -> None:
    d = _big()
    t = build_timeline(d)
    assert t is not None and len(t.rows) <= 6 and t.height < 400
    assert t.rows[0].role == "culprit" and t.rows[0].label == "0"
    bands = [r for r in t.rows if r.n_ranks > 1]
    assert sum(r.n_ranks for r in t.rows) == 1024 and any(r.exit_text == "-9 SIGKILL" for r in bands)
    big = max(bands, key=lambda r: r.n_ranks)
    assert big.tag == f"{big.n_ranks} waiting" and any(m.x2 is not None for m in big.marks if m.kind == "timeout")
    html = render(d, "html")
    assert len(html) < 200_000 and "1024 ranks in" in html


def test_many_distinct_bands_are_capped() -> None:
    d = _big(300)
    rows = [{**r, "timeout_seq": r["rank"]} if r["rank"] else r for r in d.ranks]  # 299 different stories
    t = build_timeline(dataclasses.replace(d, ranks=tuple(rows)))
    assert t is not None and len(t.rows) == MAX_ROWS
    assert t.rows[0].role == "culprit" and t.rows[-1].label == f"{300 - MAX_ROWS + 1} other ranks"
    assert sum(r.n_ranks for r in t.rows) == 300


def test_no_rank_no_picture_but_a_page() -> None:
    d = diagnose([CASES / "init_rendezvous_failure__torchrun_port_in_use" / "input"])
    assert build_timeline(d) is None
    html = render(d, "html")
    assert "<svg" not in html and "No rank could be identified" in html and str(d.category) in html


@pytest.mark.skipif(BROWSER is None, reason="chromium not installed")
def test_headless_chromium_renders_without_running_anything(hostile_job: Path, tmp_path: Path) -> None:
    d = diagnose([hostile_job])
    page = tmp_path / "report.html"
    page.write_text(render(d, "html"), encoding="utf-8")
    dom = browser_dom(page)
    assert "Rank 3 died first" in dom and 'id="verdict"' in dom and "<svg" in dom
    assert "data-pwned" not in dom.split("<body", 1)[1].split(">", 1)[0], "no script ran"
    assert "&lt;script&gt;" in dom and "<script" not in dom
