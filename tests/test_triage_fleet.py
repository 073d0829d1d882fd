"""The fleet view of triage: failure times, the per-host roll-up, restart storms, progress lines off a terminal,
--select/--ignore/--patterns, --reports, and the fleet page's safety (the page as a person sees it is in
test_fleet_page.py)."""

from __future__ import annotations

import re
import shutil
from datetime import datetime
from html.parser import HTMLParser
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from ncclpm.cli import main
from ncclpm.render.fleet import render_fleet, script_hash
from ncclpm.triage import render_summary, to_frame, triage_job
from ncclpm.triage.fleet import fleet_context
from ncclpm.triage.hosts import host_rollup
from ncclpm.triage.progress import ProgressLines
from ncclpm.triage.recurrence import _storm_run
from ncclpm.triage.worker import empty_row, report_name
from tests.test_output_injection import assert_safe_markdown

ROOT = Path(__file__).resolve().parents[1]
CASES = ROOT / "tests" / "cases"
XID = CASES / "issue4_xid79_kernlog" / "input"
CRASH = CASES / "rank_crash__exception_4ranks" / "input"
STORM_INFO = CASES / "rank_crash__restart_storm_info" / "input"
STORM_DEFAULT = CASES / "rank_crash__restart_storm_default" / "input"


def _run(monkeypatch: pytest.MonkeyPatch, args: list[str]):
    """`ncclpm triage` without worker processes (their start-up costs seconds; the pool is tested elsewhere)."""
    import ncclpm.triage

    def run_local(jobs, workers=None, on_done=None, options=None):
        rows = []
        for j in jobs:
            rows.append(triage_job(j.path, j.name, **(options or {})))
            if on_done is not None:
                on_done(rows[-1])
        return rows

    monkeypatch.setattr(ncclpm.triage, "run_local", run_local)
    return CliRunner().invoke(main, ["triage", *args])


# ------------------------------------------------------------------------------------------------ failure times


def test_failed_at_is_the_first_decisive_event_and_started_at_the_first_line() -> None:
    row = triage_job(str(XID))
    # rank 5's NCCL error at 03:12:45 is the first dated decisive line (the kernel's Xid line carries no year)
    assert row["failed_at"] == datetime(2025, 11, 14, 3, 12, 45)
    assert row["started_at"] == datetime(2025, 11, 14, 3, 11) and row["duration_s"] == 105.0
    assert row["failed_clock"] is None


def test_a_log_without_dates_gives_no_failed_at_but_its_clock(tmp_path: Path) -> None:
    job = tmp_path / "job"
    job.mkdir()
    (job / "rank1.log").write_text(
        "[rank1]:[E1122 08:30:01.000 ProcessGroupNCCL.cpp:1899] started\n"
        "[rank1]:[E1122 08:37:58.331 ProcessGroupNCCL.cpp:1899] RuntimeError: DataLoader timed out after 5 seconds\n"
    )
    row = triage_job(str(job))
    assert row["failed_at"] is None and row["started_at"] is None
    assert row["failed_clock"].startswith("11-22 08:37:58")  # month and day, no year


def test_a_log_without_any_time_gives_nothing(tmp_path: Path) -> None:
    job = tmp_path / "job"
    job.mkdir()
    (job / "rank1.log").write_text("[rank1]: RuntimeError: DataLoader timed out after 5 seconds\n")
    row = triage_job(str(job))
    assert (row["failed_at"], row["failed_clock"], row["started_at"], row["duration_s"]) == (None, None, None, None)


# -------------------------------------------------------------------------------------------------- host roll-up


def _row(job: str, category: str, action: str, hosts: list[str], own: list[str], at: datetime | None) -> dict:
    return empty_row(job) | {
        "category": category,
        "action": action,
        "confidence": 0.9,
        "culprit_hosts": hosts,
        "own_hosts": own,
        "failed_at": at,
        "signature": f"{category} failure",
    }


