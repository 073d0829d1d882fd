"""The C decoder (`_frdecode`, via `fr_native`) gives exactly what the Python path gives: the same compact table, the
same dictionaries of distinct values (same ids), groups, status, dumps and warnings, on every dump the tests have,
the synthetic ones at several sizes and the hostile and mutated ones; and it never crashes on arbitrary bytes."""

from __future__ import annotations

import copy
import pickle
import random
import struct
from pathlib import Path

import pytest

from ncclpm.ingest.flight_recorder import decode as fr_decode
from ncclpm.ingest.flight_recorder import native as fr_native
from ncclpm.ingest.flight_recorder.load import load_fr_dumps
from ncclpm.ingest.flight_recorder.scan import Refused, scan
from ncclpm.tables.fr import FRLoad
from tests import fuzz_dumps
from tests.shared import corpus
from tests.synth.fr_dumps import FAULTS, generate
from tests.test_fr_bounds import REAL_DUMP, _mutations, hostile_dumps, wrong_metadata

pytestmark = pytest.mark.skipif(fr_native._frdecode is None, reason="the C decoder is not built in this install")
ROOT = Path(__file__).resolve().parents[1]
CORPUS = corpus()  # reference material beside the checkout; absent elsewhere


def _load(items: list, native: bool, monkeypatch: pytest.MonkeyPatch, **kw: str) -> tuple[FRLoad, int]:
    """(the load, how many dumps the C decoder read)."""
    read = [0]
    real = fr_native.NativeLoad.decode

    def counted(self: fr_native.NativeLoad, data: bytes) -> tuple | str:
        got = real(self, data)
        read[0] += not isinstance(got, str)
        return got

    with monkeypatch.context() as m:
        m.setattr(fr_native.NativeLoad, "decode", counted)
        if not native:
            m.setenv("NCCLPM_FR_PYTHON", "1")
        return load_fr_dumps(items, **kw), read[0]


def _same(items: list, monkeypatch: pytest.MonkeyPatch, **kw: str) -> int:
    """Load both ways, require identical results; return how many dumps the C decoder read."""
    py, n_py = _load(items, False, monkeypatch, **kw)
    c, n_c = _load(items, True, monkeypatch, **kw)
    assert n_py == 0
    assert c.compact.equals(py.compact)
    assert c.compact.schema == py.compact.schema
    assert list(c.values) == list(py.values)
    for k in py.values:
        assert c.values[k].equals(py.values[k]), k
    assert c.groups.equals(py.groups) and c.status.equals(py.status) and c.dumps.equals(py.dumps)
    assert c.warnings == py.warnings
    return n_c


def _job_dumps() -> list[tuple[str, list[Path]]]:
    """Every test case's dumps (all copies: raw, fixed, JSON, periodic, loaded together as a job is) and each dump
    folder of the reference corpus."""
    jobs = []
    for case in sorted((ROOT / "tests" / "cases").iterdir()):
        files = sorted(p for p in (case / "input").rglob("*") if p.is_file() and "fr" in p.parts)
        if files:
            jobs.append((case.name, files))
    if CORPUS.is_dir():
        folders: dict[Path, list[Path]] = {}
        for p in sorted(CORPUS.rglob("*")):
            if p.is_file() and p.stat().st_size < 64 << 20 and (p.suffix == ".json" or p.read_bytes()[:1] == b"\x80"):
                folders.setdefault(p.parent, []).append(p)
        jobs += [(str(f.relative_to(CORPUS)), files) for f, files in folders.items()]
    return jobs


def test_every_real_dump_reads_the_same_both_ways(monkeypatch: pytest.MonkeyPatch) -> None:
    jobs = _job_dumps()
    assert len(jobs) >= 20
    native = 0
    for name, files in jobs:
        items = [(str(p.relative_to(p.parents[2])), p.read_bytes()) for p in files]
        for frames in ("tail", "all", "none"):
            try:
                native += _same(items, monkeypatch, frames=frames)
            except AssertionError as exc:
                raise AssertionError(f"{name} (frames={frames})") from exc
    assert native > 300  # the real pickles are read by the C decoder, not left to Python


@pytest.mark.parametrize("fault", FAULTS)
def test_synthetic_jobs_read_the_same_both_ways(fault: str, monkeypatch: pytest.MonkeyPatch) -> None:
    for ranks, entries, groups in ((3, 5, 1), (16, 300, 3), (40, 70, 4)):
        items = list(generate(ranks, entries, groups, fault).items())
        items += [(f"json/{n}.json", b) for n, b in generate(4, 30, 2, fault, fmt="json").items()]
        assert _same(items, monkeypatch) == ranks
        assert _same(items, monkeypatch, frames="all") == ranks


