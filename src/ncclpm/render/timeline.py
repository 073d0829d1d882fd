"""Geometry of the per-rank timeline picture in the HTML report (the template only draws what this computes).

Input: a `Diagnosis` - its per-rank rows (`first_error_ts`, `last_activity_ts`, `timed_out`, `timeout_op/seq`,
`exit_code`, `signal`, `role`) and its failing collective (`timeout_ms`). Output: a `Timeline` of rows with
marks placed in pixels: time on x, one row per rank (healthy ranks with the same story folded into one band
with `render/rankview.py`, so 8 and 1024 ranks both read), the culprit marked.

Marks: last activity (progress, checkpoint...), first error, the timeout firing (a first error that is the
timeout of a rank that timed out: NCCL's watchdog, or gloo's own receive timeout - labelled as what it is), the
wait before it (timeout_ms back from the firing: the rank was blocked in the failing collective), the culprit's
busy span (from its last dated activity to its own failure or to when the others gave up), and how the rank
exited (a column to the right). A culprit whose collective differs from the others' (a mismatch) has the
difference written on its row. A folded band shows the spread (earliest to latest) of each mark over its ranks.

Known limits: timestamps of different hosts are compared as given (no clock-skew correction); logs without
timestamps give an "in order, not to scale" picture (`scaled=False`); a rank whose first error comes before
its timeout gets its wait drawn back from that error (the only time known).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from ncclpm.model import Diagnosis
from ncclpm.render.rankview import RankGroup, rank_groups
from ncclpm.util.clamp import shift, timedelta_ms
from ncclpm.util.durations import duration_text, human_duration

LABEL_W, PLOT_W, EXIT_W = 230, 640, 130
LABEL_CHARS = 17  # monospace 11.5px in the label column, before the role tag
ROW_H, TOP, BOTTOM = 22, 66, 34
MAX_ROWS = 40
TIMEOUT_TEXT = re.compile(r"timed? ?out|watchdog", re.IGNORECASE)
STEPS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600)
STEPS += (43200, 86400, 172800, 604800)  # tick steps in seconds
ORDINAL = {"activity": 0.12, "wait": 0.38, "error": 0.62, "timeout": 0.86, "exit": 0.96}


@dataclass(frozen=True)
class Mark:
    """One thing that happened on a row: a point at `x`, or a spread/span from `x` to `x2`."""

    kind: str  # "activity" | "error" | "timeout" | "wait" | "busy" | "exit"
    x: float
    x2: float | None
    title: str  # hover text (SVG <title>): what, when, which line


@dataclass(frozen=True)
class Row:
    label: str  # shortened to fit the column; `full_label` is the hover text
    full_label: str
    tag: str  # "culprit", "waiting", "1021 waiting", "12 ranks"...
    n_ranks: int
    role: str  # "culprit" | "waiting" | ""
    y: float
    marks: tuple[Mark, ...]
    exit_text: str
    note: str  # short text drawn next to the row's last mark (culprit's first error)
    note_x: float
    note_anchor: str  # "start" | "end"
    dated: bool


@dataclass(frozen=True)
class Timeline:
    rows: tuple[Row, ...]
    ticks: tuple[tuple[float, str], ...]
    scaled: bool
    width: int
    height: int
    plot_x: int
    plot_w: int
    exit_x: int
    title: str
    caption: str
    fire_x: float | None  # first watchdog firing, drawn as a vertical line across the rows
    fire_label: str
    legend: tuple[str, ...] = field(default=())


def _members(d: Diagnosis, groups: list[RankGroup]) -> list[list[dict[str, Any]]]:
    by_rank = {r["rank"]: r for r in d.ranks}
    return [[by_rank[r] for r in g.ranks if r in by_rank] or [g.row] for g in groups]


def _cap(groups: list[RankGroup], members: list[list[dict]]) -> tuple[list[RankGroup], list[list[dict]]]:
    """At most MAX_ROWS rows: culprits always stay; the largest leftover bands become one 'other ranks' row."""
    if len(groups) <= MAX_ROWS:
        return groups, members
    order = sorted(range(len(groups)), key=lambda i: (groups[i].row["role"] != "culprit", -len(groups[i].ranks)))
    keep = sorted(order[: MAX_ROWS - 1])
    rest = [i for i in range(len(groups)) if i not in keep]
    other_ranks = tuple(r for i in rest for r in groups[i].ranks)
    other = RankGroup(f"{len(other_ranks)} other ranks", other_ranks, members[rest[0]][0])
    return [*(groups[i] for i in keep), other], [*(members[i] for i in keep), [m for i in rest for m in members[i]]]


def _wait_start(row: dict[str, Any], timeout_ms: int | None) -> datetime | None:
    ts = _error_ts(row)
    timeout_ms = row.get("timeout_ms") or timeout_ms  # the rank's own (gloo names no collective, only its timeout)
    if not (row.get("timed_out") and timeout_ms and ts is not None):
        return None
    wait = timedelta_ms(timeout_ms)
    return None if wait is None else shift(ts, -wait)


def _fired(row: dict[str, Any]) -> str:
    """What fired: NCCL's watchdog names itself; gloo and the store time out on their own."""
    return "watchdog timeout" if "watchdog" in (row.get("first_error") or "").lower() else "timeout"


