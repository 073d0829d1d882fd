"""What happened, in time order: the report's first section after the verdict.

From the tables, the root cause and the per-rank rows: what the culprit last did and why it stopped, who entered
which collective and waited from when (the firing time minus the timeout), when the watchdogs fired and how long
the culprit had been away by then, who failed in turn, and how each rank ended (torchrun's failure summary).
Ranks with the same step at the same time are one `Moment` ("ranks 1–3 ..."); hosts and pids are named on a
culprit's first mention. Times are the logs' own clocks (no skew correction); a derived time is marked `approx`.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import polars as pl

from ncclpm.analysis import Analysis
from ncclpm.analysis.activity import FinishedWork
from ncclpm.model import Finding, Moment, rank_span
from ncclpm.model import said as quote_line
from ncclpm.tables import Tables
from ncclpm.tables.kinds import K
from ncclpm.util.clamp import shift, timedelta_ms
from ncclpm.util.durations import human_duration
from ncclpm.util.frames import filtered

QUOTE = 140
MAX_MOMENTS = 10


def said(t: Tables, text: str | None, limit: int = QUOTE) -> str:
    return quote_line(text, t.line_prefix, limit)


def _ref(source: str | None, line: int | None) -> str:
    return "" if source is None else source if line is None else f"{source}:{line}"


def who(ranks: list[int] | tuple[int, ...], rows: dict[int, dict[str, Any]], detail: bool = True) -> str:
    """`rank 0 (gpu-node-17, pid 877)`, `ranks 1–3 (gpu-node-17)`: hosts and pids where the logs show them."""
    text = rank_span(ranks)
    if not detail:
        return text
    hosts = sorted({h for r in ranks if (h := (rows.get(r) or {}).get("host"))})
    if len(ranks) == 1 and ranks[0] in rows:
        row = rows[ranks[0]]
        bits = [row.get("host"), f"pid {row['pid']}" if row.get("pid") is not None else None]
        bits += [f"cuda:{row['cuda_dev']}" if row.get("cuda_dev") is not None else None]
        bits = [b for b in bits if b]
        return f"{text} ({', '.join(bits)})" if bits else text
    return f"{text} ({hosts[0]})" if len(hosts) == 1 else text


def _moment(
    rows: dict[int, dict], ts: datetime | None, text: str, ranks: Any, refs: Any, kind: str, approx: bool = False
) -> Moment:
    ranks = tuple(sorted(r for r in ranks if r is not None))
    hosts = tuple(sorted({h for r in ranks if (h := (rows.get(r) or {}).get("host"))}))
    return Moment(ts, text, ranks, hosts, tuple(r for r in refs if r), approx, kind)


def _line(t: Tables, source: str, line: int | None) -> dict[str, Any] | None:
    """The event a quoted line is (time, kind, severity), or None for a line that is no event (a dump entry)."""
    if line is None:
        return None
    hit = t.events.filter((pl.col("source") == source) & (pl.col("line") == line))
    return None if hit.is_empty() else hit.sort("ts", nulls_last=True).row(0, named=True)


def _verb(event: dict[str, Any] | None) -> str:
    if event is None:
        return "shows"
    if event["kind"] in (K.activity, K.progress, K.data_wait):
        return "last logged"
    return "failed:" if event["severity"] == "error" else "reported"


def _nothing_more(t: Tables, row: dict[str, Any], text: str | None) -> bool:
    """`text` is the rank's last line across every file, proven so (no line of the rank left unplaced)."""
    return bool(row.get("last_line_proven")) and text is not None and said(t, row.get("last_line")) == said(t, text)


