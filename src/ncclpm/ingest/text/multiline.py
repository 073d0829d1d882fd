"""Stitch multi-line constructs out of the parsed lines: Python tracebacks and torchrun failure summaries.

Input: the parsed `lines` frame (only prefiltered lines: traceback heads, `File "..."` frames, exception
lines and the torchrun summary fields are all catalog anchors). Output: `tracebacks` (one row per
traceback: its exception line and frames) and `elastic` (one row per entry of torchrun's
`ChildFailedError` summary, with `root_cause` marking the "Root Cause (first observed failure)" entry).

Interleaved consoles are handled by stitching per (source, rank) stream. This runs in Python over the
few kept lines, not over the log.
"""

from __future__ import annotations

import re
from collections import defaultdict
from datetime import datetime

import polars as pl

from ncclpm.tables.schema import ELASTIC_SCHEMA, TRACEBACKS_SCHEMA, empty
from ncclpm.util.frames import filtered, ordered

# Also a thread dump's `File: "..."` and a prose paste that lost the function name (`..., line 14, in`).
_FRAME = re.compile(r'^\s*File:? "(?P<file>[^"]+)", line (?P<line>\d+),? in(?: (?P<func>\S+))?')
_EXC = re.compile(
    r"^\s*(?P<type>(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Interrupt|Exit))(?::\s?(?P<msg>.*))?$"
)
_FIELD = re.compile(r"^\s{1,4}(?P<key>time|host|rank|exitcode|error_file|traceback)\s*:\s?(?P<val>.*)$")
_RANK = re.compile(r"(?P<rank>-?\d+) \(local_rank: (?P<local>\d+)\)")
_EXIT = re.compile(r"(?P<code>-?\d+) \(pid: (?P<pid>\d+)\)\s*(?:\((?P<sig>SIG\w+)\))?")


# Supersets of `_EXC` and `_FIELD` in polars' dialect (Python's `\s` also matches \x1c-\x1f), to skip lines early.
_EXC_WORDS = ["Error", "Exception", "Interrupt", "Exit"]
_FIELD_START = r"^[\s\x1c-\x1f]{1,4}(?:time|host|rank|exitcode|error_file|traceback)"


def _walk(lines: pl.DataFrame, moves: pl.Expr, *columns: str) -> list[dict]:
    """The rows where `moves` holds (a null message never does), in (source, line) order, as dicts."""
    return ordered(
        filtered(lines, moves.fill_null(False)).select(columns), "source", "line", maintain_order=True
    ).to_dicts()


def _short_frame(m: re.Match[str]) -> str:
    return f"{m['func'] or '?'} ({m['file'].rsplit('/', 1)[-1]}:{m['line']})"


_TB_HEAD = "Traceback (most recent call last)"
# torch 2.5+'s watchdog prints the failed collective's Python stack under this head, one `#<i> <function> from
# <file>:<line>` line per frame, unprefixed (parsers/torch/processgroup_nccl.toml, pg.failed_collective_frame)
_FR_STACK_HEAD = "Stack trace of the failed collective:"
_FR_FRAME = re.compile(r"^#\d+ [\w<>.]+ from \S+:\d+\s*$")
# Lines between two kept lines of one traceback: a frame's source line, Python 3.11's `^^^^` marker, and the pieces
# of either when a paste cut them at 80 columns; a larger gap is not one traceback.
_RECORD_GAP = 8
_RECORD_KEYS = ("rank", "rank_local", "host", "pid")  # what a record's head lends the lines that continue it


