"""Hostile and unlucky input, round three (issue 27), part 4: one job or several, decided from identities
(`analysis/identity.py`), both ways.

Single jobs that were refused (exit 2) because two folders held the same rank number: host folders with
local-rank files, Kubernetes pods, per-host dated folders, torchrun `[defaultN]:` streams from two nodes,
restart and requeue folders, checkpoint-resume segments, a requeue under one Slurm id, torchrun's attempt folders.
Several jobs that were merged into one confident verdict: Slurm job id folders, attempt folders of two runs, two
runs given as two files, two jobs of only flight-recorder dumps or only error files, jobs with disjoint ranks, two
runs at the same time, two master addresses. Each test here failed before.
"""

from __future__ import annotations

import json
import shutil
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner

from ncclpm.api import build, diagnose
from ncclpm.cli import main
from ncclpm.triage import find_jobs, triage_job

ROOT = Path(__file__).resolve().parents[1]
CASES = ROOT / "tests" / "cases"
T0 = datetime(2024, 6, 1, 10, 0, 0)


def _stamp(at: datetime | None) -> str:
    return "" if at is None else f"[{at:%Y-%m-%dT%H:%M:%S}.000] "


def _rank_log(ranks: range | list[int], start: datetime | None, failing: int | None = None, steps: int = 4) -> str:
    """Torch-prefixed lines (`[rankN]:`: global ranks) of a small run: progress, then the failing rank's own error
    and the others' watchdog timeouts."""
    out = []
    for i in range(steps):
        for r in ranks:
            at = None if start is None else start + timedelta(seconds=10 * i + r)
            out.append(f"[rank{r}]:{_stamp(at)}step {i + 1} loss {0.9 - 0.01 * i - 0.001 * r:.4f}")
    end = None if start is None else start + timedelta(seconds=10 * steps + 60)
    for r in ranks:
        if r == failing:
            out.append(f"[rank{r}]:{_stamp(end)}torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB")
        elif failing is not None:
            out.append(
                f"[rank{r}]:{_stamp(end)}[Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, "
                "OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600012 milliseconds before timing out."
            )
    return "\n".join(out) + "\n"


def _local_stream(local: range, start: datetime | None, failing: int | None = None) -> str:
    """torchrun `--tee` console lines of one node: `[defaultN]:` local-rank streams, no global rank."""
    out = []
    for i in range(3):
        for lr in local:
            at = None if start is None else start + timedelta(seconds=10 * i + lr)
            out.append(f"[default{lr}]:{_stamp(at)}step {i + 1} loss {0.8 - 0.01 * i:.4f}")
    if failing is not None:
        at = None if start is None else start + timedelta(seconds=90)
        out.append(
            f"[default{failing}]:{_stamp(at)}RuntimeError: DataLoader worker (pid 4242) is killed by signal: Bus error."
        )
    return "\n".join(out) + "\n"


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _cli(*args: object) -> object:
    return CliRunner().invoke(main, ["diagnose", *map(str, args), "-f", "json"])


def _one_job(path: Path | list[Path]) -> dict:
    paths = path if isinstance(path, list) else [path]
    res = _cli(*paths)
    assert res.exit_code == 0 and "separate jobs" not in res.stderr, res.output
    return json.loads(res.stdout)


def _several(path: Path | list[Path], n: int) -> str:
    paths = path if isinstance(path, list) else [path]
    res = _cli(*paths)
    assert res.exit_code == 2 and f"{n} separate jobs" in res.stderr, res.output
    return res.stderr


# ------------------------------------------------------------------------------------------ single jobs


def test_host_folders_with_local_rank_files_are_one_job(tmp_path: Path) -> None:
    for i, host in enumerate(("nid001234", "nid001235")):
        for lr in range(2):
            text = "step 1 loss 0.5\nstep 2 loss 0.4\n"
            if (i, lr) == (1, 1):
                text += "RuntimeError: DataLoader worker (pid 4242) is killed by signal: Bus error.\n"
            _write(tmp_path / host / f"rank{lr}.log", text)
    d = _one_job(tmp_path)
    assert d["category"] == "dataloader_hang", d["category"]


