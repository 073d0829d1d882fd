"""Inputs that blow up memory or time (issue 13, items 9 and 11-14), each run in a child process killed past a
memory cap (or, for time, bounded by a deadline), so that a regression fails instead of taking the machine down.

- a sparse GNU tar member (191 bytes of .tar.gz, 512 MiB of real size) and a sparse log on disk (64 KB of text,
  then a 1 GiB hole): hole bytes are charged to the budgets and never held;
- 2M short lines that all hit an anchor: kept lines are capped per source, with a warning saying how many;
- pasted text with 20k backticks: the fence strip is linear;
- triage's raw-error scan of an 800 MB log reads its first megabytes only;
- `triage -j 1` where a job aborts its process: that job is an error row, the others are diagnosed.
"""

from __future__ import annotations

import base64
import json
import os
import time
from pathlib import Path

import pytest

from ncclpm.api import catalog
from ncclpm.sources import paste
from tests.test_hostile_files import _capped_cli, _capped_python

ROOT = Path(__file__).resolve().parents[1]
CASE = ROOT / "tests" / "cases" / "rank0_slow_work__torchrun_3ranks" / "input"
DL = "[rank{}]: RuntimeError: DataLoader timed out after 5 seconds\n"

# `printf '[rank1]: RuntimeError: DataLoader timed out after 5 seconds\n' x10 > big.log; truncate -s 512M big.log;
#  tar -S -czf sparse.tar.gz big.log` (GNU tar 1.34): one sparse member, 600 bytes of data and a 512 MiB hole.
SPARSE_TAR_GZ = base64.b64decode(
    "H4sIAAAAAAAAA+3TvQrCMBSG4c5exbkCSbQ/0Fk3Jx3FIdpaRG0gTe/fWgWxYItKt/dZzsnPR0Ig+1MxvdgiGJNqxGHY1kan6rbX"
    "0bzpEhUncaB0PNMqkM2ot3qqK2+cSOCs9X37htZ/pl7eXkSF3flH//0BYU9460x51rtU1nXpT9d86Zx1qSyMNytrstzJfTYTW3sx"
    "R9+MI6nygy2zakKW7Kfs//8CAAAAAAAAAAAAAAAAwJAbYnh4qwAoAAA="
)


def _job(tmp_path: Path) -> Path:
    job = tmp_path / "job"
    job.mkdir()
    (job / "rank2.log").write_text(DL.format(2))
    return job


def _report(out: Path) -> dict:
    return json.loads(out.read_text())


# --------------------------------------------------------------------------------------------- 11. sparse


def test_a_sparse_tar_member_is_charged_for_its_holes(tmp_path: Path) -> None:
    job = _job(tmp_path)
    (job / "sparse.tar.gz").write_bytes(SPARSE_TAR_GZ)
    out = tmp_path / "r.json"
    code, usage, err = _capped_cli(["diagnose", str(job), "-f", "json", "-o", str(out)], cap_mb=700, timeout=120)
    assert code == 0, err[-2000:]
    report = _report(out)
    assert any(w.startswith("sparse.tar.gz: ") and "ratio" in w for w in report["warnings"]), report["warnings"]
    assert report["culprit_ranks"] == [2]
    assert usage["rss_mb"] < 700, usage


def _sparse_log(path: Path, hole: int) -> bool:
    """64 KB of text, then a hole of `hole` bytes, then one more line; False if the file system has no holes."""
    with path.open("wb") as fh:
        fh.write(("[rank5]: Epoch 1 step 1 loss 0.5\n" * 2000).encode())
        fh.write(DL.format(5).encode())
        fh.seek(hole, os.SEEK_CUR)
        fh.write(DL.format(6).encode())
    return path.stat().st_blocks * 512 < hole // 2


def test_a_sparse_log_on_disk_is_read_without_its_hole(tmp_path: Path) -> None:
    job = _job(tmp_path)
    if not _sparse_log(job / "crashed_node.log", 1 << 30):
        pytest.skip("this file system does not make sparse files")
    out = tmp_path / "r.json"
    code, usage, err = _capped_cli(["diagnose", str(job), "-f", "json", "-o", str(out)], cap_mb=700, timeout=120)
    assert code == 0, err[-2000:]
    report = _report(out)
    assert any(w.startswith("crashed_node.log: ") and "hole" in w for w in report["warnings"]), report["warnings"]
    assert sorted(report["culprit_ranks"]) == [2, 5, 6]  # the lines before and after the hole are both read
    assert usage["rss_mb"] < 700, usage


# ------------------------------------------------------------------------------------------ 12. kept lines