def traceback_record_ranks(lines: pl.DataFrame) -> pl.DataFrame:
    """The lines with a rank from the log record they continue: a logger's message that embeds a traceback
    (`[... TP1] Scheduler hit an exception: Traceback (most recent call last):`, `logger.exception(...)`) or the
    watchdog's `Stack trace of the failed collective:` carries the process's prefix on its first line only; the
    frames and exception line below it are that record's, so they take its rank (and its host and pid). Only a
    ranked head opens such a record, and only unprefixed frame lines (and a traceback's exception line) close
    enough to the previous one continue it."""
    msg = pl.col("message")
    # a head: the watchdog's stack head, or a traceback's head after words of the record's own, on a ranked line
    heads = (msg.str.contains(_FR_STACK_HEAD, literal=True) | (msg.str.find(_TB_HEAD, literal=True) > 0)) & pl.col(
        "rank"
    ).is_not_null()
    sources = lines.filter(heads.fill_null(False))["source"].unique() if not lines.is_empty() else None
    if sources is None or sources.is_empty():
        return lines  # (most jobs: no such record; a `[rank1]: Traceback` carries its prefix on every line)
    moves = pl.col("source").is_in(sources.implode()) & msg.str.contains_any(
        [_TB_HEAD, _FR_STACK_HEAD, 'File "', " from ", *_EXC_WORDS]
    )
    keys = ("source", "line", *_RECORD_KEYS, "message")
    walked = lines.filter(moves.fill_null(False)).select(keys).sort("source", "line", maintain_order=True)
    fills: dict[str, list] = {k: [] for k in ("source", "line", *_RECORD_KEYS)}
    record: tuple | None = None  # the open record's head: (source, rank, rank_local, host, pid)
    stack = False  # the open record is the failed collective's stack (else a Python traceback)
    last = 0  # the line of its head or of the last line it took
    for source, line, rank, rank_local, host, pid, text in walked.iter_rows():
        text = text or ""
        if rank is not None:
            stack = _FR_STACK_HEAD in text
            record = (source, rank, rank_local, host, pid) if stack or text.find(_TB_HEAD) > 0 else None
            last = line
            continue
        if record is None or source != record[0] or line - last > _RECORD_GAP or _TB_HEAD in text:
            record = None  # too far from it, another file, or an unprefixed traceback of its own
            continue
        frame = _FR_FRAME.match(text) if stack else _FRAME.match(text)
        exc = None if stack else _EXC.match(text)
        if not frame and not exc:
            continue
        for key, value in zip(("source", "line", *_RECORD_KEYS), (source, line, *record[1:]), strict=True):
            fills[key].append(value)
        last = line
        if exc:
            record = None
    if not fills["line"]:
        return lines
    filled = pl.DataFrame(fills, schema={k: lines.schema[k] for k in fills})
    return lines.update(filled, on=["source", "line"])


def stitch_tracebacks(lines: pl.DataFrame) -> pl.DataFrame:
    """One row per Python traceback, frames innermost last, keyed to its exception line."""
    rows: list[dict] = []
    open_tb: dict[tuple, dict] = {}
    # Only a traceback head, a frame or an exception line moves the loop; the others are skipped in polars.
    moves = pl.col("message").str.contains_any(["Traceback (most recent call last)", 'File "', 'File: "', *_EXC_WORDS])
    for r in _walk(lines, moves, "source", "rank", "line", "ts", "message"):
        key = (r["source"], r["rank"])
        msg = r["message"] or ""
        if "Traceback (most recent call last)" in msg:
            open_tb[key] = {"source": r["source"], "line": r["line"], "rank": r["rank"], "ts": r["ts"], "frames": []}
            continue
        tb = open_tb.get(key)
        if tb is None:
            continue
        frame = _FRAME.match(msg)
        if frame:
            tb["frames"].append(_short_frame(frame))
            tb["last"] = r["line"]
            continue
        exc = _EXC.match(msg)
        if exc:
            rows.append(
                {
                    **tb,
                    "end_line": r["line"],
                    "error_type": exc["type"],
                    "detail": exc["msg"],
                    "ts": tb["ts"] or r["ts"],
                }
            )
            del open_tb[key]
    # A traceback the paste cuts before its exception line is still the record of an exception on that process: a
    # row with no error_type, ending at its last frame.
    rows += [
        {**tb, "end_line": tb["last"], "error_type": None, "detail": None} for tb in open_tb.values() if tb["frames"]
    ]
    for row in rows:
        row.pop("last", None)
    rows.sort(key=lambda r: (r["source"], r["line"]))
    return pl.DataFrame(rows, schema=TRACEBACKS_SCHEMA) if rows else empty(TRACEBACKS_SCHEMA)


def _parse_time(text: str) -> datetime | None:
    try:
        return datetime.strptime(text.strip(), "%Y-%m-%d_%H:%M:%S")
    except ValueError:
        return None


