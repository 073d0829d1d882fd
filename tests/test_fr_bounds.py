"""What a dump may expand to is bounded before anything is built (issue 13, items 6 and 7).

Item 7: a self-referential list, a 100k-deep list, an entry repeated 60k times with 60k sizes, a memo index of
2**26, a pg_config reference bomb and a 900-deep JSON list each crashed (segfault, Rust abort, MemoryError) or
took gigabytes. They are loaded here next to a real dump, in a child process whose address space is capped, and
each must be a warning naming that dump while the real dump is still used. Item 6: metadata of the wrong type
(a timestamp past Int64, a rank past Int32, a 5000-digit pg id, a deep version) is a warning naming the dump,
never a crash. And the opcode scanner's C build and its pure-Python reference give the same verdicts.
"""

from __future__ import annotations

import json
import os
import pickle
import random
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from ncclpm.analysis.fr_match import analyze_fr
from ncclpm.cli import main
from ncclpm.ingest.flight_recorder import scan as fr_scan
from ncclpm.ingest.flight_recorder.load import load_fr_dumps

ROOT = Path(__file__).resolve().parents[1]
CASE = ROOT / "tests" / "cases" / "rank0_slow_work__torchrun_3ranks" / "input"
REAL_DUMP = CASE / "fr" / "raw" / "fr_trace_rank_1"


def _real() -> dict:
    return pickle.loads(REAL_DUMP.read_bytes())  # our own test data, trusted


def _text(s: str) -> bytes:
    raw = s.encode()
    return b"X" + len(raw).to_bytes(4, "little") + raw


def _dump_with_field(value: bytes) -> bytes:
    """{"version": "2.10", "pg_config": {}, "entries": [{"record_id": 0, ..., "input_sizes": <value>}]} by hand."""
    entry = (
        b"}("
        + _text("record_id")
        + b"K\x00"
        + _text("collective_seq_id")
        + b"K\x01"
        + _text("profiling_name")
        + _text("nccl:all_reduce")
        + _text("input_sizes")
        + value
        + b"u"
    )
    return (
        b"\x80\x02}("
        + _text("version")
        + _text("2.10")
        + _text("pg_config")
        + b"}"
        + _text("entries")
        + b"]"
        + entry
        + b"au."
    )


def hostile_dumps() -> dict[str, bytes]:
    """Item 7: name -> a dump that blew up (or crashed) ncclpm before the opcode scan."""
    self_ref = _real()
    loop: list = []
    loop.append(loop)
    self_ref["entries"][0]["input_sizes"] = loop
    sized = {**_real()["entries"][0], "input_sizes": [[1]] * 60_000}
    repeated = {**_real(), "entries": [sized] * 60_000}
    ranks = list(range(5000))
    config_bomb = {**_real(), "pg_config": {f"pg{i}": {"ranks": ranks, "desc": "x"} for i in range(20_000)}}
    deep_json = json.dumps({"version": "2.10", "pg_config": {}, "entries": [{"record_id": 0, "input_sizes": "@"}]})
    return {
        "self_reference_trace_rank_0": pickle.dumps(self_ref, protocol=2),
        "deep_list_trace_rank_0": _dump_with_field(b"]" * 100_000 + b"a" * 99_999),
        "repeated_entry_trace_rank_0": pickle.dumps(repeated, protocol=4),
        "memo_index_trace_rank_0": b"\x80\x02}r" + (2**26).to_bytes(4, "little") + b"(" + _text("entries") + b"]u.",
        "pg_config_bomb_trace_rank_0": pickle.dumps(config_bomb, protocol=4),
        "deep_json_trace_rank_0.json": deep_json.replace('"@"', "[" * 900 + "]" * 900).encode(),
    }


_CHILD = """
import json, pickle, re, resource, sys
from ncclpm.analysis.fr_match import analyze_fr
from ncclpm.ingest.flight_recorder.load import load_fr_dumps
payloads, real = pickle.load(open(sys.argv[1], "rb")), open(sys.argv[2], "rb").read()
analyze_fr(load_fr_dumps([("fr_trace_rank_1", real)]))  # warm up: polars threads and allocator arenas exist
vm = int(re.search(r"VmSize:\\s+(\\d+) kB", open("/proc/self/status").read()).group(1)) << 10
resource.setrlimit(resource.RLIMIT_AS, (vm + (768 << 20),) * 2)  # room for real work, not for a bomb
for name, data in payloads.items():
    print(name, flush=True)
    fr = load_fr_dumps([(name, data), ("fr_trace_rank_1", real)])
    analyze_fr(fr)
    print(json.dumps({"warnings": list(fr.warnings), "ranks": sorted(set(fr.entries["rank"].to_list()))}), flush=True)
"""


