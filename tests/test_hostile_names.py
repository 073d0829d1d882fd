"""Hostile and unlucky input, round two (issue 13): what the job is made of. Sources are keyed by identity (two
files with one name are both read), a folder of jobs stays one, text that looks odd is still text, any file name
works, any depth works, and a bad `--patterns` catalog is a usage error.

Each test here failed before its fix (see the commit that added it).
"""

from __future__ import annotations

import io
import json
import os
import shutil
import tarfile
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from ncclpm.api import build, diagnose
from ncclpm.cli import main
from ncclpm.sources.discover import classify, collect
from ncclpm.triage import find_jobs, triage_job

ROOT = Path(__file__).resolve().parents[1]
CASE = ROOT / "tests" / "cases" / "rank0_slow_work__torchrun_3ranks" / "input"
DL = "[rank{}]: RuntimeError: DataLoader timed out after 5 seconds\n"
OOM = "[rank{}]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"


def _verdict(paths: list) -> tuple[str, tuple[int, ...]]:
    d = diagnose(paths)
    return str(d.category), tuple(d.culprit_ranks)


def _events_by_source(paths: list) -> dict[str, set[int]]:
    t = build(paths)
    out: dict[str, set[int]] = {}
    for source, rank in t.events.select("source", "rank").iter_rows():
        out.setdefault(source, set()).add(rank)
    return out


# ------------------------------------------------------------------------------ 1. sources keyed by identity


def test_two_folders_with_the_same_layout_are_both_read_whatever_the_order(tmp_path: Path) -> None:
    for node, line in (("nodeA", DL.format(0)), ("nodeB", OOM.format(1))):
        (tmp_path / node / "attempt_0" / "0").mkdir(parents=True)
        (tmp_path / node / "attempt_0" / "0" / "stderr.log").write_text(line)
    a, b = tmp_path / "nodeA", tmp_path / "nodeB"
    events = _events_by_source([a, b])
    assert events == {"nodeA/attempt_0/0/stderr.log": {0}, "nodeB/attempt_0/0/stderr.log": {1}}
    assert _verdict([a, b]) == _verdict([b, a])


def test_two_files_with_one_name_are_both_read(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "rank0.log").write_text(DL.format(0))
    (tmp_path / "b" / "rank0.log").write_text(OOM.format(1))
    args = [tmp_path / "a" / "rank0.log", tmp_path / "b" / "rank0.log"]
    assert _events_by_source(args) == {"a/rank0.log": {0}, "b/rank0.log": {1}}
    assert _verdict(args) == _verdict(args[::-1])


def test_an_archive_member_added_twice_is_read_twice_under_two_names(tmp_path: Path) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        for text in (DL.format(0), OOM.format(1)):  # `tar -r` appends, it never replaces
            info = tarfile.TarInfo("logs/train.log")
            info.size = len(text)
            tf.addfile(info, io.BytesIO(text.encode()))
    (tmp_path / "job.tar").write_bytes(buf.getvalue())
    job = collect([tmp_path / "job.tar"])
    assert [s.name for s in job.sources] == ["job.tar!/logs/train.log", "job.tar!/logs/train.log (second copy)"]
    assert any("more than one source has this name" in w for w in job.warnings)
    events = _events_by_source([tmp_path / "job.tar"])
    assert events == {"job.tar!/logs/train.log": {0}, "job.tar!/logs/train.log (second copy)": {1}}


def test_the_same_file_given_twice_or_hard_linked_is_read_once(tmp_path: Path) -> None:
    job = tmp_path / "job"
    job.mkdir()
    (job / "rank0.log").write_text(DL.format(0))
    os.link(job / "rank0.log", job / "copy.log")
    collected = collect([job, job / "rank0.log"])
    assert [s.name for s in collected.sources] == ["copy.log"]
    assert sum("same file as copy.log - read once" in w for w in collected.warnings) == 2


# ----------------------------------------------------------------------------- 2. a folder of jobs stays one


def _folder_of_jobs(root: Path, n: int) -> None:
    for i in range(n):
        (root / f"job-{i:02d}").mkdir(parents=True)
        (root / f"job-{i:02d}" / "console.log").write_text(DL.format(i % 4))


def test_a_stray_file_and_an_empty_folder_do_not_merge_a_folder_of_jobs(tmp_path: Path) -> None:
    _folder_of_jobs(tmp_path, 12)
    (tmp_path / "x.log").write_text("notes of the person who collected these\n")
    (tmp_path / "rank0").mkdir()  # a launcher left an empty per-rank folder
    warnings: list[str] = []
    jobs = find_jobs([tmp_path], warnings)
    assert [Path(j.name).name for j in jobs] == [f"job-{i:02d}" for i in range(12)]
    assert any(w.endswith("x.log: a file beside 12 jobs in a folder of jobs - skipped") for w in warnings), warnings
    assert any(w.endswith("rank0: an empty folder beside 12 jobs in a folder of jobs - skipped") for w in warnings)


