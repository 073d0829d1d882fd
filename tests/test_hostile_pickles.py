"""No code from data: flight-recorder dumps are pickles, and `pickle.load` calls whatever callable a pickle names.

Every payload below is a dump that looks real (a real dump of tests/cases with one value replaced) and would create
a marker file when loaded with the plain unpickler - `test_every_payload_is_live_with_the_plain_unpickler` proves
that in a subprocess, so the refusal tests cannot pass by accident. ncclpm must refuse each one, name it in the
warnings, create nothing, and still diagnose the rest of the job exactly as without it.
"""

from __future__ import annotations

import builtins
import contextlib
import copyreg
import io
import json
import logging
import os
import pickle
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from ncclpm.api import build, diagnose
from ncclpm.cli import main
from ncclpm.ingest.flight_recorder.load import load_fr_dumps

ROOT = Path(__file__).resolve().parents[1]
CASE = ROOT / "tests" / "cases" / "rank0_slow_work__torchrun_3ranks" / "input"
REAL_DUMP = CASE / "fr" / "raw" / "fr_trace_rank_1"
EXT_CODE = 0x7A31  # a copyreg extension code for the EXT2 payload (registered only while a test runs)


@contextlib.contextmanager
def _posix_system_extension() -> Iterator[None]:
    """Register the EXT2 code for posix.system (as some import might have) unless it already is; undo after."""
    added = copyreg._extension_registry.get(("posix", "system")) != EXT_CODE  # type: ignore[attr-defined]
    if added:
        copyreg.add_extension("posix", "system", EXT_CODE)
    try:
        yield
    finally:
        if added:
            copyreg.remove_extension("posix", "system", EXT_CODE)


class _Call:
    """Unpickling this calls `fn(*args)`: what a hostile dump does through the REDUCE opcode."""

    def __init__(self, fn: Callable, *args: object) -> None:
        self.fn, self.args = fn, args

    def __reduce__(self) -> tuple:
        return self.fn, self.args


def _real() -> dict:
    return pickle.loads(REAL_DUMP.read_bytes())  # our own test data, trusted


def _text(s: str) -> bytes:
    """BINUNICODE opcode."""
    raw = s.encode()
    return b"X" + len(raw).to_bytes(4, "little") + raw


def _handwritten(call: bytes) -> bytes:
    """{"version": "2.10", "pg_config": {}, "entries": [<call>]} in hand-written opcodes."""
    return (
        b"\x80\x02}("
        + _text("version")
        + _text("2.10")
        + _text("pg_config")
        + b"}"
        + _text("entries")
        + b"]("
        + call
        + b"eu."
    )


def payloads(marker: Path) -> dict[str, bytes]:
    """name -> pickle bytes that create `marker` when loaded with `pickle.loads`."""
    sh = f"touch {marker}"
    py = f"open({str(marker)!r}, 'w').close()"

    def in_entries(evil: object, protocol: int = 2) -> bytes:
        dump = _real()
        dump["entries"][0]["profiling_name"] = evil
        return pickle.dumps(dump, protocol=protocol)

    nested = _real()
    nested["entries"][-1]["frames"][0]["name"] = _Call(os.system, sh)  # deep inside a valid-looking dump
    in_config = _real()
    next(iter(in_config["pg_config"].values()))["desc"] = _Call(builtins.eval, py)
    in_status = _real()
    in_status["pg_status"] = _Call(builtins.exec, py)
    with _posix_system_extension():
        ext = in_entries(_Call(os.system, sh))  # the pickler writes EXT2 instead of GLOBAL
    assert b"\x83" in ext and b"posix" not in ext
    return {
        "reduce_os_system": in_entries(_Call(os.system, sh)),  # GLOBAL 'posix system' + REDUCE
        "builtins_eval_in_pg_config": pickle.dumps(in_config, protocol=2),
        "builtins_exec_in_pg_status": pickle.dumps(in_status, protocol=2),
        "subprocess_popen": in_entries(_Call(subprocess.Popen, ["touch", str(marker)])),
        "class_whose_constructor_writes": in_entries(_Call(logging.FileHandler, str(marker))),
        "nested_in_entries_protocol5": pickle.dumps(nested, protocol=5),  # STACK_GLOBAL
        "raw_global_opcode": _handwritten(b"cposix\nsystem\n" + _text(sh) + b"\x85R"),
        "inst_opcode": _handwritten(b"(" + _text(sh) + b"iposix\nsystem\n"),
        "ext_opcode_registered_extension": ext,
    }


NAMES = sorted(payloads(Path("/nonexistent")))


@pytest.fixture
def ext_registered() -> Iterator[None]:
    """The EXT2 code registered in this process, as an attacker would hope some import did."""
    with _posix_system_extension():
        yield


