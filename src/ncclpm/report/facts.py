"""Facts the report shows besides the findings: the failing collective, per-rank rows (logs + flight
recorder), versions, and whether the logs and the flight-recorder dumps agree on the culprit."""

from __future__ import annotations

import re
from dataclasses import replace

import polars as pl

from ncclpm.analysis import Analysis
from ncclpm.analysis.identity import attempts_caveat
from ncclpm.model import Evidence, strip_prefix
from ncclpm.rules.base import Finding, ranks_text
from ncclpm.tables import Tables
from ncclpm.tables.kinds import K
from ncclpm.tables.schema import empty
from ncclpm.util.frames import filtered

FR_RANK_COLUMNS = ["fr_last_op", "fr_last_seq", "fr_last_state", "fr_dump"]


def _fr_op(t: Tables, group: str, seq: int) -> str | None:
    """The op most ranks recorded at (group, seq); ties name all of them."""
    if t.fr is None:
        return None
    ops = (
        t.fr.compact.filter((pl.col("group_key") == group) & (pl.col("collective_seq_id") == seq))
        .group_by(pl.col("op").cast(pl.String))
        .len()
        .sort("len", "op", descending=[True, False])
    )
    if ops.is_empty():
        return None
    top = ops.filter(pl.col("len") == ops["len"][0])["op"].to_list()
    return " / ".join(o for o in top if o)


def fr_stall(facts: Analysis) -> dict | None:
    """The collective the flight recorder says the job stopped in (when the logs name none)."""
    t, fa = facts.t, facts.fr
    if fa is None:
        return None
    for frame in (fa.mismatches, fa.missing.filter(pl.col("group_key") == (fa.root_group or "")), fa.missing):
        if not frame.is_empty():
            r = frame.sort("collective_seq_id").row(0, named=True)
            op = r.get("op") or _fr_op(t, r["group_key"], r["collective_seq_id"])
            return {
                "op": op,
                "seq": r["collective_seq_id"],
                "numel_in": None,
                "numel_out": None,
                "timeout_ms": None,
                "pg": r["group_key"],
                "pg_desc": r.get("pg_desc"),
                "source": "flight recorder",
            }
    return None


def failing_collective(facts: Analysis) -> dict | None:
    to = facts.t.events.filter((pl.col("kind") == K.collective_timeout) & pl.col("op").is_not_null())
    if to.is_empty():
        return fr_stall(facts)
    r = to.sort("ts", "source", "line", nulls_last=True).row(0, named=True)
    return {k: r[k] for k in ("op", "seq", "numel_in", "numel_out", "timeout_ms", "pg")}


def _fr_rank_facts(facts: Analysis) -> pl.DataFrame | None:
    fa = facts.fr
    if fa is None or fa.rank_facts.is_empty():
        return None
    return fa.rank_facts.select(
        "rank",
        pl.col("last_op").alias("fr_last_op"),
        pl.col("last_seq_root_group").alias("fr_last_seq"),
        pl.col("last_state").alias("fr_last_state"),
        pl.col("dump_present").alias("fr_dump"),
    )


def _finer_first_errors(t: Tables, table: pl.DataFrame) -> pl.DataFrame:
    """A first error stamped to the whole second (torchelastic's error file) is the same failure a log line of that
    second stamps to the millisecond: take the finer stamp, so the picture and the story keep the true order."""
    errors = t.events.filter(
        (pl.col("severity") == "error") & pl.col("rank").is_not_null() & (pl.col("ts").dt.microsecond() != 0)
    ).select(pl.col("rank").cast(table.schema["rank"]), pl.col("ts").alias("_fine"))
    if errors.is_empty():
        return table
    whole = pl.col("first_error_ts").dt.microsecond() == 0
    fine = (
        table.select("rank", "first_error_ts")
        .filter(whole)
        .join(errors, on="rank")
        .filter(
            (pl.col("_fine") > pl.col("first_error_ts"))
            & (pl.col("_fine") < pl.col("first_error_ts").dt.offset_by("1s"))
        )
        .group_by("rank")
        .agg(pl.col("_fine").min())
    )
    if fine.is_empty():
        return table
    joined = table.join(fine, on="rank", how="left")
    return joined.with_columns(pl.coalesce("_fine", "first_error_ts").alias("first_error_ts")).drop("_fine")


