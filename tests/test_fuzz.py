"""Property tests (hypothesis) over the line parsers, the ingest pipeline and the dump loader: on random and mutated
input no exception escapes and the output is deterministic (the same input twice gives identical frames and warnings).

Seeds are real: lines and logs of tests/cases, dumps of tests/cases/*/input/fr and ../shared/corpus/nvrx-fr (when
present). Strategies build the right shape first and confuse types at the leaves (a random dict almost never looks
like a dump). CI runs each target with a small fixed budget (derandomized, no example database); the long run is
`python scripts/fuzz_long.py`, which uses the same `TARGETS` with a big budget.
"""

from __future__ import annotations

import gzip
import io
import json
import pickle
import random
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from ncclpm.api import catalog
from ncclpm.engine import diagnose_tables
from ncclpm.ingest.build import build_tables
from ncclpm.ingest.flight_recorder.load import load_fr_dumps
from ncclpm.ingest.selftest import parse_one
from ncclpm.ingest.text.errorfiles import read_error_files
from ncclpm.ingest.text.extract import extract_events, parse_lines
from ncclpm.ingest.text.lines import read_kept_lines
from ncclpm.ingest.text.multiline import parse_elastic_summaries, stitch_tracebacks
from ncclpm.sources.discover import Source, collect
from tests.fuzz_dumps import TARGET_SPECS as DUMP_TARGETS
from tests.fuzz_inputs import TARGET_SPECS as INPUT_TARGETS
from tests.fuzz_round3 import TARGET_SPECS as ROUND3_TARGETS
from tests.shared import corpus

ROOT = Path(__file__).resolve().parents[1]
CASES = ROOT / "tests" / "cases"
NVRX = corpus("nvrx-fr")


# ------------------------------------------------------------------------------------------------------ seeds


