"""Synthetic flight-recorder dumps shaped like real PyTorch 2.10-format NCCL dumps.

`generate()` simulates a training loop on ``n_ranks`` ranks that issues a fixed, global schedule of
collectives over ``n_groups`` kinds of process groups (kind 0 = ``default_pg`` with every rank, kind
*k* >= 1 = contiguous blocks of ranks, like TP/DP groups) and returns one dump per rank (file name ->
bytes), keeping the newest ``n_entries`` entries per rank as the ring buffer does.  The job ends in a
hang; an optional ``fault`` decides who caused it:

* ``never_joined``       the culprit stops issuing collectives a few steps before everybody else.
* ``stopped_completing`` the culprit issues everything but stops retiring its work (GPU error / GIL).
* ``op_mismatch`` / ``size_mismatch`` / ``dtype_mismatch``  the culprit issues a different op / size
  / dtype at one collective of the default group; everybody hangs there.
* ``skip``               the culprit skips one default-group collective; its later seq ids carry the
  next step's op and sizes.

The culprit is ``culprit_rank(n_ranks, fault)``.  Only plain dict/list/str/int/float/bool/None go into
the pickle (stdlib ``pickle.dumps``), so a restricted unpickler can read them.
CLI: ``python -m tests.synth.fr_dumps OUT_DIR --ranks N --entries M [--groups G] [--fault F]``.
"""

from __future__ import annotations

import argparse
import json
import pickle
import random
from dataclasses import dataclass
from pathlib import Path

FAULTS = ("never_joined", "op_mismatch", "size_mismatch", "dtype_mismatch", "stopped_completing", "skip")
_OPS = ("all_reduce", "_all_gather_base", "_reduce_scatter_base", "broadcast")
_T0 = 1_758_610_000_000_000_000
_TAIL = 6  # ops still in flight at the hang
_FAULT_AT = 12  # the fault happens this many ops before the end


@dataclass(frozen=True)
class _Op:
    idx: int
    kind: int
    op: str
    size: int
    dtype: str


def culprit_rank(n_ranks: int, fault: str | None) -> int | None:
    """The rank `generate` makes faulty (None without a fault)."""
    return None if fault is None else (n_ranks * 5) // 8


