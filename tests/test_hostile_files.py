"""Broken and hostile files in a job folder or archive: each unusable one gets a warning in the report, nothing blocks,
nothing is written, and every other file of the job is still used (same verdict, same sources as without it).

Job A is a real case (rank 0 slow, ranks 1-2 time out) plus files ncclpm cannot use. Job B holds the oddities ncclpm
must READ - UTF-16 (PowerShell), `\\r`-only line ends, a cut last line, invalid UTF-8, a truncated .gz, a zero-filled
tail - each carrying a line for its own rank that must come out in the events table. Memory-hungry inputs (a 100 MB
line, a gzip bomb) run in a child process that is killed past a resident-memory cap, so a regression fails instead of
taking the machine down.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import os
import pickle
import random
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tarfile
import tempfile
import time
import uuid
import zipfile
import zlib
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import polars as pl
import pytest
from click.testing import CliRunner

from ncclpm.api import build, catalog, diagnose
from ncclpm.cli import main
from ncclpm.engine import diagnose_tables
from ncclpm.ingest.build import build_tables
from ncclpm.sources.discover import collect
from tests.test_hostile_pickles import payloads

ROOT = Path(__file__).resolve().parents[1]
CASE = ROOT / "tests" / "cases" / "rank0_slow_work__torchrun_3ranks" / "input"
ATTEMPT = "torchrun_logs/c28c9ada-d5f0-4e66-b025-635c6b2aa019_8r3s5a0z/attempt_0"
DL = "[rank{}]: RuntimeError: DataLoader timed out after 5 seconds"
WATCHDOG = (
    "[rank{0}]:[E ProcessGroupNCCL.cpp:616] [Rank {0}] Watchdog caught collective operation timeout: "
    "WorkNCCL(SeqNum=5, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600001 "
    "milliseconds before timing out."
)


@contextlib.contextmanager
def _deadline(seconds: int) -> Iterator[None]:
    """Fail (instead of hanging the suite) if ncclpm blocks, e.g. opening a FIFO."""

    def boom(*_: object) -> None:
        raise TimeoutError(f"ncclpm blocked for {seconds} s")

    old = signal.signal(signal.SIGALRM, boom)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _cli_json(args: list[str], out: Path) -> tuple[int, dict, str]:
    with _deadline(120):
        res = CliRunner().invoke(main, ["diagnose", *args, "-f", "json", "-o", str(out), "--force"])
    assert "Traceback" not in res.output, res.output
    return res.exit_code, json.loads(out.read_text()) if out.exists() else {}, res.output


@pytest.fixture(scope="module")
def clean() -> SimpleNamespace:
    d = diagnose([CASE])
    return SimpleNamespace(
        category=str(d.category), culprits=list(d.culprit_ranks), sources=frozenset(build([CASE]).sources)
    )


def _junk() -> bytes:
    return bytes(b for b in random.Random(0).randbytes(6000) if b != 10)[:4096]  # deterministic, no newlines


def _gzip_cut(text: str) -> bytes:
    """A gzip of `text` padded with varied filler lines, cut in the middle (a partial upload)."""
    rnd = random.Random(1)
    filler = "".join(f"step {i} loss {rnd.random():.6f}\n" for i in range(100_000))
    data = gzip.compress((text + "\n" + filler).encode())
    return data[: len(data) // 2]


# ------------------------------------------------------------------------------------- job A: unusable files

# relative path -> (content, regex the warning naming it must match)
UNUSABLE: dict[str, tuple[bytes, str]] = {
    "empty.log": (b"", r"empty file"),
    "junk.bin": (_junk(), r"binary content"),
    "junk.log.gz": (gzip.compress(_junk()), r"binary content"),
    "not_really.log.gz": (b"\x1f\x8b\x08\x00this is not deflate data", r"corrupt gzip"),
    "fr/cut/fr_trace_rank_1": ((CASE / "fr/raw/fr_trace_rank_1").read_bytes()[:700], r"truncated"),
    "fr/cut/fr_trace_rank_2.json": ((CASE / "fr/json/fr_trace_rank_2.json").read_bytes()[:400], r"unreadable json"),
    "fr/deep/fr_trace_rank_3.json": (
        b'{"version": "2.10", "entries": ' + b"[" * 200_000 + b"]" * 200_000 + b"}",
        r"nesting too deep|unreadable",
    ),
    f"{ATTEMPT}/7/error.json": (
        b'{"message": {"message": "RuntimeError: boom", "extraInfo": {"py_callstack": "Tr',
        r"unreadable torchelastic error file",
    ),
    "error_list.json": (b'[{"message": "RuntimeError: boom"}]', r"without a torchelastic error message"),
}
SPECIAL = {  # created by `_make_special`; name -> regex of its warning
    "pipe.log": r"not a regular file",
    "socket.log": r"not a regular file",
    "loop": r"symlinked folder not followed",
    "logs/up": r"symlinked folder not followed",
    "a.log": r"symlink loop",
    "b.log": r"symlink loop",
    "passwd.log": r"outside the job folder",
    "gone.log": r"cannot be read",
}


def _make_special(job: Path) -> dict[str, str]:
    os.mkfifo(job / "pipe.log")  # opening it for reading would block for ever
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(job / "socket.log"))
    (job / "loop").symlink_to(".", target_is_directory=True)
    (job / "logs").mkdir()
    (job / "logs" / "up").symlink_to("..", target_is_directory=True)
    (job / "a.log").symlink_to("b.log")
    (job / "b.log").symlink_to("a.log")
    (job / "passwd.log").symlink_to("/etc/passwd")
    (job / "gone.log").symlink_to("nowhere.log")
    (job / "rank9.log").mkdir()  # a folder named like a file: walked, nothing in it
    special = dict(SPECIAL)
    try:
        os.mknod(job / "null.dev", stat.S_IFCHR | 0o600, os.makedev(1, 3))
        special["null.dev"] = r"not a regular file"
    except OSError:  # no CAP_MKNOD in this container
        pass
    return special


@pytest.fixture(scope="module")
def job_a(tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    job = tmp_path_factory.mktemp("a") / "job"
    shutil.copytree(CASE, job)
    for rel, (data, _) in UNUSABLE.items():
        (job / rel).parent.mkdir(parents=True, exist_ok=True)
        (job / rel).write_bytes(data)
    special = _make_special(job)
    code, report, output = _cli_json([str(job)], job.parent / "report.json")
    with _deadline(60):
        sources = set(build([job]).sources)
    return SimpleNamespace(code=code, report=report, output=output, special=special, sources=sources)


@pytest.mark.parametrize("rel", sorted(UNUSABLE))
def test_each_unusable_file_is_named_in_a_warning(job_a: SimpleNamespace, rel: str) -> None:
    mine = [w for w in job_a.report["warnings"] if w.startswith(f"{rel}: ") or w.startswith(f"{rel} ")]
    assert mine, job_a.report["warnings"]
    assert any(re.search(UNUSABLE[rel][1], w) for w in mine), mine


@pytest.mark.parametrize("rel", sorted(SPECIAL))
def test_fifos_sockets_and_symlinks_are_skipped_with_a_warning(job_a: SimpleNamespace, rel: str) -> None:
    mine = [w for w in job_a.report["warnings"] if w.startswith(f"{rel}: ")]
    assert any(re.search(job_a.special[rel], w) for w in mine), (mine, job_a.report["warnings"])


def test_the_rest_of_job_a_is_diagnosed_as_without_the_bad_files(job_a: SimpleNamespace, clean) -> None:
    assert job_a.code == 0, job_a.output
    assert (job_a.report["category"], job_a.report["culprit_ranks"]) == (clean.category, clean.culprits)
    assert clean.sources <= job_a.sources
    assert not any(s.startswith(("passwd.log", "a.log", "b.log", "loop/", "logs/up/")) for s in job_a.sources)
    if "null.dev" in job_a.special:
        assert any(w.startswith("null.dev: ") for w in job_a.report["warnings"])


# ------------------------------------------------------------------------------------- job B: read them

READABLE: dict[str, bytes] = {
    "powershell.log": ("\ufeff" + WATCHDOG.format(1) + "\r\n").encode("utf-16-le"),  # Out-File default
    "utf16be.log": ("\ufeff" + DL.format(2) + "\n").encode("utf-16-be"),
    "no_bom_le.log": (WATCHDOG.format(12) + "\r\n").encode("utf-16-le"),  # .NET's Encoding.Unicode, no BOM
    "no_bom_be.log": (DL.format(13) + "\n").encode("utf-16-be"),
    "old_mac.log": ("step 1\r" + DL.format(3) + "\rstep 2\r").encode(),
    "cut_midline.log": (DL.format(4) + "\n[rank4]: Traceback (most rec").encode(),  # no final newline
    "latin1.log": b"caf\xe9 \xff\xfe garbage\n" + DL.format(5).encode() + b"\n",
    "truncated.log.gz": _gzip_cut(DL.format(6)),
    "plain_text.log.gz": (DL.format(7) + "\n").encode(),  # named .gz, is not gzip
    "crashed_node.log": (DL.format(8) + "\n").encode() + b"\0" * 8192,  # zero-filled tail after a crash
    f"{ATTEMPT}/9/error.json": json.dumps({"message": {"message": "RuntimeError: boom", "extraInfo": ["x"]}}).encode(),
    "error_rank99999999999.json": json.dumps({"message": "RuntimeError: far too big a rank"}).encode(),
    "utf8_bom.log": ("\ufeff" + DL.format(10) + "\n").encode(),
    "crlf.log": (DL.format(11) + "\r\n").encode(),
}
# source -> (rank, event) that must be in the events table
EXPECTED_EVENTS = {
    "powershell.log": (1, "pg.watchdog_timeout"),
    "utf16be.log": (2, "dl.timeout"),
    "no_bom_le.log": (12, "pg.watchdog_timeout"),
    "no_bom_be.log": (13, "dl.timeout"),
    "old_mac.log": (3, "dl.timeout"),
    "cut_midline.log": (4, "dl.timeout"),
    "latin1.log": (5, "dl.timeout"),
    "truncated.log.gz": (6, "dl.timeout"),
    "plain_text.log.gz": (7, "dl.timeout"),
    "crashed_node.log": (8, "dl.timeout"),
    f"{ATTEMPT}/9/error.json": (9, "elastic.error_file"),
    "error_rank99999999999.json": (None, "elastic.error_file"),
    "utf8_bom.log": (10, "dl.timeout"),
    "crlf.log": (11, "dl.timeout"),
}
EXPECTED_WARNINGS = {"latin1.log": "not valid UTF-8", "truncated.log.gz": "truncated or corrupt gzip"}


@pytest.fixture(scope="module")
def job_b(tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    job = tmp_path_factory.mktemp("b") / "job"
    for rel, data in READABLE.items():
        (job / rel).parent.mkdir(parents=True, exist_ok=True)
        (job / rel).write_bytes(data)
    t = build([job])
    return SimpleNamespace(events=t.events, warnings=t.warnings, sources=set(t.sources))


@pytest.mark.parametrize("rel", sorted(READABLE))
def test_each_odd_but_readable_file_is_read(job_b: SimpleNamespace, rel: str) -> None:
    rank, event = EXPECTED_EVENTS[rel]
    mine = job_b.events.filter(pl.col("source") == rel)
    assert rel in job_b.sources
    assert (rank, event) in set(mine.select("rank", "event").iter_rows()), mine.select("line", "rank", "event")
    if rel in EXPECTED_WARNINGS:
        assert any(w.startswith(f"{rel}: ") and EXPECTED_WARNINGS[rel] in w for w in job_b.warnings)


# ----------------------------------------------------------------------- big inputs, in a memory-capped child

_CHILD = """
import json, resource, sys, time
from ncclpm.cli import main
start = time.perf_counter()
try:
    main(sys.argv[1:])
