"""Hostile and broken input in a job folder: each bad file gets a warning, nothing runs, nothing is written,
and every other file of the job is still used (the verdict stays the same)."""

from __future__ import annotations

import gzip
import io
import os
import pickle
import shutil
from pathlib import Path

import pytest

from ncclpm.api import diagnose

ROOT = Path(__file__).resolve().parents[1]
JOB = ROOT / "tests" / "cases" / "rank0_slow_work__torchrun_3ranks" / "input"


@pytest.fixture
def job(tmp_path: Path) -> Path:
    dest = tmp_path / "job"
    shutil.copytree(JOB, dest)
    return dest


def _same_verdict(job: Path) -> tuple[str, ...]:
    d = diagnose([job])
    assert str(d.category) == "slow_rank_work" and d.culprit_ranks == (0,), d.summary
    return d.warnings


class _Evil:
    """Unpickling this calls `fn(*args)` - what a hostile dump would do."""

    def __init__(self, fn, *args) -> None:
        self.fn, self.args = fn, args

    def __reduce__(self):
        return self.fn, self.args


def _dump_with(evil: object) -> bytes:
    """A pickle shaped like a real flight-recorder dump (so it is sniffed and loaded) carrying `evil`."""
    return pickle.dumps({"version": "2.10", "pg_config": {}, "pg_status": {}, "entries": [evil]}, protocol=2)


def _payloads(marker: Path) -> dict[str, bytes]:
    import builtins
    import subprocess

    touch = f"open({str(marker)!r}, 'w').write('pwned')"

    def text(s: str) -> bytes:  # BINUNICODE opcode
        return b"X" + len(s.encode()).to_bytes(4, "little") + s.encode()

    # Hand-written opcodes: {"version": "2.10", "pg_config": {}, "entries": [posix.system("touch ...")]}
    raw = (
        b"\x80\x02}("
        + text("version")
        + text("2.10")
        + text("pg_config")
        + b"}"
        + text("entries")
        + b"]"
        + b"cposix\nsystem\n"
        + text(f"touch {marker}")
        + b"\x85Ra"
        + b"u."
    )
    return {
        "os_system": _dump_with(_Evil(os.system, f"touch {marker}")),
        "builtins_eval": _dump_with(_Evil(builtins.eval, touch)),
        "builtins_exec": _dump_with(_Evil(builtins.exec, touch)),
        "subprocess": _dump_with(_Evil(subprocess.Popen, ["touch", str(marker)])),
        "raw_global": raw,
        "nested_in_entries": _dump_with({"frames": [_Evil(os.system, f"touch {marker}")]}),
    }


@pytest.mark.parametrize(
    "kind", ["os_system", "builtins_eval", "builtins_exec", "subprocess", "raw_global", "nested_in_entries"]
)
def test_a_pickle_that_would_run_code_is_refused_and_runs_nothing(job: Path, tmp_path: Path, kind: str) -> None:
    marker = tmp_path / "pwned"
    (job / "fr" / "raw" / "nccl_trace_rank_5").write_bytes(_payloads(marker)[kind])
    warnings = _same_verdict(job)
    assert not marker.exists() and not Path("/tmp/x").exists()
    assert any("nccl_trace_rank_5" in w for w in warnings), warnings


def test_broken_files_each_get_a_warning_and_the_rest_is_used(job: Path) -> None:
    (job / "empty.log").write_bytes(b"")
    (job / "junk.bin").write_bytes(os.urandom(4096).replace(b"\n", b"\x00"))
    (job / "truncated_dump_rank_1").write_bytes((job / "fr" / "raw" / "fr_trace_rank_1").read_bytes()[:500])
    (job / "truncated_dump_rank_2.json").write_bytes((job / "fr" / "json" / "fr_trace_rank_2.json").read_bytes()[:300])
    (job / "bad_gzip.log.gz").write_bytes(b"\x1f\x8b\x08\x00garbage that is not deflate")
    warnings = " | ".join(_same_verdict(job))
    for name in ("empty.log", "junk.bin", "truncated_dump_rank_1", "truncated_dump_rank_2.json", "bad_gzip.log.gz"):
        assert name in warnings, name


