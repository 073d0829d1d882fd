"""Flight-recorder dumps -> polars rows: safe decoding, column extraction, and the 2-process batch runner.

Used by `ncclpm.ingest.flight_recorder` (see its docstring for the normalisation rules).  This module
imports nothing from ncclpm, so it also runs as a bare script: ``python -P fr_decode.py --worker`` is the
worker process of `run_batches` (the package's ``__init__`` is never imported there, which saves its
start-up time, and no ``multiprocessing`` main-module re-import can happen in the caller's program).

Safety: pickles are read by `_NoGlobalsUnpickler`, whose ``find_class`` refuses every global, in the
worker as in-process.  What the worker sends back is polars IPC bytes (the rows) and a pickle of plain
dicts/lists/strings (the dumps' metadata) that the parent reads with the same restricted unpickler, so no
path ever unpickles with the default ``find_class``.

Batches: the (name, bytes) items are cut, in order, into batches of about `_BATCH_BYTES`; each batch gives
its `_Dump` list, warnings and one polars frame, the same whether it ran in-process or in a worker; the
results are put back in batch order, so the load is identical whatever the completion order.  Above
`_POOL_MIN_BYTES` (and with >= 2 usable cores) ``cores - 1`` worker processes take batches while the calling
thread works on batches too.  A worker that dies or cannot start only means its batch is done in-process.
"""

from __future__ import annotations

import gc
import io
import json
import marshal
import os
import pickle
import re
import struct
import subprocess
import sys
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import chain
from operator import itemgetter

import polars as pl

MAX_DUMP_BYTES = 512 * 1024 * 1024
STATES = ["scheduled", "started", "completed"]
_FRAME = pl.Struct({"name": pl.String, "filename": pl.String, "line": pl.Int64})
FR_ENTRIES_SCHEMA = pl.Schema(
    {
        "rank": pl.Int32,
        "source": pl.String,
        "record_id": pl.Int64,
        "pg_id": pl.Int64,
        "pg_name": pl.String,
        "pg_desc": pl.String,
        "group_key": pl.String,
        "collective_seq_id": pl.Int64,
        "p2p_seq_id": pl.Int64,
        "op_id": pl.Int64,
        "op": pl.String,
        "profiling_name": pl.String,
        "is_p2p": pl.Boolean,
        "input_sizes": pl.List(pl.List(pl.Int64)),
        "output_sizes": pl.List(pl.List(pl.Int64)),
        "input_dtypes": pl.List(pl.String),
        "output_dtypes": pl.List(pl.String),
        "state": pl.Enum(STATES),
        "retired": pl.Boolean,
        "time_created_ns": pl.Int64,
        "time_started_ns": pl.Int64,
        "time_completed_ns": pl.Int64,
        "timeout_ms": pl.Int64,
        "duration_ms": pl.Float64,
        "frames": pl.List(_FRAME),
        "thread_name": pl.String,
    }
)
# raw entry keys read as they are -> output column (frames/process_group/time_discovered handled apart)
_RAW_KEYS = (
    "record_id",
    "pg_id",
    "collective_seq_id",
    "p2p_seq_id",
    "op_id",
    "profiling_name",
    "is_p2p",
    "input_sizes",
    "output_sizes",
    "input_dtypes",
    "output_dtypes",
    "state",
    "retired",
    "time_created_ns",
    "timeout_ms",
    "duration_ms",
    "thread_name",
)
_EXTRA_KEYS = ("process_group", "time_discovered_started_ns", "time_discovered_completed_ns", "frames")
_ALL_KEYS = _RAW_KEYS + _EXTRA_KEYS
_CHUNK_ROWS = 65536
_NESTED_KEYS = ("input_sizes", "output_sizes", "input_dtypes", "output_dtypes", "frames")

_BATCH_BYTES = 8 * 1024 * 1024  # ~32k pickled entries: small enough that the last batches balance the cores
_POOL_MIN_BYTES = 48 * 1024 * 1024  # below this (~1.5 s of work) a worker's start-up (~0.4 s) is not worth it
_MAX_WORKERS = 8
_HEADER = struct.Struct("<iiq")  # request: n files, keep_frames, base index
_FILE = struct.Struct("<IQ")  # per file: name length, data length
_REPLY = struct.Struct("<QQ")  # reply: meta length, ipc length


