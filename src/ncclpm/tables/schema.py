"""Declared schemas of the tables ncclpm builds, and the closed vocabularies they use.

Every table a rule can read is listed in `TABLES` with its polars schema, so an empty table still has
the right columns and a rule never has to guess a dtype.
"""

from __future__ import annotations

from collections.abc import Mapping

import polars as pl

from ncclpm.model import Band, Category, FRCulprit  # noqa: F401 - the closed vocabularies, re-exported

# Fields a catalog pattern may extract into the `events` table, with their dtype. A catalog that names a
# field not listed here fails the catalog lint.
EVENT_FIELDS: dict[str, pl.DataType] = {
    "pg": pl.String(),
    "pg_desc": pl.String(),
    "seq": pl.Int64(),
    "op": pl.String(),
    "numel_in": pl.Int64(),
    "numel_out": pl.Int64(),
    "timeout_ms": pl.Int64(),
    "ran_ms": pl.Int64(),
    "last_enqueued": pl.Int64(),
    "last_completed": pl.Int64(),
    "exit_code": pl.Int64(),
    "signal": pl.String(),
    "pid": pl.Int64(),
    "local_rank": pl.Int64(),
    "peer": pl.String(),
    "error_type": pl.String(),
    "detail": pl.String(),
    "count": pl.Int64(),
    "expected": pl.Int64(),
    "nranks": pl.Int64(),
    "cuda_dev": pl.Int64(),
    "bus_id": pl.String(),
    "comm_id": pl.String(),
    "version": pl.String(),
    "xid": pl.Int64(),
    "pci": pl.String(),
    "var": pl.String(),
    "value": pl.String(),
    "subject_rank": pl.Int64(),
    "hca": pl.String(),  # an InfiniBand HCA a line names (`hca mlx5_3`)
    "interface": pl.String(),  # a network interface a line names (`eth0`, NCCL_SOCKET_IFNAME's value)
    "qp": pl.Int64(),  # an InfiniBand queue pair number
    "node": pl.String(),  # the host a kernel/syslog line names (`Apr  2 16:31:54 node7 kernel: ...`)
    "shape": pl.String(),  # a collective's tensor shape as printed (`[768]`)
    "dtype": pl.String(),  # a collective's tensor dtype as printed (`Float`)
    # The other rank's collective a fingerprint check prints (`but Rank 0 is running collective: ...`):
    "peer_seq": pl.Int64(),
    "peer_op": pl.String(),
    "peer_shape": pl.String(),
    "peer_dtype": pl.String(),
    # Attributes set by the kind declarations (parsers/kinds.toml), not by regex groups:
    "victim": pl.Boolean(),  # printed because ANOTHER rank failed (never makes its rank a culprit)
    # network errors: ib / interface / connect / closed / remote_exited / kv_transfer (a KV-cache connector's); a lost
    # peer: store
    "net_class": pl.String(),
    "strength": pl.Float64(),  # how much the line alone proves its cause (network errors, GPU/driver faults; 0-1)
    "exhausted": pl.String(),  # DataLoader failures: the resource that ran out (shm / fds)
    # the transport or service a failed connection used, where a reading names it: a KV-cache connector's (NIXL,
    # Mooncake, MoRI-IO; read only on a `kv_transfer` line), Ray's GCS for a driver that could not reach its cluster
    "transport": pl.String(),
    "killer": pl.String(),  # an OOM kill: who ended the process (kernel / cgroup / slurm / kubernetes / ray)
    # NCCL's result class an NCCL error names, whatever program wraps it (`ncclInternalError`...: ncclResult_t's names)
    "nccl_result": pl.String(),
}

DTYPE_NAMES: dict[str, pl.DataType] = {
    "str": pl.String(),
    "i64": pl.Int64(),
    "u64": pl.Int64(),  # stored signed: -1 is a real value ("nothing completed yet")
    "f64": pl.Float64(),
    "ms": pl.Int64(),  # a duration read into milliseconds (`60s`, `10000ms`, `29:55`): see ingest/extract.typed
}