def _differs(rep: dict[str, Any], d: Diagnosis) -> str:
    """For a culprit that timed out in another collective than the waiting ranks: what differs (`NumelIn=1, the
    others 14845952`)."""
    others = [r for r in d.ranks if r["role"] == "waiting" and r.get("timed_out")]
    if rep.get("role") != "culprit" or not rep.get("timed_out") or not others:
        return ""
    keys = (("timeout_op", "op "), ("timeout_seq", "#"), ("timeout_numel_in", "NumelIn="))
    common = Counter(tuple(o.get(k) for k, _ in keys) for o in others).most_common(1)[0][0]
    diffs = [
        (f"{label}{rep.get(k)}", f"{label}{c}") for (k, label), c in zip(keys, common, strict=True) if rep.get(k) != c
    ]
    return "; ".join(f"{mine}, the others {theirs}" for mine, theirs in diffs)


def _busy(members: list[dict], sc: _Scale, fire: datetime | None, span: float) -> Mark | None:
    """The culprit's busy span: from its last dated activity to its own first error, or to when the others gave up."""
    rep = members[0]
    starts = _times(members, "last_activity_ts")
    if rep.get("role") != "culprit" or rep.get("timed_out") or not starts:
        return None
    errors = [e for e in _times(members, "first_error_ts") if e > starts[-1]]
    end = errors[0] if errors else fire
    if end is None or end <= starts[-1]:
        return None
    until = "its own failure" if errors else "the others timed out"
    what = (rep.get("last_activity") or "")[:100]
    took = human_duration((end - starts[-1]).total_seconds())
    return Mark(
        "busy", sc.x(starts[-1]), sc.x(end), f"busy from {_fmt(starts[-1], span)} for {took} until {until}: {what}"
    )


def _error_kind(row: dict[str, Any]) -> str:
    return "timeout" if row.get("timed_out") and TIMEOUT_TEXT.search(row.get("first_error") or "") else "error"


def _error_ts(m: dict[str, Any]) -> datetime | None:
    """First-error time; a whole-second stamp (torchelastic error files) is placed no earlier than a
    last-activity line of the same second, which it cannot precede."""
    ts, act = m.get("first_error_ts"), m.get("last_activity_ts")
    if not isinstance(ts, datetime):
        return None
    if ts.microsecond == 0 and isinstance(act, datetime) and ts <= act < shift(ts, timedelta(seconds=1)):
        return act
    return ts


def _times(members: list[dict], key: str) -> list[datetime]:
    if key == "first_error_ts":
        return sorted(t for t in map(_error_ts, members) if t is not None)
    return sorted(m[key] for m in members if isinstance(m.get(key), datetime))


def _fmt(t: datetime, span: float) -> str:
    if span >= 86400 and t.year > 1970:
        return t.strftime("%m-%d %H:%M")
    return t.strftime("%H:%M:%S") if span >= 5 else t.strftime("%H:%M:%S.%f")[:-3]


def _ticks(t0: datetime, t1: datetime) -> list[tuple[datetime, float]]:
    span = max((t1 - t0).total_seconds(), 1e-3)
    step = next((s for s in STEPS if span / s <= 7), STEPS[-1])
    epoch = datetime(t0.year, t0.month, t0.day, tzinfo=t0.tzinfo)
    first = (t0 - epoch).total_seconds() // step * step + step
    out = []
    for i in range(64):
        k = round(first + i * step, 3)
        if k > (t1 - epoch).total_seconds():
            break
        out.append((shift(epoch, timedelta(seconds=k)), span))
    return out


def _exit_text(members: list[dict]) -> str:
    exits = {
        (m.get("exit_code"), m.get("signal")) for m in members if m.get("exit_code") is not None or m.get("signal")
    }
    if not exits:
        return ""
    if len(exits) > 1:
        return f"{len(exits)} exit kinds"
    code, sig = exits.pop()
    return " ".join(str(x) for x in (code if code is not None else "", sig or "") if x != "").strip()