def _in_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """Triage without worker processes (their start-up costs seconds; the runner is tested in test_triage.py)."""
    import ncclpm.triage

    def run_local(jobs, workers=None, on_done=None, options=None):
        return [triage_job(j.path, j.name, **(options or {})) for j in jobs]

    monkeypatch.setattr(ncclpm.triage, "run_local", run_local)


def test_triage_prints_the_strays_it_skipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _folder_of_jobs(tmp_path / "jobs", 10)
    (tmp_path / "jobs" / "x.log").write_text("stray\n")
    _in_process(monkeypatch)
    res = CliRunner().invoke(main, ["triage", str(tmp_path / "jobs"), "-o", str(tmp_path / "t.csv")])
    assert res.exit_code == 0, res.output
    assert "x.log: a file beside 10 jobs" in res.output
    assert pl.read_csv(tmp_path / "t.csv").height == 10


@pytest.mark.parametrize("extra", [["console.log"], ["logs/"], ["console.log", "fr/"]])
def test_a_few_jobs_beside_a_loose_log_are_still_one_job(tmp_path: Path, extra: list[str]) -> None:
    """Strays are tolerated only beside many jobs: a job folder with two sub-runs and a log stays one job."""
    _folder_of_jobs(tmp_path, 3)
    for e in extra:
        if e.endswith("/"):
            (tmp_path / e).mkdir()
            (tmp_path / e / "rank0.log").write_text(DL.format(0))
        else:
            (tmp_path / e).write_text(DL.format(0))
    assert len(find_jobs([tmp_path])) == 1


def _diagnose_cli(*args: object) -> object:
    return CliRunner().invoke(main, ["diagnose", *map(str, args)])


def test_diagnose_refuses_a_folder_of_jobs_and_points_at_triage(tmp_path: Path) -> None:
    """60 jobs, a stray x.log and an empty rank0/: one merged verdict ('dataloader_hang on ranks 0-3', exit 0)
    before; now exit 2, the jobs counted, the evidence, the stray named, `ncclpm triage DIR` suggested."""
    jobs = tmp_path / "jobs"
    _folder_of_jobs(jobs, 60)
    (jobs / "x.log").write_text("notes of the person who collected these\n")
    (jobs / "rank0").mkdir()
    res = _diagnose_cli(jobs, "-o", tmp_path / "report.md")
    assert res.exit_code == 2, res.output
    assert "60 separate jobs (job-00, job-01, job-02, job-03, ... job-59)" in res.stderr
    assert "rank 0 is in job-00/console.log and in job-04/console.log" in res.stderr
    assert "x.log: in none of the 60 jobs" in res.stderr
    assert f"ncclpm triage {jobs}" in res.stderr and "--one-job" in res.stderr
    assert not (tmp_path / "report.md").exists()  # no report that could be taken for a verdict


def test_diagnose_one_job_reads_them_as_one_and_says_so(tmp_path: Path) -> None:
    _folder_of_jobs(tmp_path / "jobs", 12)
    res = _diagnose_cli(tmp_path / "jobs", "--one-job", "-f", "json")
    assert res.exit_code == 0, res.output
    warnings = json.loads(res.stdout)["warnings"]
    assert any("12 separate jobs" in w and w.endswith("read as one job (--one-job)") for w in warnings), warnings


def test_diagnose_refuses_an_archive_of_jobs_and_two_runs_given_together(tmp_path: Path) -> None:
    _folder_of_jobs(tmp_path / "jobs", 5)  # job-04 holds rank 0 again
    with tarfile.open(tmp_path / "jobs.tar.gz", "w:gz") as tf:
        tf.add(tmp_path / "jobs", arcname="jobs")
    res = _diagnose_cli(tmp_path / "jobs.tar.gz")
    assert res.exit_code == 2 and "5 separate jobs (job-00, job-01, job-02, job-03, job-04)" in res.stderr, res.output
    (tmp_path / "job-04").mkdir()
    (tmp_path / "job-04" / "console.log").write_text(OOM.format(0))
    res = _diagnose_cli(tmp_path / "jobs" / "job-00", tmp_path / "job-04")
    assert res.exit_code == 2 and "rank 0 is in job-00/console.log and in job-04/console.log" in res.stderr