ROWS = [
    _row("j1", "nvml_driver_failure", "exclude_node", ["gpu-a07"], ["gpu-a07"], datetime(2026, 1, 3, 4, 5)),
    _row("j2", "network_transport", "exclude_node", ["gpu-a07", "gpu-b01"], ["gpu-a07"], datetime(2026, 1, 5, 1, 0)),
    _row("j3", "rank_crash", "fix_code", ["gpu-a07"], [], datetime(2026, 1, 1, 0, 0)),
    _row("j4", "rank_crash", "fix_code", ["gpu-c09"], [], None),
    _row("j5", "nvml_driver_failure", "exclude_node", ["gpu-d01"], ["gpu-d01"], None),
]


def test_the_host_rollup_counts_jobs_evidence_and_first_and_last_seen() -> None:
    hosts = {r["host"]: r for r in host_rollup(to_frame(ROWS)).iter_rows(named=True)}
    a07 = hosts["gpu-a07"]
    assert (a07["jobs"], a07["own_evidence_jobs"], a07["rank_only_jobs"], a07["exclude_node_jobs"]) == (3, 2, 1, 2)
    assert a07["evidence"] == "own and rank on it" and a07["drain"]
    assert a07["categories"] == ["network_transport", "nvml_driver_failure", "rank_crash"]
    assert (a07["first_seen"], a07["last_seen"]) == (datetime(2026, 1, 1), datetime(2026, 1, 5, 1, 0))
    assert hosts["gpu-b01"]["evidence"] == "rank on it" and not hosts["gpu-b01"]["drain"]
    assert not hosts["gpu-d01"]["drain"]  # exclude_node in one job only
    assert next(iter(hosts)) == "gpu-a07"  # hosts to drain first


def test_the_summary_names_hosts_to_drain_and_every_culprit_host() -> None:
    text = render_summary(to_frame(ROWS))
    assert "**Hosts to drain**" in text and "`gpu-a07` (`exclude_node` in 2 of its 3 jobs" in text
    table = text.split("## Culprit hosts", 1)[1].split("\n## ", 1)[0]
    for host in ("gpu-a07", "gpu-b01", "gpu-c09", "gpu-d01"):
        assert f"`{host}`" in table
    assert "| rank on it |" in table and "| own |" in table


def test_own_evidence_comes_from_the_hosts_own_lines() -> None:
    xid = triage_job(str(XID))
    assert xid["action"] == "exclude_node" and xid["own_hosts"] == ["gpu-c02"]
    crash = triage_job(str(CRASH))
    assert crash["culprit_hosts"] and crash["own_hosts"] == []  # blamed because rank 3 ran there: a correlation


def test_hosts_table_is_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    res = _run(monkeypatch, [str(XID), str(CRASH), "--hosts", str(tmp_path / "h.csv"), "-q"])
    assert res.exit_code == 0, res.output
    hosts = pl.read_csv(tmp_path / "h.csv")
    assert set(hosts["host"]) == {"gpu-c02", "localhost"}
    assert dict(zip(hosts["host"], hosts["evidence"], strict=True)) == {"gpu-c02": "own", "localhost": "rank on it"}


# ------------------------------------------------------------------------------------------------- recurrence


@pytest.mark.parametrize("case", [STORM_INFO, STORM_DEFAULT], ids=["restart-lines", "attempt-folders"])
def test_a_real_restart_storm_is_flagged(case: Path) -> None:
    row = triage_job(str(case))
    assert row["category"] == "rank_crash" and row["attempts"] == 3
    assert row["restart_storm"] and row["storm_attempts"] == 2  # attempt 0 crashed; 1 and 2 could not rendezvous
    assert row["storm_node_hours"] is not None and row["storm_node_hours"] > 0
    assert row["hosts_every_attempt"] == ["localhost"]


def test_a_job_run_once_is_no_storm() -> None:
    row = triage_job(str(CRASH))
    assert (row["attempts"], row["restart_storm"], row["storm_node_hours"]) == (1, False, None)


def test_progress_between_attempts_or_another_failure_breaks_a_storm() -> None:
    same = ("exception", "RuntimeError: x")
    assert _storm_run([same, same, same], [4, 4, None]) == 3
    assert _storm_run([same, same, same], [4, 9, 12]) == 1  # each attempt got further: training progresses
    assert _storm_run([("crash", "y"), same, same], [4, None, None]) == 2
    assert _storm_run([same, same, None], [None, None, None]) == 0