def rank_rows(facts: Analysis, primary: Finding) -> tuple[dict, ...]:
    t = facts.t
    culprits = set(primary.culprit_ranks)
    to = filtered(t.kinds(K.collective_timeout), pl.col("rank").is_not_null())
    victims = set(primary.victim_ranks) | set(to["rank"].to_list())
    fr = _fr_rank_facts(facts)
    if fr is None and t.ranks.is_empty():  # no rank anywhere: no row (and no query)
        return ()
    table = _finer_first_errors(t, t.ranks)
    if fr is not None:
        table = table.join(fr.cast({"rank": table.schema["rank"]}), on="rank", how="full", coalesce=True)
    else:
        table = table.with_columns(pl.lit(None).alias(c) for c in FR_RANK_COLUMNS)
    if to.is_empty():  # (most jobs: no timeout - the columns the join adds, no query)
        ev = t.events.schema
        numel = pl.DataFrame(
            schema={"rank": table.schema["rank"]}
            | {"timeout_numel_in": ev["numel_in"], "timeout_numel_out": ev["numel_out"], "timeout_ms": ev["timeout_ms"]}
        )
    else:
        numel = (
            to.sort("ts", "source", "line", nulls_last=True)
            .group_by("rank", maintain_order=True)
            .agg(
                pl.col("numel_in").first().alias("timeout_numel_in"),
                pl.col("numel_out").first().alias("timeout_numel_out"),
                pl.col("timeout_ms").first(),
            )
            .cast({"rank": table.schema["rank"]})
        )
    # each part is joined on the rank; an empty part adds its columns of nulls, typed as the join would, in the
    # same place, all at once with the next part joined (most jobs: no timeout, no launcher summary...)
    pending: dict[str, pl.DataType] = {}

    def joined(table: pl.DataFrame, part: pl.DataFrame) -> pl.DataFrame:
        if part.is_empty():
            pending.update((c, dt) for c, dt in part.schema.items() if c != "rank")
            return table
        if pending:
            table = table.with_columns(pl.lit(None, dt).alias(c) for c, dt in pending.items())
            pending.clear()
        return table.join(part.cast({"rank": table.schema["rank"]}), on="rank", how="left")

    table = joined(table, numel)
    # each rank's last activity and last line across every file in time order (analysis/activity.py), not per file
    order = ["last_activity", "last_activity_ts", "last_activity_ref"]
    table = joined(table.drop(order), facts.last_activity.select("rank", *order))
    table = joined(table, facts.last_lines)
    if not facts.task_hosts.is_empty():
        table = joined(table, facts.task_hosts.rename({"host": "_task_host"}))
        table = table.with_columns(pl.coalesce("host", "_task_host").alias("host")).drop("_task_host")
    if t.elastic.is_empty():  # (most jobs: no launcher summary, no query)
        ends = empty({"rank": table.schema["rank"], "exit_ts": t.elastic.schema["ts"]})
    else:
        ends = t.elastic.filter(pl.col("rank").is_not_null()).group_by("rank").agg(pl.col("ts").min().alias("exit_ts"))
    table = joined(table, ends)
    if pending:
        table = table.with_columns(pl.lit(None, dt).alias(c) for c, dt in pending.items())
    rows = []
    for r in table.sort("rank").iter_rows(named=True):
        role = "culprit" if r["rank"] in culprits else "waiting" if r["rank"] in victims else ""
        rows.append({**r, "timed_out": bool(r["timed_out"]), "n_events": r["n_events"] or 0, "role": role})
    return tuple(rows)


