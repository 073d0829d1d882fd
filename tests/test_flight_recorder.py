"""Flight-recorder loading: real dumps (pickle, JSON), safety against code-running pickles, corrupt input."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
from pathlib import Path

import polars as pl
import pytest

from ncclpm.ingest.flight_recorder.load import (
    FR_ANALYSIS_SCHEMA,
    FR_ENTRIES_SCHEMA,
    FR_GROUPS_SCHEMA,
    FR_STATUS_SCHEMA,
    load_fr_dumps,
    version_tuple,
)
from ncclpm.sources.fr_sniff import looks_like_fr_dump
from tests.shared import ABSENT, corpus
from tests.synth.fr_dumps import generate

NVRX = corpus("nvrx-fr")
GLOO = corpus("real-gloo")


def _items(folder: Path) -> list[tuple[str, bytes]]:
    return [
        (str(p), p.read_bytes())
        for p in sorted(folder.rglob("*"))
        if p.is_file() and "fr_trace" not in p.parts and p.suffix not in (".txt", ".log", ".md", ".meta", ".out")
    ]


def _good() -> list[tuple[str, bytes]]:
    return list(generate(4, 50, 2, None, seed=3).items())


def test_schemas_and_synthetic_roundtrip() -> None:
    load = load_fr_dumps(_good())
    assert load.entries.schema == FR_ANALYSIS_SCHEMA
    full = load_fr_dumps(_good(), columns="all")
    assert full.entries.schema == FR_ENTRIES_SCHEMA
    assert full.entries.select(FR_ANALYSIS_SCHEMA.names()).equals(load.entries)
    assert load.groups.schema == FR_GROUPS_SCHEMA
    assert load.status.schema == FR_STATUS_SCHEMA
    assert load.entries.height == 200 and load.warnings == ()
    assert set(load.entries["op"].unique()) <= {"all_reduce", "_all_gather_base", "_reduce_scatter_base", "broadcast"}
    assert load.entries["frames"].list.len().min() > 0


def test_json_and_pickle_give_same_rows() -> None:
    cols = [
        "rank",
        "group_key",
        "collective_seq_id",
        "op",
        "input_sizes",
        "input_dtypes",
        "state",
        "retired",
        "time_started_ns",
        "time_completed_ns",
    ]
    a = load_fr_dumps(generate(4, 40, 2, "never_joined", fmt="pickle").items(), columns="all").entries.select(cols)
    b = load_fr_dumps(generate(4, 40, 2, "never_joined", fmt="json").items(), columns="all").entries.select(cols)
    assert a.equals(b)


def test_sniffing() -> None:
    name, data = _good()[0]
    assert looks_like_fr_dump(name, data[:64])
    js = generate(2, 5, 1, None, fmt="json")
    assert all(looks_like_fr_dump(n, b[:64]) for n, b in js.items())
    assert not looks_like_fr_dump("train.log", b"2024-01-01 INFO hello")
    assert not looks_like_fr_dump("error.json", b'{"message": {"message": "x"}}')


def test_version_compare() -> None:
    assert version_tuple("2.10") > version_tuple("2.9")


@pytest.mark.skipif(not NVRX.is_dir(), reason=ABSENT)
def test_nvrx_load() -> None:
    items = _items(NVRX / "lock_gil_1st")
    assert all(looks_like_fr_dump(n, b[:64]) for n, b in items)
    load = load_fr_dumps(items)
    assert load.dumps.height == 16 and load.dumps["used"].all()
    assert load.dumps.filter(pl.col("rank") == 9)["n_entries"].item() == 0
    assert set(load.dumps["comm_lib_version"]) == {"2.27.3"}  # from the old `nccl_version` key
    g = load.groups.filter(pl.col("group_key") == "72").row(0, named=True)
    assert g["ranks"] == list(range(8, 16)) and g["membership_source"] == "pg_config"


@pytest.mark.skipif(not GLOO.is_dir(), reason=ABSENT)
def test_gloo_raw_groups_derived_and_dedup() -> None:
    load = load_fr_dumps(_items(GLOO / "mismatched_collectives" / "size" / "fr"))
    assert sorted(load.dumps.filter("used")["rank"].to_list()) == [0, 1]
    assert load.dumps.filter(~pl.col("used"))["note"].str.contains("superseded").all()
    assert sum("duplicate" in w for w in load.warnings) == 1
    assert load.groups["group_key"].to_list() == ["0"]


@pytest.mark.skipif(not GLOO.is_dir(), reason=ABSENT)
def test_gloo_json_and_detail_keys() -> None:
    items = _items(GLOO / "mismatched_collectives" / "skip_debug_detail" / "fr" / "json")
    assert all(looks_like_fr_dump(n, b[:64]) for n, b in items)
    load = load_fr_dumps(items, columns="all")
    assert set(load.entries["group_key"]) == {"pg_id:0", "pg_id:1"}
    assert load.entries["frames"].null_count() == load.entries.height
    assert load.entries["time_started_ns"].null_count() == load.entries.height  # JSON 0 -> null
    assert load.status["last_enqueued"].dtype == pl.Int64


def test_rank_from_name_variants() -> None:
    dump = json.loads(next(iter(generate(2, 5, 1, None, fmt="json").values())))
    names = {"_dump_12": 12, "trace_rank_node02_7": 7, "fr_trace_rank_1.json": 1, "comm_lib_trace_rank_3": 3}
    items = []
    for n in names:
        data = json.dumps({**dump, "entries": []}).encode() if n.endswith(".json") else pickle.dumps(dump)
        items.append((n, data))
    load = load_fr_dumps([*items, ("no_number_here", pickle.dumps(dump))])
    assert sorted(load.dumps["rank"]) == sorted(names.values())
    assert any("no_number_here" in w for w in load.warnings)


class _OsSystem:
    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple:
        return (os.system, (f"touch {self.path}",))


class _Eval:
    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple:
        return (eval, (f"open({str(self.path)!r}, 'w').close()",))


class _Popen:
    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple:
        return (subprocess.Popen, (["touch", str(self.path)],))


def _evil(tmp_path: Path) -> dict[str, tuple[bytes, Path]]:
    out = {}
    for i, cls in enumerate((_OsSystem, _Eval, _Popen)):
        target = tmp_path / f"pwned_{i}"
        payload = {"version": "2.10", "pg_config": {}, "entries": [cls(target)]}
        out[f"evil_{cls.__name__}_rank_{10 + i}"] = (pickle.dumps(payload), target)
    target = tmp_path / "pwned_global"
    raw = b"\x80\x02cposix\nsystem\n" + pickle.dumps(f"touch {target}", protocol=2)[2:-1] + b"\x85R."
    out["evil_global_rank_13"] = (raw, target)
    return out


def test_malicious_pickles_refused(tmp_path: Path) -> None:
    evil = _evil(tmp_path)
    load = load_fr_dumps([*_good(), *((n, b) for n, (b, _) in evil.items())])
    for name, (_, target) in evil.items():
        assert not target.exists(), name
        assert any(name in w and "refused" in w for w in load.warnings), name
    assert sorted(load.dumps["rank"]) == [0, 1, 2, 3]
    assert any("posix.system" in w for w in load.warnings)
    assert load.entries.height == 200


def test_corrupt_inputs_only_warn() -> None:
    _name, good = _good()[0]
    js = next(iter(generate(2, 5, 1, None, fmt="json").values()))
    bad_types = pickle.dumps({"version": "2.10", "entries": [{"record_id": "x", "collective_seq_id": [1]}]})
    bad = [
        ("trunc_pickle_rank_20", good[: len(good) // 2]),
        ("trunc_json_rank_21.json", js[: len(js) // 2]),
        ("empty_rank_22", b""),
        ("random_rank_23", os.urandom(512)),
        ("noentries_rank_24", pickle.dumps({"version": "2.10", "pg_config": {}})),
        ("list_rank_25", pickle.dumps([1, 2, 3])),
        ("wrongtypes_rank_26", bad_types),
        ("deep_rank_27", b"\x80\x04" + b"]" * 100000 + b"."),
    ]
    load = load_fr_dumps([*_good(), *bad])
    assert load.entries.height == 200
    for n, _ in bad:
        assert any(n in w for w in load.warnings), n


def test_order_independent_load() -> None:
    items = list(generate(8, 60, 2, "skip").items())
    a = load_fr_dumps(items).entries
    b = load_fr_dumps(items[::-1]).entries
    assert a.equals(b)
