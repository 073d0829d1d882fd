"""FR loading one dump at a time: the same tables whatever the chunking or the order, bytes read lazily."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import polars as pl
import pytest

from ncclpm.ingest.flight_recorder import decode as fr_decode
from ncclpm.ingest.flight_recorder import load as fr_load
from ncclpm.ingest.flight_recorder import native as fr_native
from ncclpm.ingest.flight_recorder.load import load_fr_dumps
from ncclpm.tables.fr import FRLoad
from tests.synth.fr_dumps import generate


class _OsSystem:
    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple:
        return (os.system, (f"touch {self.path}",))


def _mixed(tmp_path: Path) -> tuple[list[tuple[str, bytes]], list[Path]]:
    good = list(generate(12, 80, 3, "never_joined").items())
    good += [(f"json/{n}.json", b) for n, b in generate(4, 30, 2, "never_joined", fmt="json").items()]
    targets = [tmp_path / f"pwned_{i}" for i in range(3)]
    evil = [
        (f"evil_rank_{100 + i}", pickle.dumps({"version": "2.10", "entries": [_OsSystem(t)]}))
        for i, t in enumerate(targets)
    ]
    bad = [
        ("trunc_rank_300", good[0][1][: len(good[0][1]) // 2]),
        ("empty_rank_301", b""),
        ("wrongtypes_rank_302", pickle.dumps({"version": "2.10", "entries": [{"record_id": "x"}]})),
        ("deep_rank_303", b"\x80\x04" + b"]" * 100000 + b"a" * 99999 + b"."),
    ]
    items = list(good)
    for k, item in enumerate(evil):
        items.insert(3 + 4 * k, item)
    return items + bad, targets


def _same(a: FRLoad, b: FRLoad) -> None:
    assert a.entries.equals(b.entries)
    assert a.status.equals(b.status)
    assert a.dumps.equals(b.dumps)
    assert a.groups.equals(b.groups)
    assert sorted(a.warnings) == sorted(b.warnings)


@pytest.mark.parametrize("frames", ["tail", "all", "none"])
def test_chunk_size_does_not_change_the_load(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, frames: str) -> None:
    items, targets = _mixed(tmp_path)
    whole = load_fr_dumps(items, frames=frames)
    monkeypatch.setattr(fr_decode, "_CHUNK_ROWS", 50)  # a chunk every dump or so
    monkeypatch.setattr(fr_decode, "NATIVE_ROWS", 50)  # the C decoder's rows framed after every dump
    _same(whole, load_fr_dumps(items, frames=frames))
    assert whole.entries.height == 12 * 80  # the 4 JSON dumps duplicate ranks 0-3 and are superseded
    assert any("4 older or duplicate flight-recorder dump(s)" in w for w in whole.warnings)
    assert not any(t.exists() for t in targets)
    for name in ("evil_rank_100", "evil_rank_101", "evil_rank_102"):
        assert any(name in w and "refused" in w for w in whole.warnings), name
    for name in ("trunc_rank_300", "empty_rank_301", "wrongtypes_rank_302", "deep_rank_303"):
        assert any(name in w for w in whole.warnings), name


def test_all_columns_hold_the_analysis_columns(tmp_path: Path) -> None:
    items, _ = _mixed(tmp_path)
    short, full = load_fr_dumps(items), load_fr_dumps(items, columns="all")
    assert full.entries.select(short.entries.columns).equals(short.entries)
    assert full.entries.schema == fr_decode.FR_ENTRIES_SCHEMA
    assert short.entries.schema == fr_decode.FR_ANALYSIS_SCHEMA


@pytest.mark.parametrize("ranks", [6, 40])
def test_bytes_are_read_lazily_a_few_dumps_at_a_time(ranks: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Callables are called when their turn comes, each once, in order; one that fails only skips its dump. At most
    one dump's bytes are held at a time by one decoding thread, a few per thread when several decode ahead."""
    dumps = list(generate(ranks, 40, 2, "never_joined").items())
    live, peak, calls = [0], [0], []

    def reader(name: str, data: bytes):
        def read() -> bytes:
            calls.append(name)
            live[0] += 1
            peak[0] = max(peak[0], live[0])
            return data

        return read

    def gone() -> bytes:
        raise FileNotFoundError("vanished")

    orig, orig_add = fr_decode.read_dump, fr_native.NativeLoad.add

    def counted(*a: object, **k: object):
        try:
            return orig(*a, **k)
        finally:
            live[0] -= 1

    def counted_add(*a: object, **k: object) -> None:
        live[0] -= 1  # read by the C decoder: its bytes are let go
        orig_add(*a, **k)

    monkeypatch.setattr(fr_decode, "read_dump", counted)
    monkeypatch.setattr(fr_native.NativeLoad, "add", counted_add)
    items = [*((n, reader(n, b)) for n, b in dumps), ("gone_rank_9999", gone)]
    load = load_fr_dumps(items)
    monkeypatch.undo()
    assert calls == [n for n, _ in fr_load._in_rank_order(dumps)]
    threads = fr_decode._threads(len(items)) if fr_native.enabled(False) else 1
    assert peak[0] == 1 if threads == 1 else 1 <= peak[0] <= 2 * threads + 1
    assert live[0] == 0
    assert load.entries.height == ranks * 40
    assert any(w.startswith("gone_rank_9999: flight-recorder dump unreadable") for w in load.warnings)
    assert load.entries.equals(load_fr_dumps(dumps).entries)