finally:
    usage = {"seconds": time.perf_counter() - start,
             "rss_mb": int(next(x for x in open('/proc/self/status') if x.startswith('VmHWM')).split()[1]) >> 10}
    print("USAGE " + json.dumps(usage), file=sys.stderr)
"""


def _rss_mb(pid: int) -> int:
    with contextlib.suppress(OSError), open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) >> 10
    return 0


def _capped_cli(
    args: list[str], cap_mb: int, timeout: float = 180, env: dict[str, str] | None = None
) -> tuple[int, dict, str]:
    """`ncclpm <args>` in a child that is killed if its resident memory passes `cap_mb` (polled; an address-space
    rlimit does not work: polars reserves far more virtual memory than it touches)."""
    return _capped_python(_CHILD, args, cap_mb, timeout, env)


def _capped_python(
    code: str, args: list[str], cap_mb: int, timeout: float = 180, env: dict[str, str] | None = None
) -> tuple[int, dict, str]:
    """`python -c code args` in a memory-watched child (see `_capped_cli`); the code prints `USAGE {json}` on
    stderr. `env` adds variables; its PYTHONPATH goes first. The child reports its peak from /proc's VmHWM, not
    `ru_maxrss`: that one survives exec, so a child of a big pytest process would report the parent's size."""
    if not Path("/proc/self/status").exists():
        pytest.skip("needs Linux /proc to watch the child's memory")
    extra = dict(env or {})
    path = [p for p in (extra.pop("PYTHONPATH", ""), str(ROOT / "src"), str(ROOT)) if p]
    env = {**os.environ, **extra, "PYTHONPATH": os.pathsep.join(path), "RUST_BACKTRACE": "0"}
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen([sys.executable, "-c", code, *args], env=env, stdout=out, stderr=err, text=True)
        started, killed = time.monotonic(), ""
        while proc.poll() is None:
            if _rss_mb(proc.pid) > cap_mb:
                killed = f"killed: resident memory over {cap_mb} MB"
            elif time.monotonic() - started > timeout:
                killed = f"killed: still running after {timeout} s"
            if killed:
                proc.kill()
                proc.wait()
                break
            time.sleep(0.05)
        err.seek(0)
        stderr = err.read() + killed
    usage = [json.loads(line[6:]) for line in stderr.splitlines() if line.startswith("USAGE ")]
    return proc.returncode, usage[0] if usage else {}, stderr


