"""Values a line cannot mean become nulls before any rule reads them (`clamp.py` says which and why).

A rank past `MAX_RANK`, a world size past `MAX_WORLD`, a timeout past a century, a timestamp outside 1970-2199:
the value is dropped from its column, the line stays (its other fields are still used), and one warning per
column says how many values were dropped, with the first line that held one.
"""

from __future__ import annotations

import polars as pl

from ncclpm.util.clamp import EARLIEST, FIELD_BOUNDS, LATEST, MAX_RANK

_CHECKS: dict[tuple[str, ...], dict[str, pl.Expr]] = {}  # a frame's columns -> its checks (built once per shape)


def _checks(frame: pl.DataFrame) -> dict[str, pl.Expr]:
    """column -> expression true (or null) where the value is outside what it can mean."""
    held = _CHECKS.get(key := tuple(frame.columns))
    if held is None:
        if len(_CHECKS) >= 64:
            _CHECKS.clear()
        held = _CHECKS[key] = _checks_of(frame)
    return held


def _checks_of(frame: pl.DataFrame) -> dict[str, pl.Expr]:
    out: dict[str, pl.Expr] = {}
    if "rank" in frame.columns:
        out["rank"] = (pl.col("rank") < 0) | (pl.col("rank") > MAX_RANK)
    if "ts" in frame.columns:
        out["ts"] = (pl.col("ts") < EARLIEST) | (pl.col("ts") > LATEST)
    for name, (low, high) in FIELD_BOUNDS.items():
        if name in frame.columns:
            out[name] = (pl.col(name) < low) | (pl.col(name) > high)
    return out


def bound(frame: pl.DataFrame, warnings: list[str] | None = None, what: str = "value") -> pl.DataFrame:
    """`frame` with every out-of-bounds value (see the module docstring) made null."""
    checks = _checks(frame)
    if frame.is_empty() or not checks:
        return frame
    # whether any value is out of bounds, every column in one query (most jobs: none, nothing more to do)
    anywhere = frame.select(**{k: e.fill_null(False).any() for k, e in checks.items()}).row(0)
    hit = [k for k, h in zip(checks, anywhere, strict=True) if h]
    if not hit:
        return frame
    bad = frame.select(**{k: checks[k].fill_null(False) for k in hit})
    if warnings is not None:
        for k in hit:
            first = frame.filter(bad[k]).row(0, named=True)
            where = f"{first['source']}:{first['line']}" if "source" in frame.columns else "a line"
            warnings.append(
                f"{where}: {k} {first[k]} cannot be real - ignored ({bad[k].sum()} such {what}(s) in the job)"
            )
    return frame.with_columns(pl.when(~bad[k]).then(pl.col(k)).alias(k) for k in hit)