def _culprit_moments(t: Tables, primary: Finding, rows: dict[int, dict], waited: bool) -> list[Moment]:
    out: list[Moment] = []
    ends = {_ref(s, n) for s, *lines in t.elastic.select("source", "line", "exit_line").iter_rows() for n in lines}
    for rank in primary.culprit_ranks[:4]:
        row = rows.get(rank, {})
        reason = next((e for e in primary.evidence if e.rank == rank and e.ref not in ends), None)
        event = _line(t, reason.file, reason.line) if reason is not None else None
        # what it did last: its last line across its files when it did not fail (after an error, its last lines are
        # the error's own), else its last activity
        # its last activity across its files in time order; its last line too when it logged more after it and
        # did not fail (after an error, the lines that follow are the error's own)
        last, last_ts, last_ref = row.get("last_activity"), row.get("last_activity_ts"), row.get("last_activity_ref")
        if last and (reason is None or said(t, reason.text) != said(t, last)):
            refs = [last_ref]
            after = row.get("last_line")
            if after and not row.get("first_error") and said(t, after) != said(t, last):
                last, refs = after, [last_ref, row.get("last_line_ref")]  # it went on: `A` then `B`
                text = f"{who([rank], rows)} last logged `{said(t, row['last_activity'])}` then `{said(t, after)}`"
            else:
                text = f"{who([rank], rows)} last logged `{said(t, last)}`"
            if waited and not row.get("timed_out") and _nothing_more(t, row, last):
                text += " and nothing more"
            out.append(_moment(rows, last_ts, text, [rank], refs, "last_activity"))
        if reason is not None and not row.get("timed_out"):
            ts = event["ts"] if event is not None else None
            whose = who([rank], rows, detail=not out)
            if event is None and reason.line is None:  # a whole-file source: a flight-recorder dump
                whose += f"'s {reason.file.rsplit('/', 1)[-1]}"
            verb, refs = _verb(event), [reason.ref]
            text = f"{whose} {verb} `{said(t, reason.text)}`"
            after = row.get("last_line")
            if verb == "last logged" and after and said(t, after) != said(t, reason.text):
                if row.get("first_error"):
                    text = f"{whose} logged `{said(t, reason.text)}`"  # the lines after it are its failure's
                else:  # it went on: `A` then `B`, its last line
                    text += f" then `{said(t, after)}`"
                    refs.append(row.get("last_line_ref"))
                    reason_last = after
            else:
                reason_last = reason.text
            if waited and verb == "last logged" and not row.get("first_error") and _nothing_more(t, row, reason_last):
                text += " and nothing more"
            kind = "error" if verb != "last logged" else "last_activity"
            out.append(_moment(rows, ts, text, [rank], refs, kind))
    return out


def _timeout_groups(t: Tables) -> list[dict[str, Any]]:
    to = filtered(t.kinds(K.collective_timeout), pl.col("rank").is_not_null())
    if to.is_empty():
        return []
    first = to.sort("ts", "source", "line", nulls_last=True).group_by("rank", maintain_order=True).first()
    keys = ["op", "seq", "numel_in", "numel_out", "timeout_ms"]
    groups = first.group_by(keys, maintain_order=True).agg(
        pl.col("rank").sort(),
        pl.col("ts").min().alias("first"),
        pl.col("ts").max().alias("last"),
        pl.col("source").first(),
        pl.col("line").first(),
        pl.col("text").first(),
    )
    return list(groups.sort("first", nulls_last=True).iter_rows(named=True))


def _what(g: dict[str, Any], failing: dict[str, Any] | None, sites: pl.DataFrame) -> str:
    if g["op"] is None and failing and failing.get("source") == "flight recorder":
        g = {**g, "op": failing.get("op"), "seq": failing.get("seq")}  # gloo names no op: the dumps do
    op = g["op"] or "a collective"
    seq = f" #{g['seq']}" if g["seq"] is not None else ""
    numel = ""
    # torch 2.5+ printed the collective's stack: its call, not its shape, says whether it was a barrier
    site = sites.filter(pl.col("rank").is_in(g["rank"])).head(1)
    if g["numel_in"] is not None:
        barrier = g["op"] == "ALLREDUCE" and g["numel_in"] == 1 and site.is_empty()
        numel = f" (NumelIn={g['numel_in']}" + (", a barrier)" if barrier else ")")
    if not site.is_empty():
        row = site.row(0, named=True)
        numel += f", issued by `{row['op']}`" + (f" from `{row['func']}` ({row['site']})" if row["site"] else "")
    return f"{op}{seq}{numel}"


def _fired(g: dict[str, Any], wait: timedelta | None) -> str:
    ranks = g["rank"]
    if "watchdog" in (g["text"] or "").lower():
        text = f"the watchdog{'s' if len(ranks) > 1 else ''} of {rank_span(ranks)} fired"
    else:
        text = f"{rank_span(ranks)} timed out"
    text += f" after {human_duration(wait.total_seconds())}" if wait is not None else ""
    spread = g["last"] - g["first"] if g["last"] is not None else timedelta(0)
    return text + (
        f", the last {human_duration(spread.total_seconds())} later" if spread > timedelta(seconds=1) else ""
    )


