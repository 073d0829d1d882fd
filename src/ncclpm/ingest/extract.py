"""Apply the envelope and the message catalogs to the prefiltered lines.

Input: frame (source, line, raw) from `lines.py` and a `Catalog`. Output: the `lines` table (envelope
fields resolved: rank, host, pid, ts, level, message) and the `events` table (one row per pattern match,
typed fields from the catalog). All of it is polars expressions over the kept lines; no Python loop over
rows.

Rank resolution, most to least trusted: c10's `[rankN]:` prefix, Open MPI / Slurm task prefixes, a
default-PG `[PG ID 0 ... Rank N]` / `[Rank N]` tag, a script's own `rank N` prefix; then the global rank
seen on other lines of the same torchrun `[defaultN]:` stream, the torchrun local rank itself (global on a
single node), the one rank a whole file talks about, and finally the file path (`rank3.log`,
`attempt_0/3/stderr.log`).
"""

from __future__ import annotations

import polars as pl

from ncclpm.ingest.catalog import Catalog, Pattern
from ncclpm.schema import DTYPE_NAMES, EVENT_FIELDS, EVENTS_SCHEMA, LINES_SCHEMA

_TAG = (
    r"\[(?:PG (?:ID )?(?<tag_pg_id>\d+) (?:PG GUID (?<tag_guid>[^\s(\]]+)(?:\((?<tag_desc>[^)]*)\))? "
    r"|\((?<tag_desc2>[^)]*)\) )?)?Rank (?<tag_rank>\d+)\]"
)
_SCRIPT_RANK = r"^\[?(?i:rank)[\s_:=#-]{0,3}(?<script_rank>\d{1,6})\b"
_FILE_RANK = r"(?:(?:^|/)attempt_\d+/(?<file_local>\d+)/[^/]+$|(?i:rank)[_-]?(?<file_rank>\d+)[^/\d]*$)"
_ISO_FORMATS = ("%Y-%m-%dT%H:%M:%S%.f", "%Y-%m-%dT%H:%M:%S")


def _int(col: str) -> pl.Expr:
    return pl.col(col).cast(pl.Int32, strict=False)


def _iso(col: str) -> pl.Expr:
    norm = pl.col(col).str.replace(",", ".").str.replace(" ", "T")
    return pl.coalesce([norm.str.strptime(pl.Datetime("us"), f, strict=False) for f in _ISO_FORMATS])


def _mmdd_time(mmdd: str, time: str, year: int) -> pl.Expr:
    md = pl.col(mmdd).cast(pl.Int32, strict=False)
    t = pl.col(time)
    micro = t.str.slice(9, 6).str.pad_end(6, "0").cast(pl.Int32, strict=False).fill_null(0)
    return pl.datetime(
        year,
        md // 100,
        md % 100,
        t.str.slice(0, 2).cast(pl.Int32, strict=False),
        t.str.slice(3, 2).cast(pl.Int32, strict=False),
        t.str.slice(6, 2).cast(pl.Int32, strict=False),
        micro,
        time_unit="us",
    )


def _reference_year(env: pl.DataFrame) -> int:
    """Year for timestamps that have none (glog MMDD): the newest year any dated line of the job shows."""
    years = env.select(
        pl.max_horizontal(
            _iso("ts_iso").dt.year().max(), _iso("ts_iso2").dt.year().max(), _iso("nccl_ts").dt.year().max()
        )
    ).item()
    return int(years) if years else 1970


def _with_envelope(kept: pl.DataFrame, catalog: Catalog) -> pl.DataFrame:
    env = kept.with_columns(pl.col("raw").str.extract_groups(catalog.envelope_regex()).alias("_e")).unnest("_e")
    role_is_rank = pl.col("tr_role").str.to_lowercase() == "rank"
    env = env.with_columns(
        pl.coalesce("c10_rank", pl.when(role_is_rank).then("tr_local")).alias("c10_rank"),
        pl.when(role_is_rank).then(None).otherwise("tr_local").alias("tr_local"),
        pl.when(role_is_rank).then(None).otherwise("tr_role").alias("tr_role"),
    )
    env = env.with_columns(
        pl.col("message").str.extract_groups(_TAG).alias("_t"),
        pl.col("message").str.extract_groups(_SCRIPT_RANK).alias("_s"),
        pl.col("source").str.extract_groups(_FILE_RANK).alias("_f"),
    ).unnest("_t", "_s", "_f")
    return env


def _resolve_rank(env: pl.DataFrame) -> pl.Expr:
    tag_is_global = pl.col("tag_pg_id").is_null() | (pl.col("tag_pg_id") == "0")
    direct = pl.coalesce(
        _int("c10_rank"),
        _int("mpi_rank"),
        _int("slurm_task"),
        pl.when(tag_is_global).then(_int("tag_rank")),
        _int("script_rank"),
    )
    return direct


