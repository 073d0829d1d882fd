"""Progress of the two runs side by side: the steps each reached, the step time up to the point where BAD
stopped (a slower BAD can explain a timeout), and the collective each rank last reached. Steps come from the
catalog's `progress` events (`step 12`, `iter 40`, `it/s`), collectives from the flight recorder or the
watchdog's last enqueued/completed sequence numbers. Where BAD stopped is the failure's effect, never its
cause: those differences carry relevance `none`.
"""

from __future__ import annotations

from statistics import median

import polars as pl

from ncclpm.analysis import Analysis
from ncclpm.diff.facts import quote
from ncclpm.diff_model import Difference, Quote
from ncclpm.tables import Tables
from ncclpm.tables.kinds import K

SLOWER_RATIO = 1.5  # below this, step-time differences are noise on a shared machine
SLOWER_SECONDS = 0.2


def _steps(t: Tables) -> pl.DataFrame:
    return (
        t.events.filter((pl.col("kind") == K.progress) & pl.col("seq").is_not_null() & pl.col("rank").is_not_null())
        .sort("rank", "seq", "ts", "source", "line", nulls_last=True)
        .unique(["rank", "seq"], keep="first", maintain_order=True)
    )


def _reached(steps: pl.DataFrame) -> tuple[str, Quote] | None:
    if steps.is_empty():
        return None
    last = steps.group_by("rank").agg(pl.col("seq").max())
    lo, hi = int(last["seq"].min()), int(last["seq"].max())  # type: ignore[arg-type]
    row = steps.filter(pl.col("seq") == lo).sort("source", "line").row(0, named=True)
    value = f"step {lo}" if lo == hi else f"steps {lo}-{hi} (slowest rank {lo})"
    return value, quote(row)


def _intervals(steps: pl.DataFrame, upto: int) -> list[float]:
    """Seconds between consecutive steps (n-1 -> n, n <= upto) on each rank."""
    timed = steps.filter(pl.col("ts").is_not_null() & (pl.col("seq") <= upto)).sort("rank", "seq")
    if timed.is_empty():
        return []
    gaps = timed.with_columns(
        (pl.col("ts").diff().over("rank").dt.total_microseconds() / 1e6).alias("gap"),
        (pl.col("seq").diff().over("rank")).alias("dseq"),
    ).filter((pl.col("dseq") == 1) & pl.col("gap").is_not_null() & (pl.col("gap") >= 0))
    return gaps["gap"].to_list()


def _collectives(facts: Analysis) -> dict[int, tuple[str, Quote | None]]:
    t, fa = facts.t, facts.fr
    out: dict[int, tuple[str, Quote | None]] = {}
    if fa is not None and not fa.rank_facts.is_empty():
        for r in fa.rank_facts.iter_rows(named=True):
            if r.get("last_seq_root_group") is not None:
                out[int(r["rank"])] = (f"{r.get('last_op') or 'collective'} #{r['last_seq_root_group']}", None)
        return out
    for r in t.ranks.filter(pl.col("last_enqueued").is_not_null()).iter_rows(named=True):
        out[int(r["rank"])] = (f"enqueued #{r['last_enqueued']}, completed #{r['last_completed']}", None)
    return out


def progress_differences(good_a: Analysis, bad_a: Analysis) -> list[Difference]:
    """Differences of progress; a clearly slower BAD is left for the judge (relevance.py) to weigh."""
    out: list[Difference] = []
    good, bad = good_a.t, bad_a.t
    g_steps, b_steps = _steps(good), _steps(bad)
    g_reached, b_reached = _reached(g_steps), _reached(b_steps)
    if g_reached and b_reached and g_reached[0] != b_reached[0]:
        out.append(
            Difference(
                "steps reached",
                "progress_reached",
                "progress",
                g_reached[0],
                b_reached[0],
                "none",
                "where BAD stopped: the failure's effect, not its cause",
                g_reached[1],
                b_reached[1],
            )
        )
    if not g_steps.is_empty() and not b_steps.is_empty():
        upto = int(b_steps.group_by("rank").agg(pl.col("seq").max())["seq"].min())  # type: ignore[arg-type]
        out += _step_time(_intervals(g_steps, upto), _intervals(b_steps, upto), upto)
    g_coll, b_coll = _collectives(good_a), _collectives(bad_a)
    changes: dict[tuple[str, str], list[int]] = {}
    for rank in sorted(set(g_coll) & set(b_coll)):
        if g_coll[rank][0] != b_coll[rank][0]:
            changes.setdefault((g_coll[rank][0], b_coll[rank][0]), []).append(rank)
    for (g, b), ranks in changes.items():
        out.append(
            Difference(
                f"last collective of rank {ranks[0]}",
                "progress_collective",
                "progress",
                g,
                b,
                "none",
                "where BAD's ranks stopped: the failure's effect, not its cause",
                also=tuple(f"rank {r}" for r in ranks[1:]),
            )
        )
    return out


def _step_time(good: list[float], bad: list[float], upto: int) -> list[Difference]:
    if not good or not bad:
        return []
    g, b = median(good), median(bad)
    slower = b >= g * SLOWER_RATIO and b - g >= SLOWER_SECONDS
    faster = g >= b * SLOWER_RATIO and g - b >= SLOWER_SECONDS
    if not slower and not faster:
        return []
    why = (
        f"BAD's steps took {b / g:.1f}x as long before it failed"
        if slower
        else "BAD was faster before it failed: a slowdown did not cause it"
    )
    return [
        Difference(
            f"median step time (steps up to {upto})",
            "step_time",
            "progress",
            f"{g:.3g} s",
            f"{b:.3g} s",
            "medium" if slower else "none",
            why,
        )
    ]