def test_kubernetes_pod_folders_are_one_job(tmp_path: Path) -> None:
    _write(tmp_path / "myjob-master-0" / "pytorch.log", _local_stream(range(4), T0))
    _write(tmp_path / "myjob-worker-0" / "pytorch.log", _local_stream(range(4), T0, failing=2))
    _one_job(tmp_path)


def test_per_host_dated_folders_are_one_job(tmp_path: Path) -> None:
    for host, failing in (("gpu-a01", None), ("gpu-a02", 3)):
        _write(tmp_path / f"{host}_2024-06-01_10-00" / "console.log", _local_stream(range(4), T0, failing))
    _one_job(tmp_path)


def test_torchrun_streams_from_two_nodes_are_one_job(tmp_path: Path) -> None:
    """Two nodes' consoles, each with `[default0]:`..`[default3]:` streams; global ranks 0-3 and 4-7 where a
    line names one."""
    for node, ranks in (("node-a", range(0, 4)), ("node-b", range(4, 8))):
        text = _local_stream(range(4), T0) + "".join(
            f"[default{r % 4}]:[rank{r}]:{_stamp(T0 + timedelta(seconds=70))}[Rank {r}] Watchdog caught collective "
            f"operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran "
            "for 600012 milliseconds before timing out.\n"
            for r in ranks
            if r != 6
        )
        _write(tmp_path / node / "console.log", text)
    d = _one_job(tmp_path)
    assert d["category"] != "unknown"


@pytest.mark.parametrize("word", ["restart", "requeue"])
def test_restart_and_requeue_folders_are_one_job_with_attempts(tmp_path: Path, word: str) -> None:
    """The same global ranks in `restart_1/` and `restart_2/` (undated): attempts of one job; the report says how
    each failed."""
    _write(tmp_path / f"{word}_1" / "console.log", _rank_log(range(4), None, failing=1))
    _write(tmp_path / f"{word}_2" / "console.log", _rank_log(range(4), None, failing=1))
    d = _one_job(tmp_path)
    said = [c for c in d["caveats"] if "attempts" in c]
    assert said and f"{word}_1" in said[0] and f"{word}_2" in said[0] and "CUDA out of memory" in said[0], d["caveats"]


@pytest.mark.parametrize("layout", ["requeue-folders", "one-slurm-id"])
def test_triage_counts_a_requeue_as_the_jobs_attempts(tmp_path: Path, layout: str) -> None:
    """Triage's restart storms read the attempts the report reads: `requeue_1/`, `requeue_2/`, or two neutral
    folders of one Slurm job (a requeue keeps its id) where the same ranks ran at two times - both failed the same
    way at the same step: a storm of 2 (triage counted 1 attempt before, only torchrun's attempts and restarts)."""
    for i, start in enumerate((T0, T0 + timedelta(hours=3))):
        folder = f"requeue_{i + 1}" if layout == "requeue-folders" else ("first", "second")[i]
        env = "SLURM_JOB_ID=4471201\nSLURM_NNODES=1\n" if layout == "one-slurm-id" else ""
        _write(tmp_path / folder / "train.log", env + _rank_log(range(4), start, failing=1))
    row = triage_job(str(tmp_path))
    assert row["category"] == "cuda_oom", row
    assert (row["attempts"], row["restart_storm"], row["storm_attempts"]) == (2, True, 2), row


def test_triage_sees_no_storm_when_the_requeued_run_got_further(tmp_path: Path) -> None:
    for i, (start, steps) in enumerate(((T0, 4), (T0 + timedelta(hours=3), 9))):
        _write(tmp_path / f"requeue_{i + 1}" / "train.log", _rank_log(range(4), start, failing=1, steps=steps))
    row = triage_job(str(tmp_path))
    assert (row["attempts"], row["restart_storm"]) == (2, False), row


