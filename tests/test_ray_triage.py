"""`ncclpm triage --ray`: the same per-job function as Ray tasks gives the same table as the local process pool.

Opt-in: needs the optional extra (`pip install 'nccl-postmortem[ray]'`) and `NCCLPM_TEST_RAY=1` (starting Ray
twice takes a minute or two on a small machine; CI does not install ray, a large download). Run it with
`NCCLPM_TEST_RAY=1 pytest tests/test_ray_triage.py`.
"""

from __future__ import annotations

import os
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

if not os.environ.get("NCCLPM_TEST_RAY"):
    pytest.skip("Ray triage tests are opt-in: set NCCLPM_TEST_RAY=1", allow_module_level=True)
ray = pytest.importorskip("ray")

from ncclpm.cli import main  # noqa: E402
from ncclpm.triage import find_jobs, run_local, run_ray, to_frame  # noqa: E402
from tests.synth.make_jobs import make_jobs  # noqa: E402

SRC = str(Path(__file__).resolve().parents[1] / "src")


@pytest.fixture(scope="module")
def jobs(tmp_path_factory: pytest.TempPathFactory):
    out = tmp_path_factory.mktemp("rayjobs") / "jobs"
    make_jobs(out, 26, seed=5)  # mixed categories, two novel failure modes, one broken archive
    return out, find_jobs([out])


@pytest.fixture(scope="module")
def local(jobs) -> pl.DataFrame:
    return to_frame(run_local(jobs[1], workers=2))


def _env() -> dict[str, str]:
    path = os.environ.get("PYTHONPATH", "")
    return {"PYTHONPATH": SRC + (os.pathsep + path if path else "")}


def test_ray_tasks_give_the_local_table(jobs, local: pl.DataFrame) -> None:
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, runtime_env={"env_vars": _env()})
    try:
        seen: list[str] = []
        remote = to_frame(run_ray(jobs[1], on_done=lambda row: seen.append(row["job"])))
    finally:
        ray.shutdown()
    assert sorted(seen) == local["job"].to_list()
    assert remote.drop("seconds").equals(local.drop("seconds"))
    assert local["error"].is_not_null().sum() >= 1, "a broken archive is a row, on Ray too"


def test_cli_ray_local(jobs, local: pl.DataFrame, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", _env()["PYTHONPATH"])
    monkeypatch.setenv("RAY_DISABLE_IMPORT_WARNING", "1")
    out = tmp_path / "t.parquet"
    res = CliRunner().invoke(main, ["triage", str(jobs[0]), "--ray", "local", "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert pl.read_parquet(out).drop("seconds").equals(local.drop("seconds"))