def test_each_expansion_bomb_is_refused_in_a_memory_capped_child(tmp_path: Path) -> None:
    if not Path("/proc/self/status").exists():
        pytest.skip("needs Linux /proc to size the memory cap")
    payloads = hostile_dumps()
    assert max(map(len, payloads.values())) < 500_000 and len(payloads["memo_index_trace_rank_0"]) < 32
    (tmp_path / "payloads").write_bytes(pickle.dumps(payloads))
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "RUST_BACKTRACE": "0"}
    res = subprocess.run(
        [sys.executable, "-c", _CHILD, str(tmp_path / "payloads"), str(REAL_DUMP)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    lines = res.stdout.splitlines()
    assert res.returncode == 0, (lines[-1:], res.stderr[-600:])  # the last name printed is the one that broke
    results = dict(zip(lines[0::2], map(json.loads, lines[1::2]), strict=True))
    assert list(results) == list(payloads)
    for name, out in results.items():
        # the JSON dump is sound apart from its 900-deep value, which becomes null: its entry is still used
        assert out["ranks"] == ([0, 1] if name.endswith(".json") else [1]), name
        assert any(w.startswith(f"{name}: ") for w in out["warnings"]), (name, out["warnings"])
        if not name.endswith(".json"):  # refused by the scan, not stopped by a MemoryError under the cap
            assert any(w.startswith(f"{name}: refused/corrupt pickle") for w in out["warnings"]), out["warnings"]


def _deep(levels: int) -> object:
    value: object = "2.27.3"
    for _ in range(levels):
        value = [value]
    return value


def wrong_metadata() -> dict[str, bytes]:
    """Item 6: name -> a real dump with one metadata value of the wrong type (each crashed with exit 3)."""
    late, ranks, ids, deep = _real(), _real(), _real(), _real()
    late["entries"][-1]["time_created_ns"] = 2**70
    next(iter(ranks["pg_config"].values()))["ranks"] = "[99999999999]"
    ids["pg_status"] = {"9" * 5000: {"last_enqueued_collective": 3}, **ids["pg_status"]}
    deep["comm_lib_version"] = _deep(20)
    return {
        "late_trace_rank_5": pickle.dumps(late),
        "bigrank_trace_rank_6": pickle.dumps(ranks),
        "longid_trace_rank_7": pickle.dumps(ids),
        "deepversion_trace_rank_8": pickle.dumps(deep),
    }


def test_wrong_metadata_is_a_warning_naming_the_dump_and_the_rest_is_used() -> None:
    real = [(f"fr_trace_rank_{r}", (CASE / "fr" / "raw" / f"fr_trace_rank_{r}").read_bytes()) for r in (0, 1, 2)]
    bad = wrong_metadata()
    fr = load_fr_dumps([*real, *bad.items()])
    analyze_fr(fr)
    for name in bad:
        assert any(w.startswith(f"{name}: ") for w in fr.warnings), (name, fr.warnings)
    used = set(fr.dumps.filter("used")["rank"].to_list())
    assert {0, 1, 2, 6, 7, 8} <= used  # metadata dropped, entries kept
    assert 5 not in set(fr.entries["rank"].to_list())  # an entry value past Int64: that dump's entries skipped
    assert fr.dumps.filter(fr.dumps["rank"] == 8)["comm_lib_version"].to_list() == [""]


def test_wrong_metadata_through_the_cli(tmp_path: Path) -> None:
    job = tmp_path / "job"
    (job / "fr").mkdir(parents=True)
    for p in (CASE / "fr" / "raw").iterdir():
        (job / "fr" / p.name).write_bytes(p.read_bytes())
    for name, data in wrong_metadata().items():
        (job / "fr" / name).write_bytes(data)
    res = CliRunner().invoke(main, ["diagnose", str(job), "-f", "json"])
    assert res.exit_code == 0, res.output[-500:]
    report = json.loads(res.stdout)
    for name in wrong_metadata():
        assert any(name in w for w in report["warnings"]), name


def _mutations(seed: int, n: int) -> list[bytes]:
    seeds = [p.read_bytes() for p in sorted((CASE / "fr").rglob("fr_trace_rank_*")) if p.suffix != ".json"]
    seeds += [pickle.dumps(pickle.loads(seeds[0]), protocol=p) for p in range(6)]
    rng = random.Random(seed)
    out = list(seeds)
    for _ in range(n):
        s = bytearray(rng.choice(seeds))
        for _ in range(rng.randint(1, 4)):
            k = rng.randrange(len(s))
            if rng.random() < 0.5:
                s[k] = rng.randrange(256)
            elif rng.random() < 0.5:
                del s[k : k + rng.randint(1, 20)]
            else:
                s[k:k] = rng.randbytes(rng.randint(1, 5))
        out.append(bytes(s))
    return out


def _verdict_py(data: bytes) -> str | None:
    try:
        fr_scan.scan_py(data, fr_scan.budget_for(len(data)))
    except fr_scan.Refused as exc:
        return str(exc)
    return None


@pytest.mark.skipif(not fr_scan.NATIVE, reason="the C scanner is not built in this install")
def test_c_and_python_scanners_agree() -> None:
    """Same verdict and message on real dumps, the hostile ones and 1500 byte-level mutations."""
    inputs = [*_mutations(7, 1500), *hostile_dumps().values(), *wrong_metadata().values()]
    inputs += [p for p in (b"", b"\x80", b"\x80\x02.", b"\x80\x02cposix\nsystem\n.", b"\x80\x02p99999999999999\n.")]
    refused = 0
    for data in inputs:
        py = _verdict_py(data)
        refused += py is not None
        native = fr_scan._frscan.scan(data, fr_scan.budget_for(len(data)), fr_scan.MAX_DEPTH, fr_scan.MEMO_SLACK)
        assert native == py, data[:80]
    assert 300 < refused < len(inputs) - 10


def test_scan_admits_real_dumps_and_refuses_each_hostile_shape() -> None:
    for p in sorted(CASE.rglob("fr_trace_rank_*")):
        if p.suffix != ".json":
            assert _verdict_py(p.read_bytes()) is None, p
    reasons = {n: _verdict_py(d) for n, d in hostile_dumps().items() if not n.endswith(".json")}
    assert "cycle" in reasons["self_reference_trace_rank_0"]
    assert "deeper" in reasons["deep_list_trace_rank_0"]
    assert "reference bomb" in reasons["repeated_entry_trace_rank_0"]
    assert "memo table bomb" in reasons["memo_index_trace_rank_0"]
    assert "reference bomb" in reasons["pg_config_bomb_trace_rank_0"]
    assert "refused global posix.system" in (_verdict_py(b"\x80\x02cposix\nsystem\n.") or "")


@pytest.mark.parametrize("field", ["collective_seq_id", "profiling_name", "time_created_ns", "is_p2p"])
def test_a_deep_json_value_where_a_scalar_belongs_is_refused_at_once(field: str) -> None:
    """Found by the dump_depth fuzz target: a 400-deep list as a JSON dump's scalar kept polars busy 8 s before it
    refused it (900 deep: minutes, ~n^3); the scalar columns of JSON dumps are checked first."""
    dump = {"version": "2.10", "pg_config": {}, "entries": [{"record_id": 0, "collective_seq_id": 1, field: "@"}]}
    data = json.dumps(dump).replace('"@"', "[" * 400 + "]" * 400).encode()
    fr = load_fr_dumps([("deep_trace_rank_0.json", data), ("fr_trace_rank_1", REAL_DUMP.read_bytes())])
    assert list(fr.warnings) == [
        f"deep_trace_rank_0.json: skipped, entries have unexpected types (a list or dict as {field})"
    ]
    assert set(fr.entries["rank"].to_list()) == {1}


def test_a_huge_int_in_an_entry_prints_no_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    """Found by the dump_wrong_metadata fuzz target: a 5000-digit int (a 2 kB pickle) as an entry's timestamp made
    polars' error message print 'Exception ignored ... Exceeds the limit (4300 digits)' tracebacks on stderr."""
    dump = _real()
    dump["entries"][0]["time_created_ns"] = 10**5000
    fr = load_fr_dumps([("huge_trace_rank_0", pickle.dumps(dump)), ("fr_trace_rank_1", REAL_DUMP.read_bytes())])
    assert any(w.startswith("huge_trace_rank_0: skipped, entries have unexpected types") for w in fr.warnings)
    assert set(fr.entries["rank"].to_list()) == {1}
    err = capsys.readouterr().err
    assert "Traceback" not in err and "Exception ignored" not in err, err[:500]
