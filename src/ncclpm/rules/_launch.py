"""What a job's launch command says about its setup, read from the events of the command line."""

from __future__ import annotations

import polars as pl

from ncclpm.tables import Tables
from ncclpm.tables.kinds import K


def more_processes_than_gpus(t: Tables) -> pl.DataFrame:
    """A launch command that starts more processes per node than the GPUs it leaves visible: the setting's event,
    with the process count (`nproc`) and the visible GPUs (`visible`). Only a literal device list is counted."""
    nproc = (
        t.kinds(K.launcher_option)
        .filter(pl.col("var").str.replace_all("-", "_") == "nproc_per_node")
        .select("source", "line", pl.col("value").cast(pl.Int64, strict=False).alias("nproc"))
    )
    devices = t.kinds(K.setting).filter(
        (pl.col("var") == "CUDA_VISIBLE_DEVICES") & pl.col("value").str.contains(r"^[\w-]+(?:,[\w-]+)*$")
    )
    return (
        devices.with_columns(pl.col("value").str.split(",").list.len().cast(pl.Int64).alias("visible"))
        .join(nproc, on=["source", "line"])
        .filter(pl.col("nproc") > pl.col("visible"))
    )