def test_encodings_and_line_ends_are_read(tmp_path: Path) -> None:
    job = tmp_path / "job"
    job.mkdir()
    (job / "latin1.log").write_bytes(b"caf\xe9 \xff\n[rank1]: RuntimeError: DataLoader timed out after 5 seconds\n")
    (job / "powershell.log").write_bytes("[rank2]: OSError: [Errno 24] Too many open files\r\n".encode("utf-16"))
    (job / "utf8_bom.log").write_bytes("\ufeff[rank4]: OSError: [Errno 24] Too many open files\n".encode())
    (job / "old_mac.log").write_bytes(b"step 1\r[rank3]: RuntimeError: DataLoader timed out after 5 seconds\rstep 2")
    (job / "rank0.log").write_bytes(
        b"[rank0]: RuntimeError: [x.cc:78] Timed out waiting 10000ms for recv operation to complete"
    )  # no final newline: truncated mid-line
    d = diagnose([job])
    dl = next(f for f in d.findings if f.rule == "DL01")
    assert set(dl.culprit_ranks) == {1, 2, 3, 4}
    assert any("latin1.log: not valid UTF-8" in w for w in d.warnings)


def test_a_huge_single_line_is_cut_reported_and_fast(tmp_path: Path) -> None:
    job = tmp_path / "job"
    job.mkdir()
    with (job / "huge.log").open("w") as fh:
        fh.write("Error " + "x" * 20_000_000 + "\n")
        fh.write("[rank1]: RuntimeError: DataLoader timed out after 5 seconds\n")
    d = diagnose([job])
    assert any("longer than" in w and "huge.log" in w for w in d.warnings)
    assert str(d.category) == "dataloader_hang"


def test_fifo_symlink_loop_and_outside_symlink_do_not_block_or_escape(job: Path) -> None:
    os.mkfifo(job / "pipe.log")
    (job / "loop").symlink_to(job, target_is_directory=True)
    (job / "passwd.log").symlink_to("/etc/passwd")
    warnings = " | ".join(_same_verdict(job))
    assert "pipe.log" in warnings and "loop" in warnings and "passwd.log" in warnings


def test_an_unreadable_file_is_a_warning(job: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = job / "secret.log"
    secret.write_text("[rank1]: RuntimeError: boom\n")
    real_open = Path.open

    def guarded(self: Path, *a, **k):
        if self.name == "secret.log":
            raise PermissionError(13, "Permission denied")
        return real_open(self, *a, **k)

    monkeypatch.setattr(Path, "open", guarded)
    warnings = " | ".join(_same_verdict(job))
    assert "secret.log" in warnings and "Permission denied" in warnings


def test_gzip_logs_are_read(tmp_path: Path) -> None:
    job = tmp_path / "job"
    job.mkdir()
    (job / "rank1.log.gz").write_bytes(gzip.compress(b"[rank1]: RuntimeError: DataLoader timed out after 5 seconds\n"))
    assert str(diagnose([job]).category) == "dataloader_hang"


def test_nothing_is_written_anywhere(job: Path, tmp_path: Path) -> None:
    before = {p for p in tmp_path.rglob("*")}
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    old = Path.cwd()
    os.chdir(cwd)
    try:
        _same_verdict(job)
    finally:
        os.chdir(old)
    assert {p for p in tmp_path.rglob("*")} == before | {cwd}


def test_a_dump_with_oddly_typed_values_does_not_take_the_others_down() -> None:
    """Found by scripts/fuzz_long.py: one dump's malformed nested value made the whole chunk fail to convert."""
    from ncclpm.ingest.flight_recorder import load_fr_dumps
    from ncclpm.ingest.fr_decode import _NoGlobalsUnpickler

    good = (JOB / "fr" / "raw" / "fr_trace_rank_1").read_bytes()
    odd = _NoGlobalsUnpickler(io.BytesIO(good)).load()
    odd["pg_status"] = {"0": {"last_enqueued_collective": 3, "x": "y"}, "1": [1, 2]}
    odd["entries"][0]["input_sizes"] = [[1, "two"], None]
    fr = load_fr_dumps([("fr_trace_rank_1", good), ("odd_rank_2", pickle.dumps(odd))])
    assert set(fr.entries["rank"].unique().to_list()) >= {1}
    assert fr.entries.filter(fr.entries["rank"] == 1).height == 10
