"""Apply the kind declarations' readings to the events table: `victim`, and the attributes `[[kind.reading]]`
entries set (`net_class`, `strength`, `exhausted`...), so rules read columns instead of re-matching text.

For each attribute the first reading of the event's kind that sets it and whose `when` matches the event's
text wins; `victim` is true for every event of a `victim = true` kind, or when a reading says so.

Only the readings of the kinds the events hold are evaluated (a reading's condition includes its kind, so the
others are false on every row): a job's few dozen events used to run every declared reading's regex, and the
expressions were rebuilt for every table (~2 per job: most of a small job's `apply_readings`). The expressions
are built once per kinds declaration (`_Plan`); a chain whose kinds are all absent keeps its first branch
without its regex, so each column's type is resolved exactly as with every branch.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from ncclpm.tables.kinds import KindDecl
from ncclpm.tables.schema import EVENT_FIELDS


@dataclass(frozen=True)
class _Branch:
    """One declared reading of a kind, as expressions: when it applies and the value it sets."""

    kind: str
    cond: pl.Expr  # the kind, and the reading's `when` if any
    is_kind: pl.Expr  # the kind alone (false on every row when the kind is absent, like `cond`)
    value: pl.Expr  # the value set, typed as the attribute


@dataclass(frozen=True)
class _Plan:
    """The expressions that apply a set of kinds' readings to the events, built once per set of declarations."""

    chains: dict[str, list[_Branch]]  # attribute -> its branches, in declaration order
    victim_kinds: list[str]
    victim: pl.Expr  # `kind` in victim_kinds
    read: list[str]  # kinds with readings


_PLANS: dict[tuple[int, ...], tuple[list[KindDecl], _Plan]] = {}  # the declarations' ids -> (them, their plan)


def _plan(kinds: dict[str, KindDecl]) -> _Plan:
    decls = list(kinds.values())
    key = tuple(map(id, decls))  # (the declarations are frozen; held below, so their ids are not reused)
    held = _PLANS.get(key)
    if held is not None:
        return held[1]
    chains: dict[str, list[_Branch]] = {}
    for decl in decls:
        is_kind = pl.col("kind") == decl.name
        for r in decl.readings:
            cond = is_kind if r.when is None else is_kind & pl.col("text").str.contains(r.when)
            for attr, value in r.set.items():
                chains.setdefault(attr, []).append(_Branch(decl.name, cond, is_kind, pl.lit(value, EVENT_FIELDS[attr])))
    victim_kinds = [d.name for d in decls if d.victim]
    read = [d.name for d in decls if d.readings]
    plan = _Plan(chains, victim_kinds, pl.col("kind").is_in(victim_kinds), read)
    if len(_PLANS) >= 8:  # a process sees one or two catalogs; tests build many
        _PLANS.clear()
    _PLANS[key] = (decls, plan)
    return plan


def _chain(attr: str, branches: list[_Branch], present: set[str], base: pl.Expr) -> pl.Expr:
    live = [b for b in branches if b.kind in present]
    first = live[0].cond if live else branches[0].is_kind  # (all absent: false everywhere, the same column type)
    expr = pl.when(first).then(live[0].value if live else branches[0].value)
    for b in live[1:]:
        expr = expr.when(b.cond).then(b.value)
    return expr.otherwise(base).alias(attr)


def apply_readings(events: pl.DataFrame, kinds: dict[str, KindDecl]) -> pl.DataFrame:
    plan = _plan(kinds)
    if events.is_empty() and events.schema.get("victim") == pl.Boolean and _typed(events, plan):
        return events  # (no row to read, and every column it would set already there with its type: no query)
    present = set(events.get_column("kind").unique().to_list()) if "kind" in events.columns else set()
    exprs = [
        _chain(attr, branches, present, plan.victim if attr == "victim" else pl.col(attr))
        for attr, branches in plan.chains.items()
    ]
    if "victim" not in plan.chains:
        exprs.append(plan.victim.alias("victim"))
    if events.height > _FEW and _typed(events, plan):
        return _on_read_kinds(events, exprs, plan.read, plan.victim)
    # (no expression reads another's output: `victim` is made non-null in the same query)
    return events.with_columns(
        e.fill_null(False).alias("victim") if e.meta.output_name() == "victim" else e for e in exprs
    )


def _typed(events: pl.DataFrame, plan: _Plan) -> bool:
    """Whether every attribute the readings set is a column of `events` with its declared type."""
    return all(events.schema.get(a) == EVENT_FIELDS[a] for a in plan.chains)


_FEW = 10_000  # rows: below this, evaluating every reading on every event costs less than picking the rows


def _on_read_kinds(events: pl.DataFrame, exprs: list[pl.Expr], read: list[str], victim: pl.Expr) -> pl.DataFrame:
    """`apply_readings`' columns computed on the events of kinds that have readings only (every reading's regex
    ran on every event: ~0.1 s for 160k events of kinds without any), the others keep their column (`victim`: from
    their kind); the same columns as computing them on every row."""
    at = events.select(pl.arg_where(pl.col("kind").is_in(read))).to_series()
    out = events.with_columns(victim.alias("victim"))
    if not at.is_empty():
        done = events[at].select(exprs)
        out = out.with_columns(out[c].scatter(at, done[c]) for c in done.columns)
    return out.with_columns(pl.col("victim").fill_null(False))