def test_one_job_of_many_nodes_is_still_diagnosed(tmp_path: Path) -> None:
    """Guards: nodes of one job hold different global ranks; torchrun's per-rank folders are local ranks (every
    node has an attempt_0/0/); one job's dumps in two formats hold the same ranks. None is several jobs."""
    job = tmp_path / "job"
    for i, host in enumerate(("gpu-c01", "gpu-c02", "gpu-c03")):
        (job / host / "attempt_0" / "0").mkdir(parents=True)
        (job / host / "attempt_0" / "0" / "stderr.log").write_text("RuntimeError: DataLoader timed out after 5 s\n")
        (job / host / "console.log").write_text(DL.format(2 * i) + OOM.format(2 * i + 1))
    res = _diagnose_cli(job)
    assert res.exit_code == 0 and "separate jobs" not in res.stderr, res.output
    res = _diagnose_cli(CASE / "fr")  # fr/fixed, fr/json, fr/raw: ranks 0-2 in each
    assert res.exit_code == 0 and "separate jobs" not in res.stderr, res.output


# -------------------------------------------------------------------------------- 3. text that looks odd


def _pip_spinner() -> str:
    """What pip's interactive spinner writes: back up, blank, back up, then the next frame."""
    out, width = "Installing build dependencies ... ", 0
    for i in range(300):
        frame = "|/-\\"[i % 4]
        out += "\b" * width + " " * width + "\b" * width + frame
        width = len(frame)
    return out + "\b \bdone\n"


def test_a_log_starting_with_a_pip_spinner_is_read(tmp_path: Path) -> None:
    (tmp_path / "train.log").write_text(_pip_spinner() + DL.format(3))
    assert classify("train.log", (tmp_path / "train.log").read_bytes()) == "text"
    assert _events_by_source([tmp_path]) == {"train.log": {3}}


def test_a_coloured_log_is_read(tmp_path: Path) -> None:
    colour = "".join(f"\x1b[32m{i:>4}\x1b[0m \x1b[1;31mW\x1b[0m\x1b[K\n" for i in range(500))
    (tmp_path / "train.log").write_text(colour + DL.format(2))
    assert _events_by_source([tmp_path]) == {"train.log": {2}}


def test_a_json_lines_log_named_json_is_read_as_text(tmp_path: Path) -> None:
    lines = [{"message": "step 1", "level": "info"}, {"message": DL.format(1).strip(), "level": "error"}]
    (tmp_path / "events.json").write_text("".join(json.dumps(x) + "\n" for x in lines))
    (tmp_path / "error.json").write_text(json.dumps({"message": {"message": "RuntimeError: x", "extraInfo": {}}}))
    job = collect([tmp_path])
    assert {s.name: s.kind for s in job.sources} == {"events.json": "text", "error.json": "errorfile"}
    events = build([tmp_path]).events.filter(pl.col("source") == "events.json")
    assert "dl.timeout" in events["event"].to_list()


# ---------------------------------------------------------------------------- 4. file names that are not UTF-8


def _latin1_job(root: Path) -> Path:
    job = root / "job"
    shutil.copytree(CASE, job)
    raw = os.fsencode(job)
    with open(raw + b"/notes\xe9.txt", "wb") as fh:
        fh.write(b"caf\xe9 notes\n")
    os.makedirs(raw + b"/n\xf6de1", exist_ok=True)
    with open(raw + b"/n\xf6de1/rank7\xff.log", "wb") as fh:
        fh.write(DL.format(7).encode())
    return job


@pytest.mark.parametrize("fmt", ["md", "json", "html", "slack", "slack-json"])
def test_file_names_that_are_not_utf8_are_read_and_shown(tmp_path: Path, fmt: str) -> None:
    job = _latin1_job(tmp_path)
    out = tmp_path / f"r.{fmt}"
    res = CliRunner().invoke(main, ["diagnose", str(job), "-f", fmt, "-o", str(out)])
    assert res.exit_code == 0, res.output
    text = out.read_text(encoding="utf-8")
    assert "\udce9" not in text
    if fmt == "json":
        assert "n\\xf6de1/rank7\\xff.log" in build([job]).sources
        assert json.loads(text)["sources"] == len(build([job]).sources)


