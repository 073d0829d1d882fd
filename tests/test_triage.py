"""Batch triage: telling jobs apart, one row per job whatever the job holds, the table formats, the summary with
unexplained failures clustered by signature, the process pool, and the `ncclpm triage` command."""

from __future__ import annotations

import csv
import io
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from ncclpm.api import diagnose
from ncclpm.cli import main
from ncclpm.triage import TABLE_SCHEMA, find_jobs, render_summary, run_local, to_frame, triage_job, write_table
from ncclpm.triage.signature import signature
from tests.synth.make_jobs import make_jobs

ROOT = Path(__file__).resolve().parents[1]
SLOW = ROOT / "sample_logs" / "nccl_rank0_sample_generation"
CRASH = ROOT / "tests" / "cases" / "rank_crash__exception_4ranks" / "input"


def _tar_gz(folder: Path, target: Path) -> Path:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        tar.add(folder, arcname="job")
    target.write_bytes(buf.getvalue())
    return target


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    out = tmp_path_factory.mktemp("gen") / "jobs"
    rows = make_jobs(out, 30, seed=3)
    return out, {r["job"]: r["expected"] for r in rows}


@pytest.fixture(scope="module")
def table(generated) -> pl.DataFrame:
    out, _ = generated
    return to_frame(run_local(find_jobs([out]), workers=2))


# ----------------------------------------------------------------------------------------- which are jobs


def test_folder_of_archives_and_job_folders(tmp_path: Path) -> None:
    _tar_gz(SLOW, tmp_path / "a.tar.gz")
    (tmp_path / "broken.zip").write_bytes(b"not a zip at all")
    shutil.copytree(SLOW, tmp_path / "b")
    (tmp_path / "README.md").write_text("notes")
    (tmp_path / ".hidden").write_text("x")
    names = [Path(j.name).name for j in find_jobs([tmp_path])]
    assert names == ["a.tar.gz", "b", "broken.zip"]


def test_a_folder_with_a_loose_log_is_one_job(tmp_path: Path) -> None:
    shutil.copytree(CRASH, tmp_path / "job")
    assert [j.name for j in find_jobs([tmp_path / "job"])] == [str(tmp_path / "job")]


@pytest.mark.parametrize("parts", [["node0", "node1"], ["logs"], ["0", "1", "2"], ["logs", "fr"]])
def test_folders_named_like_parts_of_a_job_make_one_job(tmp_path: Path, parts: list[str]) -> None:
    for p in parts:
        (tmp_path / "job" / p).mkdir(parents=True)
        (tmp_path / "job" / p / "rank.log").write_text("[rank0]: hello\n")
    assert len(find_jobs([tmp_path / "job"])) == 1


def test_nested_folders_of_jobs_and_missing_paths(tmp_path: Path) -> None:
    for month in ("2025-10", "2025-11"):
        (tmp_path / month).mkdir()
        _tar_gz(SLOW, tmp_path / month / "x.tgz")
    jobs = find_jobs([tmp_path, tmp_path / "nope"])
    assert [Path(j.name).relative_to(tmp_path).as_posix() for j in jobs] == ["2025-10/x.tgz", "2025-11/x.tgz", "nope"]


# --------------------------------------------------------------------------------------------- one job


def test_an_archive_row_matches_the_folder_diagnosis(tmp_path: Path) -> None:
    row = triage_job(str(_tar_gz(SLOW, tmp_path / "job.tar.gz")))
    d = diagnose([SLOW])
    assert row["category"] == str(d.category) and row["culprit_ranks"] == list(d.culprit_ranks)
    assert (row["failing_op"], row["failing_seq"]) == ("ALLREDUCE", 6764)
    assert row["top_evidence"].startswith("job.tar.gz!/job/slurm-48211.out:") and row["error"] is None
    assert row["seconds"] > 0 and list(tmp_path.iterdir()) == [tmp_path / "job.tar.gz"], "nothing extracted"


@pytest.mark.parametrize("content", [b"", b"\x1f\x8b\x08\x00garbage", bytes(range(256)) * 100])
def test_a_bad_archive_is_an_error_row(tmp_path: Path, content: bytes) -> None:
    bad = tmp_path / "bad.tar.gz"
    bad.write_bytes(content)
    row = triage_job(str(bad))
    assert row["error"] and row["category"] == "unknown" and row["signature"]


