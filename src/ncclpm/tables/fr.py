"""The flight-recorder part of the contract: the schemas of the loaded dumps and `FRLoad`, what ingest's
flight-recorder reader (`ingest/flight_recorder/`) gives and the analysis, the rules and `ncclpm tables` read."""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

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
# What the analysis, the rules and the report read: the default load keeps only these.
ANALYSIS_COLUMNS = (
    "rank",
    "source",
    "record_id",
    "pg_id",
    "pg_name",
    "pg_desc",
    "group_key",
    "collective_seq_id",
    "op",
    "is_p2p",
    "input_sizes",
    "input_dtypes",
    "state",
    "retired",
    "time_created_ns",
    "frames",
)
FR_ANALYSIS_SCHEMA = pl.Schema({k: v for k, v in FR_ENTRIES_SCHEMA.items() if k in ANALYSIS_COLUMNS})
NESTED = ("input_sizes", "output_sizes", "input_dtypes", "output_dtypes", "frames")


def compact_schema(schema: pl.Schema) -> pl.Schema:
    """How a load holds `schema` in memory: text as Categorical (4 bytes a row instead of a 16-byte view) and each
    nested value as ``<name>_id``, a UInt32 id into the load's dictionary of distinct values (null = no value)."""
    out: dict[str, pl.DataType] = {}
    for k, t in schema.items():
        if k in NESTED:
            out[f"{k}_id"] = pl.UInt32()
        else:
            out[k] = pl.Categorical() if t == pl.String else t
    return pl.Schema(out)


COMPACT_ENTRIES_SCHEMA = compact_schema(FR_ENTRIES_SCHEMA)
COMPACT_ANALYSIS_SCHEMA = compact_schema(FR_ANALYSIS_SCHEMA)

FR_GROUPS_SCHEMA = pl.Schema(
    {
        "group_key": pl.String,
        "pg_name": pl.String,
        "pg_desc": pl.String,
        "ranks": pl.List(pl.Int32),
        "size": pl.Int32,
        "membership_source": pl.String,
    }
)
FR_STATUS_SCHEMA = pl.Schema(
    {
        "rank": pl.Int32,
        "pg_id": pl.Int64,
        "group_key": pl.String,
        "last_enqueued": pl.Int64,
        "last_started": pl.Int64,
        "last_completed": pl.Int64,
    }
)
FR_DUMPS_SCHEMA = pl.Schema(
    {
        "source": pl.String,
        "rank": pl.Int32,
        "format": pl.String,
        "version": pl.String,
        "comm_lib_version": pl.String,
        "n_entries": pl.Int64,
        "newest_created_ns": pl.Int64,
        "used": pl.Boolean,
        "note": pl.String,
    }
)


@dataclass(frozen=True)
class FRLoad:
    """`compact` is the entries table as held in memory (`compact_schema`: Categorical text, nested values as ids
    into `values`); `entries` is the same table with its values (`FR_ENTRIES_SCHEMA`), built on each call: code
    that reads many rows filters `compact` first and calls `expand` on the few rows it shows."""

    compact: pl.DataFrame
    groups: pl.DataFrame
    status: pl.DataFrame
    dumps: pl.DataFrame
    warnings: tuple[str, ...]
    values: dict[str, pl.Series] = field(default_factory=dict)  # nested column -> distinct values (index = id)

    @property
    def entries(self) -> pl.DataFrame:
        return self.expand(self.compact)

    def expand(self, rows: pl.DataFrame) -> pl.DataFrame:
        """Rows of `compact` (or a projection of it) with their nested values and text as String."""
        cols = []
        for name, dtype in rows.schema.items():
            col = rows.get_column(name)
            base = name.removesuffix("_id")
            if base != name and base in self.values:
                cols.append(self.values[base].gather(col).alias(base))
            elif dtype == pl.Categorical:
                cols.append(col.cast(pl.String))
            else:  # the counters held as Int32 (`fr_decode.NARROW`) as their schema has them
                cols.append(col.cast(FR_ENTRIES_SCHEMA.get(name, dtype)))
        return pl.DataFrame(cols, height=rows.height)
