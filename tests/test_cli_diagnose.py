"""`ncclpm diagnose` from the command line: folders, files, stdin, archives; the JSON fields issue 2 promises."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

from click.testing import CliRunner

from ncclpm.cli import main

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "sample_logs" / "nccl_rank0_sample_generation"


def _json(args: list[str], stdin: str | None = None) -> dict:
    res = CliRunner().invoke(main, ["diagnose", *args, "-f", "json"], input=stdin)
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def test_json_has_the_documented_fields() -> None:
    d = _json([str(SAMPLE)])
    assert d["category"] == "slow_rank_work" and d["culprit_ranks"] == [0]
    assert 0 <= d["confidence"] <= 1 and d["schema_version"] == 1
    fc = d["failing_collective"]
    assert fc["op"] == "ALLREDUCE" and fc["seq"] == 6764 and fc["numel_in"] == 1 and fc["timeout_ms"] == 600000
    assert {"numel_out", "pg"} <= fc.keys()
    for f in d["findings"]:
        assert {"rule", "category", "confidence", "culprit_ranks", "summary", "evidence"} <= f.keys()
        for e in f["evidence"]:
            assert {"file", "line", "text"} <= e.keys()
    assert isinstance(d["warnings"], list)


def test_single_file_and_pasted_text_give_the_same_verdict() -> None:
    log = SAMPLE / "slurm-48211.out"
    from_file = _json([str(log)])
    from_stdin = _json(["-"], stdin=log.read_text())
    assert from_file["category"] == from_stdin["category"] == "slow_rank_work"
    assert from_file["culprit_ranks"] == from_stdin["culprit_ranks"] == [0]


def test_an_archive_is_one_job(tmp_path: Path) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        tar.add(SAMPLE, arcname="job")
    archive = tmp_path / "job.tar.gz"
    archive.write_bytes(buf.getvalue())
    d = _json([str(archive)])
    assert d["category"] == "slow_rank_work" and d["culprit_ranks"] == [0]
    assert list(tmp_path.iterdir()) == [archive], "nothing extracted next to the archive"


def test_markdown_report_quotes_evidence_with_file_and_line() -> None:
    res = CliRunner().invoke(main, ["diagnose", str(SAMPLE)])
    assert res.exit_code == 0
    assert "slurm-48211.out:35" in res.stdout and "Generating sample images" in res.stdout
    assert "## Fixes" in res.stdout and "## What not to do" in res.stdout


def test_nothing_readable_is_an_input_error(tmp_path: Path) -> None:
    (tmp_path / "junk.bin").write_bytes(bytes(range(256)) * 64)
    res = CliRunner().invoke(main, ["diagnose", str(tmp_path)])
    assert res.exit_code == 2
    assert "binary content" in res.stderr and "Traceback" not in res.output


def test_an_archive_piped_on_stdin_is_read_as_an_archive() -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        tar.add(SAMPLE, arcname="job")
    res = CliRunner().invoke(main, ["diagnose", "-", "-f", "json"], input=buf.getvalue())
    assert res.exit_code == 0, res.output
    d = json.loads(res.stdout)
    assert d["category"] == "slow_rank_work" and d["culprit_ranks"] == [0]


def test_a_healthy_job_and_unrelated_logs_have_their_own_exit_codes() -> None:
    """0 is a diagnosed failure (unknown included), 4 no failure, 5 not a distributed job's logs (README table)."""
    cases = ROOT / "tests" / "cases"
    healthy = CliRunner().invoke(main, ["diagnose", str(cases / "code_snapshot__healthy_job" / "input"), "-f", "json"])
    assert healthy.exit_code == 4 and json.loads(healthy.stdout)["category"] == "no_failure"
    unrelated = CliRunner().invoke(main, ["diagnose", str(cases / "not_a_training_log__system_logs" / "input")])
    assert unrelated.exit_code == 5 and "`not_a_training_log`" in unrelated.stdout
    assert "are these the job's own logs?" in unrelated.stderr and "not a training job" in unrelated.stdout
    unknown = CliRunner().invoke(main, ["diagnose", "-", "-f", "json"], input=WATCHDOG_ONLY)
    assert unknown.exit_code == 0 and json.loads(unknown.stdout)["category"] == "unknown"


WATCHDOG_ONLY = (
    "[rank0]:[E607 21:52:18.774711289 ProcessGroupNCCL.cpp:1895] [PG ID 1 PG GUID 1 Rank 0] Process group watchdog "
    "thread terminated with exception: [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=3106, "
    "OpType=ALLREDUCE, NumelIn=4096, NumelOut=4096, Timeout(ms)=600000) ran for 600035 milliseconds before timing out.\n"
)


def test_one_waiting_rank_is_a_victim_s_view_with_leads_not_a_bare_unknown() -> None:
    d = _json(["-"], stdin=WATCHDOG_ONLY)
    facts = d["findings"][0]["facts"]
    assert d["category"] == "unknown" and "Most likely, in order: (1)" in d["summary"]
    assert "entered ALLREDUCE #3106 (4096 elements) of process group 1" in facts["proves"][0]
    assert facts["likely_causes"][0].startswith("another rank that crashed or hung")
