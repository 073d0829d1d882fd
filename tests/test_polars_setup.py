"""Polars' settings per job (`ncclpm.ingest.polars_setup`): a job of flight-recorder dumps gets them before polars loads,
a text job keeps polars' defaults, and a user's own setting wins."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ncclpm.ingest.polars_setup import FR_SETTINGS, mostly_dumps
from ncclpm.sources.discover import collect
from tests.synth.fr_dumps import generate

_CHILD = """
import json, os, sys
from ncclpm.cli import main
try:
    main(["diagnose", sys.argv[1], "-f", "json"], prog_name="ncclpm")
except SystemExit:
    pass
jemalloc = None
import shutil
if "polars" in sys.modules and shutil.which("nm"):  # what jemalloc read: its option, through the library's symbols
    import ctypes
    maps = [line.split() for line in open("/proc/self/maps") if "_polars_runtime" in line]
    lib = maps[0][-1]
    base = min(int(m[0].split("-")[0], 16) for m in maps if m[2] == "00000000")
    import subprocess
    nm = subprocess.run(["nm", lib], capture_output=True, text=True).stdout.splitlines()
    at = [int(line.split()[0], 16) for line in nm if line.endswith(" _rjem_je_opt_dirty_decay_ms")]
    jemalloc = ctypes.c_ssize_t.from_address(base + at[0]).value if at else None
print(json.dumps({k: os.environ.get(k) for k in sys.argv[2:]} | {"dirty_decay_ms": jemalloc}), file=sys.stderr)
"""


def _dumps(folder: Path, ranks: int = 4) -> Path:
    folder.mkdir()
    for name, data in generate(ranks, 50, 3, "never_joined").items():
        (folder / name).write_bytes(data)
    return folder


def _run(job: Path, extra_env: dict[str, str] | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in FR_SETTINGS}
    env.update(extra_env or {})
    res = subprocess.run(
        [sys.executable, "-c", _CHILD, str(job), *FR_SETTINGS], capture_output=True, text=True, timeout=120, env=env
    )
    return json.loads(res.stderr.strip().splitlines()[-1])


def test_a_job_of_dumps_is_told_from_a_text_job(tmp_path: Path) -> None:
    dumps = _dumps(tmp_path / "fr")
    assert mostly_dumps(collect([dumps]))
    (dumps / "rank0.log").write_bytes(b"[rank0]: RuntimeError: NCCL error\n" * 200_000)  # 7 MB of log: text wins
    assert not mostly_dumps(collect([dumps]))
    assert not mostly_dumps(collect([]))


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc and the library's symbols")
def test_diagnose_gives_a_job_of_dumps_the_settings_before_polars_loads(tmp_path: Path) -> None:
    got = _run(_dumps(tmp_path / "fr"))
    assert got["_RJEM_MALLOC_CONF"].endswith("," + FR_SETTINGS["_RJEM_MALLOC_CONF"])  # after polars' own defaults
    assert got["POLARS_IDEAL_MORSEL_SIZE"] == FR_SETTINGS["POLARS_IDEAL_MORSEL_SIZE"]
    if got["dirty_decay_ms"] is not None:  # found (binutils' nm, polars' symbols): jemalloc took the setting
        assert got["dirty_decay_ms"] == 0


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc and the library's symbols")
def test_a_text_job_and_a_users_setting_keep_theirs(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "rank0.log").write_text("[rank0]: RuntimeError: NCCL error: unhandled system error\n")
    got = _run(logs)
    assert "dirty_decay_ms:0" not in got["_RJEM_MALLOC_CONF"] and got["POLARS_IDEAL_MORSEL_SIZE"] is None
    assert got["dirty_decay_ms"] in (None, 500)
    mine = _run(_dumps(tmp_path / "fr"), {"_RJEM_MALLOC_CONF": "dirty_decay_ms:100"})
    assert mine["_RJEM_MALLOC_CONF"].endswith(",dirty_decay_ms:100")
    assert mine["dirty_decay_ms"] in (None, 100)


def test_a_small_job_gets_one_polars_thread_and_a_large_one_the_pool(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "POLARS_MAX_THREADS"}
    small, large = tmp_path / "small", tmp_path / "large"
    for folder, repeat in ((small, 1), (large, 200_000)):
        folder.mkdir()
        (folder / "rank0.log").write_bytes(b"[rank0]: RuntimeError: NCCL error: unhandled system error\n" * repeat)
    got = {}
    for folder in (small, large):
        res = subprocess.run(
            [sys.executable, "-c", _CHILD, str(folder), "POLARS_MAX_THREADS"],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
        )
        got[folder.name] = json.loads(res.stderr.strip().splitlines()[-1])["POLARS_MAX_THREADS"]
    assert got == {"small": "1", "large": None}
    mine = subprocess.run(
        [sys.executable, "-c", _CHILD, str(small), "POLARS_MAX_THREADS"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env | {"POLARS_MAX_THREADS": "2"},
    )
    assert json.loads(mine.stderr.strip().splitlines()[-1])["POLARS_MAX_THREADS"] == "2"  # the user's wins