def _apply_field(entry: dict, key: str, val: str) -> None:
    if key == "time":
        entry["ts"] = _parse_time(val)
    elif key == "host":
        entry["host"] = val.strip()
    elif key == "rank" and (m := _RANK.search(val)):
        entry["rank"], entry["local_rank"] = int(m["rank"]), int(m["local"])
    elif key == "exitcode" and (m := _EXIT.search(val)):
        entry["exit_code"], entry["pid"], entry["signal"] = int(m["code"]), int(m["pid"]), m["sig"]
    elif key == "error_file":
        entry["error_file"] = None if "<N/A>" in val else val.strip()
    elif key == "traceback":
        entry["detail"] = val.strip()


def parse_elastic_summaries(lines: pl.DataFrame) -> pl.DataFrame:
    """Entries of torchrun's failure summary (`Failures:` and `Root Cause (first observed failure):`)."""
    rows: list[dict] = []
    state: dict[str, dict] = defaultdict(dict)
    moves = (
        pl.col("message").str.starts_with("Root Cause")
        | pl.col("message").str.starts_with("Failures:")
        | pl.col("message").str.contains(_FIELD_START)
        | pl.col("message").str.contains_any(_EXC_WORDS)
    )
    for r in _walk(lines, moves, "source", "line", "message"):
        msg, src = r["message"] or "", r["source"]
        st = state[src]
        if msg.startswith("Root Cause"):
            st["root"] = True
        elif msg.startswith("Failures:"):
            st["root"] = False
        elif (m := _FIELD.match(msg)) and ("root" in st or m["key"] == "time"):
            st.setdefault("root", False)  # a pasted tail of the summary: its entries without their header
            if m["key"] == "time":
                st["entry"] = {"source": src, "line": r["line"], "root_cause": st["root"]}
                rows.append(st["entry"])
            if "entry" in st:
                _apply_field(st["entry"], m["key"], m["val"])
                if m["key"] in ("rank", "exitcode"):  # the entry's own words for who exited and how
                    entry = st["entry"]
                    entry.setdefault("exit_line", r["line"])
                    entry["exit_text"] = "\n".join(t for t in (entry.get("exit_text"), msg) if t)
        elif "entry" in st and (exc := _EXC.match(msg)) and st["entry"].get("detail", "").startswith("Traceback"):
            st["entry"]["detail"] = f"{exc['type']}: {exc['msg'] or ''}".strip()
    rows = [r for r in rows if "exit_code" in r or "rank" in r]  # a stray `time :` line is no entry
    return pl.DataFrame(rows, schema=ELASTIC_SCHEMA) if rows else empty(ELASTIC_SCHEMA)


BLOCK_LINES = 200  # an entry's traceback is cut by torchrun long before this


def rank_summary_blocks(parsed: pl.DataFrame, elastic: pl.DataFrame) -> pl.DataFrame:
    """`parsed` with the lines inside an entry of torchrun's failure summary given the entry's rank: its
    `traceback :` field (frames, the exception) is indented under the entry, and in a console without rank
    prefixes nothing else says whose it is. A block ends at the first kept line that is not indented."""
    entries = filtered(elastic, pl.col("rank").is_not_null()).select(
        "source", pl.col("line").alias("_start"), pl.col("rank").alias("_block_rank")
    )
    if entries.is_empty():
        return parsed
    # Only positions are sorted and joined (source, line, whether indented): the lines' text is never copied.
    where = parsed.select(
        "source", "line", (~pl.col("message").fill_null("").str.contains(r"^\s")).alias("_outdented")
    ).with_row_index("_order")
    inside = where.filter(pl.col("source").is_in(entries["source"].unique().implode()))
    ends = inside.filter("_outdented").select("source", "line")
    # both sides sorted by line over all sources, which sorts them within each source too
    blocks = entries.sort("_start").join_asof(
        ends.sort("line").rename({"line": "_end"}),
        left_on="_start",
        right_on="_end",
        by="source",
        strategy="forward",
        check_sortedness=False,
    )
    placed = (
        where.sort("line")
        .join_asof(blocks, left_on="line", right_on="_start", by="source", strategy="backward", check_sortedness=False)
        .sort("_order")
    )
    in_block = (
        (pl.col("line") > pl.col("_start"))
        & (pl.col("_end").is_null() | (pl.col("line") < pl.col("_end")))
        & (pl.col("line") - pl.col("_start") <= BLOCK_LINES)
    )
    block_rank = placed.select(pl.when(in_block).then(pl.col("_block_rank").cast(pl.Int32))).to_series()
    return parsed.with_columns(pl.coalesce(pl.col("rank"), block_rank).alias("rank"))