AWAY_CATEGORIES = ("slow_rank_work", "dataloader_hang")  # verdicts that say the culprit never entered the collective


def _inside(row: dict[str, Any], seq: int | None, start: datetime | None, fired: datetime | None) -> bool:
    """The rank was in the collective when it failed: its watchdog had enqueued it, or it failed while the others
    waited in it."""
    if seq is not None and row.get("last_enqueued") is not None and row["last_enqueued"] >= seq:
        return True
    err = row.get("first_error_ts")
    return isinstance(err, datetime) and start is not None and fired is not None and start <= err <= fired


def _wait_moments(
    t: Tables, primary: Finding, rows: dict[int, dict], failing: dict | None, sites: pl.DataFrame
) -> list[Moment]:
    out: list[Moment] = []
    groups = _timeout_groups(t)
    joined = {r for g in groups for r in g["rank"]}
    for g in groups:
        wait = timedelta_ms(g["timeout_ms"]) if g["timeout_ms"] else None
        start = shift(g["first"], -wait) if wait is not None and g["first"] is not None else None
        others = [r for r in sorted(set(primary.culprit_ranks) - joined) if r in rows or not rows]
        inside = [r for r in others if _inside(rows.get(r, {}), g["seq"], start, g["first"])]
        rest = [r for r in others if r not in inside]
        seen = [rows[r].get("last_activity_ts") for r in rest if r in rows]
        last_seen = [ts for ts in seen if isinstance(ts, datetime)]
        # "never joined" is said of a rank the verdict says was elsewhere, or whose last line is before the wait
        away = [
            r
            for r in rest
            if str(primary.category) in AWAY_CATEGORIES
            or (isinstance(rows.get(r, {}).get("last_activity_ts"), datetime) and start is not None
                and rows[r]["last_activity_ts"] < start)
        ]  # fmt: skip
        waited = [*(f"{rank_span(away)}, which never joined" for _ in away[:1])]
        waited += [rank_span(r) for r in ([x for x in rest if x not in away],) if r and rank_span(r) != "no rank"]
        waited += [f"{rank_span(inside)}, which failed inside it" for _ in inside[:1]]
        text = f"{who(g['rank'], rows)} entered {_what(g, failing, sites)} and waited"
        text += f" for {' and '.join(waited)}" if waited else ""
        out.append(_moment(rows, start, text, g["rank"], [], "wait", approx=True))
        if g["first"] is None:
            continue
        away_text = ""
        since = min(last_seen) if last_seen else start
        if away and since is not None and g["first"] >= since:
            busy = human_duration((g["first"] - since).total_seconds())
            away_text = f": {rank_span(away)} had been away for {'' if last_seen else 'at least '}{busy}"
        refs = [_ref(g["source"], g["line"])]
        out.append(_moment(rows, g["first"], _fired(g, wait) + away_text, g["rank"], refs, "timeout"))
    return out


def _victim_errors(t: Tables, rows: dict[int, dict], culprits: set[int]) -> list[Moment]:
    """Waiting ranks that failed without a timeout of their own (a peer closed the connection, an abort)."""
    groups: dict[str, list[dict]] = {}
    for r in rows.values():
        if r["role"] == "waiting" and not r["timed_out"] and r.get("first_error") and r["rank"] not in culprits:
            groups.setdefault(said(t, r["first_error"], 100), []).append(r)
    out = []
    for text, members in groups.items():
        ranks = [m["rank"] for m in members]
        ts = min((m["first_error_ts"] for m in members if isinstance(m.get("first_error_ts"), datetime)), default=None)
        refs = [m.get("first_error_ref") for m in members[:1]]
        out.append(_moment(rows, ts, f"{who(ranks, rows)} failed in turn: `{text}`", ranks, refs, "error"))
    return out


def _exit_text(code: int | None, signal: str | None) -> str:
    if signal:
        return f"{signal} ({code})" if code is not None else signal
    return f"exit code {code}"


