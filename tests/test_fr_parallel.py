"""FR loading over worker processes: same tables as in-process, same warnings, same refusals."""

from __future__ import annotations

import os
import pickle
import time
from pathlib import Path

import polars as pl
import pytest

from ncclpm.ingest import fr_decode
from ncclpm.ingest.flight_recorder import FRLoad, load_fr_dumps
from ncclpm.synth.fr_dumps import generate


class _OsSystem:
    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple:
        return (os.system, (f"touch {self.path}",))


def _evil(tmp_path: Path, n: int) -> dict[str, tuple[bytes, Path]]:
    out = {}
    for i in range(n):
        target = tmp_path / f"pwned_{i}"
        payload = {"version": "2.10", "pg_config": {}, "entries": [_OsSystem(target)]}
        out[f"evil_rank_{100 + i}"] = (pickle.dumps(payload), target)
    target = tmp_path / "pwned_global"
    raw = b"\x80\x02cposix\nsystem\n" + pickle.dumps(f"touch {target}", protocol=2)[2:-1] + b"\x85R."
    out["evil_global_rank_200"] = (raw, target)
    return out


def _mixed(tmp_path: Path) -> tuple[list[tuple[str, bytes]], dict[str, tuple[bytes, Path]]]:
    good = list(generate(12, 80, 3, "never_joined").items())
    good += [(f"json/{n}.json", b) for n, b in generate(4, 30, 2, "never_joined", fmt="json").items()]
    evil = _evil(tmp_path, 4)
    bad = [
        ("trunc_rank_300", good[0][1][: len(good[0][1]) // 2]),
        ("empty_rank_301", b""),
        ("wrongtypes_rank_302", pickle.dumps({"version": "2.10", "entries": [{"record_id": "x"}]})),
        ("deep_rank_303", b"\x80\x04" + b"]" * 100000 + b"."),
    ]
    items = list(good)
    for k, (name, (data, _)) in enumerate(evil.items()):  # spread over the batches
        items.insert(3 + 4 * k, (name, data))
    items += bad
    return items, evil


def _load(monkeypatch: pytest.MonkeyPatch, items: list, *, pool: bool, frames: str = "tail") -> FRLoad:
    monkeypatch.setattr(fr_decode, "_BATCH_BYTES", 40_000)  # a few dumps per batch
    monkeypatch.setattr(fr_decode, "_POOL_MIN_BYTES", 0 if pool else 1 << 62)
    monkeypatch.setattr(fr_decode, "_n_workers", lambda: 1)
    return load_fr_dumps(items, frames=frames)


def _slow_local(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Slow down in-process batches so the worker (started ~0.5 s later) surely gets some; count its batches."""
    local, run, done = fr_decode.load_batch, fr_decode._Worker.run, []

    def slow(*a: object) -> fr_decode.BatchOut:
        time.sleep(0.15)
        return local(*a)

    def counted(self: fr_decode._Worker, *a: object) -> fr_decode.BatchOut:
        out = run(self, *a)
        done.append(1)
        return out

    monkeypatch.setattr(fr_decode, "load_batch", slow)
    monkeypatch.setattr(fr_decode._Worker, "run", counted)
    return done


def _same(a: FRLoad, b: FRLoad) -> None:
    assert a.entries.equals(b.entries)
    assert a.status.equals(b.status)
    assert a.dumps.equals(b.dumps)
    assert a.groups.sort("group_key").equals(b.groups.sort("group_key"))  # group order is hash order
    assert a.warnings == b.warnings


@pytest.mark.parametrize("frames", ["tail", "all", "none"])
def test_pool_and_serial_identical(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, frames: str) -> None:
    items, evil = _mixed(tmp_path)
    serial = _load(monkeypatch, items, pool=False, frames=frames)
    in_worker = _slow_local(monkeypatch)
    pooled = _load(monkeypatch, items, pool=True, frames=frames)
    assert len(in_worker) >= 2
    _same(serial, pooled)
    assert serial.entries.height == 12 * 80  # the 4 JSON dumps duplicate ranks 0-3 and are superseded
    assert any("4 duplicate dump(s)" in w for w in pooled.warnings)
    for name, (_, target) in evil.items():
        assert not target.exists(), name
        assert any(name in w and "refused" in w for w in pooled.warnings), name
    for name in ("trunc_rank_300", "empty_rank_301", "wrongtypes_rank_302", "deep_rank_303"):
        assert any(name in w for w in pooled.warnings), name


def test_worker_refuses_malicious_pickles(tmp_path: Path) -> None:
    """The worker process itself (not the in-process path) decodes a batch holding code-running pickles."""
    evil = _evil(tmp_path, 3)
    files = [*generate(3, 20, 1, None).items(), *((n, b) for n, (b, _) in evil.items())]
    worker = fr_decode._Worker()
    try:
        out = worker.run(1000, files, 64)
    finally:
        worker.close()
    assert worker.proc.returncode == 0
    for name, (_, target) in evil.items():
        assert not target.exists(), name
        assert any(name in w and "refused" in w for w in out.warnings), name
    assert [d.uid for d in out.dumps] == [1000, 1001, 1002]
    local = fr_decode.load_batch(files, 1000, 64)
    assert out.frame.equals(local.frame) and out.warnings == local.warnings
    assert [d.meta() for d in out.dumps] == [d.meta() for d in local.dumps]


@pytest.mark.parametrize("exe", ["/nonexistent/python", "/bin/true"])
def test_dead_worker_falls_back(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, exe: str) -> None:
    items, _ = _mixed(tmp_path)
    serial = _load(monkeypatch, items, pool=False)
    monkeypatch.setattr(fr_decode.sys, "executable", exe)  # cannot start / exits at once
    _same(serial, _load(monkeypatch, items, pool=True))


def test_small_job_starts_no_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom() -> None:
        raise AssertionError("a worker was started for a small job")

    monkeypatch.setattr(fr_decode, "_Worker", boom)
    load = load_fr_dumps(generate(3, 50, 2, "never_joined").items())
    assert load.entries.height == 150 and load.entries.schema == fr_decode.FR_ENTRIES_SCHEMA


def test_generator_input_and_order(monkeypatch: pytest.MonkeyPatch) -> None:
    items = list(generate(8, 60, 2, "skip").items())
    a = _load(monkeypatch, iter(items), pool=True)
    b = _load(monkeypatch, items[::-1], pool=True)
    assert a.entries.equals(b.entries)
    assert a.entries.filter(pl.col("rank") == 0).height == 60
