"""Apply the kind declarations' readings to the events table: `victim`, and the attributes `[[kind.reading]]`
entries set (`net_class`, `strength`, `exhausted`...), so rules read columns instead of re-matching text.

For each attribute the first reading of the event's kind that sets it and whose `when` matches the event's
text wins; `victim` is true for every event of a `victim = true` kind, or when a reading says so.
"""

from __future__ import annotations

import polars as pl

from ncclpm.tables.kinds import KindDecl
from ncclpm.tables.schema import EVENT_FIELDS


def apply_readings(events: pl.DataFrame, kinds: dict[str, KindDecl]) -> pl.DataFrame:
    chains: dict[str, list[tuple[pl.Expr, object]]] = {}
    for decl in kinds.values():
        is_kind = pl.col("kind") == decl.name
        for r in decl.readings:
            cond = is_kind if r.when is None else is_kind & pl.col("text").str.contains(r.when)
            for attr, value in r.set.items():
                chains.setdefault(attr, []).append((cond, value))
    victim_kinds = [d.name for d in kinds.values() if d.victim]
    exprs: list[pl.Expr] = []
    for attr, branches in chains.items():
        dtype = EVENT_FIELDS[attr]
        expr = pl.when(branches[0][0]).then(pl.lit(branches[0][1], dtype))
        for cond, value in branches[1:]:
            expr = expr.when(cond).then(pl.lit(value, dtype))
        base = pl.col("kind").is_in(victim_kinds) if attr == "victim" else pl.col(attr)
        exprs.append(expr.otherwise(base).alias(attr))
    if "victim" not in chains:
        exprs.append(pl.col("kind").is_in(victim_kinds).alias("victim"))
    read = [d.name for d in kinds.values() if d.readings]
    if events.height > _FEW and all(events.schema.get(a) == EVENT_FIELDS[a] for a in chains):
        return _on_read_kinds(events, exprs, read, victim_kinds)
    return events.with_columns(exprs).with_columns(pl.col("victim").fill_null(False))


_FEW = 10_000  # rows: below this, evaluating every reading on every event costs less than picking the rows


def _on_read_kinds(
    events: pl.DataFrame, exprs: list[pl.Expr], read: list[str], victim_kinds: list[str]
) -> pl.DataFrame:
    """`apply_readings`' columns computed on the events of kinds that have readings only (every reading's regex
    ran on every event: ~0.1 s for 160k events of kinds without any), the others keep their column (`victim`: from
    their kind); the same columns as computing them on every row."""
    at = events.select(pl.arg_where(pl.col("kind").is_in(read))).to_series()
    out = events.with_columns(pl.col("kind").is_in(victim_kinds).alias("victim"))
    if not at.is_empty():
        done = events[at].select(exprs)
        out = out.with_columns(out[c].scatter(at, done[c]) for c in done.columns)
    return out.with_columns(pl.col("victim").fill_null(False))