class _Plain(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> object:  # seeds are data: never run code from them
        raise pickle.UnpicklingError(f"global {module}.{name}")


@lru_cache(maxsize=1)
def seed_lines() -> tuple[str, ...]:
    """Real lines that some catalog anchor matches (what the parsers actually see), ~1 per distinct shape."""
    anchors = catalog().anchors
    seen: dict[str, str] = {}
    for log in sorted(CASES.glob("*/input/**/*.log")):
        for line in log.read_text(errors="replace").splitlines():
            if any(a in line for a in anchors):
                seen.setdefault(line[:40], line[:2000])
    return tuple(sorted(seen.values()))


@lru_cache(maxsize=1)
def seed_logs() -> tuple[tuple[str, bytes], ...]:
    logs = sorted(p for p in CASES.glob("*/input/**/*.log") if 0 < p.stat().st_size < 200_000)
    return tuple((p.name, p.read_bytes()) for p in logs[:: max(1, len(logs) // 40)])


@lru_cache(maxsize=1)
def seed_dumps() -> tuple[tuple[str, bytes], ...]:
    paths = sorted(CASES.glob("*/input/fr/raw/*"))[::3] + sorted(CASES.glob("*/input/fr/json/*.json"))[::6]
    if NVRX.is_dir():
        paths += sorted(NVRX.glob("*/_dump_*"))[::4]
    return tuple((p.name, p.read_bytes()) for p in paths if p.stat().st_size < 400_000)


@lru_cache(maxsize=1)
def seed_dump_dicts() -> tuple[dict, ...]:
    out = []
    for _, data in seed_dumps():
        out.append(_Plain(io.BytesIO(data)).load() if data[:1] == b"\x80" else json.loads(data))
    return tuple(out)


@lru_cache(maxsize=1)
def small_cases() -> tuple[Path, ...]:
    """Cases small enough for the whole pipeline in a fuzz loop."""
    sized = [(sum(f.stat().st_size for f in c.rglob("*") if f.is_file()), c) for c in sorted(CASES.glob("*/input"))]
    return tuple(c for size, c in sorted(sized) if size < 150_000)[:12]


# --------------------------------------------------------------------------------------------- strategies

FRAGMENTS = [
    "[rank3]:",
    "[rank0]:",
    "[default0]:",
    "[default12]:",
    "[1,3]<stderr>:",
    "3: ",
    "[E ProcessGroupNCCL.cpp:616] ",
    "[W1101 10:00:00.123456 1234 ProcessGroupNCCL.cpp:1234] ",
    "E0101 10:00:00.123456 99 file.cc:12] ",
    "2024-01-01 10:00:00,123 ",
    "2024-13-45T99:99:99.999 ",
    "host-1:1234:5678 [0] NCCL INFO ",
    "NCCL WARN ",
    "[PG ID 0 PG GUID 0(default_pg) Rank 3] ",
    "[PG 1 Rank 2] ",
    "[Rank 99999999999] ",
    "Watchdog caught collective",
    "WorkNCCL(SeqNum=",
    "OpType=ALLREDUCE",
    "Timeout(ms)=600000",
    "NumelIn=",
    "ran for 600001 milliseconds",
    "Traceback (most recent call last):",
    '  File "train.py", line 12, in <module>',
    "RuntimeError: ",
    "torch.distributed.DistBackendError: ",
    "Root Cause (first observed failure):",
    "Failures:",
    "  time      : 2024-01-01_10:00:00",
    "  rank      : 3 (local_rank: 3)",
    "  exitcode  : -9 (pid: 1234)",
    "  error_file: <N/A>",
    "  traceback : Signal 9 (SIGKILL) received by PID 1234",
    "DataLoader timed out",
    "CUDA out of memory",
    "Xid 79",
    "NVML",
    "SIGSEGV",
    "999999999999999999999",
    "-1",
    "1e309",
    "nan",
    "inf",
    "0x",
    "\r",
    "\n",
    "\r\n",
    "\t",
    "\x00",
    "\ufeff",
    "\u2028",
    "\x85",
    "\u202e",
    "é",
    "\U0001f600",
    "`",
    "|",
    "\\",
    "[",
    "]",
    "(",
    ")",
    ":",
    "=",
    ",",
    " ",
]
FRAGMENT_BYTES = [f.encode() for f in FRAGMENTS] + [
    b"\xff",
    b"\xfe",
    b"\xc3",
    b"\xed\xa0\x80",
    b"\xff\xfe",
    b"\xef\xbb\xbf",
    b"\x1f\x8b",
    b"\x80\x04",
]
text_line = st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=10)), max_size=16).map("".join)
log_bytes = st.lists(
    st.one_of(
        st.sampled_from(FRAGMENT_BYTES),
        st.binary(max_size=10),
        text_line.map(lambda s: s.encode("utf-8", "surrogatepass")),
    ),
    max_size=40,
).map(b"".join)
text_edits = st.lists(
    st.tuples(
        st.sampled_from(["insert", "delete", "replace", "dup", "cut"]),
        st.integers(0, 4000),
        st.integers(1, 40),
        st.sampled_from(FRAGMENTS),
    ),
    max_size=6,
)
byte_edits = st.lists(
    st.tuples(
        st.sampled_from(["flip", "insert", "delete", "dup", "cut"]),
        st.integers(0, 1 << 22),
        st.integers(1, 64),
        st.binary(min_size=1, max_size=8),
    ),
    max_size=8,
)


def edit_text(s: str, edits: list[tuple[str, int, int, str]]) -> str:
    for op, pos, n, frag in edits:
        i = pos % (len(s) + 1)
        s = {
            "insert": s[:i] + frag + s[i:],
            "delete": s[:i] + s[i + n :],
            "replace": s[:i] + frag + s[i + len(frag) :],
            "dup": s[:i] + s[i : i + n] * 2 + s[i + n :],
            "cut": s[:i],
        }[op]
    return s


def edit_bytes(b: bytes, edits: list[tuple[str, int, int, bytes]]) -> bytes:
    for op, pos, n, chunk in edits:
        i = pos % (len(b) + 1)
        b = {
            "flip": b[:i] + bytes([(b[i] if i < len(b) else 0) ^ chunk[0] or 1]) + b[i + 1 :],
            "insert": b[:i] + chunk + b[i:],
            "delete": b[:i] + b[i + n :],
            "dup": b[:i] + b[i : i + n] * 2 + b[i + n :],
            "cut": b[:i],
        }[op]
    return b


scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.integers(-5, 5),
    st.floats(),
    st.text(max_size=12),
    st.binary(max_size=6),
)
plain = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.tuples(inner, inner), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
ENTRY_KEYS = [
    "record_id",
    "pg_id",
    "process_group",
    "collective_seq_id",
    "p2p_seq_id",
    "op_id",
    "profiling_name",
    "time_created_ns",
    "input_sizes",
    "input_dtypes",
    "output_sizes",
    "output_dtypes",
    "state",
    "time_discovered_started_ns",
    "time_discovered_completed_ns",
    "retired",
    "timeout_ms",
    "is_p2p",
    "frames",
    "thread_name",
    "duration_ms",
]
dump_edits = st.lists(
    st.one_of(
        st.tuples(st.just("entry"), st.integers(0, 10**6), st.sampled_from(ENTRY_KEYS), plain),
        st.tuples(st.just("drop"), st.integers(0, 10**6), st.sampled_from(ENTRY_KEYS), st.none()),
        st.tuples(
            st.just("top"),
            st.just(0),
            st.sampled_from(["version", "pg_config", "pg_status", "comm_lib_version", "nccl_version", "entries"]),
            plain,
        ),
        st.tuples(st.just("frame"), st.integers(0, 10**6), st.sampled_from(["name", "filename", "line"]), plain),
        st.tuples(st.just("dup"), st.integers(0, 10**6), st.just(""), st.none()),
    ),
    min_size=1,
    max_size=6,
)
errorfile_doc = st.one_of(
    plain,
    st.fixed_dictionaries(
        {
            "message": st.one_of(
                st.text(max_size=60),
                plain,
                st.fixed_dictionaries(
                    {
                        "message": st.one_of(
                            st.sampled_from(["RuntimeError: x", "", "\n\n", "a.b.C: d\ne"]), st.text(max_size=40), plain
                        ),
                        "extraInfo": st.one_of(
                            plain,
                            st.fixed_dictionaries(
                                {"py_callstack": plain, "timestamp": st.one_of(plain, st.integers().map(str))}
                            ),
                        ),
                    }
                ),
            )
        }
    ),
)