def test_checkpoint_resume_segments_are_one_job(tmp_path: Path) -> None:
    _write(tmp_path / "segment_1" / "train.log", _rank_log(range(4), T0, failing=2))
    _write(tmp_path / "resumed_from_step_5000" / "train.log", _rank_log(range(4), T0 + timedelta(hours=2), failing=2))
    d = _one_job(tmp_path)
    assert any("2 attempts" in c for c in d["caveats"]), d["caveats"]


@pytest.mark.parametrize("where", ["log", "env.txt"])
def test_one_slurm_job_requeued_into_two_folders_is_one_job(tmp_path: Path, where: str) -> None:
    """Neutral folder names, the same global ranks at two times, one SLURM_JOB_ID (a requeue keeps it): printed by
    `env` before the launch, or saved beside the log (`env > env.txt`, read as a script)."""
    for name, start in (("first", T0), ("second", T0 + timedelta(hours=3))):
        env = "SLURM_JOB_ID=4471201\nSLURM_NNODES=1\nSLURM_JOB_NODELIST=gpu-a01\n"
        if where == "env.txt":
            _write(tmp_path / name / "env.txt", env)
            env = ""
        _write(tmp_path / name / "train.log", env + _rank_log(range(4), start, failing=0))
    d = _one_job(tmp_path)
    assert not [w for w in d["warnings"] if "two runs" in w], d["warnings"]


def test_torchrun_attempt_folders_of_one_run_are_one_job(tmp_path: Path) -> None:
    run = tmp_path / "logs" / "8f3a1c_k2d9qf1a"
    for attempt, start in ((0, T0), (1, T0 + timedelta(minutes=5))):
        for r in range(2):
            _write(run / f"attempt_{attempt}" / str(r) / "stderr.log", _rank_log([r], start, failing=1 if r else None))
    _one_job(tmp_path)


@pytest.mark.parametrize("stamp", ["%Y%m%d_%H%M%S", "%Y%m%d%H%M", "%Y%m%d"])
def test_folders_named_by_their_date_or_time_are_one_jobs_restarts(tmp_path: Path, stamp: str) -> None:
    """`20250304_093000/`, `202503040930/`, `20250304/` beside the next one: when a run was written, not a Slurm
    id - read as one job (a warning: the same ranks at two times); were 2 separate jobs before."""
    for i, start in enumerate((T0, T0 + timedelta(days=1, hours=2))):
        _write(tmp_path / f"{start:{stamp}}" / "train.log", _rank_log(range(4), start, failing=i + 1))
    d = _one_job(tmp_path)
    assert any("2 attempts" in c for c in d["caveats"]), d["caveats"]


def test_zero_padded_index_folders_are_one_jobs_parts(tmp_path: Path) -> None:
    """`0001/`, `0002/`: an index (a scheduler never pads its ids), not two Slurm jobs."""
    for i in range(2):
        _write(tmp_path / f"{i + 1:04d}" / "train.log", _rank_log(range(2), T0 + timedelta(hours=i), failing=1))
    _one_job(tmp_path)


def test_a_date_like_number_far_from_its_logs_dates_is_still_a_job_id(tmp_path: Path) -> None:
    """Slurm ids reach 8 digits: `20240611/` and `20240613/` whose logs ran on 2024-06-01, far from either date,
    are jobs 20240611 and 20240613. A number named as a job (`slurm-20240601.out`) is a job id whatever its dates."""
    for i, name in enumerate(("20240611", "20240613")):
        _write(tmp_path / "a" / name / "train.log", _rank_log(range(2), T0 + timedelta(hours=i), failing=1))
    assert "20240611 is job 20240611" in _several(tmp_path / "a", 2)
    for i, name in enumerate(("slurm-20240601.out", "slurm-20240602.out")):
        _write(tmp_path / "b" / name, _rank_log(range(2), T0 + timedelta(days=i), failing=1))
    _several(tmp_path / "b", 2)