def test_a_crash_inside_the_analysis_is_an_error_row(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*_a, **_k):
        raise RuntimeError("analysis exploded on 0xdeadbeef")

    monkeypatch.setattr("ncclpm.ingest.build.build_tables", boom)
    row = triage_job(str(SLOW))
    assert row["error"] == "RuntimeError: analysis exploded on 0xdeadbeef"
    assert row["signature"] == "RuntimeError: analysis exploded on <hex>"


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        (
            "[default3]:[2026-03-01T10:12:00.000] rank3 pid4003: FATAL: shard 17 of 64 has checksum 0xdeadbeef "
            "(/lustre/ckpt/run42/shard_17.pt)",
            "FATAL: shard <n> of <n> has checksum <hex> (<path>)",
        ),
        (
            "[rank1]:[E1103 10:10:02.111 ProcessGroupNCCL.cpp:688] [Rank 1] Watchdog caught collective operation timeout",
            "Watchdog caught collective operation timeout",
        ),
        (
            "NCCL WARN NET/IB : Got completion from peer 10.12.0.13<47205> with status=12 on gpu-a02",
            "NCCL WARN NET/IB : Got completion from peer <ip><<n>> with status=<n> on gpu-a<n>",
        ),
        (
            "connect to [fe80::1ff:fe23:4567:890a]:29500 failed, comm 7f3a9c0012ab34cd uuid "
            "123e4567-e89b-12d3-a456-426614174000",
            "connect to <ip> failed, comm <hex> uuid <uuid>",
        ),
        ("", ""),
    ],
)
def test_signature_masks_what_changes_between_runs(message: str, expected: str) -> None:
    assert signature(message) == expected


# --------------------------------------------------------------------------------------- many jobs, table


def test_every_generated_job_has_its_expected_row(generated, table: pl.DataFrame) -> None:
    _, expected = generated
    assert table.height == len(expected) and table.schema == TABLE_SCHEMA
    got = {r["job"]: "error" if r["error"] else r["category"] for r in table.iter_rows(named=True)}
    assert got == expected
    assert table["job"].to_list() == sorted(expected)


@pytest.mark.parametrize("suffix", [".parquet", ".csv", ".ndjson"])
def test_table_formats(table: pl.DataFrame, tmp_path: Path, suffix: str) -> None:
    out = tmp_path / f"t{suffix}"
    write_table(table, out)
    back = {".parquet": pl.read_parquet, ".csv": pl.read_csv, ".ndjson": pl.read_ndjson}[suffix](out)
    assert back["job"].to_list() == table["job"].to_list()
    assert back["category"].to_list() == table["category"].to_list()
    if suffix == ".csv":
        assert back["culprit_ranks"].fill_null("").to_list() == [",".join(map(str, r)) for r in table["culprit_ranks"]]
    else:
        assert back["culprit_ranks"].to_list() == table["culprit_ranks"].to_list()


def test_parquet_needs_no_pyarrow(tmp_path: Path) -> None:
    code = (
        "import sys; sys.modules['pyarrow'] = None\n"
        "from pathlib import Path\nfrom ncclpm.triage import to_frame, write_table, triage_job\n"
        f"write_table(to_frame([triage_job({str(SLOW)!r})]), Path({str(tmp_path / 't.parquet')!r}))\n"
        "import polars as pl\n"
        f"print(pl.read_parquet({str(tmp_path / 't.parquet')!r})['category'][0])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"},
    )
    assert out.stdout.strip() == "slow_rank_work"


def test_summary_clusters_unexplained_failures(table: pl.DataFrame) -> None:
    md = render_summary(table)
    assert md.startswith(f"# ncclpm triage: {table.height} jobs")
    section = md.split("## Unexplained failures, by signature", 1)[1].split("## Jobs per category", 1)[0]
    unknown = table.filter(pl.col("category").eq("unknown") & pl.col("error").is_null())
    assert f"{unknown.height} jobs with no known cause, in 2 clusters" in section
    assert "`FATAL: checkpoint shard <n> of <n> has checksum <hex>, expected <hex> (<path>)`" in section
    assert "`lustre: ldlm_cli_enqueue failed for <path>: rc = -<n> (ESHUTDOWN) on node<n>`" in section
    assert "## Jobs that could not be read" in md