class _NoGlobalsUnpickler(pickle.Unpickler):
    """Unpickler that refuses every global (class, function) reference."""

    def find_class(self, module: str, name: str) -> object:
        raise pickle.UnpicklingError(f"refused global {module}.{name}")


def _safe_loads(data: bytes) -> object:
    return _NoGlobalsUnpickler(io.BytesIO(data)).load()


@dataclass
class _Dump:
    source: str
    rank: int
    fmt: str
    data: dict  # the dump without its entries
    newest: tuple[int, int]
    cols: _Cols | None
    n: int
    uid: int = 0
    used: bool = True
    bad: bool = False
    note: str = ""

    @property
    def good_config(self) -> bool:
        cfg = self.data.get("pg_config")
        return isinstance(cfg, dict) and any(k and _ranks(v) for k, v in cfg.items())

    def meta(self) -> tuple:
        return (
            self.source,
            self.rank,
            self.fmt,
            self.data,
            self.newest,
            self.n,
            self.uid,
            self.used,
            self.bad,
            self.note,
        )

    @classmethod
    def from_meta(cls, m: tuple) -> _Dump:
        source, rank, fmt, data, newest, n, uid, used, bad, note = m
        return cls(source, rank, fmt, data, tuple(newest), None, n, uid, used, bad, note)


def _rank_from_name(name: str) -> int | None:
    base = re.split(r"[\\/]", name)[-1]
    base = re.sub(r"\.(json|pkl|pickle)$", "", base, flags=re.I)
    nums = re.findall(r"\d+", base)
    rank = int(nums[-1]) if nums else None
    return rank if rank is not None and rank < 2**31 else None  # a rank past Int32 is no rank


def _ranks(cfg: object) -> list[int]:
    """Parse pg_config ``ranks`` ('[0, 1, 2]' string or list) without eval."""
    if not isinstance(cfg, dict):
        return []
    raw = cfg.get("ranks")
    if isinstance(raw, list):
        return [int(x) for x in raw if isinstance(x, int)]
    return [int(x) for x in re.findall(r"\d+", raw)] if isinstance(raw, str) else []


def version_tuple(version: str) -> tuple[int, ...]:
    """'2.10' -> (2, 10): compare FR format versions numerically."""
    return tuple(int(x) for x in re.findall(r"\d+", str(version)))


def _decode(name: str, data: bytes) -> tuple[dict | None, str, str | None]:
    """Return (dump dict, format, warning)."""
    if len(data) > MAX_DUMP_BYTES:
        return None, "?", f"{name}: skipped, {len(data)} bytes is over the {MAX_DUMP_BYTES} byte cap"
    if not data.strip():
        return None, "?", f"{name}: skipped, empty file"
    fmt = "pickle" if data[:1] == b"\x80" else "json"
    try:
        obj = _safe_loads(data) if fmt == "pickle" else json.loads(data)
    except pickle.UnpicklingError as exc:
        return None, fmt, f"{name}: refused/corrupt pickle ({exc})"
    except RecursionError:
        return None, fmt, f"{name}: skipped, nesting too deep"
    except Exception as exc:  # any decode failure only skips this file
        return None, fmt, f"{name}: unreadable {fmt} ({type(exc).__name__}: {str(exc)[:120]})"
    if not isinstance(obj, dict) or not isinstance(obj.get("entries"), list):
        return None, fmt, f"{name}: not a flight-recorder dump (no 'entries' list at top level)"
    if not all(isinstance(e, dict) for e in obj["entries"]):
        return None, fmt, f"{name}: skipped, 'entries' holds non-dict items"
    return obj, fmt, None


def _newest(entries: list[dict]) -> tuple[int, int]:
    best = (-1, -1)
    for e in entries[-64:] if len(entries) > 64 else entries:
        t, r = e.get("time_created_ns"), e.get("record_id")
        key = (t if isinstance(t, int) else -1, r if isinstance(r, int) else -1)
        best = max(best, key)
    return best