def test_a_latin1_name_given_on_the_command_line_and_inside_an_archive(tmp_path: Path) -> None:
    raw = os.fsencode(tmp_path)
    with open(raw + b"/rank5\xe9.log", "wb") as fh:
        fh.write(DL.format(5).encode())
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT, encoding="latin-1") as tf:
        data = DL.format(6).encode()
        info = tarfile.TarInfo("r\xe9sultats/rank6.log")
        info.size = len(data)
        tf.addfile(info, io.BytesIO(data))
    (tmp_path / "job.tar").write_bytes(buf.getvalue())
    events = _events_by_source([os.fsdecode(raw + b"/rank5\xe9.log"), tmp_path / "job.tar"])
    assert {min(v) for v in events.values()} == {5, 6}
    assert all(s.isprintable() for s in events)


def test_triage_of_a_job_with_a_latin1_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _in_process(monkeypatch)
    jobs = tmp_path / "jobs"
    _latin1_job(jobs)
    os.rename(jobs / "job", os.fsdecode(os.fsencode(jobs) + b"/job\xe9"))
    shutil.copytree(CASE, jobs / "other")
    res = CliRunner().invoke(main, ["triage", str(jobs), "-o", str(tmp_path / "t.csv")])
    assert res.exit_code == 0, res.output
    table = pl.read_csv(tmp_path / "t.csv")
    assert table.height == 2 and table["error"].null_count() == 2
    assert any(j.endswith("job\\xe9") for j in table["job"])


def test_control_characters_and_bidi_overrides_never_reach_a_name(tmp_path: Path) -> None:
    (tmp_path / "a\nb\x1b]0;title\x07\u202egol.log").write_text(DL.format(1))
    (tmp_path / "x\x1b[2Jy.log").write_text(DL.format(2))
    assert {s.name for s in collect([tmp_path]).sources} == {"a bgol.log", "xy.log"}


# --------------------------------------------------------------------------------- 8. depth and --patterns


def test_a_folder_1100_levels_deep_is_walked(tmp_path: Path) -> None:
    deep = tmp_path / "job"
    deep.mkdir()
    here = os.getcwd()
    os.chdir(deep)
    try:
        for _ in range(1100):  # Python's recursion limit is 1000: a recursive walk fails here
            os.mkdir("d")
            os.chdir("d")
        Path("rank4.log").write_text(DL.format(4))
        os.chdir(here)
        assert _verdict([deep]) == ("dataloader_hang", (4,))
    finally:
        _remove_deep(deep, here)


def _remove_deep(deep: Path, here: str) -> None:
    """shutil.rmtree (pytest's clean-up too) recurses: take the tree down level by level."""
    os.chdir(deep)
    levels = 0
    while os.path.isdir("d"):
        os.chdir("d")
        levels += 1
    for name in os.listdir("."):
        os.unlink(name)
    for _ in range(levels):
        os.chdir("..")
        os.rmdir("d")
    os.chdir(here)


BAD_CATALOGS = {
    "bad_toml": b"this is [not toml",
    "not_utf8": b"# caf\xe9\n",
    "missing_key": b'[[pattern]]\nid = "x"\nkind = "k"\n',
    "not_a_table": b"pattern = 3\n",
    "too_deep": b"pattern = " + b"[" * 5000 + b"]" * 5000 + b"\n",  # (round three: RecursionError, exit 3)
    "huge_regex": (
        b'[[pattern]]\nid = "big"\nkind = "exception"\nanchor = "xyz"\n'
        b'regex = "xyz(?<detail>(?:a{1,1000}){1,1000})"\nfields = {detail = "str"}\n'
        b'[[pattern.example]]\nline = "xyz aaa"\n'
    ),
}


@pytest.mark.parametrize("kind", sorted(BAD_CATALOGS))
@pytest.mark.parametrize("command", ["diagnose", "catalog"])
def test_a_bad_patterns_catalog_is_a_usage_error(tmp_path: Path, kind: str, command: str) -> None:
    (tmp_path / "pat").mkdir()
    (tmp_path / "pat" / "mine.toml").write_bytes(BAD_CATALOGS[kind])
    args = ["catalog", "check", str(tmp_path / "pat")]
    if command == "diagnose":
        args = ["diagnose", str(CASE), "--patterns", str(tmp_path / "pat")]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 2, res.output
    assert "mine.toml" in res.output and "internal error" not in res.output and "Traceback" not in res.output


def test_two_job_folders_whose_names_print_alike_get_two_names(tmp_path: Path) -> None:
    """Found by the job_folder_names fuzz target: `job` and `job\\n` were two triage rows named alike."""
    _folder_of_jobs(tmp_path, 10)
    for name in ("twin", "twin\n"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "console.log").write_text(DL.format(0))
    names = [Path(j.name).name for j in find_jobs([tmp_path])]
    assert len(names) == 12 and len(set(names)) == 12 and "twin (2)" in names, names