def test_workers_agree_with_one_process(generated, table: pl.DataFrame) -> None:
    out, _ = generated
    jobs = find_jobs([out])[:5]
    one = to_frame(run_local(jobs, workers=1)).drop("seconds")
    assert one.equals(table.filter(pl.col("job").is_in([j.name for j in jobs])).drop("seconds"))


# ------------------------------------------------------------------------------------------------- the CLI


def test_cli_writes_table_and_summary(generated, tmp_path: Path) -> None:
    out, expected = generated
    res = CliRunner().invoke(
        main, ["triage", str(out), "-o", str(tmp_path / "t.csv"), "--summary", str(tmp_path / "s.md"), "-j", "2"]
    )
    assert res.exit_code == 0, res.output
    with (tmp_path / "t.csv").open() as fh:
        assert len(list(csv.DictReader(fh))) == len(expected)
    assert (tmp_path / "s.md").read_text().startswith("# ncclpm triage")
    assert f"{len(expected)} jobs" in res.stderr


def test_cli_summary_to_stdout_and_bad_extension(tmp_path: Path) -> None:
    res = CliRunner().invoke(main, ["triage", str(SLOW), "-j", "1"])
    assert res.exit_code == 0 and "# ncclpm triage: 1 job" in res.stdout and "`slow_rank_work` | 1 |" in res.stdout
    bad = CliRunner().invoke(main, ["triage", str(SLOW), "-o", str(tmp_path / "t.xlsx")])
    assert bad.exit_code == 2 and "extension" in bad.output


def test_generator_is_deterministic(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    make_jobs(a, 6, seed=1)
    make_jobs(b, 6, seed=1)
    files = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file() and p.name != "expected.csv")
    assert files and all((a / f).read_bytes() == (b / f).read_bytes() for f in files)


def test_a_dead_worker_costs_only_its_own_job(monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker killed mid-run breaks the whole pool: the job it was running is re-run alone, the jobs done are
    kept, the jobs not started go on in a new pool."""
    from concurrent.futures import Future
    from concurrent.futures.process import BrokenProcessPool

    from ncclpm.triage import runner
    from ncclpm.triage.jobs import JobRef

    jobs = [JobRef(f"job{i}", f"/jobs/{i}") for i in range(5)]
    pools: list[list[str]] = []

    class PoolKilledByJob2:
        """Runs jobs in order; job2 kills its worker, which breaks every job submitted after it."""

        def __init__(self, _workers: int, started) -> None:
            self.started, self.dead = started, False
            pools.append([])

        def __enter__(self):
            return self

        def __exit__(self, *_a) -> None:
            return None

        def submit(self, _fn, path: str, name: str, _options: dict) -> Future:
            fut: Future = Future()
            pools[-1].append(name)
            if name == "job2" or self.dead:
                if not self.dead:
                    self.started.put(path)
                self.dead = True
                fut.set_exception(BrokenProcessPool("a worker died"))
            else:
                self.started.put(path)
                fut.set_result(runner.empty_row(name) | {"category": "rank_crash"})
            return fut

    alone: list[str] = []

    def run_alone(job: JobRef, options: dict) -> dict:
        alone.append(job.name)
        return runner._error_row(job, "the worker process died while reading this job (killed? out of memory?)")

    monkeypatch.setattr(runner, "_pool", PoolKilledByJob2)
    monkeypatch.setattr(runner, "_alone", run_alone)
    done: list[str] = []
    rows = runner.run_local(jobs, workers=2, on_done=lambda r: done.append(r["job"]))
    assert [r["job"] for r in rows] == [j.name for j in jobs] and sorted(done) == [j.name for j in jobs]
    assert pools == [["job0", "job1", "job2", "job3", "job4"], ["job3", "job4"]]
    assert alone == ["job2"]
    assert [r["error"] is not None for r in rows] == [False, False, True, False, False]