def test_two_million_matching_lines_are_capped_with_a_warning(tmp_path: Path) -> None:
    job = _job(tmp_path)
    with (job / "progress.log").open("w") as fh:
        fh.write(DL.format(0))  # at the start: kept (the head is kept)
        for i in range(2_000_000):
            fh.write(f"step {i}\n")
        fh.write(DL.format(1))  # at the end, where failures are: kept (the tail is kept)
    out = tmp_path / "r.json"
    code, usage, err = _capped_cli(["diagnose", str(job), "-f", "json", "-o", str(out)], cap_mb=1000, timeout=180)
    assert code == 0, err[-2000:]
    report = _report(out)
    capped = [w for w in report["warnings"] if w.startswith("progress.log: ") and "dropped" in w]
    assert capped and "2,000,002 lines" in capped[0], report["warnings"]
    assert sorted(report["culprit_ranks"]) == [0, 1, 2]
    assert usage["rss_mb"] < 1000, usage


# -------------------------------------------------------------------------------------------- 13. paste


@pytest.mark.parametrize(
    "text", ["`" * 20_000, "`" * 20_000 + "x", "x" + "`" * 20_000 + "x", " " * 5 + "`" * 20_000 + " y"]
)
def test_pasted_backticks_are_linear(text: str) -> None:
    heads = catalog().head_regex()
    start = time.perf_counter()
    paste.normalise_paste(text + "\n" + DL.format(1), heads)
    assert time.perf_counter() - start < 1.0  # quadratic: ~3 s for 20k backticks, 28 s for 60k


def test_fences_are_still_removed() -> None:
    pasted = "```text\n" + DL.format(1) + "```\n```" + DL.format(2).strip() + "```\n"
    assert paste.normalise_paste(pasted, catalog().head_regex()) == DL.format(1) + DL.format(2).strip() + "\n"


# ------------------------------------------------------------------------------------- 14. triage raw scan

_RAW_ERROR = """
import json, resource, sys, time
from ncclpm.sources.discover import collect
from ncclpm.triage.worker import _raw_error
start = time.perf_counter()
line = _raw_error(collect([sys.argv[1]]))
usage = {"seconds": time.perf_counter() - start, "rss_mb": int(next(x for x in open('/proc/self/status') if x.startswith('VmHWM')).split()[1]) >> 10}
print("USAGE " + json.dumps(usage), file=sys.stderr)
print("LINE " + json.dumps(line), file=sys.stderr)
"""


def test_the_raw_error_scan_reads_the_head_of_a_huge_log_only(tmp_path: Path) -> None:
    job = tmp_path / "job"
    job.mkdir()
    block = ("lustre: ldlm_cli_enqueue failed: rc = -108 on node17\n" + "x" * 200 + "\n") * 4000
    with (job / "console.log").open("w") as fh:
        for _ in range(int(400e6 // len(block))):
            fh.write(block)
    code, usage, err = _capped_python(_RAW_ERROR, [str(job)], cap_mb=250, timeout=120)
    assert code == 0, err[-2000:]
    assert "ldlm_cli_enqueue failed" in err
    assert usage["rss_mb"] < 250, usage


# -------------------------------------------------------------------------------- 9. triage -j 1 isolates

# Every Python process started with this folder on its path - the CLI and the pool's spawned workers - aborts on
# the job named "poison": what a Rust panic, a segfault in a C extension or the OOM killer does to a process.
_POISON = """
import os
if os.environ.get("NCCLPM_TEST_POISON"):
    import ncclpm.triage.runner as runner
    import ncclpm.triage.worker as worker

    real = worker.triage_job

    def triage_job(path, name=None, **options):
        if path.endswith("poison"):
            os.abort()
        return real(path, name, **options)

    worker.triage_job = runner.triage_job = triage_job
"""


def test_triage_with_one_worker_survives_a_job_that_aborts_its_process(tmp_path: Path) -> None:
    jobs = tmp_path / "jobs"
    for name in ("a", "poison"):
        (jobs / name).mkdir(parents=True)
        (jobs / name / "rank3.log").write_text(DL.format(3))
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(_POISON)
    out = tmp_path / "t.ndjson"
    code, _, err = _capped_cli(
        ["triage", str(jobs), "-j", "1", "-o", str(out)],
        cap_mb=2000,
        timeout=240,
        env={"NCCLPM_TEST_POISON": "1", "PYTHONPATH": str(tmp_path / "site")},
    )
    assert code == 0, err[-2000:]
    rows = {Path(r["job"]).name: r for r in map(json.loads, out.read_text().splitlines())}
    assert sorted(rows) == ["a", "poison"]
    assert rows["poison"]["error"] and "died" in rows["poison"]["error"]
    assert rows["a"]["category"] == "dataloader_hang" and rows["a"]["error"] is None