def _end_moments(t: Tables, rows: dict[int, dict], culprits: set[int]) -> list[Moment]:
    """How each rank ended, from torchrun's failure summary: one moment per second, one clause per exit kind."""
    ended = pl.col("exit_code").is_not_null() | pl.col("signal").is_not_null()
    ends = filtered(t.elastic, pl.col("rank").is_not_null() & ended)
    if ends.is_empty():
        return []
    ends = ends.sort("ts", "rank", nulls_last=True).unique("rank", keep="first", maintain_order=True)
    out = []
    for _, at in ends.group_by(pl.col("ts").dt.truncate("1s"), maintain_order=True):
        parts, ranks = [], []
        for (code, signal), same in at.group_by("exit_code", "signal", maintain_order=True):
            members = sorted(same["rank"].to_list())
            ranks += members
            root = same.filter(pl.col("root_cause"))["rank"].to_list()
            note = ""
            if root and culprits and not set(root) & culprits:  # (it only saw that exit first)
                waiting = all(rows.get(r, {}).get("role") == "waiting" for r in root)
                what = "a waiting rank" if waiting else "the first exit it saw"
                note = f' (torchrun\'s "first observed failure": {what}, not the cause)'
            parts.append(f"{rank_span(members)} ended with {_exit_text(code, signal)}{note}")
        ref = _ref(at["source"][0], at["exit_line"][0] if at["exit_line"][0] is not None else at["line"][0])
        out.append(_moment(rows, at["ts"][0], "; ".join(parts), ranks, [ref], "end"))
    return out


def _reason_moment(t: Tables, primary: Finding, rows: dict[int, dict], taken: set[str]) -> list[Moment]:
    """The root cause's first line, when no moment above quotes it (a kernel Xid, a Slurm cancellation...)."""
    for e in primary.evidence[:1]:
        if e.ref in taken or e.rank in primary.culprit_ranks:
            return []
        event = _line(t, e.file, e.line)
        # a line with no rank: the host it came from says more than the file's name (`a process on node12`)
        host = event["host"] if event is not None else None
        whom = rank_span([e.rank]) if e.rank is not None else f"a process on {host}" if host else e.file
        if event is None and e.line is None and e.rank is not None:
            whom += f"'s {e.file.rsplit('/', 1)[-1]}"
        text = f"{whom} {_verb(event)} `{said(t, e.text)}`"
        return [_moment(rows, event["ts"] if event else None, text, [e.rank], [e.ref], "error")]
    return []


def _key(ts: datetime) -> datetime:
    """Sort key of a time: a whole-second stamp (torchrun's summary, error files, c10's logger) means "within that
    second", so it sorts after the finer stamps of the same second."""
    ts = ts.replace(tzinfo=None)
    return shift(ts, timedelta(microseconds=999_999)) if ts.microsecond == 0 else ts


def _order(moments: list[Moment]) -> list[Moment]:
    """By time; an undated moment keeps its place right after the moment built before it (logical order)."""
    keyed, last = [], datetime.min
    for i, m in enumerate(moments):
        if m.ts is not None:
            last = _key(m.ts)
        keyed.append((last, m.ts is None, i, m))
    return [k[-1] for k in sorted(keyed, key=lambda k: k[:3])]


def _finished_moment(t: Tables, done: FinishedWork | None, rows: dict[int, dict]) -> list[Moment]:
    """The work was done before the job failed: said first, with the last step reached."""
    if done is None:
        return []
    whom = who(list(done.ranks), rows, detail=False) if done.ranks else "the job"
    step = f" after `{said(t, done.last_step)}`" if done.last_step else ""
    text = f"{whom} finished {'its' if len(done.ranks) <= 1 else 'their'} work: `{said(t, done.text)}`{step}"
    refs = [r for r in (done.last_step_ref, done.ref) if r]
    return [_moment(rows, done.ts, text, done.ranks, refs, "finished")]


def build_story(
    facts: Analysis, primary: Finding, rank_rows: tuple[dict[str, Any], ...], failing: dict[str, Any] | None = None
) -> tuple[Moment, ...]:
    t = facts.t
    rows = {r["rank"]: r for r in rank_rows}
    culprits = set(primary.culprit_ranks)
    waits = _wait_moments(t, primary, rows, failing, facts.call_sites)
    moments = _culprit_moments(t, primary, rows, waited=bool(waits)) + waits
    moments += _victim_errors(t, rows, culprits)
    taken = {ref for m in moments for ref in m.refs}
    moments = _finished_moment(t, facts.finished_work, rows) + _reason_moment(t, primary, rows, taken) + moments
    moments += _end_moments(t, rows, culprits)
    return tuple(_order(moments)[:MAX_MOMENTS])