def _group_of(rank: int, kind: int, n_ranks: int) -> tuple[str, list[int]]:
    if kind == 0:
        return "0", list(range(n_ranks))
    block = max(2, n_ranks >> kind)
    start = (rank // block) * block
    return str(kind * 10000 + rank // block), list(range(start, min(start + block, n_ranks)))


def _schedule(n_ops: int, n_groups: int) -> list[_Op]:
    ops = []
    for i in range(n_ops):
        kind = i % n_groups
        op = _OPS[(i // n_groups) % len(_OPS)] if kind else "all_reduce"
        ops.append(_Op(i, kind, op, 256 * (1 + i % 7), "BFloat16" if kind else "Float"))
    return ops


def _frames(op: str, culprit_tail: bool) -> list[dict]:
    base = [
        {"name": op, "filename": "/opt/venv/torch/distributed/distributed_c10d.py", "line": 3245},
        {"name": "wrapper", "filename": "/opt/venv/torch/distributed/c10d_logger.py", "line": 83},
    ]
    caller = "save_checkpoint" if culprit_tail else "train_step"
    base.append({"name": caller, "filename": "/workspace/train.py", "line": 120 if culprit_tail else 88})
    base.append({"name": "main", "filename": "/workspace/train.py", "line": 200})
    return base


def _mutate(op: _Op, fault: str) -> _Op:
    if fault == "op_mismatch":
        new = "all_gather" if op.op != "all_gather" else "all_reduce"
        return _Op(op.idx, op.kind, new, op.size, op.dtype)
    if fault == "size_mismatch":
        return _Op(op.idx, op.kind, op.op, op.size * 2, op.dtype)
    if fault == "dtype_mismatch":
        return _Op(op.idx, op.kind, op.op, op.size, "Double")
    return op


def _fault_index(sched: list[_Op]) -> int:
    """Index of the default-group op where the fault happens."""
    return max(o.idx for o in sched[: len(sched) - _FAULT_AT + 1] if o.kind == 0)


def _rank_ops(rank: int, sched: list[_Op], fault: str | None, culprit: int | None) -> list[_Op]:
    """The ops `rank` issued, in order (before the ring-buffer cut)."""
    fault_idx = _fault_index(sched)
    if fault is None or rank != culprit:
        if fault in ("op_mismatch", "size_mismatch", "dtype_mismatch", "skip"):
            return sched[: fault_idx + 1]
        return sched
    if fault == "never_joined":
        return sched[:fault_idx]
    if fault in ("op_mismatch", "size_mismatch", "dtype_mismatch"):
        return [*sched[:fault_idx], _mutate(sched[fault_idx], fault)]
    if fault == "skip":
        nxt = next(o for o in sched[fault_idx + 1 :] if o.kind == 0)
        return [*sched[:fault_idx], nxt]
    return sched


def _done_limit(rank: int, sched: list[_Op], fault: str | None, culprit: int | None) -> int:
    """Ops with index below this are retired/completed on `rank`."""
    if fault == "stopped_completing":
        return _fault_index(sched) if rank == culprit else len(sched) - 1
    if fault is None:
        return len(sched) - _TAIL
    return _fault_index(sched)


def _entry(rank: int, rid: int, op: _Op, seq: int, done: bool, culprit_tail: bool, n_ranks: int) -> dict:
    name, members = _group_of(rank, op.kind, n_ranks)
    inp = out = op.size
    if op.op == "_all_gather_base":
        out = op.size * len(members)
    elif op.op == "_reduce_scatter_base":
        inp = op.size * len(members)
    return {
        "frames": _frames(op.op, culprit_tail),
        "record_id": rid,
        "pg_id": op.kind,
        "process_group": (name, "default_pg" if op.kind == 0 else f"GROUP_KIND_{op.kind}"),
        "thread_name": "pt_autograd_0" if op.kind else "python3",
        "thread_id": "140318726691712",
        "collective_seq_id": seq,
        "p2p_seq_id": 0,
        "op_id": seq,
        "profiling_name": f"nccl:{op.op}",
        "time_created_ns": _T0 + op.idx * 1_000_000 + rank,
        "input_sizes": [[inp, 16]],
        "input_dtypes": [op.dtype],
        "output_sizes": [[out, 16]],
        "output_dtypes": [op.dtype],
        "state": "completed" if done else "scheduled",
        "time_discovered_started_ns": _T0 + op.idx * 1_000_000 + 500 if done else None,
        "time_discovered_completed_ns": _T0 + op.idx * 1_000_000 + 900 if done else None,
        "retired": done,
        "timeout_ms": 600000,
        "is_p2p": False,
        "duration_ms": 0.25 if done else None,
    }


def _rank_dump(
    rank: int, sched: list[_Op], n_entries: int, n_groups: int, fault: str | None, culprit: int | None, n_ranks: int
) -> dict:
    ops = _rank_ops(rank, sched, fault, culprit)
    limit = _done_limit(rank, sched, fault, culprit)
    seqs = [0] * n_groups
    entries = []
    for rid, op in enumerate(ops):
        seqs[op.kind] += 1
        if rid >= len(ops) - n_entries:
            tail = rank == culprit and rid >= len(ops) - 3
            entries.append(_entry(rank, rid, op, seqs[op.kind], op.idx < limit, tail, n_ranks))
    pg_config, pg_status = {}, {}
    for kind in range(n_groups):
        name, members = _group_of(rank, kind, n_ranks)
        desc = "default_pg" if kind == 0 else f"GROUP_KIND_{kind}"
        pg_config[name] = {"name": name, "desc": desc, "ranks": str(members)}
        done = sum(1 for o in ops if o.kind == kind and o.idx < limit)
        pg_status[str(kind)] = {
            "last_enqueued_collective": seqs[kind],
            "last_started_collective": -1,
            "last_completed_collective": done,
        }
    return {
        "version": "2.10",
        "pg_config": pg_config,
        "comm_lib_version": "2.21.5",
        "pg_status": pg_status,
        "entries": entries,
    }


def _to_json(dump: dict) -> bytes:
    d = {k: v for k, v in dump.items()}
    d["nccl_comm_state"] = {}
    d["pg_status"] = {k: {kk: str(vv) for kk, vv in v.items()} for k, v in dump["pg_status"].items()}
    ents = []
    for e in dump["entries"]:
        e = {k: v for k, v in e.items() if k != "frames"}
        e["process_group"] = list(e["process_group"])
        for k in ("time_discovered_started_ns", "time_discovered_completed_ns"):
            e[k] = e[k] or 0
        ents.append(e)
    d["entries"] = ents
    return json.dumps(d, sort_keys=True).encode()


def generate(
    n_ranks: int, n_entries: int, n_groups: int = 3, fault: str | None = None, seed: int = 0, fmt: str = "pickle"
) -> dict[str, bytes]:
    """Return {file name: dump bytes} for every rank (see module docstring)."""
    if fault is not None and fault not in FAULTS:
        raise ValueError(f"unknown fault {fault!r}; choose from {FAULTS}")
    if fmt not in ("pickle", "json"):
        raise ValueError("fmt must be 'pickle' or 'json'")
    n_groups = max(1, min(n_groups, max(1, n_ranks.bit_length() - 1)))
    rng = random.Random(seed)
    n_ops = n_entries + _FAULT_AT + 4 + rng.randrange(n_groups * 4 + 1)
    sched = _schedule(n_ops, n_groups)
    culprit = culprit_rank(n_ranks, fault)
    out = {}
    for rank in range(n_ranks):
        dump = _rank_dump(rank, sched, n_entries, n_groups, fault, culprit, n_ranks)
        if fmt == "json":
            out[f"nccl_trace_rank_{rank}.json"] = _to_json(dump)
        else:
            out[f"nccl_trace_rank_{rank}"] = pickle.dumps(dump, protocol=4)
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m tests.synth.fr_dumps", description=__doc__.splitlines()[0])
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("--ranks", type=int, default=16)
    ap.add_argument("--entries", type=int, default=2000)
    ap.add_argument("--groups", type=int, default=3)
    ap.add_argument("--fault", choices=FAULTS, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--format", choices=("pickle", "json"), default="pickle")
    a = ap.parse_args(argv)
    a.out_dir.mkdir(parents=True, exist_ok=True)
    files = generate(a.ranks, a.entries, a.groups, a.fault, a.seed, a.format)
    for name, data in files.items():
        (a.out_dir / name).write_bytes(data)
    print(f"wrote {len(files)} dumps to {a.out_dir} (culprit: {culprit_rank(a.ranks, a.fault)})")


if __name__ == "__main__":
    main()