def test_hostile_and_mutated_dumps_read_the_same_both_ways(monkeypatch: pytest.MonkeyPatch) -> None:
    real = ("fr_trace_rank_1", REAL_DUMP.read_bytes())
    for name, data in [*hostile_dumps().items(), *wrong_metadata().items()]:
        _same([(name, data), real], monkeypatch)
    mutated = _mutations(11, 300)
    for i in range(0, len(mutated), 10):  # ten dumps a load: the dictionaries are shared between them
        _same([(f"m/fr_trace_rank_{i + k}", d) for k, d in enumerate(mutated[i : i + 10])], monkeypatch)


def _edited(edit: object) -> bytes:
    dump = pickle.loads(REAL_DUMP.read_bytes())  # our own test data, trusted
    edit(dump)  # type: ignore[operator]
    return pickle.dumps(dump, protocol=4)


def _set(i: int, key: str, value: object):
    def edit(d: dict) -> None:
        d["entries"][i][key] = value

    return edit


def _drop(i: int, key: str):
    def edit(d: dict) -> None:
        d["entries"][i].pop(key, None)

    return edit


EDITS = {
    "none_scalars": _set(1, "collective_seq_id", None),
    "none_bool": _set(0, "retired", None),
    "none_text": _set(1, "profiling_name", None),
    "missing_middle": _drop(1, "pg_id"),
    "missing_first": _drop(0, "state"),
    "tuple_sizes": _set(0, "input_sizes", ((4, 2), (3,))),
    "empty_sizes": _set(0, "input_sizes", []),
    "odd_sizes": _set(0, "input_sizes", [[1.5]]),
    "bool_in_int": _set(0, "pg_id", True),
    "float_in_int": _set(0, "record_id", 1.0),
    "big_int": _set(0, "time_created_ns", 2**70),
    "negative": _set(0, "record_id", -(2**63)),
    "pg_short": _set(0, "process_group", ("only",)),
    "pg_empty": _set(0, "process_group", []),
    "pg_odd": _set(0, "process_group", (1, None, "x")),
    "pg_text": _set(0, "process_group", "ab"),
    "pg_none": _set(0, "process_group", None),
    "unicode_text": _set(0, "profiling_name", "nccl:all_reduce ✓"),
    "surrogate": _set(0, "profiling_name", "\ud800"),
    "unicode_frame": _set(0, "frames", [{"name": "f", "filename": "/tmp/é.py", "line": 1}]),
    "quote_frame": _set(0, "frames", [{"name": "it's", "filename": "a\\b", "line": None}]),
    "frame_extra_key": _set(0, "frames", [{"name": "f", "filename": "x", "line": 1, "col": 2}]),
    "frame_order": _set(0, "frames", [{"line": 1, "filename": "x", "name": "f"}]),
    "frame_not_dict": _set(0, "frames", ["f"]),
    "dtypes_odd": _set(0, "input_dtypes", [1]),
    "int_key": lambda d: d["entries"][0].update({7: "x"}),
    "no_entries": lambda d: d.update(entries=[]),
    "entries_tuple": lambda d: d.update(entries=tuple(d["entries"])),
    "version_3": lambda d: d.update(version="3.0"),
    "old_nccl_version": lambda d: d.update(nccl_version=d.pop("comm_lib_version", "2.0")),
    "bad_pg_status": lambda d: d.update(pg_status=[1]),
}


def test_unusual_values_read_the_same_both_ways(monkeypatch: pytest.MonkeyPatch) -> None:
    real = ("fr_trace_rank_1", REAL_DUMP.read_bytes())
    items = [(f"{k}/fr_trace_rank_{i + 2}", _edited(e)) for i, (k, e) in enumerate(EDITS.items())]
    for item in items:
        _same([item, real], monkeypatch)
    assert _same([*items, real], monkeypatch) > len(EDITS) // 2  # most stay on the C path
    shared = pickle.loads(REAL_DUMP.read_bytes())
    for e in shared["entries"]:  # one list object for every entry: the pickle writes it once, then references
        e["input_sizes"] = shared["entries"][0]["input_sizes"]
    copies = [pickle.dumps(shared, protocol=p) for p in (2, 3, 4, 5)] + [pickle.dumps(copy.deepcopy(shared))]
    assert _same([(f"p{i}/fr_trace_rank_{i}", d) for i, d in enumerate(copies)], monkeypatch) == len(copies)


