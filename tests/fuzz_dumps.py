"""Fuzz targets for the dump shapes issue 13 round two bounds, used by tests/test_fuzz.py (CI budget) and
scripts/fuzz_long.py (long budget). Each takes a real dump and puts one hostile shape at a random place:

- dump_self_reference: a container that holds itself, two that hold each other, an entry list that holds the
  dump, a dict that holds its parent - pickled by Python (protocols 2 to 5), so memo GETs close the cycle;
- dump_depth: lists, tuples, dicts or a mix nested 20 to 200,000 deep, spliced in as opcodes (Python's pickler
  recurses), and the same as JSON text;
- dump_reference_bomb: one value referenced k times at each of several levels (a memo GET per reference), an
  entry repeated with its sizes, a `pg_config` naming one rank list for thousands of groups, a memo index
  far past the values memoised;
- dump_wrong_metadata: metadata of the wrong type or range (timestamps past Int64, ranks past Int32 as text,
  5000-digit pg ids, deep versions, NaN, bytes), as a pickle and as JSON.

The property, besides "no exception, same output twice": the real dump loaded beside it is still used (its rank
is in the entries), the hostile dump is either used or named in a warning, and what the load built is bounded by
the file size (`ncclpm.ingest.flight_recorder.scan`: 32 values per byte, at least 2**20 values).
"""

from __future__ import annotations

import json
import math
import pickle
from functools import lru_cache
from pathlib import Path

from hypothesis import strategies as st

from ncclpm.ingest.flight_recorder.load import load_fr_dumps

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT / "tests" / "cases" / "rank0_slow_work__torchrun_3ranks" / "input" / "fr" / "raw"
MARK = "\x00fuzz-marker\x00"
# what a load may build from a dump of n bytes: the scan admits 32 values per byte (at least 2**20 values); a
# value in a polars column costs at most a few dozen bytes with its validity and offsets, strings are bounded by
# the file itself
BYTES_PER_VALUE = 64
MIN_VALUES = 1 << 20