_SCALARS = {k: FR_ENTRIES_SCHEMA.get(k, pl.String) for k in _RAW_KEYS if k not in _NESTED_KEYS}
_SCALARS.update(
    {
        "state": pl.String,
        "time_discovered_started_ns": pl.Int64,
        "time_discovered_completed_ns": pl.Int64,
        "pg_name": pl.String,
        "pg_desc": pl.String,
    }
)


def _str_list_keys(values: list) -> list:
    try:
        return list(map(tuple, values))
    except TypeError:  # None or a non-iterable somewhere
        return list(map(repr, values))


def _marshal_keys(values: list) -> list:
    """Fast exact keys for plain nested lists (marshal is only written here, never read)."""
    try:
        return list(map(marshal.dumps, values))
    except ValueError:  # an unmarshallable object: fall back to repr
        return list(map(repr, values))


class _Interner:
    """Deduplicate nested values (stacks, size lists) so polars converts each distinct one once."""

    def __init__(self, dtype: pl.DataType) -> None:
        self.dtype, self.index, self.uniq = dtype, {}, []
        self.bad: set[int] = set()  # indices of values polars could not hold (set by `series`)
        self.keys = _str_list_keys if dtype == pl.List(pl.String) else _marshal_keys

    def add(self, values: list) -> list[int]:
        keys = self.keys(values)
        local = dict(zip(keys, values, strict=True))  # C-level: one value per distinct key
        index, uniq = self.index, self.uniq
        for k, v in local.items():
            if k not in index:
                if _too_big(v):
                    raise ValueError(
                        f"implausibly large nested value (> {MAX_NESTED} elements): a pickle reference bomb?"
                    )
                index[k] = len(uniq)
                uniq.append(v)
        return list(map(index.__getitem__, keys))

    def series(self, name: str, idx: list[int]) -> pl.Series:
        try:
            base = pl.Series(name, self.uniq or [None], dtype=self.dtype, strict=True)
        except Exception:  # a malformed value (corrupt or hostile dump): that value becomes null, not the chunk
            ok = [_converts(v, self.dtype) for v in self.uniq]
            self.bad = {i for i, good in enumerate(ok) if not good}
            base = pl.Series(
                name, [v if good else None for v, good in zip(self.uniq, ok, strict=True)], dtype=self.dtype
            )
        return base.gather(idx) if idx else pl.Series(name, [], dtype=self.dtype)


MAX_NESTED = 65_536  # real sizes/dtypes/stacks hold a few to a few hundred elements


def _too_big(value: object) -> bool:
    """Pickle's memo lets a few bytes name one big list many times; polars would expand every copy."""
    if not isinstance(value, list | tuple):
        return False
    if len(value) > MAX_NESTED:
        return True
    total = 0
    for item in value:
        if isinstance(item, list | tuple | dict | str):
            total += len(item)
            if total > MAX_NESTED:
                return True
    return False


def _converts(value: object, dtype: pl.DataType) -> bool:
    try:
        pl.Series([value], dtype=dtype, strict=True)
        return True
    except Exception:
        return False


@dataclass
class _Cols:
    """Column-wise entries of one dump (the dump's dicts are dropped right after extraction)."""

    n: int
    scalars: dict[str, list]
    nested: dict[str, list[int]]


def _tail_frames(cols: dict, n: int, keep: int) -> list:
    """Stacks of the newest `keep` entries and of every entry not retired/completed; None elsewhere."""
    frames = cols.get("frames")
    if frames is None or keep == 0:
        return [None] * n
    if keep < 0 or n <= keep:
        return frames
    retired, state = cols.get("retired") or [None] * n, cols.get("state") or [None] * n
    cut = n - keep
    return [
        f if i >= cut or not (r is True or s == "completed") else None
        for i, (f, r, s) in enumerate(zip(frames, retired, state, strict=True))
    ]