def test_nested_values_that_almost_match_read_the_same_both_ways(monkeypatch: pytest.MonkeyPatch) -> None:
    """The decoder finds a dump's sizes and dtypes by structure (a hash of the nodes, then a walk comparing them) before
    making their repr: values one list/tuple, one int, one dim, one byte or one element apart, repeated in any order
    and as fresh or shared objects, get the ids the Python path gives them."""
    sizes = [[[4, 8]], [(4, 8)], ([4, 8],), [[4, 8], []], [[8, 4]], [[4, 9]], [[4]], [[4, 8, 0]], [[-4, 8]], []]
    sizes += [[[2**40, 8]], [[4, 8], [4, 8]], [[4, 8]], [(4,)], [[4, 8]]]
    dtypes = [["Float"], ("Float",), ["Float", "Float"], ["Floa"], ["Float "], ["float"], [], ["Float", "Half"]]
    dtypes += [["Half", "Float"], ["BFloat16"], ["Float"]]
    dump = pickle.loads(REAL_DUMP.read_bytes())  # our own test data, trusted
    rng = random.Random(7)
    for i, e in enumerate(dump["entries"]):
        e["input_sizes"] = copy.deepcopy(sizes[rng.randrange(len(sizes))]) if i % 3 else sizes[i % len(sizes)]
        e["input_dtypes"] = copy.deepcopy(dtypes[rng.randrange(len(dtypes))]) if i % 2 else dtypes[i % len(dtypes)]
    items = [(f"n{i}/fr_trace_rank_{i}", pickle.dumps(dump, protocol=p)) for i, p in enumerate((2, 4, 5))]
    assert _same(items, monkeypatch) == len(items)


