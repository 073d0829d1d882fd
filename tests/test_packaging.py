"""The wheel carries parsers/ and templates/: build it, install it in a fresh venv, run the CLI elsewhere."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_wheel_installs_and_diagnoses_from_another_directory(tmp_path: Path) -> None:
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True, system_site_packages=False).create(env_dir)
    py = env_dir / "bin" / "python"
    subprocess.run([py, "-m", "pip", "install", "-q", str(ROOT)], check=True, timeout=900)
    work = tmp_path / "elsewhere"
    work.mkdir()
    out = subprocess.run(
        [env_dir / "bin" / "ncclpm", "diagnose", str(ROOT / "sample_logs" / "nccl_nvml_unknown_error"), "-f", "json"],
        cwd=work,
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    assert json.loads(out.stdout)["category"] == "nvml_driver_failure"
    where = subprocess.run(
        [
            py,
            "-c",
            "import ncclpm.util.resources as r, ncclpm.render.template_code as t; "
            "print(r.data_dir('templates'), len(t.read_snapshot().codes), len(r._snapshot()))",
        ],
        cwd=work,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "site-packages" in where and "_data" in where
    assert int(where.split()[-1]) >= 15, "the wheel records the catalogs' parse (hatch_build.py)"
    assert int(where.split()[-2]) >= 9, "and the templates' compiled code"
    assert list(work.iterdir()) == [], "nothing is written to the working directory"
    if shutil.which("cc") and not os.environ.get("NCCLPM_PURE_PYTHON"):  # the C helpers, each beside its reference
        native = subprocess.run(
            [
                py,
                "-c",
                "import ncclpm.ingest.text.rawscan as t, ncclpm.ingest.flight_recorder.native as d, "
                "ncclpm.ingest.flight_recorder.scan as s; print(t.native(), d._frdecode is not None, "
                "s._frscan is not None, d._frdecode.__file__)",
            ],
            cwd=work,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        assert native[:3] == ["True", "True", "True"] and "site-packages" in native[3], native


def test_checkout_resolves_data_from_the_repository() -> None:
    from ncclpm.util.resources import data_dir

    assert data_dir("parsers") == ROOT / "parsers" or "_data" in str(data_dir("parsers"))
    assert (data_dir("templates") / "report.md").is_file()
    assert sys.version_info >= (3, 11)