def _fill_ranks(env: pl.DataFrame) -> pl.DataFrame:
    env = env.with_columns(_resolve_rank(env).alias("_direct"))
    stream = ["source", "tr_role", "tr_local"]
    env = env.with_columns(
        pl.col("_direct").drop_nulls().mode().first().over(stream).alias("_stream_rank"),
        # A file that mostly talks about one rank is that rank's log (a per-rank file with some unprefixed
        # lines); a console where only one rank printed prefixed lines is not.
        pl.when(
            (pl.col("_direct").drop_nulls().n_unique().over("source") == 1)
            & (pl.col("_direct").is_not_null().mean().over("source") > 0.5)
        )
        .then(pl.col("_direct").drop_nulls().first().over("source"))
        .alias("_file_single"),
    )
    return env.with_columns(
        pl.coalesce(
            "_direct",
            pl.when(pl.col("tr_local").is_not_null()).then("_stream_rank"),
            _int("tr_local"),
            "_file_single",
            _int("file_rank"),
            _int("file_local"),
        )
        .cast(pl.Int32)
        .alias("rank")
    )


def parse_lines(kept: pl.DataFrame, catalog: Catalog) -> pl.DataFrame:
    """The `lines` table (plus private `_`-free helper columns used by extraction: pg tag fields)."""
    env = _fill_ranks(_with_envelope(kept, catalog))
    year = _reference_year(env)
    nccl_level = (
        pl.when(pl.col("message").str.contains("NCCL WARN", literal=True))
        .then(pl.lit("W"))
        .when(pl.col("nccl_host").is_not_null())
        .then(pl.lit("I"))
    )
    return env.select(
        "source",
        "line",
        "rank",
        pl.coalesce("nccl_host", "ray_ip").alias("host"),
        pl.coalesce(_int("nccl_pid"), _int("ray_pid"), _int("py_pid")).cast(pl.Int64).alias("pid"),
        pl.coalesce(
            _iso("ts_iso2"),
            _iso("nccl_ts"),
            _iso("ts_iso"),
            _mmdd_time("py_mmdd", "py_time", year),
            _mmdd_time("gl_mmdd", "gl_time", year),
            _mmdd_time("cpp_mmdd", "cpp_time", year),
        ).alias("ts"),
        pl.coalesce("cpp_level", "py_level", "gl_level", "old_level", nccl_level).alias("level"),
        "message",
        "raw",
        pl.coalesce("tag_guid", "tag_pg_id").alias("tag_pg"),
        pl.coalesce("tag_desc", "tag_desc2").alias("tag_pg_desc"),
    )


def _pattern_events(parsed: pl.DataFrame, p: Pattern) -> pl.DataFrame:
    hits = parsed.filter(pl.col("message").str.contains_any(list(p.anchors)) & pl.col("message").str.contains(p.regex))
    if hits.is_empty():
        return pl.DataFrame(schema=EVENTS_SCHEMA)
    if p.repeat:  # one event per match: each match is read again on its own for its groups
        hits = hits.with_columns(pl.col("message").str.extract_all(p.regex).alias("_all")).explode("_all")
        hits = hits.with_columns(pl.col("_all").str.extract_groups(p.regex).alias("_m"))
    else:
        hits = hits.with_columns(pl.col("message").str.extract_groups(p.regex).alias("_m"))
    cols: list[pl.Expr] = []
    for name, dtype in EVENT_FIELDS.items():
        if name in p.fields:
            raw = pl.col("_m").struct.field(name)
            cols.append(raw.cast(DTYPE_NAMES[p.fields[name]], strict=False).cast(dtype).alias(name))
        else:
            cols.append(pl.lit(None, dtype).alias(name))
    out = hits.select(
        "source",
        "line",
        "rank",
        "host",
        "ts",
        "level",
        pl.lit(p.id).alias("event"),
        pl.lit(p.kind).alias("kind"),
        pl.lit(p.severity).alias("severity"),
        pl.col("raw").alias("text"),
        *cols,
        "tag_pg",
        "tag_pg_desc",
    )
    return out.with_columns(
        pl.coalesce("pg", "tag_pg").alias("pg"), pl.coalesce("pg_desc", "tag_pg_desc").alias("pg_desc")
    ).select(list(EVENTS_SCHEMA.keys()))


def extract_events(parsed: pl.DataFrame, catalog: Catalog) -> pl.DataFrame:
    """The `events` table: one row per (line, pattern) match, sorted by source and line."""
    frames = [_pattern_events(parsed, p) for p in catalog.patterns]
    events = pl.concat([f.cast(EVENTS_SCHEMA) for f in frames], how="vertical")  # type: ignore[arg-type]
    return events.sort("source", "line", "event")


def lines_table(parsed: pl.DataFrame) -> pl.DataFrame:
    return parsed.select(list(LINES_SCHEMA.keys())).cast(LINES_SCHEMA)  # type: ignore[arg-type]