# --------------------------------------------------------------------------------------------------- targets


def frame_summary(*frames: pl.DataFrame) -> str:
    """A comparable picture of frames: repr, so that NaN equals NaN."""
    return repr([(dict(f.schema), f.rows()) for f in frames])


def run_parse_one(line: str) -> str:
    parsed, events = parse_one(catalog(), line, messages=True)
    return frame_summary(parsed, events)


def run_block(data: bytes) -> str:
    warnings: list[str] = []
    kept = read_kept_lines([Source("rank3.log", "text", data=data)], catalog().anchors, warnings)
    parsed = parse_lines(kept, catalog())
    events = extract_events(parsed, catalog())
    return frame_summary(kept, parsed, events, stitch_tracebacks(parsed), parse_elastic_summaries(parsed)) + repr(
        warnings
    )


FILE_NAMES = [
    "rank0.log",
    "rank12.log",
    "console.log",
    "attempt_0/3/stderr.log",
    "node1/out.txt",
    "x.log.gz",
    "attempt_0/1/error.json",
    "fr_trace_rank_1",
]


def run_files_on_disk(files: list[tuple[int, bytes, bool]]) -> str:
    with tempfile.TemporaryDirectory(prefix="ncclpm-fuzz-") as d:
        for i, (name, data, gz) in enumerate(files):
            path = Path(d) / f"f{i}" / FILE_NAMES[name % len(FILE_NAMES)]
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(gzip.compress(data, mtime=0) if gz else data)
        t = build_tables(collect([d]), catalog())
        return frame_summary(t.lines, t.events, t.tracebacks, t.elastic, t.ranks) + repr((t.warnings, t.sources))


def run_pipeline(args: tuple[int, int, list]) -> str:
    """A small real case with one text file edited byte-wise, through discovery, every table and every rule."""
    case_i, file_i, edits = args
    case = small_cases()[case_i % len(small_cases())]
    with tempfile.TemporaryDirectory(prefix="ncclpm-fuzz-") as d:
        job = Path(d) / "job"
        files = sorted(p for p in case.rglob("*") if p.is_file())
        for p in files:
            (job / p.relative_to(case)).parent.mkdir(parents=True, exist_ok=True)
            (job / p.relative_to(case)).write_bytes(p.read_bytes())
        texts = [p for p in files if p.suffix in (".log", ".txt", ".json")] or files
        target = job / texts[file_i % len(texts)].relative_to(case)
        target.write_bytes(edit_bytes(target.read_bytes(), edits))
        diagnosis = diagnose_tables(build_tables(collect([job], name="fuzzed job"), catalog()))
        return json.dumps(diagnosis.to_dict(), sort_keys=True, default=str)


