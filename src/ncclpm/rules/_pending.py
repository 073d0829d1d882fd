"""Whether a request still pending is where the log ends (rules CF05, SL02)."""

from __future__ import annotations

import polars as pl

from ncclpm.tables import Tables


def log_ends_pending(t: Tables, ev: pl.DataFrame) -> bool:
    """Nothing after the last of `ev`'s lines: no line of the job read after it in its file (the workers starting,
    the server up, the pod scheduled) and no error in another file - the request was still pending at the end."""
    last = ev.sort("source", "line").tail(1).row(0, named=True)
    others = t.events.filter(~pl.col("kind").is_in(ev["kind"].unique().implode()))
    later_here = others.filter((pl.col("source") == last["source"]) & (pl.col("line") > last["line"]))
    errors_elsewhere = others.filter((pl.col("source") != last["source"]) & (pl.col("severity") == "error"))
    return later_here.is_empty() and errors_elsewhere.is_empty()