# ---------------------------------------------------------------------------------------------------- progress


def test_progress_lines_every_interval_with_rate_and_time_left() -> None:
    now = [0.0]
    said: list[str] = []
    lines = ProgressLines(100, said.append, interval=10, clock=lambda: now[0])
    for _ in range(40):
        now[0] += 0.5
        lines.tick()
    assert said == [
        "ncclpm: triage 20/100 jobs (20%), 2.0 jobs/s, about 40 s left",
        "ncclpm: triage 40/100 jobs (40%), 2.0 jobs/s, about 30 s left",
    ]


def test_a_run_off_a_terminal_prints_progress_lines_and_quiet_prints_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    args = [str(XID), str(CRASH), "-o", str(tmp_path / "t.csv"), "--progress-every", "0"]
    res = _run(monkeypatch, args)
    assert res.exit_code == 0, res.output
    assert re.search(r"ncclpm: triage 1/2 jobs \(50%\), [\d.]+ jobs/s, about .+ left", res.stderr), res.stderr
    quiet = _run(monkeypatch, [*args, "--force", "-q"])
    assert quiet.exit_code == 0 and "ncclpm: triage " not in quiet.stderr


# ------------------------------------------------------------------------------------- options diagnose has too


def test_select_ignore_and_patterns_reach_every_job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "t.ndjson"
    res = _run(monkeypatch, [str(CRASH), "-o", str(out), "--ignore", "CR01", "-q"])
    assert res.exit_code == 0, res.output
    assert pl.read_ndjson(out)["rule"][0] != "CR01"
    res = _run(monkeypatch, [str(CRASH), "-o", str(out), "--force", "--select", "CR01", "-q"])
    assert res.exit_code == 0 and pl.read_ndjson(out)["rule"][0] == "CR01"
    bad = _run(monkeypatch, [str(CRASH), "--select", "NOPE99"])
    assert bad.exit_code == 2 and "no rule 'NOPE99'" in bad.output
    catalog = tmp_path / "extra"
    catalog.mkdir()
    (catalog / "site.toml").write_text(
        '[[pattern]]\nid = "site.checksum"\nkind = "exception"\nseverity = "error"\nanchor = "CHECKSUM"\n'
        "regex = '''CHECKSUM MISMATCH in (?<detail>\\S+)'''\nfields = { detail = \"str\" }\n"
        '  [[pattern.example]]\n  line = "CHECKSUM MISMATCH in shard_17.pt"\n  expect = { detail = "shard_17.pt" }\n'
    )
    job = tmp_path / "job"
    job.mkdir()
    (job / "rank0.log").write_text("[rank0]: step 3 loss 1.2\n[rank0]: CHECKSUM MISMATCH in shard_17.pt\n")
    assert triage_job(str(job))["category"] == "unknown"  # the shipped catalog does not know the site's error
    res = _run(monkeypatch, [str(job), "-o", str(tmp_path / "p.ndjson"), "--patterns", str(catalog), "-q"])
    assert res.exit_code == 0, res.output
    row = pl.read_ndjson(tmp_path / "p.ndjson").row(0, named=True)
    assert (row["category"], row["culprit_ranks"]) == ("rank_crash", [0])


# ------------------------------------------------------------------------------------------ page and reports


