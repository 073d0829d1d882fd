"""The fleet page as a person sees it: every real case the project has (the test cases, the sample logs, the
real-issues corpus, the real-gloo and nvrx runs - `tests/fleet_corpus.py`), packed as archives, triaged by the
installed command in a process of its own (not a terminal: progress comes as lines), the page opened in headless
Chromium: the counts, the failures over time, the clusters and the host roll-up naming every culprit host of the
table are on it; and the table has `failed_at` wherever the logs date the failure.

Chromium is Debian's `chromium` (`.ci/run` installs it); where it is absent the browser test skips and says so.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from datetime import datetime, timedelta
from html.parser import HTMLParser
from pathlib import Path
from types import SimpleNamespace

import polars as pl
import pytest

from tests.fleet_corpus import build_fleet, shared
from tests.rendered import BROWSER, browser_dom

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    base = tmp_path_factory.mktemp("fleet")
    archives = build_fleet(base / "jobs")
    out = base / "out"
    out.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    res = subprocess.run(
        [sys.executable, "-m", "ncclpm", "triage", str(base / "jobs"), "-o", str(out / "fleet.html"),
         "--table", str(out / "table.parquet"), "--reports", str(out / "reports"), "--progress-every", "2"],
        capture_output=True, text=True, env=env, timeout=1500, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    table = pl.read_parquet(out / "table.parquet")
    return SimpleNamespace(archives=archives, out=out, table=table, stderr=res.stderr, page=out / "fleet.html")


def test_a_few_hundred_real_archives_give_one_page(fleet: SimpleNamespace) -> None:
    corpus = (shared() / "corpus" / "real-issues").is_dir()
    assert len(fleet.archives) >= (250 if corpus else 130)
    assert fleet.table.height == len(fleet.archives) and fleet.table["error"].null_count() == fleet.table.height
    assert fleet.page.stat().st_size > 50_000
    reports = sorted(p.name for p in (fleet.out / "reports").iterdir())
    assert len(reports) == fleet.table.height
    assert set(fleet.table["report"]) == set(reports)


def test_progress_lines_come_when_stderr_is_not_a_terminal(fleet: SimpleNamespace) -> None:
    lines = re.findall(r"ncclpm: triage (\d+)/(\d+) jobs \(\d+%\), [\d.]+ jobs/s, about .+ left", fleet.stderr)
    assert lines, fleet.stderr[-2000:]
    assert {int(total) for _, total in lines} == {len(fleet.archives)}
    done = [int(n) for n, _ in lines]
    assert done == sorted(done) and 0 < done[-1] < len(fleet.archives)


def _has_timed_error(job: Path) -> tuple[bool, bool]:
    """(the logs date an error, the logs give an error a time of day at least), read independently of triage."""
    from ncclpm.api import build

    events = build([job]).events
    stamps = events.filter((pl.col("severity") == "error") & pl.col("ts").is_not_null())["ts"]
    return bool((stamps.dt.year() > 1970).any()), stamps.len() > 0


def test_failed_at_is_filled_wherever_the_logs_date_the_failure(fleet: SimpleNamespace) -> None:
    rows = {r["job"]: r for r in fleet.table.iter_rows(named=True)}
    failing = [r for r in rows.values() if r["category"] not in ("no_failure", "not_a_training_log")]
    assert sum(r["failed_at"] is not None for r in failing) >= len(failing) // 4
    for r in rows.values():
        if r["failed_at"] is not None and r["started_at"] is not None:
            assert r["started_at"] <= r["failed_at"] + timedelta(seconds=1), r["job"]  # (whole-second stamps)
        assert r["failed_at"] is None or r["failed_clock"] is None, r["job"]
    for archive in fleet.archives[::4]:  # a quarter of them, read again the long way
        row = rows[str(archive)]
        if row["category"] in ("no_failure", "not_a_training_log"):
            continue
        dated, timed = _has_timed_error(archive)
        if dated:
            assert isinstance(row["failed_at"], datetime), row["job"]
        elif timed:
            assert row["failed_at"] is not None or row["failed_clock"] is not None, row["job"]


class _Text(HTMLParser):
    """The page's visible text by section id, and its SVG bars."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.section: str | None = None
        self.text: dict[str, list[str]] = {}
        self.rects = 0
        self.input_hidden: bool | None = None
        self.sortable = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "section" and a.get("id"):
            self.section = a["id"]
        if tag == "rect" and self.section == "timeline":
            self.rects += 1
        if tag == "input" and a.get("id") == "jobfilter":
            self.input_hidden = "hidden" in a
        if tag == "th" and "sortable" in (a.get("class") or ""):
            self.sortable += 1

    def handle_data(self, data: str) -> None:
        if self.section:
            self.text.setdefault(self.section, []).append(data)

    def of(self, section: str) -> str:
        return " ".join(" ".join(self.text.get(section, [])).split())


@pytest.mark.skipif(BROWSER is None, reason="chromium is not installed (apt-get install chromium): page not opened")
def test_the_page_in_chromium_shows_counts_timeline_clusters_and_every_culprit_host(fleet: SimpleNamespace) -> None:
    page = _Text()
    page.feed(browser_dom(fleet.page))
    table = fleet.table
    # the counts by category and by action, as the table has them
    categories = page.of("categories")
    for cat, n in table.group_by("category").len().iter_rows():
        assert re.search(rf"\b{re.escape(cat)} {n}\b", categories), (cat, n, categories[:400])
    actions = page.of("actions")
    for action, n in table.group_by("action").len().iter_rows():
        assert f"{action} {n}" in actions, (action, n)
    # the failures over time: one bar segment per (time bucket, category) of the dated jobs
    dated = table.filter(pl.col("failed_at").is_not_null())
    assert dated.height and page.rects >= dated["category"].n_unique()
    assert f"{dated.height} jobs with a dated failure" in page.of("timeline")
    # the clusters: the largest signature is there with its size
    clusters = page.of("clusters")
    top = table.filter(pl.col("signature") != "").group_by("signature").len().sort("len", descending=True).row(0)
    assert top[0][:40] in clusters and "first seen" in clusters
    # the host roll-up names every culprit host of the table
    hosts = page.of("hosts")
    named = set(table["culprit_hosts"].explode().drop_nulls()) | set(table["own_hosts"].explode().drop_nulls())
    assert named and [h for h in named if h not in hosts] == []
    # every job is in the job table, and the page's script ran (filter box shown, columns sortable)
    jobs = page.of("all-jobs")
    assert all(Path(j).name in jobs for j in table["job"])
    assert page.input_hidden is False and page.sortable >= 8


def test_the_page_reads_without_javascript(fleet: SimpleNamespace) -> None:
    html = fleet.page.read_text()
    page = _Text()
    page.feed(html)
    assert page.input_hidden is True  # without the script the filter box stays hidden, the content is all there
    assert "<svg" in html and "http://" not in html.replace("http://www.w3.org/2000/svg", "")
    assert not re.search(r"""(?:src|href)=["']?(?:https?:)?//""", html)  # nothing loaded from anywhere