VERSION_KINDS = ((K.torch_version, "torch"), (K.nccl_error, "nccl"), (K.nccl_version, "nccl"))  # the first wins


def versions(t: Tables) -> dict[str, str]:
    out: dict[str, str] = {}
    for kind, key in VERSION_KINDS:
        if key in out or not t.has_kinds(kind):  # (most jobs: one kind or none, no query for the others)
            continue
        hit = t.kinds(kind)["version"].drop_nulls()
        if hit.len():
            out[key] = ", ".join(sorted(hit.unique().to_list()))  # several: the hosts disagree (see CV01)
    if "nccl" not in out and t.fr is not None and not t.fr.dumps.is_empty():
        libs = t.fr.dumps.filter(pl.col("comm_lib_version").fill_null("") != "")["comm_lib_version"]
        if libs.len():
            out["nccl"] = str(libs[0])
    return out


def caveats(facts: Analysis) -> tuple[str, ...]:
    """What the evidence cannot show: ranks whose flight-recorder dumps are missing, P2P entries not aligned...;
    and, for a job that ran several attempts (restarts, requeues), which attempt failed how."""
    attempts = attempts_caveat(facts.identity)
    return (() if facts.fr is None else tuple(facts.fr.notes)) + ((attempts,) if attempts else ())


def cross_check(facts: Analysis, primary: Finding) -> str | None:
    """Do the logs and the flight-recorder dumps name the same culprit? Say so either way."""
    fa = facts.fr
    if fa is None:
        return None
    fr, logs = set(fa.culprit_ranks), set(primary.culprit_ranks)
    if not fr:
        return (
            "The flight-recorder dumps show every rank in step (no missing, mismatched or stuck collective): "
            "they may have been written before the failure, or the failure is outside collectives."
        )
    if primary.rule.startswith("FR") or fr == logs:
        return f"Flight-recorder dumps agree: {fa.summary}."
    if not logs:
        return f"Flight-recorder dumps name {ranks_text(sorted(fr))} ({fa.summary}); the logs name no rank."
    return (
        f"Logs and dumps disagree: the logs point at {ranks_text(sorted(logs))}, the dumps at "
        f"{ranks_text(sorted(fr))} ({fa.summary})."
    )


def culprit_hosts(primary: Finding, rows: tuple[dict, ...]) -> tuple[str, ...]:
    """Hosts of the culprit ranks, and the hosts a hardware or network finding names itself."""
    culprits = set(primary.culprit_ranks)
    hosts = {r["host"] for r in rows if r["rank"] in culprits and r.get("host")}
    return tuple(sorted(hosts | set(primary.named_hosts)))


_NUMBERS = re.compile(r"\d+")


def fold_evidence(
    evidence: list[Evidence], envelopes: str, culprits: tuple[int, ...], limit: int
) -> tuple[Evidence, ...]:
    """Each message quoted once: copies of a line (console.log and a rank's own log, four ranks printing the same
    timeout) fold into the first, whose `also` lists the others. Lines fold when they read the same without their
    envelopes and with numbers masked - but a culprit's line never folds with a waiting rank's (it may differ
    from theirs in exactly the number that matters)."""
    groups: dict[tuple[str, bool | None], list[Evidence]] = {}
    for e in evidence:
        text = _NUMBERS.sub("#", strip_prefix(e.text, envelopes))
        role = None if e.rank is None else e.rank in culprits
        key = next((k for k in groups if k[0] == text and (role is None or k[1] is None or k[1] == role)), None)
        groups.setdefault(key or (text, role), []).append(e)
    out = []
    for first, *copies in list(groups.values())[:limit]:
        also = tuple(f"{c.ref} (rank {c.rank})" if c.rank is not None else c.ref for c in copies)
        out.append(replace(first, also=first.also + also) if also else first)
    return tuple(out)