def _pg_names(pg: list | tuple) -> tuple[list, list]:
    """(names, descs) from process_group tuples/lists; malformed values become None."""
    try:
        return list(map(itemgetter(0), pg)), list(map(itemgetter(1), pg))
    except (TypeError, IndexError, KeyError):
        ok = [p if isinstance(p, list | tuple) else () for p in pg]
        return [p[0] if p else None for p in ok], [p[1] if len(p) > 1 else None for p in ok]


def _extract(entries: list[dict], interners: dict[str, _Interner], keep_frames: int) -> _Cols:
    ends = (entries[0], entries[-1]) if entries else ()
    present = [k for k in _ALL_KEYS if any(k in e for e in ends)]  # KeyError below -> per-entry .get
    try:
        if len(present) > 1:
            cols = dict(zip(present, zip(*map(itemgetter(*present), entries), strict=True), strict=True))
        else:
            cols = {k: [e[k] for e in entries] for k in present}
    except (KeyError, TypeError):
        cols = {k: [e.get(k) for e in entries] for k in present}
    n, none = len(entries), [None] * len(entries)
    pg = cols.get("process_group", none)
    scalars = {k: cols.get(k, none) for k in _SCALARS if k not in ("pg_name", "pg_desc")}
    scalars["pg_name"], scalars["pg_desc"] = _pg_names(pg)
    cols["frames"] = _tail_frames(cols, n, keep_frames)
    nested = {k: interners[k].add(cols.get(k, none)) for k in _NESTED_KEYS}
    return _Cols(n, scalars, nested)


def _repeat_index(counts: list[int]) -> list[int]:
    return list(chain.from_iterable([i] * c for i, c in enumerate(counts)))


def _build(
    cols: list[_Cols], ranks: list[int], sources: list[str], ids: list[int], interners: dict[str, _Interner]
) -> pl.DataFrame:
    flat = chain.from_iterable
    data = {k: pl.Series(k, list(flat(c.scalars[k] for c in cols)), dtype=t, strict=True) for k, t in _SCALARS.items()}
    for k in _NESTED_KEYS:
        data[k] = interners[k].series(k, list(flat(c.nested[k] for c in cols)))
    n = [c.n for c in cols]
    data["rank"] = pl.Series("rank", ranks, dtype=pl.Int32).gather(_repeat_index(n))
    data["source"] = pl.Series("source", sources, dtype=pl.String).gather(_repeat_index(n))
    data["_id"] = pl.Series("_id", ids, dtype=pl.Int64).gather(_repeat_index(n))
    return pl.DataFrame(data)


def _new_interners() -> dict[str, _Interner]:
    return {k: _Interner(FR_ENTRIES_SCHEMA[k]) for k in _NESTED_KEYS}


def empty_raw() -> pl.DataFrame:
    return _build([], [], [], [], _new_interners())


class _Chunks:
    """Turn extracted dumps into polars chunks every ~_CHUNK_ROWS entries so Python lists stay small."""

    def __init__(self) -> None:
        self.pending: list[_Dump] = []
        self.rows = 0
        self.frames: list[pl.DataFrame] = []
        self.interners = _new_interners()

    def add(self, d: _Dump, warnings: list[str]) -> None:
        self.pending.append(d)
        self.rows += d.n
        if self.rows >= _CHUNK_ROWS:
            self.flush(warnings)

    def flush(self, warnings: list[str]) -> None:
        good = self.pending
        if not good:
            return
        try:
            self.frames.append(self._build(good))
        except Exception:  # find the dumps with unexpected types, skip them, build again
            good = [d for d in good if self._check(d, warnings)]
            self.frames.append(self._build(good))
        self._report_nulled(good, warnings)
        for d in self.pending:
            d.cols = None
        self.pending, self.rows, self.interners = [], 0, _new_interners()

    def _report_nulled(self, dumps: list[_Dump], warnings: list[str]) -> None:
        """Name the dumps whose malformed values were replaced by nulls (damaged, not just without stacks)."""
        for d in dumps:
            hit = [k for k, it in self.interners.items() if it.bad and it.bad & set(d.cols.nested[k])]
            if hit:
                warnings.append(f"{d.source}: malformed {', '.join(hit)} in some entries; shown as missing")

    def _build(self, dumps: list[_Dump]) -> pl.DataFrame:
        return _build(
            [d.cols for d in dumps],
            [d.rank for d in dumps],
            [d.source for d in dumps],
            [d.uid for d in dumps],
            self.interners,
        )

    def _check(self, d: _Dump, warnings: list[str]) -> bool:
        try:
            self._build([d])
            return True
        except Exception as exc:  # a malformed dump is skipped, not fatal
            warnings.append(f"{d.source}: skipped, entries have unexpected types ({str(exc)[:120]})")
            d.bad, d.used, d.note = True, False, "entries have unexpected types"
            return False