def test_restart_folders_each_launched_by_torchrun_standalone_are_one_job(tmp_path: Path) -> None:
    """`restart_1/`, `restart_2/`: each a new `torchrun --standalone` launch, so each its own uuid run id - the
    names say they are attempts, the uuids only that torchrun started again (were 2 separate jobs before)."""
    runs = ("6b1f0c2e-4d5a-4c1e-9a7b-0f2d3c4b5a69", "d0e9c8b7-a6f5-4e3d-8c2b-1a0f9e8d7c6b")
    for k, run in enumerate(runs):
        for r in range(2):
            folder = tmp_path / f"restart_{k + 1}" / "tlogs" / f"{run}_q1w2e3r{k}" / "attempt_0" / str(r)
            _write(folder / "stdout.log", _rank_log([r], T0 + timedelta(hours=k), failing=1 if r else None))
    d = _one_job(tmp_path)
    assert any("2 attempts" in c for c in d["caveats"]), d["caveats"]
    # an id given with --rdzv-id names the run: two of them are two runs, attempts by name or not
    for k, run in enumerate(("sweep-a", "sweep-b")):
        folder = tmp_path / "given" / f"attempt_{k + 1}" / f"{run}_q1w2e3r{k}" / "attempt_0" / "0"
        _write(folder / "stdout.log", _rank_log([0], T0 + timedelta(hours=k), failing=0))
    assert "is torchrun run sweep-a" in _several(tmp_path / "given", 2)


def test_attempt_folders_that_ran_at_the_same_time_are_two_jobs(tmp_path: Path) -> None:
    """Attempts run one after another: `attempt_1/` and `attempt_2/` holding rank 0 at the same time are two runs
    (were one job before)."""
    for k in range(2):
        _write(tmp_path / f"attempt_{k + 1}" / "train.log", _rank_log(range(2), T0 + timedelta(seconds=5 * k), 1))
    assert "at the same time" in _several(tmp_path, 2)


def test_weak_signs_read_as_one_job_with_a_warning_naming_them(tmp_path: Path) -> None:
    """Neutral names, the same ranks at disjoint times, nothing else: a restart or a second run? One job, and the
    warning says why it may not be."""
    _write(tmp_path / "monday" / "train.log", _rank_log(range(2), T0, failing=1))
    _write(tmp_path / "tuesday" / "train.log", _rank_log(range(2), T0 + timedelta(days=1), failing=1))
    d = _one_job(tmp_path)
    said = [w for w in d["warnings"] if "read as one job" in w]
    assert said and "monday" in said[0] and "tuesday" in said[0] and "rank 0" in said[0], d["warnings"]


# ------------------------------------------------------------------------------------------ several jobs


def test_slurm_job_id_folders_are_separate_jobs_for_diagnose_and_triage(tmp_path: Path) -> None:
    for i in range(12):
        _write(tmp_path / str(4471201 + i) / "train.log", _rank_log(range(4), T0 + timedelta(hours=i), failing=i % 4))
    said = _several(tmp_path, 12)
    assert "is job 4471201 and" in said and f"ncclpm triage {tmp_path}" in said
    assert len(find_jobs([tmp_path])) == 12


def test_attempt_folders_of_two_runs_are_two_jobs(tmp_path: Path) -> None:
    for name, job in (("attempt_1", "4471201"), ("attempt_2", "4471377")):
        _write(tmp_path / name / "console.log", f"SLURM_JOB_ID={job}\n" + _rank_log(range(4), None, failing=1))
    said = _several(tmp_path, 2)
    assert "attempt_1 is job 4471201 and attempt_2 is job 4471377" in said
    assert f"ncclpm triage {tmp_path / 'attempt_1'} {tmp_path / 'attempt_2'}" in said


@pytest.mark.parametrize("names", [("run_a.log", "run_b.log"), ("slurm-4471201.out", "slurm-4471305.out")])
def test_two_runs_given_as_two_files_are_two_jobs(tmp_path: Path, names: tuple[str, str]) -> None:
    """Two files of the same ranks: at the same time (a sweep), or named by their Slurm ids."""
    for i, (name, failing) in enumerate(zip(names, (1, 3), strict=True)):
        start = T0 + timedelta(seconds=7 * i) if "run" in name else None
        _write(tmp_path / name, _rank_log(range(4), start, failing=failing))
    _several([tmp_path / n for n in names], 2)