def test_reports_are_written_in_the_folder_and_linked_from_the_page(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    for case in (XID, CRASH):
        shutil.copytree(case, jobs / case.parent.name)
    page, reports = tmp_path / "fleet.html", tmp_path / "reports"
    res = _run(monkeypatch, [str(jobs), "-o", str(page), "--reports", str(reports), "-q"])
    assert res.exit_code == 0, res.output
    written = sorted(p.name for p in reports.iterdir())
    assert len(written) == 2 and all(n.endswith(".html") for n in written)
    html = page.read_text()
    for name in written:
        assert f'href="reports/{name}"' in html
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fleet.html", "jobs", "reports"]
    again = _run(monkeypatch, [str(jobs), "-o", str(tmp_path / "f2.html"), "--reports", str(reports), "-q"])
    assert again.exit_code == 2 and "not empty" in again.output  # an earlier run's reports: only with --force


def test_a_report_name_never_leaves_the_folder() -> None:
    for job in ("../../etc/passwd", "/abs/x", "a/../../b", "<img src=x>", "..", ""):
        name = report_name(job)
        assert "/" not in name and not name.startswith(".") and re.fullmatch(r"[A-Za-z0-9._-]+\.html", name), name
    assert report_name("jobs/a") != report_name("jobs_a")


def test_format_by_extension_and_by_option(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    res = _run(monkeypatch, [str(CRASH), "-f", "html", "-q"])
    assert res.exit_code == 0 and res.stdout.startswith("<!DOCTYPE html>")
    res = _run(monkeypatch, [str(CRASH), "-o", str(tmp_path / "s.md"), "-q"])
    assert res.exit_code == 0 and (tmp_path / "s.md").read_text().startswith("# ncclpm triage: 1 job")
    res = _run(monkeypatch, [str(CRASH), "-o", str(tmp_path / "t.txt")])
    assert res.exit_code == 2 and ".html" in res.output


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[str] = []
        self.attrs: list[tuple[str, str, str]] = []
        self.text: list[str] = []
        self.scripts: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.attrs += [(tag, k, v or "") for k, v in attrs]
        self._in_script = tag == "script"

    handle_startendtag = handle_starttag

    def handle_endtag(self, tag: str) -> None:
        self._in_script = False

    def handle_data(self, data: str) -> None:
        (self.scripts if self._in_script else self.text).append(data)


MARKUP = '<script>alert(1)</script><img src=x onerror=alert(2)>"><svg onload=alert(3)>'


def test_hostile_job_names_hosts_and_errors_never_become_markup() -> None:
    rows = [
        _row(f"jobs/{MARKUP}", "rank_crash", "exclude_node", [f"node{MARKUP}"], [f"node{MARKUP}"], datetime(2026, 1, 1))
        | {"top_error": f"RuntimeError: {MARKUP}", "signature": f"sig {MARKUP}", "restart_storm": True}
        | {"attempts": 3, "storm_attempts": 2, "hosts_every_attempt": [f"node{MARKUP}"]},
        _row("jobs/b", "rank_crash", "exclude_node", [f"node{MARKUP}"], [], datetime(2026, 1, 2)),
        empty_row(f"jobs/{MARKUP}-broken") | {"category": "unknown", "error": f"ValueError: {MARKUP}"},
    ]
    page = _Page()
    html = render_fleet(fleet_context(to_frame(rows)))
    page.feed(html)
    assert page.tags.count("script") == 1 and not {"img", "iframe", "object", "embed"} & set(page.tags)
    assert [a for a in page.attrs if a[1].startswith("on")] == []
    shown = "".join(page.text)
    assert MARKUP in shown and f"node{MARKUP}" in shown
    csp = next(v for t, k, v in page.attrs if t == "meta" and k == "content" and "default-src" in v)
    assert "default-src 'none'" in csp and f"script-src '{script_hash(page.scripts[0])}'" in csp
    assert "unsafe-inline'; img" in csp and "script-src 'unsafe" not in csp  # styles inline; scripts by hash only
    assert_safe_markdown(render_summary(to_frame(rows)))


def test_clusters_say_whether_they_are_new_against_the_baseline() -> None:
    from ncclpm.triage.baseline import baseline_context, mark_new

    before = to_frame(ROWS[:2])
    now = to_frame([*ROWS, _row("j6", "cuda_oom", "fix_code", [], [], datetime(2026, 2, 1))])
    now = mark_new(now, before)
    context = fleet_context(now, baseline=baseline_context(now, before, "last_week.parquet"))
    flags = {c["signature"]: c["new"] for c in context["clusters"]}
    assert flags["cuda_oom failure"] and flags["rank_crash failure"]  # new: shown, even the one of a single job
    assert not flags["nvml_driver_failure failure"] and "network_transport failure" not in flags  # seen (1 job)
    page = _Page()
    page.feed(render_fleet(context))
    shown = " ".join("".join(page.text).split())
    assert "against the baseline last_week.parquet (2 jobs)" in shown and "new" in shown