def test_a_single_100_mb_line_is_cut_reported_and_parsed_as_far_as_it_goes(tmp_path: Path) -> None:
    job = tmp_path / "job"
    job.mkdir()
    with (job / "huge.log").open("w") as fh:
        fh.write(WATCHDOG.format(1) + " ")  # the anchor is at the start of the 100 MB line
        fh.write("x" * 100_000_000)
        fh.write(" " + DL.format(3))  # past the cut: not parsed (documented)
        fh.write("\n" + DL.format(2) + "\n")
    out = tmp_path / "r.json"
    code, usage, err = _capped_cli(["diagnose", str(job), "-f", "json", "-o", str(out)], cap_mb=1500)
    assert code == 0, err[-2000:]
    report = json.loads(out.read_text())
    assert any(w.startswith("huge.log: 1 line(s) longer than") for w in report["warnings"]), report["warnings"]
    assert (report["category"], report["culprit_ranks"]) == ("dataloader_hang", [2])
    assert report["failing_collective"]["op"] == "ALLREDUCE" and report["failing_collective"]["seq"] == 5
    assert usage["seconds"] < 90 and usage["rss_mb"] < 1500, usage


def _gzip_bomb(path: Path, mb: int) -> None:
    """`mb` MB of lines every pattern wants to look at, gzipped (~300x)."""
    co = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = ((WATCHDOG.format(1) + "\n") * 5000).encode()
    with path.open("wb") as fh:
        for _ in range(mb * 1_000_000 // len(block)):
            fh.write(co.compress(block))
        fh.write(co.flush())


def test_a_gzip_bomb_log_is_refused_and_the_rest_is_used(tmp_path: Path) -> None:
    job = tmp_path / "job"
    job.mkdir()
    (job / "rank2.log").write_text(DL.format(2) + "\n")
    _gzip_bomb(job / "bomb.log.gz", 100)
    assert (job / "bomb.log.gz").stat().st_size < 1_000_000
    out = tmp_path / "r.json"
    code, usage, err = _capped_cli(["diagnose", str(job), "-f", "json", "-o", str(out)], cap_mb=1000)
    assert code == 0, err[-2000:]
    report = json.loads(out.read_text())
    assert any(w.startswith("bomb.log.gz: ") and "gzip bomb" in w for w in report["warnings"]), report["warnings"]
    assert (report["category"], report["culprit_ranks"]) == ("dataloader_hang", [2])
    assert usage["seconds"] < 60, usage


# ------------------------------------------------------------------------------------------ unreadable files


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a chmod-000 file; the monkeypatched tests cover it")
def test_a_chmod_000_file_is_a_warning(tmp_path: Path, clean) -> None:
    job = tmp_path / "job"
    shutil.copytree(CASE, job)
    (job / "secret.log").write_text(DL.format(5) + "\n")
    (job / "secret.log").chmod(0)
    d = diagnose([job])
    assert any(w.startswith("secret.log: ") and "Permission denied" in w for w in d.warnings)
    assert (str(d.category), list(d.culprit_ranks)) == (clean.category, clean.culprits)


def test_a_file_that_cannot_be_opened_is_a_warning(tmp_path: Path, clean, monkeypatch: pytest.MonkeyPatch) -> None:
    job = tmp_path / "job"
    shutil.copytree(CASE, job)
    (job / "secret.log").write_text(DL.format(5) + "\n")
    real_open = Path.open

    def guarded(self: Path, *args, **kwargs):
        if self.name == "secret.log":
            raise PermissionError(13, "Permission denied", str(self))
        return real_open(self, *args, **kwargs)

    monkeypatch.setattr(Path, "open", guarded)
    d = diagnose([job])
    assert any(w.startswith("secret.log: ") and "Permission denied" in w for w in d.warnings), d.warnings
    assert (str(d.category), list(d.culprit_ranks)) == (clean.category, clean.culprits)


def test_a_folder_that_cannot_be_listed_is_a_warning(tmp_path: Path, clean, monkeypatch: pytest.MonkeyPatch) -> None:
    job = tmp_path / "job"
    shutil.copytree(CASE, job)
    (job / "private").mkdir()
    (job / "private" / "rank5.log").write_text(DL.format(5) + "\n")
    real_scandir = os.scandir

    def guarded(path=".", *args, **kwargs):
        if str(path).endswith("private"):
            raise PermissionError(13, "Permission denied", str(path))
        return real_scandir(path, *args, **kwargs)

    monkeypatch.setattr(os, "scandir", guarded)
    d = diagnose([job])
    assert any(w.startswith("private: ") and "cannot be listed" in w for w in d.warnings), d.warnings
    assert (str(d.category), list(d.culprit_ranks)) == (clean.category, clean.culprits)


@pytest.mark.parametrize("how", ["deleted", "unreadable"])
def test_a_log_gone_between_discovery_and_reading_is_a_warning(
    tmp_path: Path, clean, how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Log rotation or a job still writing: the file list is taken, then a file goes away before it is read."""
    job = tmp_path / "job"
    shutil.copytree(CASE, job)
    (job / "rotating.log").write_text(DL.format(5) + "\n")
    collected = collect([job])
    if how == "deleted":
        (job / "rotating.log").unlink()
    else:
        real_open = Path.open

        def guarded(self: Path, *args, **kwargs):
            if self.name == "rotating.log":
                raise PermissionError(13, "Permission denied", str(self))
            return real_open(self, *args, **kwargs)

        monkeypatch.setattr(Path, "open", guarded)
        (job / "rotating.log").chmod(0)  # polars scans the path itself; as root this changes nothing
        if os.geteuid() == 0:
            (job / "rotating.log").unlink()
    t = build_tables(collected, catalog())
    assert any(w.startswith("rotating.log: ") for w in t.warnings), t.warnings
    d = diagnose_tables(t)
    assert (str(d.category), list(d.culprit_ranks)) == (clean.category, clean.culprits)


# ---------------------------------------------------------------------------------------- hostile archives


def _tar_add(tf: tarfile.TarFile, name: str, data: bytes = b"", **kw: object) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data) if kw.get("type", tarfile.REGTYPE) == tarfile.REGTYPE else 0
    for k, v in kw.items():
        setattr(info, k, v)
    tf.addfile(info, io.BytesIO(data) if info.size else None)


def _nested(level: int, depth: int) -> tuple[str, bytes]:
    """An archive `depth - level + 1` levels deep, alternating zip / tar / tar.gz, a log at every level."""
    inner = None if level == depth else _nested(level + 1, depth)
    log = (f"level{level}.log", f"hello from nesting level {level}\n".encode())
    members = [log] + ([inner] if inner else [])
    kind = ("zip", "tar", "tar.gz")[(level - 1) % 3]
    buf = io.BytesIO()
    if kind == "zip":
        with zipfile.ZipFile(buf, "w") as zf:
            for name, data in members:
                zf.writestr(name, data)
    else:
        with tarfile.open(fileobj=buf, mode="w:gz" if kind == "tar.gz" else "w") as tf:
            for name, data in members:
                _tar_add(tf, name, data)
    return f"n{level}.{kind}", buf.getvalue()


def _zip_bomb(mb: int = 100) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf, zf.open("zeros.log", "w", force_zip64=True) as m:
        zeros = b"\0" * (1 << 20)
        for _ in range(mb):
            m.write(zeros)
    return buf.getvalue()


@pytest.fixture
def sealed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> SimpleNamespace:
    """An empty cwd and an empty TMPDIR: anything ncclpm wrote would show up in them."""
    cwd, tmp = tmp_path / "cwd", tmp_path / "tmpdir"
    cwd.mkdir()
    tmp.mkdir()
    monkeypatch.chdir(cwd)
    monkeypatch.setenv("TMPDIR", str(tmp))
    monkeypatch.setattr(tempfile, "tempdir", None)
    return SimpleNamespace(cwd=cwd, tmp=tmp, tag=uuid.uuid4().hex[:12])


def test_a_hostile_job_archive_writes_nothing_and_is_still_diagnosed(tmp_path: Path, sealed, clean) -> None:
    tag = sealed.tag
    absolute = Path(f"/tmp/ncclpm-abs-{tag}.log")
    passwd = os.stat("/etc/passwd")
    archive = tmp_path / "upload" / "job.tar.gz"
    archive.parent.mkdir()
    with tarfile.open(archive, "w:gz") as tf:
        tf.add(CASE, arcname="job")
        _tar_add(tf, str(absolute), b"absolute path member\n")
        _tar_add(tf, f"../../escape-{tag}.log", b"dot-dot member\n")
        _tar_add(tf, "job/passwd.log", type=tarfile.SYMTYPE, linkname="/etc/passwd")
        _tar_add(tf, "job/up.log", type=tarfile.SYMTYPE, linkname="../../../../etc/shadow")
        _tar_add(tf, "job/hard.log", type=tarfile.LNKTYPE, linkname="/etc/passwd")
        _tar_add(tf, "job/null.dev", type=tarfile.CHRTYPE, devmajor=1, devminor=3)
        _tar_add(tf, "job/sda.dev", type=tarfile.BLKTYPE, devmajor=8, devminor=0)
        _tar_add(tf, "job/pipe.log", type=tarfile.FIFOTYPE)
        _tar_add(tf, "job/fr/evil/nccl_trace_rank_1", payloads(sealed.cwd / "pwned")["reduce_os_system"])
        _tar_add(tf, *_nested(1, 5))  # n1.zip > n2.tar.gz > n3.zip > ... levels 1-2 read, 3-5 refused
        _tar_add(tf, "job/bomb.zip", _zip_bomb())  # last: a bomb stops the whole archive
    code, report, output = _cli_json([str(archive)], tmp_path / "report.json")
    assert code == 0, output
    assert (report["category"], report["culprit_ranks"]) == (clean.category, clean.culprits)
    w = " | ".join(report["warnings"])
    for expected in (
        "symlink",
        "hard link",
        "device file",
        "FIFO",
        "made relative",
        "deeper than max_depth",
        "nccl_trace_rank_1: refused",
        "ratio",
    ):
        assert expected in w, (expected, report["warnings"])
    # written nowhere: not at the absolute or '..' names, not in cwd, TMPDIR, next to the archive, not /etc
    assert not absolute.exists()
    assert not list(tmp_path.parent.rglob(f"escape-{tag}.log"))
    assert list(sealed.cwd.iterdir()) == [] and list(sealed.tmp.iterdir()) == []
    assert sorted(p.name for p in archive.parent.iterdir()) == ["job.tar.gz"]
    assert os.stat("/etc/passwd").st_mtime_ns == passwd.st_mtime_ns
    sources = set(build([archive]).sources)
    assert {f"job.tar.gz!/job/{s}" for s in clean.sources} <= sources
    assert "job.tar.gz!/n1.zip!/level1.log" in sources and "job.tar.gz!/n1.zip!/n2.tar!/level2.log" in sources
    assert not [s for s in sources if "level3" in s or "level4" in s or "level5" in s]
    assert f"job.tar.gz!/tmp/ncclpm-abs-{tag}.log" in sources  # renamed, read as a label only


def test_a_zip_bomb_next_to_real_logs_is_refused_and_the_rest_is_used(tmp_path: Path, sealed, clean) -> None:
    job = tmp_path / "job"
    shutil.copytree(CASE, job)
    (job / "bomb.zip").write_bytes(_zip_bomb())
    code, report, output = _cli_json([str(job)], tmp_path / "report.json")
    assert code == 0, output
    assert any(w.startswith("bomb.zip: ") and "ratio" in w for w in report["warnings"]), report["warnings"]
    assert (report["category"], report["culprit_ranks"]) == (clean.category, clean.culprits)
    assert list(sealed.tmp.iterdir()) == [] and list(sealed.cwd.iterdir()) == []


def test_a_fifo_or_missing_path_given_on_the_command_line_does_not_block(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe.log")
    (tmp_path / "rank2.log").write_text(DL.format(2) + "\n")
    args = [str(tmp_path / "pipe.log"), str(tmp_path / "missing.log"), str(tmp_path / "rank2.log")]
    code, report, output = _cli_json(args, tmp_path / "r.json")
    assert code == 0, output
    assert any(w.startswith("pipe.log: ") and "not a regular file" in w for w in report["warnings"])
    assert any("missing.log: no such file" in w for w in report["warnings"])
    assert report["culprit_ranks"] == [2]


# ----------------------------------------------------------------------- bugs in files that are not ours to edit


def _job_with_malformed_frames(tmp_path: Path) -> Path:
    job = tmp_path / "job"
    shutil.copytree(CASE, job)
    dump = {
        "version": "2.10",
        "pg_config": {},
        "pg_status": {},
        "entries": [{"record_id": 1, "profiling_name": "nccl:all_reduce", "frames": "not a list of frames"}],
    }
    (job / "fr" / "raw" / "fr_trace_rank_4").write_bytes(pickle.dumps(dump))
    return job


def test_a_dump_with_malformed_frames_does_not_take_the_job_down(tmp_path: Path, clean) -> None:
    """Until 3ff4211 one dump whose 'frames' was a string crashed the whole load (a ComputeError, exit 3)."""
    d = diagnose([_job_with_malformed_frames(tmp_path)])
    assert (str(d.category), list(d.culprit_ranks)) == (clean.category, clean.culprits)


def test_a_dump_with_malformed_frames_is_named_in_a_warning(tmp_path: Path) -> None:
    d = diagnose([_job_with_malformed_frames(tmp_path)])
    assert any(w.startswith("fr/raw/fr_trace_rank_4: ") for w in d.warnings), d.warnings


def test_a_dump_whose_rank_does_not_fit_int32_is_skipped_not_fatal(tmp_path: Path, clean) -> None:
    job = tmp_path / "job"
    shutil.copytree(CASE, job)
    shutil.copy(CASE / "fr" / "raw" / "fr_trace_rank_1", job / "fr" / "raw" / "fr_trace_rank_99999999999")
    d = diagnose([job])
    assert any(w.startswith("fr/raw/fr_trace_rank_99999999999: ") for w in d.warnings)
    assert (str(d.category), list(d.culprit_ranks)) == (clean.category, clean.culprits)


def test_a_dump_with_oddly_typed_values_does_not_take_the_others_down() -> None:
    """Found by scripts/fuzz_long.py: one dump's malformed nested value made the whole chunk fail to convert."""
    from ncclpm.ingest.flight_recorder.decode import _NoGlobalsUnpickler
    from ncclpm.ingest.flight_recorder.load import load_fr_dumps

    good = (CASE / "fr" / "raw" / "fr_trace_rank_1").read_bytes()
    odd = _NoGlobalsUnpickler(io.BytesIO(good)).load()
    odd["pg_status"] = {"0": {"last_enqueued_collective": 3, "x": "y"}, "1": [1, 2]}
    odd["entries"][0]["input_sizes"] = [[1, "two"], None]
    fr = load_fr_dumps([("fr_trace_rank_1", good), ("odd_rank_2", pickle.dumps(odd))])
    assert set(fr.entries["rank"].unique().to_list()) >= {1}
    assert fr.entries.filter(fr.entries["rank"] == 1).height == 10