def test_two_jobs_of_only_flight_recorder_dumps_are_two_jobs(tmp_path: Path) -> None:
    """Each job's dumps of ranks 0-2, from two real runs; one job's dumps in two formats stay one job."""
    for name, case in (("job-a", "rank0_slow_work__torchrun_3ranks"), ("job-b", "mismatched_collectives__size")):
        shutil.copytree(CASES / case / "input" / "fr" / "raw", tmp_path / name / "fr")
    said = _several(tmp_path, 2)
    assert "dump is in job-a/fr/" in said
    _one_job(CASES / "rank0_slow_work__torchrun_3ranks" / "input" / "fr")


def test_two_jobs_of_only_error_files_are_two_jobs(tmp_path: Path) -> None:
    """torchelastic error files under each run's torchrun log folder (`<run_id>_xxxxxxxx/attempt_0/N/`)."""
    for job, run in (("job-a", "c28c9ada_8r3s5a0z"), ("job-b", "f75a6648_l7kol22x")):
        for lr in range(2):
            doc = {"message": {"message": f"RuntimeError: boom {job}", "extraInfo": {"timestamp": "1717236000"}}}
            _write(tmp_path / job / "logs" / run / "attempt_0" / str(lr) / "error.json", json.dumps(doc))
    said = _several(tmp_path, 2)
    assert "torchrun run c28c9ada" in said


def test_jobs_with_disjoint_ranks_are_two_jobs(tmp_path: Path) -> None:
    """Job A states a world of 2 and holds ranks 0-1; job B states a world of 8 and its logs hold ranks 4-7 (two
    halves of one job would state one world)."""
    _write(tmp_path / "small" / "train.log", "WORLD_SIZE=2\n" + _rank_log(range(2), T0, failing=1))
    _write(tmp_path / "large" / "train.log", "WORLD_SIZE=8\n" + _rank_log(range(4, 8), T0, failing=5))
    said = _several(tmp_path, 2)
    assert "world of 2 ranks" in said


def test_two_runs_at_the_same_time_are_two_jobs(tmp_path: Path) -> None:
    _write(tmp_path / "lr-3e-4" / "train.log", _rank_log(range(4), T0, failing=2))
    _write(tmp_path / "lr-1e-3" / "train.log", _rank_log(range(4), T0 + timedelta(seconds=20), failing=0))
    assert "at the same time" in _several(tmp_path, 2)


def test_two_master_addresses_at_the_same_time_are_two_jobs(tmp_path: Path) -> None:
    """Disjoint ranks, the same time, but each rendezvoused at another host: two jobs."""
    _write(tmp_path / "a" / "train.log", "MASTER_ADDR=gpu-a01\n" + _rank_log(range(2), T0, failing=1))
    _write(tmp_path / "b" / "train.log", "MASTER_ADDR=gpu-b07\n" + _rank_log(range(2, 4), T0, failing=3))
    assert "rendezvoused at gpu-a01" in _several(tmp_path, 2)


def test_one_job_option_still_reads_several_as_one(tmp_path: Path) -> None:
    for i in range(3):
        _write(tmp_path / str(4471201 + i) / "train.log", _rank_log(range(2), T0, failing=1))
    res = CliRunner().invoke(main, ["diagnose", str(tmp_path), "--one-job", "-f", "json"])
    assert res.exit_code == 0
    assert any("3 separate jobs" in w for w in json.loads(res.stdout)["warnings"])


def test_identity_of_a_single_source_or_folder_is_one_job() -> None:
    t = build([CASES / "rank0_slow_work__torchrun_3ranks" / "input"])
    d = diagnose([CASES / "rank0_slow_work__torchrun_3ranks" / "input"])
    assert t.sources and not [c for c in d.caveats if "attempts" in c]