def test_every_payload_is_live_with_the_plain_unpickler(tmp_path: Path) -> None:
    """The canary: `pickle.loads` runs every payload (in a child process) - so refusing them is what protects."""
    script = (
        "import copyreg, pickle, sys, json\n"
        f"copyreg.add_extension('posix', 'system', {EXT_CODE})\n"
        "for path in json.loads(sys.argv[1]):\n"
        "    try:\n        pickle.loads(open(path, 'rb').read())\n"
        "    except Exception:\n        pass\n"
    )
    files = []
    for name in NAMES:
        (tmp_path / name).mkdir()
        data = payloads(tmp_path / name / "marker")[name]
        (tmp_path / name / "dump").write_bytes(data)
        files.append(str(tmp_path / name / "dump"))
    subprocess.run(
        [sys.executable, "-c", script, json.dumps(files)],
        check=True,
        timeout=60,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 20  # `subprocess.Popen(["touch", ...])` is not waited for: give it time
    while [n for n in NAMES if not (tmp_path / n / "marker").exists()] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [n for n in NAMES if not (tmp_path / n / "marker").exists()] == []


@pytest.mark.parametrize("name", NAMES)
def test_the_dump_loader_refuses_each_payload(name: str, tmp_path: Path, ext_registered: None) -> None:
    marker = tmp_path / "marker"
    fr = load_fr_dumps([(f"fr/{name}_trace_rank_1", payloads(marker)[name])])
    assert not marker.exists()
    assert fr.entries.is_empty()
    assert any(name in w and "refused" in w for w in fr.warnings), fr.warnings


@pytest.fixture(scope="module")
def clean_verdict() -> tuple[str, tuple[int, ...], frozenset[str]]:
    d = diagnose([CASE])
    return str(d.category), tuple(d.culprit_ranks), frozenset(build([CASE]).sources)


def test_a_job_with_every_payload_next_to_real_logs(
    tmp_path: Path, ext_registered: None, clean_verdict, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through `ncclpm diagnose`: every payload is refused and named, nothing is created, same verdict."""
    job = tmp_path / "job"
    shutil.copytree(CASE, job)
    marker = tmp_path / "marker"
    evil = job / "fr" / "evil"
    evil.mkdir()
    for name, data in payloads(marker).items():
        (evil / f"{name}_nccl_trace_rank_1").write_bytes(data)
    # a protocol-0 pickle is plain text: read as a log line, never unpickled
    (job / "fr" / "fr_trace_rank_5").write_text(f"cposix\nsystem\n(S'touch {marker}'\ntR.")
    # file names are labels, never shell
    shutil.copy(REAL_DUMP, job / "fr" / f"$(touch {marker.name})_nccl_trace_rank_1")
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    out = tmp_path / "report.json"
    res = CliRunner().invoke(main, ["diagnose", str(job), "-f", "json", "-o", str(out)])
    assert res.exit_code == 0, res.output
    report = json.loads(out.read_text())
    assert not marker.exists() and not (cwd / marker.name).exists() and list(cwd.iterdir()) == []
    category, culprits, sources = clean_verdict
    assert (report["category"], tuple(report["culprit_ranks"])) == (category, culprits)
    assert sources <= set(build([job]).sources)  # every real file of the job was still used
    for name in NAMES:
        assert any(f"fr/evil/{name}_nccl_trace_rank_1" in w and "refused" in w for w in report["warnings"]), name


def test_a_restricted_load_of_a_real_dump_still_works() -> None:
    """The protection admits what real dumps hold (plain containers and scalars): nothing real is refused."""
    fr = load_fr_dumps([("fr_trace_rank_1", REAL_DUMP.read_bytes())])
    assert fr.warnings == () and fr.entries.height == len(_real()["entries"])
    assert pickle.loads(io.BytesIO(REAL_DUMP.read_bytes()).read()) == _real()  # sanity: the seed dump is plain


_BOMB_CHILD = """
import json, re, resource, sys
from ncclpm.ingest.flight_recorder.load import load_fr_dumps
bomb, real = open(sys.argv[1], "rb").read(), open(sys.argv[2], "rb").read()
load_fr_dumps([("fr_trace_rank_1", real)])  # warm up: polars threads and allocator arenas exist
vm = int(re.search(r"VmSize:\\s+(\\d+) kB", open("/proc/self/status").read()).group(1)) << 10
resource.setrlimit(resource.RLIMIT_AS, (vm + (768 << 20),) * 2)  # room for real work, not for a bomb
fr = load_fr_dumps([("bomb_trace_rank_0", bomb), ("fr_trace_rank_1", real)])
print(json.dumps({"warnings": list(fr.warnings), "ranks": sorted(set(fr.entries["rank"].to_list()))}))
"""


def test_a_pickle_reference_bomb_is_refused_not_fatal(tmp_path: Path) -> None:
    """Pickle's memo lets N bytes name N/2 references to one object: {"input_sizes": [inner] * 10**6}, inner holding
    10**5 ints, is 400 kB on disk and 80 GB in polars. It runs in a child whose address space is capped 768 MiB above
    its warmed-up size, so a regression fails in seconds instead of taking the machine down."""
    if not Path("/proc/self/status").exists():
        pytest.skip("needs Linux /proc to size the memory cap")
    inner = [7] * 100_000
    bomb = {
        "version": "2.10",
        "pg_config": {},
        "pg_status": {},
        "entries": [
            {
                "record_id": 0,
                "pg_id": 0,
                "collective_seq_id": 1,
                "profiling_name": "nccl:all_reduce",
                "input_sizes": [inner] * 100_000,
            }
        ],
    }
    (tmp_path / "bomb").write_bytes(pickle.dumps(bomb, protocol=4))
    assert (tmp_path / "bomb").stat().st_size < 500_000
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "RUST_BACKTRACE": "0"}
    res = subprocess.run(
        [sys.executable, "-c", _BOMB_CHILD, str(tmp_path / "bomb"), str(REAL_DUMP)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr[-500:]
    out = json.loads(res.stdout)
    assert out["ranks"] == [1] and any("bomb_trace_rank_0" in w for w in out["warnings"])