class _Scale:
    def __init__(self, t0: datetime | None, t1: datetime | None, x0: int, w: int) -> None:
        self.t0, self.t1, self.x0, self.w = t0, t1, x0, w
        self.scaled = t0 is not None and t1 is not None and t1 > t0

    def x(self, t: datetime) -> float:
        assert self.t0 is not None and self.t1 is not None
        span = (self.t1 - self.t0).total_seconds()
        return round(self.x0 + 8 + (self.w - 16) * (t - self.t0).total_seconds() / span, 1)

    def ordinal(self, kind: str) -> float:
        return round(self.x0 + self.w * ORDINAL[kind], 1)


def _point_or_spread(kind: str, ts: list[datetime], sc: _Scale, what: str, span: float) -> Mark:
    if len(ts) > 1 and ts[0] != ts[-1]:
        title = f"{what}: {_fmt(ts[0], span)} - {_fmt(ts[-1], span)} ({len(ts)} ranks)"
        return Mark(kind, sc.x(ts[0]), sc.x(ts[-1]), title)
    many = f" ({len(ts)} ranks)" if len(ts) > 1 else ""
    return Mark(kind, sc.x(ts[0]), None, f"{what}: {_fmt(ts[0], span)}{many}")


def _scaled_marks(
    members: list[dict], sc: _Scale, timeout_ms: int | None, span: float, fire: datetime | None = None
) -> list[Mark]:
    rep = members[0]
    busy = _busy(members, sc, fire, span)
    marks: list[Mark] = [busy] if busy is not None else []
    waits = sorted(w for w in (_wait_start(m, timeout_ms) for m in members) if w is not None)
    fires = _times([m for m in members if m.get("timed_out")], "first_error_ts")
    if waits and fires:
        op = rep.get("timeout_op") or "the collective"
        seq = f" #{rep['timeout_seq']}" if rep.get("timeout_seq") is not None else ""
        marks.append(
            Mark(
                "wait",
                sc.x(waits[0]),
                sc.x(fires[-1]),
                f"blocked in {op}{seq} from about {_fmt(waits[0], span)} until its {_fired(rep)} fired",
            )
        )
    act = _times(members, "last_activity_ts")
    if act:
        marks.append(
            _point_or_spread("activity", act, sc, f"last activity: {(rep.get('last_activity') or '')[:120]}", span)
        )
    err = _times(members, "first_error_ts")
    if err:
        kind = _error_kind(rep)
        what = _fired(rep) if kind == "timeout" else f"first error: {(rep.get('first_error') or '')[:160]}"
        marks.append(_point_or_spread(kind, err, sc, what, span))
    ended = _times(members, "exit_ts")
    if ended:  # each rank's exit where it happened, not only in the exit column
        marks.append(_point_or_spread("exit", ended, sc, f"exited: {_exit_text(members) or 'ended'}", span))
    return marks


def _ordinal_marks(rep: dict[str, Any], sc: _Scale) -> list[Mark]:
    marks: list[Mark] = []
    if rep.get("last_activity"):
        marks.append(Mark("activity", sc.ordinal("activity"), None, f"last activity: {rep['last_activity'][:120]}"))
    if rep.get("timed_out"):
        op = rep.get("timeout_op") or "a collective"
        marks.append(Mark("wait", sc.ordinal("wait") - 40, sc.ordinal("timeout"), f"blocked in {op}"))
    if rep.get("first_error"):
        kind = _error_kind(rep)
        marks.append(Mark(kind, sc.ordinal(kind), None, f"first error: {rep['first_error'][:160]}"))
    elif rep.get("timed_out"):
        marks.append(Mark("timeout", sc.ordinal("timeout"), None, _fired(rep)))
    return marks


def _note(
    rep: dict[str, Any], marks: list[Mark], sc: _Scale, dated: bool, clean: Callable[[str], str], differs: str = ""
) -> tuple[str, float, str]:
    """Text on the row: the culprit's first error after its last mark when there is room; for a rank with no
    dated line in a dated picture, what it last said (its time is unknown)."""
    if sc.scaled and not dated:
        said = rep.get("first_error") if rep.get("role") == "culprit" else None
        said = said or rep.get("last_activity") or rep.get("first_error")
        text = f"time unknown - last said: {clean(said)}" if said else "no timestamped line"
        x = sc.x0 + 12
    elif rep.get("role") == "culprit" and (differs or rep.get("first_error") or rep.get("last_activity")) and marks:
        # what made it the culprit: how its collective differs, its error, or - when that error is only its own
        # timeout - what it was doing
        own_timeout = _error_kind(rep) == "timeout" and rep.get("last_activity")
        text = rep["last_activity"] if own_timeout or not rep.get("first_error") else rep["first_error"]
        x = max((m.x2 or m.x) for m in marks) + 10
        if differs:  # the reason goes on the bar itself: a mismatched rank's bar looks like everyone else's
            text, x = differs, min(m.x for m in marks) + 10
    else:
        return "", 0.0, "start"
    room = int((sc.x0 + sc.w - x) / 6.2)
    anchor = "start"
    if room < 40 and sc.scaled and dated:  # little room after the marks: write it before them instead
        left = min(m.x for m in marks) - 10
        if (left - sc.x0) / 6.2 > room:
            x, room, anchor = left, int((left - sc.x0 - 8) / 6.2), "end"
    if room < 12:
        return "", 0.0, anchor
    text = " ".join(clean(text).split())
    return (text if len(text) <= room else text[: room - 1] + "…"), x, anchor