def summarize_fr(items: list[tuple[str, bytes]]) -> str:
    fr = load_fr_dumps(items)
    groups = fr.groups.sort("group_key")  # its row order was not deterministic: see test_fr_groups_row_order_is_stable
    return frame_summary(fr.entries, groups, fr.status, fr.dumps) + repr(fr.warnings)


def run_dump_bytes(data: bytes) -> str:
    return summarize_fr([("fuzz_trace_rank_3", data), ("fr_trace_rank_1", seed_dumps()[0][1])])


def run_dump_byte_edits(args: tuple[int, list]) -> str:
    i, edits = args
    name, data = seed_dumps()[i % len(seed_dumps())]
    return summarize_fr([(name, edit_bytes(data, edits)), ("fr_trace_rank_1", seed_dumps()[0][1])])


def _apply_dump_edits(dump: dict, edits: list) -> dict:
    entries = dump.get("entries") if isinstance(dump.get("entries"), list) else []
    for op, i, key, value in edits:
        e = entries[i % len(entries)] if entries else None
        if op == "entry" and isinstance(e, dict):
            e[key] = value
        elif op == "drop" and isinstance(e, dict):
            e.pop(key, None)
        elif op == "top":
            dump[key] = value
        elif op == "frame" and isinstance(e, dict) and isinstance(e.get("frames"), list) and e["frames"]:
            frame = e["frames"][i % len(e["frames"])]
            if isinstance(frame, dict):
                frame[key] = value
        elif op == "dup" and e is not None:
            entries.insert(i % len(entries), e)
    return dump


def run_dump_structured(args: tuple[int, list, int]) -> str:
    i, edits, protocol = args
    dump = _apply_dump_edits(pickle.loads(pickle.dumps(seed_dump_dicts()[i % len(seed_dump_dicts())])), edits)
    if protocol == 0:
        try:
            data = json.dumps(dump, default=repr).encode()
        except (ValueError, TypeError, RecursionError):  # a NaN key, a cycle: not JSON - pickle it
            data = pickle.dumps(dump, protocol=4)
    else:
        data = pickle.dumps(dump, protocol=protocol + 1)
    return summarize_fr([(f"fuzz_trace_rank_{i % 7}", data), ("fr_trace_rank_1", seed_dumps()[0][1])])


ERROR_NAMES = [
    "attempt_0/3/error.json",
    "error_rank7.json",
    "error_rank99999999999.json",
    "error.json",
    "attempt_12/" + "9" * 30 + "/error.json",
]


def run_errorfile(args: tuple[object, int]) -> str:
    doc, n = args
    data = json.dumps(doc, default=repr).encode()
    warnings: list[str] = []
    frame = read_error_files([Source(ERROR_NAMES[n % len(ERROR_NAMES)], "errorfile", data=data)], warnings)
    return frame_summary(frame) + repr(warnings)


@dataclass(frozen=True)
class Target:
    strategy: st.SearchStrategy
    run: Callable[[object], str]
    ci_examples: int  # per CI run (derandomized)
    long_examples: int  # per scripts/fuzz_long.py run (parse_one costs ~80 ms a call: 5,000 x 2 is ~15 min)
    known: tuple = ()  # inputs that once broke ncclpm: always tried first


def _json_safe(doc: object) -> bool:
    try:
        json.dumps(doc, default=repr)
        return True
    except (ValueError, TypeError, RecursionError):
        return False