def _read_one(
    name: str, data: bytes, interners: dict[str, _Interner], keep_frames: int
) -> tuple[_Dump | None, str | None]:
    obj, fmt, warn = _decode(name, data)
    if warn:
        return None, warn
    rank = _rank_from_name(name)
    if rank is None:
        return None, f"{name}: skipped, no rank number in the file name"
    entries = obj.pop("entries")
    head = {k: v for k, v in obj.items()}
    ver = version_tuple(head.get("version", ""))
    note = ""
    if ver and ver[0] != 2:
        note = f"{name}: unknown FR format version {head.get('version')!r}; read as 2.x"
    cols = _extract(entries, interners, keep_frames)
    return _Dump(name, rank, fmt, head, _newest(entries), cols, cols.n), note or None


@dataclass
class BatchOut:
    dumps: list[_Dump]  # with cols dropped; uid = the item's index in the whole load
    warnings: list[str]
    frame: pl.DataFrame | None  # raw rows (before `_normalise`), with `_id` = uid


def load_batch(files: list[tuple[str, bytes]], base: int, keep_frames: int) -> BatchOut:
    """Decode + extract + build one batch (GC off: millions of small containers per batch)."""
    gc_was_on = gc.isenabled()
    gc.disable()
    try:
        warnings: list[str] = []
        dumps: list[_Dump] = []
        chunks = _Chunks()
        for i, (name, data) in enumerate(files):
            try:
                dump, warn = _read_one(name, data, chunks.interners, keep_frames)
            except Exception as exc:  # never fatal: an odd dump only skips this file
                dump, warn = None, f"{name}: unreadable dump ({type(exc).__name__}: {str(exc)[:120]})"
            if warn:
                warnings.append(warn)
            if dump is not None:
                dump.uid = base + i
                dumps.append(dump)
                chunks.add(dump, warnings)
        chunks.flush(warnings)
        frame = None
        if chunks.frames:
            frame = chunks.frames[0] if len(chunks.frames) == 1 else pl.concat(chunks.frames, rechunk=False)
        return BatchOut(dumps, warnings, frame)
    finally:
        if gc_was_on:
            gc.enable()


# ---- batching and the worker processes -------------------------------------------------------------


def _batches(items: Iterable[tuple[str, bytes]]) -> Iterator[tuple[int, list[tuple[str, bytes]], int]]:
    """(base index, files, bytes) in item order, each about `_BATCH_BYTES`."""
    files: list[tuple[str, bytes]] = []
    size, base = 0, 0
    for i, (name, data) in enumerate(items):
        if files and size + len(data) > _BATCH_BYTES:
            yield base, files, size
            files, size, base = [], 0, i
        files.append((name, data))
        size += len(data)
    if files:
        yield base, files, size


def _n_workers() -> int:
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(0, min(cores - 1, _MAX_WORKERS))


def _read_exact(f: io.BufferedIOBase, n: int) -> bytes:
    buf = f.read(n)
    if buf is None or len(buf) != n:
        raise EOFError("worker pipe closed")
    return buf