def _short_label(g: RankGroup) -> str:
    span = g.label.split(" (")[0] if len(g.ranks) > 1 else g.label
    return span if len(span) <= LABEL_CHARS else span[: LABEL_CHARS - 1] + "…"


def _tag(g: RankGroup, role: str) -> str:
    n = len(g.ranks)
    if n == 1:
        return role
    return f"{n} {role}" if role else f"{n} ranks"


def _title(d: Diagnosis) -> str:
    fc = d.failing_collective
    if not fc:
        return "Per-rank timeline"
    what = (fc.get("op") or "a collective") + (f" #{fc['seq']}" if fc.get("seq") is not None else "")
    timeout = f" (timeout {duration_text(fc['timeout_ms'])})" if fc.get("timeout_ms") else ""
    return f"Per-rank timeline - the job stopped in {what}{timeout}"


def build_timeline(d: Diagnosis) -> Timeline | None:
    """The picture's geometry, or None when no rank is known (nothing to draw)."""
    if not d.ranks:
        return None
    groups = rank_groups(d)
    groups, members = _cap(groups, _members(d, groups))
    timeout_ms = (d.failing_collective or {}).get("timeout_ms")
    stamps = [
        t
        for ms in members
        for m in ms
        for t in (m.get("first_error_ts"), m.get("last_activity_ts"), _wait_start(m, timeout_ms), m.get("exit_ts"))
        if isinstance(t, datetime)
    ]
    sc = _Scale(min(stamps, default=None), max(stamps, default=None), LABEL_W, PLOT_W)
    span = (sc.t1 - sc.t0).total_seconds() if sc.scaled else 0.0  # type: ignore[operator]
    fires = sorted(
        m["first_error_ts"]
        for ms in members
        for m in ms
        if m.get("timed_out") and isinstance(m.get("first_error_ts"), datetime)
    )
    rows = []
    for i, (g, ms) in enumerate(zip(groups, members, strict=True)):
        rep = {**ms[0], "role": g.row["role"]}
        dated = any(isinstance(m.get(k), datetime) for m in ms for k in ("first_error_ts", "last_activity_ts"))
        marks = (
            _scaled_marks(ms, sc, timeout_ms, span, fires[0] if fires else None)
            if sc.scaled and dated
            else (_ordinal_marks(rep, sc) if not sc.scaled else [])
        )
        note, note_x, anchor = _note(rep, marks, sc, dated, d.clean, _differs(rep, d) if len(g.ranks) == 1 else "")
        rows.append(
            Row(
                _short_label(g),
                g.label,
                _tag(g, rep["role"]),
                len(g.ranks),
                rep["role"],
                TOP + i * ROW_H,
                tuple(marks),
                _exit_text(ms),
                note,
                note_x,
                anchor,
                dated,
            )
        )
    fire_x = sc.x(fires[0]) if sc.scaled and fires else None
    ticks = tuple((sc.x(t), _fmt(t, s)) for t, s in _ticks(sc.t0, sc.t1)) if sc.scaled else ()  # type: ignore[arg-type]
    caption = (
        "Time runs left to right; hover a mark for its line."
        if sc.scaled
        else "The logs carry no usable timestamps: events are shown in order, not to scale."
    )
    if sc.scaled and sc.t0 is not None and sc.t0.year > 1970:
        caption = f"{sc.t0:%Y-%m-%d}. " + caption
    return Timeline(
        rows=tuple(rows),
        ticks=ticks,
        scaled=sc.scaled,
        width=LABEL_W + PLOT_W + EXIT_W,
        height=TOP + len(rows) * ROW_H + BOTTOM,
        plot_x=LABEL_W,
        plot_w=PLOT_W,
        exit_x=LABEL_W + PLOT_W + 12,
        title=_title(d),
        caption=caption,
        fire_x=fire_x,
        fire_label=f"first {_fired(next(m for ms in members for m in ms if m.get('timed_out')))} {_fmt(fires[0], span)}"
        if fire_x is not None
        else "",
    )
