"""The `settings` table: the environment variables the job sets - in launch scripts and env dumps, in code
(`os.environ[...] =`, `export`), and as NCCL echoes them (`NCCL_X set by environment to Y`) - one row per variable
(var, value, file, line). Where a variable is set (script, env dump, code) wins over NCCL's echo of it, which only
proves the setting reached NCCL; then its last occurrence. Facts only: what each does is the analysis's settings
lint (`analysis/settings.py`), worded by the report."""

from __future__ import annotations

import polars as pl

from ncclpm.tables.kinds import K
from ncclpm.tables.schema import empty

SETTINGS_SCHEMA = pl.Schema({"var": pl.String(), "value": pl.String(), "file": pl.String(), "line": pl.Int64()})


def env_rows(code: pl.DataFrame) -> pl.DataFrame:
    """Environment variables set in code, shaped like `setting` events (var, value, source, line, event)."""
    return code.filter(pl.col("setting") == "env").select(
        pl.col("name").alias("var"), "value", "source", "line", pl.col("reading").alias("event")
    )


def settings_table(events: pl.DataFrame, code: pl.DataFrame | None = None) -> pl.DataFrame:
    """One row per variable, by name."""
    in_code = code is not None and bool((code["setting"] == "env").any())
    if not in_code and not (events["kind"] == K.setting).any():  # (most jobs: no setting anywhere, no query)
        return empty(SETTINGS_SCHEMA)
    rows = events.filter((pl.col("kind") == K.setting) & pl.col("var").is_not_null())
    rows = rows.select("var", "value", "source", "line", "event")
    if code is not None:
        rows = pl.concat([rows, env_rows(code)], how="vertical_relaxed")
    if rows.is_empty():
        return empty(SETTINGS_SCHEMA)
    rows = rows.with_columns((pl.col("event") != "nccl.env_echo").alias("_set_here"))
    last = rows.sort("_set_here", "source", "line").group_by("var", maintain_order=True).last()
    table = last.select("var", "value", pl.col("source").alias("file"), "line")
    return table.cast(SETTINGS_SCHEMA).sort("var")  # type: ignore[arg-type]