TARGETS: dict[str, Target] = {
    "parse_one_random_text": Target(text_line, run_parse_one, 10, 5_000),
    "parse_one_mutated_real_line": Target(
        st.tuples(st.integers(0, 10**6), text_edits).map(
            lambda a: edit_text(seed_lines()[a[0] % len(seed_lines())], a[1])
        ),
        run_parse_one,
        10,
        5_000,
    ),
    "log_bytes_in_memory": Target(
        st.one_of(
            log_bytes,
            st.tuples(st.integers(0, 10**6), byte_edits).map(
                lambda a: edit_bytes(seed_logs()[a[0] % len(seed_logs())][1], a[1])
            ),
        ),
        run_block,
        12,
        5_000,
    ),
    "log_files_on_disk": Target(
        st.lists(
            st.tuples(
                st.integers(0, 100),
                st.one_of(
                    log_bytes,
                    st.tuples(st.integers(0, 10**6), byte_edits).map(
                        lambda a: edit_bytes(seed_logs()[a[0] % len(seed_logs())][1], a[1])
                    ),
                ),
                st.booleans(),
            ),
            min_size=1,
            max_size=3,
        ),
        run_files_on_disk,
        8,
        5_000,
    ),
    "job_pipeline_mutated_case": Target(
        st.tuples(st.integers(0, 100), st.integers(0, 100), byte_edits), run_pipeline, 4, 2_000
    ),
    "dump_random_bytes": Target(
        st.one_of(
            st.binary(max_size=3000),
            st.binary(max_size=3000).map(lambda b: b"\x80\x04" + b),
            st.binary(max_size=300).map(lambda b: b'{"version": "2.10", "entries": [' + b),
            st.binary(max_size=300).map(lambda b: b"\x80\x02}(X\x07\x00\x00\x00versionX" + b),
        ),
        run_dump_bytes,
        60,
        20_000,
    ),
    "dump_byte_mutations": Target(st.tuples(st.integers(0, 10**6), byte_edits), run_dump_byte_edits, 60, 20_000),
    "dump_structured_type_confusion": Target(
        st.tuples(st.integers(0, 10**6), dump_edits, st.integers(0, 4)),
        run_dump_structured,
        40,
        20_000,
        known=(
            (0, [("entry", 0, "frames", "not a list of frames")], 2),  # crashed the whole load before 3ff4211
            (1, [("entry", 0, "input_sizes", [[1, "two"], None])], 4),
        ),
    ),
    "errorfile_type_confusion": Target(
        st.tuples(errorfile_doc.filter(_json_safe), st.integers(0, 100)),
        run_errorfile,
        60,
        50_000,
        known=(
            ({"message": {"message": "RuntimeError: x", "extraInfo": ["x"]}}, 0),  # crashed before 0e856d7
            ({"message": "RuntimeError: x"}, 2),
        ),
    ),
}

TARGETS.update({name: Target(*spec) for name, spec in INPUT_TARGETS.items()})  # names, escapes, pastes
TARGETS.update({name: Target(*spec) for name, spec in DUMP_TARGETS.items()})  # self-reference, depth, bombs, types
TARGETS.update({name: Target(*spec) for name, spec in ROUND3_TARGETS.items()})  # bounds, code or log, identity

CI = settings(
    deadline=None,
    derandomize=True,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)


def deterministic(target: Target, value: object) -> None:
    """The property: no exception escapes (an exception fails the test) and the same input gives the same output."""
    first = target.run(value)
    assert target.run(value) == first, "same input, different output"


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_fuzz(name: str) -> None:
    target = TARGETS[name]

    @settings(CI, max_examples=target.ci_examples)
    @given(target.strategy)
    def check(value: object) -> None:
        deterministic(target, value)

    for known in target.known:
        check = example(known)(check)
    check()


def test_the_seeds_are_real() -> None:
    assert len(seed_lines()) > 100 and len(seed_logs()) > 20 and len(seed_dumps()) > 10 and len(small_cases()) >= 5
    assert random.Random(0).random() == random.Random(0).random()  # (the strategies use hypothesis' own PRNG)


def test_fr_groups_row_order_is_stable() -> None:
    entries = [
        {
            "record_id": i,
            "pg_id": i,
            "process_group": (f"pg{i}", f"desc{i}"),
            "collective_seq_id": 1,
            "profiling_name": "nccl:all_reduce",
            "state": "completed",
        }
        for i in range(40)
    ]
    data = pickle.dumps({"version": "2.10", "pg_config": {}, "pg_status": {}, "entries": entries})
    orders = {tuple(load_fr_dumps([("fr_trace_rank_0", data)]).groups["group_key"].to_list()) for _ in range(5)}
    assert len(orders) == 1