class _Plain(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> object:  # our own test data: never a global
        raise pickle.UnpicklingError(f"global {module}.{name}")


@lru_cache(maxsize=1)
def real_dumps() -> tuple[bytes, bytes]:
    """(the dump that gets the hostile shape, the real dump of rank 1 loaded beside it)."""
    return (REAL / "fr_trace_rank_0").read_bytes(), (REAL / "fr_trace_rank_1").read_bytes()


def real_dict() -> dict:
    import io

    return _Plain(io.BytesIO(real_dumps()[0])).load()


PLACES = [
    ("entry", "input_sizes"),
    ("entry", "output_sizes"),
    ("entry", "frames"),
    ("entry", "profiling_name"),
    ("entry", "process_group"),
    ("entry", "state"),
    ("entry", "collective_seq_id"),
    ("top", "entries"),
    ("top", "pg_config"),
    ("top", "pg_status"),
    ("top", "comm_lib_version"),
    ("top", "version"),
]


def _put(dump: dict, place: tuple[str, str], index: int, value: object) -> None:
    where, key = place
    entries = dump.get("entries") or [{}]
    if where == "entry":
        entries[index % len(entries)][key] = value
    else:
        dump[key] = value


def _finish(data: bytes, name: str) -> str:
    """Load the hostile dump beside a real one, check the property, return a comparable summary."""
    fr = load_fr_dumps([(name, data), ("fr_trace_rank_1", real_dumps()[1])])
    ranks = set(fr.entries["rank"].to_list()) if fr.entries.height else set()
    assert 1 in ranks, (name, fr.warnings)  # the real dump is still used
    named = any(name in w for w in fr.warnings)
    assert named or 0 in ranks, (name, fr.warnings)  # the hostile one is used or named: never dropped silently
    built = sum(f.estimated_size() for f in (fr.entries, fr.groups, fr.status, fr.dumps))
    real_built = 4 * len(real_dumps()[1]) * BYTES_PER_VALUE  # (the real dump's share, generously)
    assert built <= BYTES_PER_VALUE * max(32 * len(data), MIN_VALUES) + real_built, (name, len(data), built)
    return repr((sorted(ranks), fr.entries.height, fr.warnings))


# -------------------------------------------------------------------------------------------- self-reference


def _cycle(kind: int) -> object:
    if kind == 0:
        loop: list = []
        loop.append(loop)
        return loop
    if kind == 1:
        a: list = []
        b: list = [a, 1]
        a.append(b)
        return a
    if kind == 2:
        d: dict = {}
        d["x"] = d
        return d
    if kind == 3:
        inner: list = []
        t = (inner, 2)
        inner.append(t)  # a tuple reached again through the list it holds
        return t
    inner_d: dict = {}
    outer = [inner_d, [inner_d]]
    inner_d["up"] = outer
    return outer


def run_self_reference(args: tuple[int, int, int, int, int]) -> str:
    return _finish(*make_self_reference(args))


def make_self_reference(args: tuple[int, int, int, int, int]) -> tuple[bytes, str]:
    kind, place_i, index, protocol, whole = args
    dump = real_dict()
    if whole % 3 == 0:
        _put(dump, PLACES[place_i % len(PLACES)], index, _cycle(kind % 5))
    elif whole % 3 == 1:
        _put(dump, PLACES[place_i % len(PLACES)], index, dump)  # the dump holds itself
    else:
        _put(dump, PLACES[place_i % len(PLACES)], index, dump.get("entries"))  # an entry holds the entry list
    return pickle.dumps(dump, protocol=2 + protocol % 4), "self_ref_trace_rank_0"


# ----------------------------------------------------------------------------------------------------- depth


def _text_op(s: str) -> bytes:
    raw = s.encode()
    return b"X" + len(raw).to_bytes(4, "little") + raw


def _deep_opcodes(depth: int, kind: int) -> bytes:
    if kind == 0:  # [[[...]]]
        return b"]" * (depth + 1) + b"a" * depth
    if kind == 1:  # ((((),),),)
        return b")" + b"\x85" * depth
    if kind == 2:  # {"k": {"k": {...}}}
        return (b"}" + _text_op("k")) * depth + b"}" + b"s" * depth
    # a mix: a list holding a tuple holding a dict ...
    out_open, out_close = b"", b""
    for level in range(depth):
        if level % 3 == 0:
            out_open, out_close = out_open + b"]", b"a" + out_close
        elif level % 3 == 1:
            out_open, out_close = out_open + b"(", b"t" + out_close
        else:
            out_open, out_close = out_open + b"}" + _text_op("k"), b"s" + out_close
    return out_open + b"K\x01" + out_close


def run_depth(args: tuple[int, int, int, int, bool]) -> str:
    return _finish(*make_depth(args))


def make_depth(args: tuple[int, int, int, int, bool]) -> tuple[bytes, str]:
    depth_i, kind, place_i, index, as_json = args
    depth = [20, 31, 33, 64, 900, 5000, 100_000, 200_000][depth_i % 8]
    dump = real_dict()
    _put(dump, PLACES[place_i % len(PLACES)], index, MARK)
    if as_json:
        doc = json.dumps(dump, default=repr)
        nest = ("[" * depth + "]" * depth) if kind % 2 == 0 else ('{"k": ' * depth + "{}" + "}" * depth)
        data = doc.replace(json.dumps(MARK), nest, 1).encode()
        return data, "deep_trace_rank_0.json"
    data = pickle.dumps(dump, protocol=2)
    assert data.count(_text_op(MARK)) == 1
    return data.replace(_text_op(MARK), _deep_opcodes(depth, kind % 4)), "deep_trace_rank_0"


# ------------------------------------------------------------------------------------------- reference bombs


def _bomb(levels: int, fan: int, base: int, leaf: int) -> object:
    value: object = [[1, 2]] * base if leaf == 0 else (list(range(base)) if leaf == 1 else ["x" * 40] * base)
    for _ in range(levels):
        value = [value] * fan
    return value


def run_reference_bomb(args: tuple[int, int, int, int, int, int, int]) -> str:
    return _finish(*make_reference_bomb(args))


def make_reference_bomb(args: tuple[int, int, int, int, int, int, int]) -> tuple[bytes, str]:
    shape, levels, fan, base, place_i, index, protocol = args
    dump = real_dict()
    if shape % 4 == 0:  # a shared value referenced again and again, at one place
        _put(dump, PLACES[place_i % len(PLACES)], index, _bomb(levels % 4, fan, base, place_i % 3))
    elif shape % 4 == 1:  # the 60k entry: an entry with many sizes, repeated
        entry = dict(dump["entries"][index % len(dump["entries"])], input_sizes=[[1]] * base)
        dump["entries"] = [entry] * fan
    elif shape % 4 == 2:  # pg_config: one rank list for many groups
        ranks = list(range(base))
        dump["pg_config"] = {f"pg{i}": {"name": str(i), "desc": "x", "ranks": ranks} for i in range(fan)}
    else:  # a memo index far past the values memoised (a huge memo table)
        data = pickle.dumps({**dump, "pg_status": MARK}, protocol=2)
        put = b"]r" + ((fan * base) << (levels % 4 * 7)).to_bytes(8, "little")[:4]
        return data.replace(_text_op(MARK), put), "bomb_trace_rank_0"
    return pickle.dumps(dump, protocol=2 + protocol % 4), "bomb_trace_rank_0"


# -------------------------------------------------------------------------------------------- wrong metadata

WRONG_VALUES = [
    2**63,
    2**70,
    -(2**63) - 1,
    10**5000,
    math.nan,
    math.inf,
    -1,
    "[99999999999]",
    "[0, 1, -5, 2147483648]",
    "9" * 5000,
    "",
    b"\xff\xfe",
    None,
    True,
    1.5,
    [[[[[[[[[[[[[[[[[[[["deep"]]]]]]]]]]]]]]]]]]]],
    {"ranks": 3},
    ("tuple", 1),
    {1, 2},
]
META_PLACES = [
    ("version",),
    ("comm_lib_version",),
    ("nccl_version",),
    ("pg_config",),
    ("pg_config", "<key>"),
    ("pg_config", "0", "ranks"),
    ("pg_config", "0", "desc"),
    ("pg_config", "0", "name"),
    ("pg_status",),
    ("pg_status", "<key>"),
    ("pg_status", "0", "last_enqueued_collective"),
    ("pg_status", "0", "last_started_collective"),
    ("pg_status", "0", "last_completed_collective"),
    ("entries", "time_created_ns"),
    ("entries", "pg_id"),
    ("entries", "record_id"),
    ("entries", "timeout_ms"),
    ("entries", "duration_ms"),
]


def _set_meta(dump: dict, place: tuple[str, ...], value: object, index: int) -> None:
    if len(place) == 1:
        dump[place[0]] = value
        return
    top = dump.setdefault(place[0], {})
    if place[0] == "entries":
        if isinstance(top, list) and top:
            top[index % len(top)][place[1]] = value
        return
    if not isinstance(top, dict):
        return
    if place[1] == "<key>":  # the value becomes a key (ints, long digit strings), holding a copy of a real group
        key = value if isinstance(value, int | str) and not isinstance(value, bool) else repr(value)
        top[key] = next(iter(top.values()), {})
        return
    group = top.setdefault(place[1], {})
    if isinstance(group, dict):
        group[place[2]] = value


def run_wrong_metadata(args: tuple[list[tuple[int, int]], int, int]) -> str:
    edits, index, protocol = args
    dump = real_dict()
    for place_i, value_i in edits:
        _set_meta(dump, META_PLACES[place_i % len(META_PLACES)], WRONG_VALUES[value_i % len(WRONG_VALUES)], index)
    if protocol == 0:
        try:
            data = json.dumps(dump, default=repr).encode()
            return _finish(data, "meta_trace_rank_0.json")
        except (ValueError, TypeError):  # a key JSON cannot hold: pickle it
            pass
    return _finish(pickle.dumps(dump, protocol=2 + protocol % 4), "meta_trace_rank_0")


small = st.integers(0, 10**6)
TARGET_SPECS = {
    "dump_self_reference": (
        st.tuples(small, small, small, st.integers(0, 3), st.integers(0, 2)),
        run_self_reference,
        12,
        3_000,
        ((0, 0, 0, 0, 0),),  # `L = [L]` as input_sizes: a segfault inside polars before the scan
    ),
    "dump_depth": (
        st.tuples(small, small, small, small, st.booleans()),
        run_depth,
        12,
        3_000,
        # a 100k-deep list (segfault); a 900-deep JSON list (abort); the same as a JSON scalar (minutes in polars)
        ((6, 0, 0, 0, False), (4, 0, 0, 0, True), (4, 0, 6, 0, True)),
    ),
    "dump_reference_bomb": (
        st.tuples(
            small, st.integers(0, 3), st.integers(1, 3000), st.integers(1, 6000), small, small, st.integers(0, 3)
        ),
        run_reference_bomb,
        12,
        3_000,
        ((1, 0, 3000, 6000, 0, 0, 2), (2, 0, 3000, 5000, 0, 0, 2)),  # the 60k-entry and pg_config bombs, smaller
    ),
    "dump_wrong_metadata": (
        st.tuples(st.lists(st.tuples(small, small), min_size=1, max_size=5), small, st.integers(0, 4)),
        run_wrong_metadata,
        20,
        5_000,
        (([(13, 1)], 0, 1), ([(5, 7)], 0, 1), ([(4, 9)], 0, 1), ([(1, 15)], 0, 1)),  # item 6's four examples
    ),
}


def hostile_pickles() -> dict[str, bytes]:
    """A fixed sample of the pickle shapes above (the C decoder's tests run it without the fuzzer): every cycle kind
    at several places and protocols, every nesting kind at depths around the scan's limit, every bomb shape."""
    out: dict[str, bytes] = {}
    for kind in range(5):
        for place_i in (0, 2, 4, 7, 8):
            for whole in range(3):
                args = (kind, place_i, 3, kind + place_i, whole)
                out[f"self_ref_{args}"] = make_self_reference(args)[0]
    for depth_i in range(5):
        for kind in range(4):
            for place_i in (0, 2, 4, 7, 9, 11):
                args = (depth_i, kind, place_i, 1, False)
                out[f"depth_{args}"] = make_depth(args)[0]
    for shape in range(4):
        for levels, fan, base in ((1, 3, 5), (2, 40, 30), (3, 60, 200)):
            for place_i in (0, 2, 8):
                args = (shape, levels, fan, base, place_i, 2, shape + levels)
                out[f"bomb_{args}"] = make_reference_bomb(args)[0]
    return out