class _Writer:
    """A pickle of plain values with chosen opcode forms (Python's pickler picks one form per value): dicts filled
    one SETITEM or `batch` items a SETITEMS at a time (several segments a dict), lists one APPEND or a batch at a
    time, every int as LONG1 (widths 0 to 8) or in its smallest form, strings as BINUNICODE8, every scalar memoized
    (so repeats pass memo index 255 and come back by LONG_BINGET) or by BINPUT/LONG_BINPUT."""

    def __init__(self, batch: int, long1: bool, unicode8: bool, memo_all: bool, binput: bool) -> None:
        self.batch, self.long1, self.unicode8, self.memo_all, self.binput = batch, long1, unicode8, memo_all, binput
        self.memo: dict[tuple[type, object], int] = {}
        self.out = bytearray(b"\x80\x04")

    def dump(self, obj: object) -> bytes:
        self.value(obj)
        return bytes(self.out + b".")

    def _memoize(self, key: tuple[type, object]) -> None:
        i = self.memo[key] = len(self.memo)
        if not self.binput:
            self.out += b"\x94"  # MEMOIZE
        else:
            self.out += b"q" + bytes([i]) if i < 256 else b"r" + i.to_bytes(4, "little")

    def _scalar(self, obj: object, body: bytes) -> None:
        key = (type(obj), obj)
        if key in self.memo:
            i = self.memo[key]
            self.out += b"h" + bytes([i]) if i < 256 else b"j" + i.to_bytes(4, "little")
            return
        self.out += body
        if self.memo_all or type(obj) is str:
            self._memoize(key)

    def _int(self, v: int) -> bytes:
        if not self.long1 and 0 <= v < 256:
            return b"K" + bytes([v])
        if not self.long1 and 0 <= v < 65536:
            return b"M" + v.to_bytes(2, "little")
        if not self.long1 and -(2**31) <= v < 2**31:
            return b"J" + v.to_bytes(4, "little", signed=True)
        raw = v.to_bytes((v + (v < 0)).bit_length() // 8 + 1, "little", signed=True) if v else b""
        return b"\x8a" + bytes([len(raw)]) + raw

    def value(self, obj: object) -> None:
        if obj is None or obj is True or obj is False:
            self.out += {None: b"N", True: b"\x88", False: b"\x89"}[obj]
        elif type(obj) is int:
            self._scalar(obj, self._int(obj))
        elif type(obj) is float:
            self._scalar(obj, b"G" + struct.pack(">d", obj))
        elif type(obj) is str:
            raw = obj.encode("utf-8", "surrogatepass")
            if self.unicode8:
                self._scalar(obj, b"\x8d" + len(raw).to_bytes(8, "little") + raw)
            else:
                head = b"\x8c" + bytes([len(raw)]) if len(raw) < 256 else b"X" + len(raw).to_bytes(4, "little")
                self._scalar(obj, head + raw)
        elif type(obj) is tuple:
            self.out += b"("
            for v in obj:
                self.value(v)
            self.out += b"t"
        elif type(obj) is list:
            self._items(b"]", obj, b"a", b"e")
        else:
            assert type(obj) is dict
            self._items(b"}", [kv for item in obj.items() for kv in item], b"s", b"u", step=2)

    def _items(self, empty: bytes, flat: list, one: bytes, many: bytes, step: int = 1) -> None:
        self.out += empty
        size = self.batch * step
        for at in range(0, len(flat), size):
            part = flat[at : at + size]
            if len(part) == step:
                for v in part:
                    self.value(v)
                self.out += one
            else:
                self.out += b"("
                for v in part:
                    self.value(v)
                self.out += many


def test_opcode_forms_read_the_same_both_ways(monkeypatch: pytest.MonkeyPatch) -> None:
    """The forms a pickler may choose (dicts and lists filled in several steps, each int width, 8-byte string
    lengths, memo indices past 255) read as the Python path reads them; the same string in several text fields
    (the decoder caches a memoized string's code) and ints past 32 bits and negative ones included."""
    dump = pickle.loads(REAL_DUMP.read_bytes())  # our own test data, trusted
    first = dump["entries"][0]
    first["state"] = first["profiling_name"]  # one memoized string in two text fields
    first["process_group"] = (first["profiling_name"], first["profiling_name"])
    first["record_id"], first["pg_id"] = -(2**40) - 3, 2**56 + 7
    first["collective_seq_id"], first["time_created_ns"] = -129, -(2**63)
    dump["entries"][1]["record_id"] = 2**63 - 1
    forms = [
        (1, False, False, False, False),
        (2, True, False, True, False),
        (3, False, True, True, True),
        (1000, True, True, False, True),
    ]
    items = [(f"f{i}/fr_trace_rank_{i}", _Writer(*f).dump(dump)) for i, f in enumerate(forms)]
    assert all(pickle.loads(d) == dump for _, d in items)  # our writer's output is the same dump
    assert _same(items, monkeypatch) == len(items)  # all read by the C decoder
    assert _same(items, monkeypatch, frames="all") == len(items)


def test_row_buffers_grow_past_the_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    """The load's row buffers get room for `NATIVE_ROWS` + `_ROOM_ROWS` rows at once; a frame that outgrows them (a
    big dump arriving near the threshold) grows them and keeps every row, and a bad hint is ignored."""
    items = list(generate(12, 1500, 3, "never_joined").items())
    # room for 16001 rows (the decoder makes room for 16384 at least): the 11th dump of 1500 rows outgrows it
    monkeypatch.setattr(fr_decode, "NATIVE_ROWS", 16000)
    monkeypatch.setattr(fr_decode, "_ROOM_ROWS", 1)
    assert _same(items, monkeypatch) == len(items)
    for hint in (-5, 0, 2**40):
        job = fr_native._frdecode.Job(64, hint)
        got = job.decode(items[0][1])
        job.add(got[4], 0, 0)
        assert job.take()["rows"] == 1500


def _decoded(data: bytes, keep: int = -1) -> tuple[object, dict | None]:
    """(what `Job.decode` gives, what `take` gives after adding it: None when the dump is left to Python)."""
    job = fr_native._frdecode.Job(keep)
    got = job.decode(data)
    if isinstance(got, str):
        return got, None
    job.add(got[4], 0, 0)
    return got, job.take()


def test_the_decoders_keys_are_pythons_repr() -> None:
    checked = 0
    for p in sorted((ROOT / "tests" / "cases").rglob("fr_trace_rank_*")):
        if p.suffix != ".json":
            got, taken = _decoded(p.read_bytes())
            assert taken is not None or got == "no entries", (p, got)  # an empty dump is Python's
            for k in ("input_sizes", "input_dtypes", "frames") if taken else ():
                _, keys, values = taken[k]
                assert keys == [repr(v) for v in values]
                checked += len(keys)
    assert checked > 100


def _scan_admits(data: bytes) -> bool:
    try:
        scan(data)
    except Refused:
        return False
    return True


def test_the_decoder_survives_arbitrary_bytes_and_reads_only_what_the_scan_admits() -> None:
    """The decoder runs the scan's bounds in its own pass (no separate scan): it must hold on anything (mutations,
    truncations, random bytes, every hostile shape) and read no dump the scan refuses."""
    rng = random.Random(5)
    inputs = _mutations(23, 1500) + list(hostile_dumps().values()) + list(wrong_metadata().values())
    real = REAL_DUMP.read_bytes()
    inputs += [real[:k] for k in range(0, len(real), max(1, len(real) // 300))]
    inputs += [b"\x80\x04" + rng.randbytes(rng.randint(0, 400)) for _ in range(1500)]
    inputs += [fuzz_dumps.hostile_pickles()[k] for k in sorted(fuzz_dumps.hostile_pickles())]
    read = refused = 0
    for data in inputs:
        admitted = _scan_admits(data)
        refused += not admitted
        for keep in (-1, 0, 64):
            got, taken = _decoded(data, keep)
            assert isinstance(got, str | tuple)
            assert taken is None or admitted, data[:80]
            read += taken is not None
    assert read > 100 and refused > 300


def test_the_python_path_can_be_forced(monkeypatch: pytest.MonkeyPatch) -> None:
    items = list(generate(4, 20, 2, "never_joined").items())
    assert _load(items, True, monkeypatch)[1] == 4
    assert _load(items, False, monkeypatch)[1] == 0
    assert fr_decode.decode_all(items, 64, native=False).dumps  # the parameter, as for callers without the env