class _Worker:
    """One `python -P fr_decode.py --worker` process; one request/reply per batch over its pipes."""

    def __init__(self) -> None:
        env = {**os.environ, "POLARS_MAX_THREADS": "1"}
        self.proc = subprocess.Popen(
            [sys.executable, "-P", os.path.abspath(__file__), "--worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
        )

    def run(self, base: int, files: list[tuple[str, bytes]], keep_frames: int) -> BatchOut:
        w = self.proc.stdin
        w.write(_HEADER.pack(len(files), keep_frames, base))
        for name, data in files:
            raw = name.encode("utf-8", "surrogatepass")
            w.write(_FILE.pack(len(raw), len(data)))
            w.write(raw)
            w.write(data)
        w.flush()
        r = self.proc.stdout
        meta_len, ipc_len = _REPLY.unpack(_read_exact(r, _REPLY.size))
        metas, warnings = _safe_loads(_read_exact(r, meta_len))  # plain data only: the restricted unpickler
        frame = pl.read_ipc(_read_exact(r, ipc_len)) if ipc_len else None
        return BatchOut([_Dump.from_meta(m) for m in metas], list(warnings), frame)

    def close(self, kill: bool = False) -> None:
        if kill:  # never used or broken: no need to wait for its start-up to finish
            self.proc.kill()
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=10)
        except Exception:  # stuck or already gone: end the process we started
            self.proc.kill()
            self.proc.wait()


def _serve() -> None:
    """Worker main loop: read batches on stdin, answer on the original stdout until EOF."""
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # a stray print must not corrupt the replies
    inp = sys.stdin.buffer
    while True:
        head = inp.read(_HEADER.size)
        if len(head) < _HEADER.size:
            break
        n, keep_frames, base = _HEADER.unpack(head)
        files = []
        for _ in range(n):
            name_len, data_len = _FILE.unpack(_read_exact(inp, _FILE.size))
            name = _read_exact(inp, name_len).decode("utf-8", "surrogatepass")
            files.append((name, _read_exact(inp, data_len)))
        res = load_batch(files, base, keep_frames)
        del files
        meta = pickle.dumps(([d.meta() for d in res.dumps], res.warnings), protocol=4)
        ipc = b""
        if res.frame is not None:
            buf = io.BytesIO()
            res.frame.write_ipc(buf, compression="lz4")
            ipc = buf.getvalue()
        out.write(_REPLY.pack(len(meta), len(ipc)))
        out.write(meta)
        out.write(ipc)
        out.flush()
        del res, meta, ipc
    out.close()


def run_batches(items: Iterable[tuple[str, bytes]], keep_frames: int, *, workers: int | None = None) -> list[BatchOut]:
    """All batches' results in item order; big loads are spread over worker processes (module docstring)."""
    it = _batches(items)
    head, size = [], 0
    for b in it:
        head.append(b)
        size += b[2]
        if size >= _POOL_MIN_BYTES:
            break
    if workers is None:
        workers = _n_workers() if size >= _POOL_MIN_BYTES else 0
    n = workers
    jobs = enumerate(chain(head, it))
    if n <= 0:
        return [load_batch(files, base, keep_frames) for _, (base, files, _s) in jobs]
    out: dict[int, BatchOut] = {}
    lock = threading.Lock()

    def take() -> tuple[int, tuple] | None:
        with lock:
            return next(jobs, None)

    def feed() -> None:
        try:
            worker = _Worker()
        except OSError:
            return
        done = 0
        try:
            while (job := take()) is not None:
                k, (base, files, _s) = job
                try:
                    out[k] = worker.run(base, files, keep_frames)
                    done += 1
                except Exception:  # the worker died or broke the protocol: do this batch here, stop it
                    out[k] = load_batch(files, base, keep_frames)
                    done = 0
                    return
        finally:
            worker.close(kill=not done)

    threads = [threading.Thread(target=feed, daemon=True) for _ in range(n)]
    for t in threads:
        t.start()
    while (job := take()) is not None:
        k, (base, files, _s) = job
        out[k] = load_batch(files, base, keep_frames)
    for t in threads:
        t.join()
    return [out[k] for k in sorted(out)]


if __name__ == "__main__" and "--worker" in sys.argv[1:]:
    _serve()
    os._exit(0)  # skip interpreter teardown
