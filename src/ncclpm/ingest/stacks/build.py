"""The `stacks` table: one row per frame of every thread stack found in the job.

Sources: stack-dump files (`Source.kind == "stack"`: py-spy text and `--json`, faulthandler, gdb, torch's
debug-server dumps), faulthandler blocks inside the logs (read from the kept lines, so they carry the line's
rank), and the frames recorded with each flight-recorder entry (where a rank entered its last collective).

Which rank a dumped process is: the debug server's `=== Rank N ===` section, the log line's rank, the file
name (`rank3.txt`, `attempt_0/3/...`), then a pid → rank map built from the job's other files (torchrun's
failure summary and `local_rank: N (pid: P)` lines, worker log lines that carry both, NCCL `host:pid` lines,
ncclras status lines), then a `rank` local in a py-spy `--locals` dump. A process nothing maps keeps a null
rank and is named by host:pid.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import polars as pl

from ncclpm.ingest.stacks.frames import frame_rules
from ncclpm.ingest.stacks.parse import LIMITS, NOT_A_COUNT, Block, Frame, parse_pyspy_json, parse_stack_lines
from ncclpm.ingest.unwrap import NO_ENVELOPE, unwrap_lines
from ncclpm.sources.discover import Job, SourceKind
from ncclpm.sources.line_tags import without_line_tags
from ncclpm.sources.stack_sniff import stack_format
from ncclpm.util.clamp import MAX_RANK

PidRanks = dict[tuple[str | None, int], int]  # (host, pid) -> global rank: `pid_rank_map`

STACKS_SCHEMA = pl.Schema(
    {
        "source": pl.String(),
        "line": pl.Int64(),  # where the frame (or, for JSON and flight-recorder frames, the dump) is
        "dump": pl.Int32(),  # block number within the job: one thread of one process as one tool printed it
        "format": pl.String(),
        "rank": pl.Int32(),
        "rank_from": pl.String(),  # how the rank was found: section | log | file | pid | locals | dump
        "host": pl.String(),
        "pid": pl.Int64(),
        "parent_pid": pl.Int64(),  # set for a child process (a DataLoader worker) dumped with its rank
        "thread": pl.String(),
        "main_thread": pl.Boolean(),
        "state": pl.String(),
        "depth": pl.Int32(),  # 0 = outermost frame
        "func": pl.String(),
        "file": pl.String(),
        "code_line": pl.Int64(),
        "native": pl.Boolean(),
        "user": pl.Boolean(),
        "text": pl.String(),  # the frame as the tool printed it
    }
)
MAX_STACK_BYTES = 64 * 1024**2  # a stack dump bigger than this is not a stack dump
_FILE_RANK = re.compile(
    r"(?:(?:^|/)attempt_\d+/(\d+)/[^/]+$|rank[_-]?(\d{1,9})(?:[^/\d][^/]*)?$|(?:^|/)rank[_-]?(\d{1,9})/)", re.I
)
_FH_LINE = re.compile(r"most recent call first\):|^\s*File \"[^\"]*\", line (?:\d+|\?\?\?) in |^=== Rank ")


def file_rank(name: str) -> int | None:
    m = _FILE_RANK.search(name.replace("\\", "/"))
    if not m:
        return None
    digits = m.group(1) or m.group(2) or m.group(3)
    return int(digits) if len(digits) <= 7 and int(digits) <= MAX_RANK else None


def _say_dropped(name: str, dropped: Counter[str], warnings: list[str]) -> None:
    """One warning naming the numbers of a dump that were past what they can mean (left blank), one naming the
    values that are no count at all (a negative pid, a fraction, text: left blank too)."""
    past = {k: n for k, n in dropped.items() if not k.startswith(NOT_A_COUNT)}
    odd = {k.removeprefix(NOT_A_COUNT): n for k, n in dropped.items() if k.startswith(NOT_A_COUNT)}
    if past:
        what = ", ".join(f"{kind} x{n}" if n > 1 else kind for kind, n in sorted(past.items()))
        bounds = ", ".join(f"{kind} <= {LIMITS[kind]:,}" for kind in sorted(past))
        warnings.append(f"{name}: numbers past what they can mean left blank: {what} ({bounds})")
    if odd:
        what = ", ".join(f"{kind} x{n}" if n > 1 else kind for kind, n in sorted(odd.items()))
        warnings.append(f"{name}: values that are not a whole number >= 0 left blank: {what}")


@dataclass
class _Found:
    """A stack block found in a source (a dump file, a log, the flight recorder)."""

    source: str
    block: Block


def _read_stack_sources(job: Job, warnings: list[str]) -> list[_Found]:
    found: list[_Found] = []
    for src in job.of_kind(SourceKind.STACK):
        try:
            data = src.read_bytes()
        except (OSError, ValueError) as exc:
            warnings.append(f"{src.name}: stack dump unreadable ({exc}) - skipped")
            continue
        if len(data) > MAX_STACK_BYTES:
            warnings.append(f"{src.name}: {len(data)} bytes is too large for a stack dump - skipped")
            continue
        text = without_line_tags(data.decode("utf-8", errors="replace"))
        hint = file_rank(src.name)
        dropped: Counter[str] = Counter()
        try:
            blocks = parse_pyspy_json(text, dropped) if stack_format(data[:65536]) == "json" else []
        except ValueError as exc:
            warnings.append(f"{src.name}: py-spy JSON dump unreadable ({exc}) - skipped")
            continue
        if not blocks:
            # a terminal copy of a dump may be hard-wrapped: a frame cut in two would read as no frame
            rows = unwrap_lines(text.splitlines(), NO_ENVELOPE)
            blocks = parse_stack_lines(((i, line, None) for i, line in rows), dropped)
        _say_dropped(src.name, dropped, warnings)
        if not blocks:
            warnings.append(f"{src.name}: looks like a stack dump but no frame could be read")
        for b in blocks:
            if b.rank is None and hint is not None:
                b.rank, b.rank_from = hint, "file"
            found.append(_Found(src.name, b))
    return found


def _read_log_stacks(lines: pl.DataFrame, warnings: list[str]) -> list[_Found]:
    """faulthandler blocks (and debug-server sections) inside logs, from their kept lines, per rank stream."""
    cand = lines.filter(pl.col("message").str.contains(_FH_LINE.pattern))
    found: list[_Found] = []
    if cand.is_empty():  # (most jobs: no stack in the logs, no query more)
        return found
    for (source,), part in cand.sort("source", "line").group_by(["source"], maintain_order=True):
        dropped: Counter[str] = Counter()
        for (_rank,), stream in part.group_by(["rank"], maintain_order=True):
            rows = stream.select("line", "message", "rank").iter_rows()
            found += [_Found(str(source), b) for b in parse_stack_lines(rows, dropped)]
        _say_dropped(str(source), dropped, warnings)
    return found


def _fr_stacks(t_fr: object | None) -> list[_Found]:
    """Each rank's newest flight-recorder entry with frames: where it entered its last collective. Found on the
    compact table (stack ids) and expanded for those rows only: `FRLoad.entries` would build every entry's values
    (~150 B per entry: 110 MB more at 256 ranks x 2000 entries)."""
    compact, values = getattr(t_fr, "compact", None), getattr(t_fr, "values", {})
    if not isinstance(compact, pl.DataFrame) or compact.is_empty() or "frames" not in values:
        return []
    stacks = values["frames"]
    with_frames = pl.Series("frames_id", range(stacks.len()), dtype=pl.UInt32).filter(stacks.list.len() > 0)
    cols = ("rank", "time_created_ns", "record_id", "source", "op", "collective_seq_id", "state", "frames_id")
    newest = (
        compact.select(cols)
        .filter(pl.col("frames_id").is_in(with_frames.implode()))
        .sort("rank", "time_created_ns", "record_id", nulls_last=False, maintain_order=True)
        .group_by("rank", maintain_order=True)
        .last()
    )
    newest = t_fr.expand(newest)  # type: ignore[attr-defined]
    found = []
    for r in newest.iter_rows(named=True):
        label = f"{r['op'] or '?'} #{r['collective_seq_id']}" if r["collective_seq_id"] is not None else r["op"]
        blk = Block("fr", None, None, None, f"last collective: {label} ({r['state']})", r["state"])
        blk.rank, blk.rank_from = r["rank"], "dump"
        blk.frames = [
            Frame(
                str(fr["name"] or "?"),
                fr["filename"],
                fr["line"],
                False,
                None,
                f"{fr['name']} ({fr['filename']}:{fr['line']})",
            )
            for fr in r["frames"]
            if fr is not None
        ]
        found.append(_Found(r["source"], blk))
    return found


def _is_main(b: Block, frames: list[Frame]) -> bool:
    if b.thread is not None and b.fmt != "gdb":
        if b.thread == "MainThread":
            return True
        if b.fmt.startswith("py-spy") and b.thread:
            return False
    if b.fmt in ("py-spy", "py-spy-json") and b.pid is not None and b.tid is not None:
        return b.tid == str(b.pid)
    if b.fmt == "fr":
        return True
    python = [f for f in frames if not f.native]
    if python:  # the main thread starts in the script (`<module>`), other Python threads in threading.py
        return python[0].func == "<module>" or (b.current and "_bootstrap" not in python[0].func)
    return b.current


def _unique(pairs: list[tuple]) -> dict:
    seen: dict = {}
    for key, value in pairs:
        seen.setdefault(key, set()).add(value)
    return {k: next(iter(v)) for k, v in seen.items() if len(v) == 1}


def _resolve_ranks(blocks: list[Block], pid_ranks: PidRanks) -> None:
    """Ranks of dumps that name none themselves: the job's pid → rank map (a worker process takes its parent's
    rank), a `rank` local, then the other dumps of the same process - found by pid, or by pthread id (which
    faulthandler and py-spy `--json` both print) when that names one process only."""
    for b in blocks:
        for pid in (b.pid, b.parent_pid):
            if b.rank is None and pid is not None:
                rank = pid_ranks.get((b.host, pid), pid_ranks.get((None, pid)))
                if rank is not None:
                    b.rank, b.rank_from = rank, "pid"
        if b.rank is None and b.locals_rank is not None:
            b.rank, b.rank_from = b.locals_rank, "locals"
    pthread_pid = _unique([(b.pthread, b.pid) for b in blocks if b.pthread is not None and b.pid is not None])
    for b in blocks:
        if b.pid is None and b.pthread in pthread_pid:
            b.pid = pthread_pid[b.pthread]
    live = [b for b in blocks if b.fmt != "fr"]
    pid_rank = _unique([((b.host, b.pid), b.rank) for b in live if b.pid is not None and b.rank is not None])
    for b in live:
        for pid in (b.pid, b.parent_pid):
            if b.rank is None and (b.host, pid) in pid_rank:
                b.rank, b.rank_from = pid_rank[(b.host, pid)], "dump"


def build_stacks(
    job: Job,
    lines: pl.DataFrame,
    pid_ranks: PidRanks | Callable[[], PidRanks],
    fr: object | None,
    warnings: list[str],
) -> pl.DataFrame:
    """The `stacks` table (schema `STACKS_SCHEMA`), frames outermost first (depth 0). `pid_ranks` may be a function
    that works the map out (`pid_rank_map`): called only when the job holds a stack (~13 queries a job)."""
    found = _read_stack_sources(job, warnings) + _read_log_stacks(lines, warnings) + _fr_stacks(fr)
    rows: dict[str, list] = {k: [] for k in STACKS_SCHEMA.names()}
    if not found:  # (the frame rules' ~30 regexes are compiled in Python, ~8 ms, only for a job with stacks)
        return pl.DataFrame(rows, schema=STACKS_SCHEMA)
    _resolve_ranks([f.block for f in found], pid_ranks() if callable(pid_ranks) else pid_ranks)
    rules = frame_rules()
    for n, f in enumerate(found):
        b = f.block
        rank, how = b.rank, b.rank_from if b.rank is not None else None
        frames = list(reversed(b.frames))  # outermost first
        main = _is_main(b, frames)
        for depth, fr in enumerate(frames):
            rows["source"].append(f.source)
            rows["line"].append(fr.src_line if fr.src_line is not None else b.header_line)
            rows["dump"].append(n)
            rows["format"].append(b.fmt)
            rows["rank"].append(rank)
            rows["rank_from"].append(how)
            rows["host"].append(b.host)
            rows["pid"].append(b.pid)
            rows["parent_pid"].append(b.parent_pid)
            rows["thread"].append(b.thread or b.tid)
            rows["main_thread"].append(main)
            rows["state"].append(b.state)
            rows["depth"].append(depth)
            rows["func"].append(fr.func)
            rows["file"].append(fr.file)
            rows["code_line"].append(fr.line)
            rows["native"].append(fr.native)
            rows["user"].append(not rules.is_library(fr.file, fr.native))
            rows["text"].append(fr.text[:400])
    return pl.DataFrame(rows, schema=STACKS_SCHEMA)


def pid_rank_map(
    lines: pl.DataFrame, events: pl.DataFrame, elastic: pl.DataFrame, nccl_ranks: pl.DataFrame
) -> dict[tuple[str | None, int], int]:
    """(host, pid) → global rank from everything else the job says; (None, pid) when the pid is unambiguous.

    Most trusted first: torchrun's failure summary (global rank, host, pid), NCCL's `host:pid` lines of the
    world communicator, ncclras status lines (`Rank R ... managed by process P on node H`), worker log lines
    carrying both a rank and a pid, and torchrun's `local_rank: N (pid: P)` lines when the job ran on one host.
    """
    parts = [
        elastic.select("host", "pid", "rank"),
        nccl_ranks.select("host", "pid", pl.col("nccl_rank").alias("rank")),
        events.filter(pl.col("subject_rank").is_not_null() & pl.col("pid").is_not_null()).select(
            pl.col("peer").alias("host"), "pid", pl.col("subject_rank").alias("rank")
        ),
        lines.select("host", "pid", "rank"),
    ]
    hosts = pl.concat([p.select("host") for p in parts[:2]] + [lines.select("host")])["host"].drop_nulls().n_unique()
    if hosts <= 1:
        parts.append(
            events.filter(pl.col("local_rank").is_not_null() & pl.col("pid").is_not_null()).select(
                "host", "pid", pl.col("local_rank").alias("rank")
            )
        )
    pairs = pl.concat(
        [p.cast({"host": pl.String, "pid": pl.Int64, "rank": pl.Int32}) for p in parts], how="vertical"
    ).drop_nulls(["pid", "rank"])
    # the first (most trusted) source wins for each (host, pid); a pid alone names a rank when every host that
    # has it agrees (py-spy and gdb dumps carry no host)
    firsts = (
        pairs.with_row_index("_order")
        .sort("_order")
        .group_by("host", "pid", maintain_order=True)
        .agg(pl.col("rank").first())
    )
    out: dict[tuple[str | None, int], int] = {(r[0], r[1]): r[2] for r in firsts.iter_rows()}
    by_pid = firsts.group_by("pid").agg(pl.col("rank").unique())
    for pid, ranks in by_pid.iter_rows():
        if len(ranks) == 1:
            out[(None, pid)] = ranks[0]
    return out