LINES_SCHEMA = pl.Schema(
    {
        "source": pl.String(),
        "line": pl.Int64(),
        "rank": pl.Int32(),
        "rank_local": pl.Boolean(),  # the rank is only a local rank or a file name's (not the job's global rank)
        "host": pl.String(),
        "pid": pl.Int64(),
        "ts": pl.Datetime("us"),
        "level": pl.String(),
        "message": pl.String(),
    }
)

EVENTS_SCHEMA = pl.Schema(
    {
        "source": pl.String(),
        "line": pl.Int64(),
        "rank": pl.Int32(),
        "host": pl.String(),
        "ts": pl.Datetime("us"),
        "level": pl.String(),
        "event": pl.String(),
        "kind": pl.String(),
        "severity": pl.String(),
        "text": pl.String(),
        **EVENT_FIELDS,
    }
)

TRACEBACKS_SCHEMA = pl.Schema(
    {
        "source": pl.String(),
        "line": pl.Int64(),
        "end_line": pl.Int64(),
        "rank": pl.Int32(),
        "ts": pl.Datetime("us"),
        "error_type": pl.String(),
        "detail": pl.String(),
        "frames": pl.List(pl.String()),
    }
)

ELASTIC_SCHEMA = pl.Schema(
    {
        "source": pl.String(),
        "line": pl.Int64(),
        "rank": pl.Int32(),
        "local_rank": pl.Int64(),
        "host": pl.String(),
        "ts": pl.Datetime("us"),
        "exit_code": pl.Int64(),
        "signal": pl.String(),
        "pid": pl.Int64(),
        "root_cause": pl.Boolean(),
        "error_file": pl.String(),
        "detail": pl.String(),
        "exit_line": pl.Int64(),  # the entry's `rank :` line, quoted with its `exitcode :` line as `exit_text`
        "exit_text": pl.String(),  # (the summary's own words: evidence of the exit is what the file says)
    }
)

RANKS_SCHEMA = pl.Schema(
    {
        "rank": pl.Int32(),
        "host": pl.String(),
        "pid": pl.Int64(),
        "n_events": pl.UInt32(),
        "timed_out": pl.Boolean(),
        "timeout_op": pl.String(),
        "timeout_seq": pl.Int64(),
        "last_enqueued": pl.Int64(),
        "last_completed": pl.Int64(),
        "first_error_ts": pl.Datetime("us"),
        "first_error": pl.String(),
        "first_error_ref": pl.String(),
        "exit_code": pl.Int64(),
        "signal": pl.String(),
        "last_activity_ts": pl.Datetime("us"),
        "last_activity": pl.String(),
        "last_activity_ref": pl.String(),
        "cuda_dev": pl.Int64(),
        "nccl_version": pl.String(),
    }
)


_EMPTY: dict[tuple[tuple[str, str], ...], pl.DataFrame] = {}


def empty(schema: Mapping[str, pl.DataType | type[pl.DataType]]) -> pl.DataFrame:
    """An empty frame with `schema` (so rules can query absent tables uniformly). One frame per schema is made and
    shared: building one costs a Series a column (~1 ms for the events' 55), ~30 times a job, and frames are never
    changed in place in ncclpm (every operation returns a new one). Keyed by the dtypes' reprs: `pl.Datetime` and
    `pl.Datetime("ns")` compare equal as dtypes, but do not make the same frame."""
    key = tuple((name, repr(dtype)) for name, dtype in schema.items())
    frame = _EMPTY.get(key)
    if frame is None:
        if len(_EMPTY) >= 512:  # (tests build many schemas; a job uses a few dozen)
            _EMPTY.clear()
        frame = _EMPTY[key] = pl.DataFrame(schema=schema)
    return frame