def test_counters_past_32_bits_widen_the_column(monkeypatch: pytest.MonkeyPatch) -> None:
    """Counters are held as Int32 where they fit (`NARROW`); a dump with a record_id past 2**31 makes the load's
    column Int64 (its chunk could not narrow), with the same values, analysis and `entries` schema."""
    from ncclpm.analysis.fr_match import analyze_fr

    dumps = list(generate(8, 60, 2, "never_joined").items())
    monkeypatch.setattr(fr_decode, "_CHUNK_ROWS", 100)  # the wide dump gets a chunk of its own, the others Int32
    monkeypatch.setattr(fr_decode, "NATIVE_ROWS", 100)
    plain = load_fr_dumps(dumps)
    narrow = {k: t for k, t in fr_decode.NARROW.items() if k in plain.compact.columns}
    assert {k: plain.compact.schema[k] for k in narrow} == narrow and len(narrow) == 6
    name, data = dumps[-1]
    obj = pickle.loads(data)
    for e in obj["entries"]:
        e["record_id"] += 2**40
    wide = load_fr_dumps([*dumps[:-1], (name, pickle.dumps(obj))])
    assert wide.compact.schema["record_id"] == pl.Int64 and wide.compact.schema["collective_seq_id"] == pl.Int32
    assert wide.compact.n_chunks() > 1
    assert wide.entries.schema == fr_decode.FR_ANALYSIS_SCHEMA == plain.entries.schema
    moved = pl.when(pl.col("rank") == wide.entries["rank"].max()).then(pl.col("record_id") - 2**40)
    assert wide.entries.with_columns(moved.otherwise(pl.col("record_id"))).equals(plain.entries)
    a, b = analyze_fr(plain), analyze_fr(wide)
    assert a.culprit_ranks == b.culprit_ranks and a.missing.equals(b.missing)
    assert a.rank_facts.equals(b.rank_facts) and a.stuck.equals(b.stuck)


def test_a_chunk_narrows_only_the_columns_whose_values_fit() -> None:
    chunk = pl.DataFrame(
        {
            "record_id": [1, 2**31],
            "pg_id": [0, 1],
            "collective_seq_id": [None, 5],
            "frames_id": pl.Series([3, 70_000], dtype=pl.UInt32),
            "input_sizes_id": pl.Series([None, 65_535], dtype=pl.UInt32),
            "pg_name": pl.Series(["a", None], dtype=pl.Categorical),
            "group_key": pl.Series(["a", "pg_id:1"], dtype=pl.Categorical),
        }
    )
    slim = fr_decode._slim(chunk)
    assert slim.schema["record_id"] == pl.Int64 and slim.schema["frames_id"] == pl.UInt32
    assert slim.schema["pg_id"] == pl.Int32 and slim.schema["collective_seq_id"] == pl.Int32
    assert slim.schema["input_sizes_id"] == pl.UInt16
    assert slim.cast(chunk.schema).equals(chunk)  # same values; group_key kept (it differs from pg_name)


@pytest.mark.parametrize("helper", ["absent", "stale"])
def test_without_the_c_decoder_the_python_path_reads_everything(
    helper: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """An install without a compiler has no `_frdecode`; one built from older sources has no `Job`: either way the
    load is the Python path's, the same as with the decoder (or without it, in an install that has none)."""
    items, targets = _mixed(tmp_path)
    built = load_fr_dumps(items)
    stale = type("Stale", (), {"release": staticmethod(lambda: None)})  # an old build: release() but no Job
    monkeypatch.setattr(fr_native, "_frdecode", None if helper == "absent" else stale)
    assert not fr_native.enabled(False)
    fallback = load_fr_dumps(items)
    _same(built, fallback)
    assert fallback.entries.height == 12 * 80 and not any(t.exists() for t in targets)
