"""Read text sources into a polars frame of the lines worth parsing.

Input: `Source`s of kind "text". Output: one DataFrame (source, line, raw) holding only the lines that contain a
catalog anchor (case-sensitive: catalogs list the spellings they accept). The anchors are searched in each text's
raw bytes (`rawscan`): only the hit lines, and the line after each (wrapped-line re-joining looks at it), are cut
out with their line numbers - the rest never becomes a line. Files are read one at a time in groups (over 8 MB
and gzipped: in blocks cut at line ends), which worker threads scan while the next is read. Invalid UTF-8 is
replaced (with a warning); UTF-16 (BOM) is decoded. Progress-bar output glued with `\\r` is split so each segment
is read on its own, with the line number of its physical line. Huge lines are cut to `MAX_LINE_CHARS` after the
prefilter.
"""

from __future__ import annotations

import collections
import gzip
import io
import os
import queue
import re
import zlib
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace
from typing import Any, BinaryIO

import polars as pl

from ncclpm.ingest.text.nccl_messages import LAST_ERROR
from ncclpm.ingest.text.rawscan import (
    FEW_LINES,
    Block,
    Bytes,
    all_utf8,
    anchor_regex,
    cut_group,
    hit_line_regex,
    matcher,
    new_block,
    newlines,
    scan_cut,
    trim_blocks,
    utf8_text,
)
from ncclpm.ingest.unwrap import MIN_WIDTH, joins, may_join, python_start, rejoin_wrapped, unwrap_lines
from ncclpm.sources.discover import ANSI_CSI, Source
from ncclpm.tables.schema import empty
from ncclpm.util.encoding import SNIFF_BYTES, decode_text, utf16_codec
from ncclpm.util.frames import engine_for

__all__ = ["anchor_regex", "read_kept_lines"]

MAX_LINE_CHARS = 8192
SMALL_TEXT = 2 * 1024**2  # a text this small is read whole and re-joined (hard wraps) before the prefilter
MAX_KEPT_LINES = 200_000  # per source (~1.5 kB each through the pipeline): see `_capped`
JOB_KEPT_LINES = 400_000  # per job: each source keeps its share of it (`allowances`)
MIN_KEPT_LINES = 200  # a source's share is never less (its first and last 100 matching lines)
TQDM_END = r"(\[\d+:\d{2}(?::\d{2})?<[^\]\r]{0,80}\])"
_TQDM_END = re.compile(TQDM_END)  # (the same in Python: `_may_split`)
SLOW_IN_MEMORY_BYTES = 256 * 1024  # texts read the slow way, at most this big in all: their group is read in memory
SPLIT_CHECK_ROWS = 4096  # `_may_split` looks at this many rows or fewer in Python
GROUP_FILES = 96  # texts scanned together (one pass of the matcher, one query for the kept lines) ...
GROUP_BYTES = 48 * 1024 * 1024  # ... holding at most about this many bytes
CHUNK_BYTES = 8 * 1024 * 1024  # a bigger (or gzipped) file is read in blocks of this size, cut at line ends
SPARE_ROOM = 64 * 1024  # a block's buffer has this much more room, for the partial line carried into it
BLOCK_BYTES = GROUP_BYTES + CHUNK_BYTES  # a group's memory (`rawscan.new_block`): room for its last small text
TAIL_GROUP_BYTES = 4 * 1024 * 1024  # the last groups shrink down to this: see `_group_bytes`
SCAN_THREADS = 3  # groups scanned at once: the C matcher and polars run without the GIL, and a third thread
# keeps both cores of a small machine busy while another waits for the GIL (its Python between the queries)
# A terminal's colours inside a small text (a copy of a coloured terminal: Python 3.13's tracebacks colour `File
# "x.py"`'s parts, which breaks the anchor `File "`) are taken out before the anchors are searched; a process's big
# log is read as it is (`extract._without_ansi` cleans the kept lines).
_COLOURED = re.compile(ANSI_CSI.encode())
_SCHEMA = {"source": pl.String(), "line": pl.Int64(), "raw": pl.String()}
_KEPT_SCHEMA = {**_SCHEMA, "cut": pl.Boolean()}
Then = Callable[[pl.DataFrame], pl.DataFrame] | None  # more row-wise columns, computed where the lines are cut out


def _frame_from_bytes(name: str, data: Bytes, line_start: str = "") -> pl.LazyFrame:
    """Every line of `data`, read the slow way (a small text hard-wrapped near an anchor is re-joined first)."""
    text = decode_text(data)
    if line_start and len(data) <= SMALL_TEXT:  # copied text: re-join what a terminal hard-wrapped first
        lines = unwrap_lines(text.split("\n"), python_start(line_start))
        frame = pl.LazyFrame(lines, schema={"line": pl.UInt32(), "raw": pl.String()}, orient="row")
    else:
        frame = pl.read_lines(text.encode("utf-8"), name="raw", row_index_name="line", row_index_offset=1).lazy()
    return frame.select(pl.lit(name).alias("source"), "line", "raw")


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _small(src: Source) -> bool:
    try:
        return src.path is not None and src.path.stat().st_size <= SMALL_TEXT and src.path.suffix != ".gz"
    except OSError:
        return False


def _keep(lf: pl.LazyFrame, anchors: list[str], line_start: str = "", bars: bool = True) -> pl.LazyFrame:
    """The kept lines of `lf` (source, line, raw; one or more sources, each in line order). A `hit` column, when
    there is one (the cutter's rows), already says which lines hold an anchor (the regex is not run on them
    again before the tqdm bars are split). `bars` False: no line of `lf` can be split (`_may_split`), so every line
    left holds an anchor or follows `Last error:` as it is, and the anchors' regex is neither compiled (~25 ms in
    each thread, 900 anchors) nor run."""
    hit = pl.col("raw").str.contains(anchor_regex(tuple(anchors)))
    found = pl.col("hit") if "hit" in lf.collect_schema() else hit
    kept = rejoin_wrapped(lf.with_columns(after_last_error().alias("_told")), found | pl.col("_told"), line_start)
    if bars:
        # A tqdm bar ends in "[elapsed<remaining, rate]"; text glued right after it is another line.
        kept = (
            kept.with_columns(pl.col("raw").str.replace_all(TQDM_END, "$1\r").str.split("\r"))
            .explode("raw")
            .filter(hit | pl.col("_told"))
        )
    return kept.select(
        pl.col("source"),
        pl.col("line").cast(pl.Int64),
        pl.col("raw").str.slice(0, MAX_LINE_CHARS).str.strip_chars_start("\ufeff\x00").str.strip_chars_end(),
        (pl.col("raw").str.len_chars() > MAX_LINE_CHARS).alias("cut"),
    )


def _may_split(rows: pl.DataFrame) -> bool:
    """Whether `_keep` may split a line of `rows` (the cutter's: each hit line with the line after it): one holds a
    carriage return, or a tqdm bar's end, alone or glued to the next row (re-joining a wrapped line glues only a
    hit line and the line after it, so every line `_keep` can make is looked at). A few rows are looked at in
    Python: a query costs ~1 ms, and ~2 ms more in a scan thread, where polars compiles its regex again."""
    if rows.height <= SPLIT_CHECK_ROWS:
        raws = [r or "" for r in rows["raw"].to_list()]
        pairs = zip(raws, [*raws[1:], ""], strict=False)  # (no rows: no pair)
        return any("\r" in r for r in raws) or any(
            _TQDM_END.search(a + b)
            for a, b in pairs
            if "<" in a or "<" in b  # (a bar's end holds a `<`)
        )
    raw = pl.col("raw")
    glued = pl.concat_str(raw, raw.shift(-1).fill_null(""))
    split = (raw.str.contains("\r", literal=True) | glued.str.contains(TQDM_END)).any()
    return bool(rows.lazy().select(split).collect().item())


def after_last_error() -> pl.Expr:
    """The line after torch's `Last error:` (NCCL's last WARN message, on its own line since torch 2.0): kept with
    the hit line before it, which the cutter already cuts out with the line after it."""
    before = pl.col("raw").shift(1)
    return (
        (pl.col("source").shift(1) == pl.col("source"))
        & (pl.col("line").shift(1) == pl.col("line") - 1)
        & before.str.strip_chars_end().str.ends_with(LAST_ERROR)
    ).fill_null(False)


def _python_name(src: Source) -> bool:
    """polars takes only UTF-8 paths: a file with a Latin-1 name (or none) is read by Python."""
    return src.path is None or not str(src.path).isprintable() or not _utf8(str(src.path))


def _needs_python_decode(src: Source) -> bool:
    if _python_name(src) or src.container:  # (a container log: its decoded lines, `Source.read_bytes`)
        return True
    try:
        with src.path.open("rb") as fh:
            return utf16_codec(fh.read(SNIFF_BYTES)) is not None
    except OSError:  # gone or unreadable since discovery: `_read_one` reports it as a warning
        return True


@dataclass
class _Text:
    """One text to scan: its UTF-8 bytes (Python's, or a view of its group's block), and how its lines are read."""

    name: str
    data: Bytes
    original: Bytes  # as read: the slow path (`_frame_from_bytes`) decodes it itself
    whole: bool  # a small text, re-joined whole if hard-wrapped (Python's lines); else polars' lines
    first_line: int = 1  # of a block of a big file
    keep: int | None = None  # the most matching lines kept of it (its first and last halves): `allowances`


def _as_strings(texts: list[_Text], warnings: list[str], block: Block | None = None) -> pl.Series:
    """The texts as one string Series, validated in Rust (the group's block, when it holds them all, without a
    copy); a text with invalid UTF-8 is decoded with its invalid bytes replaced, with a warning."""
    try:
        if block is not None and len(block) == len(texts):
            return pl.Series(block).cast(pl.String)
        return pl.Series([bytes(t.data) for t in texts], dtype=pl.Binary).cast(pl.String)
    except pl.exceptions.ComputeError:  # "invalid utf8": find which
        pass
    for t in texts:
        if utf8_text(bytes(t.data)) is None:
            warnings.append(f"{t.name}: not valid UTF-8; read with invalid bytes replaced")
            t.data = bytes(t.data).decode("utf-8", errors="replace").encode("utf-8")
    return pl.Series([bytes(t.data) for t in texts], dtype=pl.Binary).cast(pl.String)


def _hit_lines(series: pl.Series, whole: list[bool], anchors: list[str]) -> list[list[str]]:
    """Every line of each text holding an anchor (small texts re-joined whole: also an anchor cut by newlines,
    as a match spanning lines), in one parallel query per pattern."""
    frame = pl.DataFrame({"text": series})
    idx = {w: [i for i, x in enumerate(whole) if x == w] for w in (False, True)}
    queries = {
        w: frame[ix].lazy().select(pl.col("text").str.extract_all(hit_line_regex(tuple(anchors), across_newlines=w)))
        for w, ix in idx.items()
        if ix
    }
    found: list[list[str]] = [[] for _ in whole]
    for w, result in zip(queries, pl.collect_all(list(queries.values())), strict=True):
        for i, lines in zip(idx[w], result.to_series().to_list(), strict=True):
            found[i] = lines or []
    return found


def _scan(
    texts: list[_Text], anchors: list[str], line_start: str, then: Then = None, block: list[Block] | None = None
) -> _Scanned:
    """The kept lines of each text (None: unreadable) and the warnings met. The anchors are searched in the raw
    texts (`rawscan`) in one pass; only the hit lines (and the lines around each: `line_start` re-joins
    wrapped lines) become rows, all the group's in one frame and one query. A small text where an anchor is cut
    by a newline, or where a hit line may be glued to its neighbour, is re-joined whole, the slow way. `then` is
    applied to the kept lines here, a group at a time (see `read_kept_lines`). `block`: the memory holding the
    texts' bytes (`_Text.data` are views of it), if any, in a list emptied as soon as the rows are cut out (the
    caller's arguments live until this returns: the block goes back to be reused while the kept lines are built)."""
    warnings: list[str] = []
    if not texts:
        return {}, warnings, {}
    whole = [t.whole for t in texts]
    first_lines = [t.first_line for t in texts]
    compiled = matcher(tuple(anchors))
    valid = compiled is not None and all_utf8([t.data for t in texts])  # (the matcher reads bytes: no str needed)
    strings = None if valid else _as_strings(texts, warnings, block[0] if block else None)  # (invalid UTF-8 replaced)
    if compiled is not None:
        frame, slow = scan_cut(compiled, [t.data for t in texts], first_lines, whole, following=bool(line_start))
    else:
        assert strings is not None
        found = _hit_lines(strings, whole, anchors)
        frame, slow = cut_group([t.data for t in texts], found, first_lines, whole, following=bool(line_start))
    del strings
    frame, dropped = _precap(frame, texts)
    slow |= _may_join(frame, [i for i, t in enumerate(texts) if t.whole], line_start)
    for i, t in enumerate(texts):  # the rows are cut out: only the slow path reads a text again (less memory)
        if i not in slow:
            t.data = t.original = b""
    if block:
        block.clear()
    names = pl.Series([t.name for t in texts], dtype=pl.String)
    after_hit = pl.col("hit").shift(1) & (pl.col("text").shift(1) == pl.col("text"))
    fast = (
        frame.lazy()
        .filter(~pl.col("text").is_in(sorted(slow)) & (pl.col("hit") | after_hit))  # not the lines before
        .select(pl.lit(names).gather(pl.col("text")).alias("source"), "line", "raw", "hit")
    )
    bars = _may_split(frame)
    pending = {"": _keep(fast, anchors, line_start, bars)}
    pending |= {
        texts[i].name: _keep(_frame_from_bytes(texts[i].name, texts[i].original, line_start), anchors, line_start)
        for i in sorted(slow)
    }
    # a group of few rows (the texts read the slow way: small ones) is read in memory, not streamed
    few_bytes = sum(len(texts[i].original) for i in slow) <= SLOW_IN_MEMORY_BYTES
    done = _collect(pending, warnings, engine_for(frame.height) if few_bytes else "auto")
    group = done.pop("")
    if group is None:  # read the fast texts one by one
        pending = {
            t.name: _keep(fast.filter(pl.col("source") == t.name), anchors, line_start, bars)
            for i, t in enumerate(texts)
            if i not in slow
        }
        done |= _collect(pending, warnings)
    limits = {t.name: t.keep if t.keep is not None else MAX_KEPT_LINES for t in texts}
    # The texts read the slow way go through `then` with the group's lines, in one call (its ~13 queries cost the
    # same for 10 lines or 1,000; it is per source: each source's columns are what they would be alone). A text
    # without a kept line keeps its empty frame, as the fast texts' do not (it is not in the partition).
    lined = [frame for frame in done.values() if frame is not None and frame.height]
    out = {name: _then(frame, then, limits[name]) for name, frame in done.items() if frame is None or not frame.height}
    if group is not None:
        lined.insert(0, group)
    if lined:
        out |= _by_source(pl.concat(lined, how="vertical") if len(lined) > 1 else lined[0], then, limits)
    return out, warnings, dropped


def _precap(rows: pl.DataFrame, texts: list[_Text]) -> tuple[pl.DataFrame, dict[str, int]]:
    """The scan's rows of each text cut to the first and last halves of its allowance of hit lines (with the lines
    around them), before anything is built from them: what a hit-dense text costs is bounded as soon as it is
    scanned. `_capped` cuts exactly afterwards (a physical line may hold several progress-bar segments). Returns
    the rows and how many hit lines of each text were dropped."""
    limits = {i: t.keep for i, t in enumerate(texts) if t.keep is not None}
    if not limits or rows.height <= min(limits.values()):
        return rows, {}
    counts = rows.group_by("text").agg(pl.col("hit").sum())
    over = [t for t, n in counts.iter_rows() if t in limits and n > limits[t]]
    if not over:
        return rows, {}
    dropped = {texts[t].name: n - limits[t] for t, n in counts.iter_rows() if t in over}
    cap = pl.col("text").replace_strict(over, [limits[t] for t in over], default=None, return_dtype=pl.Int64)
    nth = pl.col("hit").cast(pl.Int64).cum_sum().over("text")  # the hit a row belongs to (its own, or the last)
    total = pl.col("hit").cast(pl.Int64).sum().over("text")
    head = cap // 2
    keep_row = cap.is_null() | (nth <= head) | (nth > total - (cap - head))
    return rows.filter(keep_row), dropped


def allowances(sizes: list[int]) -> list[int]:
    """How many matching lines each text source may keep (`_capped`): its share of JOB_KEPT_LINES - the larger of
    an equal share and a share by size - within [MIN_KEPT_LINES, MAX_KEPT_LINES]. Decided from the sizes alone,
    before anything is read, so that each source is cut as soon as it is scanned (memory stays bounded while the
    job is read) and the same job always keeps the same lines. The shares add up to at most twice JOB_KEPT_LINES
    (plus MIN_KEPT_LINES a source): 16 files of 120,000 progress lines keep 25,000 each."""
    total = max(1, sum(sizes))
    equal = JOB_KEPT_LINES // max(1, len(sizes))
    return [min(MAX_KEPT_LINES, max(MIN_KEPT_LINES, equal, JOB_KEPT_LINES * size // total)) for size in sizes]


def _then(frame: pl.DataFrame | None, then: Then, limit: int) -> pl.DataFrame | None:
    """`then` applied, except to a source to be capped: its columns are computed after its cap (`_capped`)."""
    return frame if frame is None or then is None or frame.height > limit else then(frame)


def _by_source(group: pl.DataFrame, then: Then, limits: dict[str, int]) -> dict[str, pl.DataFrame]:
    """A group's kept lines by source, `then` applied at once to all of them but the sources to be capped."""
    if then is not None:
        sizes = group["source"].value_counts()
        big = [name for name, n in sizes.iter_rows() if n > limits.get(name, MAX_KEPT_LINES)]
        if big:
            is_big = pl.col("source").is_in(big)
            return _by_source(group.filter(~is_big), then, limits) | _by_source(group.filter(is_big), None, limits)
        group = then(group)
    return {key[0]: part for key, part in group.partition_by("source", as_dict=True, maintain_order=True).items()}


def _may_join(rows: pl.DataFrame, whole: list[int], line_start: str) -> set[int]:
    """The small texts (indices `whole`) where re-joining hard-wrapped lines may change what is kept. With no
    anchor cut by a newline (checked by the caller), that needs a hit line glued to the line before or after it
    (`unwrap.joins`): `rows` holds both around each hit. The pairs are narrowed first (`_join_pairs`, or in Python
    for a few rows), then checked exactly."""
    if not whole or not line_start or rows.is_empty():
        return set()
    pairs = _join_pairs_few(rows, set(whole)) if rows.height <= FEW_LINES else _join_pairs(rows, whole, line_start)
    if not pairs:  # (compiling the line start in Python costs ~6-10 ms)
        return set()
    start = python_start(line_start)
    return {i for i, a, b in pairs if joins(a, b, start)}


def _join_pairs_few(rows: pl.DataFrame, whole: set[int]) -> list[tuple[int, str, str]]:
    """`_join_pairs` of a few rows, in Python (a query costs ~2 ms in a scan thread, where polars compiles the line
    start's regex again). The line start is left to `joins`: the query's check of it only drops pairs early."""
    text, line, raw, hit = (rows[c].to_list() for c in ("text", "line", "raw", "hit"))
    return [
        (text[i], raw[i], raw[i + 1])
        for i in range(rows.height - 1)
        if text[i] in whole
        and text[i + 1] == text[i]
        and line[i + 1] == line[i] + 1
        and (hit[i] or hit[i + 1])
        and raw[i]
        and raw[i + 1]
        and may_join(raw[i], raw[i + 1])
    ]


def _join_pairs(rows: pl.DataFrame, whole: list[int], line_start: str) -> list[tuple[int, str, str]]:
    """The pairs (text, line, the line after it) of the small texts `whole` that `may_join`, in one query: lengths
    and the line start checked there first (Rust's reading of the start trusted only on ASCII lines, where it never
    matches more than Python's)."""
    head, tail = pl.col("raw"), pl.col("_tail")
    ascii_tail = tail.str.len_bytes() == tail.str.len_chars()
    candidates = (
        rows.lazy()
        .filter(pl.col("text").is_in(whole))
        .with_columns(
            tail=pl.col("raw").shift(-1),
            pair=(pl.col("text").shift(-1) == pl.col("text"))
            & (pl.col("line").shift(-1) == pl.col("line") + 1)
            & (pl.col("hit") | pl.col("hit").shift(-1)),
        )
        .rename({"tail": "_tail"})
        .filter(
            pl.col("pair")
            & (head.str.len_chars() >= MIN_WIDTH)
            & (tail.str.len_chars() <= head.str.len_chars())
            & (tail != "")
            & ~(ascii_tail & tail.str.contains(f"^(?:{line_start})"))
        )
        .select("text", "raw", "_tail")
        .collect()
    )
    return [(i, a, b) for i, a, b in candidates.iter_rows() if may_join(a, b)]


class _Utf16Reader:
    """A UTF-16 stream (`codec`: with its BOM or without) read as UTF-8 bytes through `readinto`, a piece at a time:
    a big or gzipped log that PowerShell wrote is read in blocks like any other (it was not decoded when gzipped)."""

    def __init__(self, fh: BinaryIO, codec: str) -> None:
        self._text = io.TextIOWrapper(fh, encoding=codec, errors="replace", newline="")
        self._pending = b""

    def readinto(self, view: memoryview) -> int:
        while len(self._pending) < len(view):
            more = self._text.read(max(1, (len(view) - len(self._pending)) // 2))
            if not more:
                break
            self._pending += more.encode("utf-8", errors="replace")
        n = min(len(view), len(self._pending))
        view[:n] = self._pending[:n]
        self._pending = self._pending[n:]
        return n


def _utf8_start(buf: bytearray, start: int, end: int) -> int:
    """`end`, or just before it when buf[:end] would end inside a UTF-8 character (never before `start`)."""
    at = end
    while at > start and end - at < 3 and buf[at - 1] & 0xC0 == 0x80:
        at -= 1  # continuation bytes
    lead = buf[at - 1] if at > start else 0
    if lead >= 0xC0 and at - 1 + (2 if lead < 0xE0 else 3 if lead < 0xF0 else 4) > end:
        return at - 1  # that character is not whole: cut before it
    return end


def _spare(spare: queue.SimpleQueue[bytearray] | None, size: int) -> bytearray:
    """A buffer of at least `size` bytes: one given back to `spare` (its scan over) if there is one, else a new one
    (reused memory: a new buffer costs a page fault per 4 kB and its zeroing, ~2/3 of reading a block)."""
    while spare is not None:
        try:
            buf = spare.get_nowait()
        except queue.Empty:
            break
        if len(buf) >= size:
            return buf
    return bytearray(max(size, CHUNK_BYTES + SPARE_ROOM))


def _blocks(src: Source, spare: queue.SimpleQueue[bytearray] | None = None) -> Iterator[_Text]:
    """A big or gzipped file in blocks cut at line ends: memory holds a few blocks, not the file. Each byte is read
    once and searched a bounded number of times (linear in the file, whatever its lines): only a block's partial
    last line is carried into the next, and a line longer than a block is never carried whole - it is cut after
    its last `\\r` (a progress bar's segments are read one by one anyway), or, for one segment longer than a
    block, at the block's end, the rest of that segment skipped (only a line's start is parsed: MAX_LINE_CHARS,
    warned). The pieces of one physical line keep its line number. A UTF-16 stream (with a BOM or without) is read
    as UTF-8. A process's log: nothing to re-join (`whole` false). Each block is read into a buffer of `spare`
    when there is one (the caller gives a block's buffer back there once it is scanned: `_give_back`); the
    generator never touches a buffer after yielding it."""
    assert src.path is not None
    line0, rest, skipping = 1, b"", False
    buf: bytearray | None = None
    with src.open_lines() if src.container else src.path.open("rb") as raw:
        fh: Any = raw  # (a container log: decoded as it is read, `container_logs.ContainerLogReader`)
        if not src.container and (head := raw.read(SNIFF_BYTES))[:2] == b"\x1f\x8b":
            raw.seek(0)
            fh = gzip.GzipFile(fileobj=raw, mode="rb")
            head = fh.peek(SNIFF_BYTES)[:SNIFF_BYTES]
        raw.seek(0) if fh is raw and not src.container else None
        if not src.container and (codec := utf16_codec(head)):
            fh = _Utf16Reader(fh, codec)
        while True:
            if buf is None or len(buf) < len(rest) + CHUNK_BYTES:  # (else: the last one, not yielded)
                buf = _spare(spare, len(rest) + CHUNK_BYTES)
            buf[: len(rest)] = rest
            read = fh.readinto(memoryview(buf)[len(rest) : len(rest) + CHUNK_BYTES]) or 0
            begin, new, size = 0, len(rest), len(rest) + read
            if skipping:  # the rest of a segment longer than a block, up to the next line or segment
                ends = [i for i in (buf.find(b"\n", 0, size), buf.find(b"\r", 0, size)) if i >= 0]
                if not ends:
                    if read:
                        continue
                    break
                skipping, begin = False, min(ends)
            if not read:
                cut = size  # the end: the rest, a last line without newline
            elif (cut := buf.rfind(b"\n", max(new, begin), size) + 1) == 0 and (  # (the carried part has no newline)
                (cut := buf.rfind(b"\r", begin, size) + 1) == 0 and size - begin >= CHUNK_BYTES
            ):
                cut, skipping = _utf8_start(buf, begin, size), True
            rest = bytes(buf[max(cut, begin) : size])
            if cut > begin:
                data = memoryview(buf)[begin:cut]
                lines = newlines(buf, begin, cut)
                buf = None  # handed over: the caller gives it back once scanned
                yield _Text(src.name, data, data, whole=False, first_line=line0)
                line0 += lines
            if not read:
                break


def _give_back(spare: queue.SimpleQueue[bytearray], text: _Text) -> Callable[[Future], None]:
    """A callback giving `text`'s buffer (a block of `_blocks`) back to `spare` when its scan is over (the scan
    reads it only until its rows are cut out). It holds the buffer only until then: a future keeps its callbacks,
    and the scans' futures wait for the finishing thread (a buffer held there would be memory `spare` lost)."""
    held = [text.data.obj] if isinstance(text.data, memoryview) and isinstance(text.data.obj, bytearray) else []

    def back(_: Future) -> None:
        while held:
            spare.put(held.pop())

    return back


_FAILURES = (OSError, EOFError, zlib.error, pl.exceptions.PolarsError)


_Scanned = tuple[dict[str, pl.DataFrame | None], list[str], dict[str, int]]  # kept lines, warnings, hits dropped


@dataclass
class _Chunked:
    """A big file's blocks, scanned in the pool like groups: its kept lines are their parts in order, taken as they
    are scanned (`blocks`: the scans' futures in order, then None) and cut to the file's allowance on the way - its
    first lines, and a window of its last ones - so a hit-dense file's middle is let go block by block. Invalid
    UTF-8 in a block is replaced (one warning); a failure (reading, or scanning a block) skips the file, as reading
    it block after block would have at that point."""

    name: str
    keep: int
    blocks: queue.Queue[Future[_Scanned] | None] = field(default_factory=queue.Queue)
    failure: BaseException | None = None  # while reading, after the blocks scanned
    finished: Future[tuple[pl.DataFrame | None, list[str], int]] | None = None  # `finish`, in the finishing thread

    def frame(self, warnings: list[str]) -> tuple[pl.DataFrame | None, int]:
        """The kept lines (at most the first half of the allowance and a window of at least the last half) and
        how many lines matched in all."""
        first, last = self.keep // 2, self.keep - self.keep // 2
        head: list[pl.DataFrame] = []
        tail: collections.deque[pl.DataFrame] = collections.deque()
        in_head = in_tail = matched = 0
        lossy: list[str] = []
        failed: BaseException | None = None
        while (scan := self.blocks.get()) is not None:
            if failed is not None:
                continue  # (the rest is drained: its scans are let go)
            try:
                kept, met, _ = scan.result()
            except _FAILURES as exc:
                failed = exc
                continue
            del scan
            lossy += met
            part = kept.get(self.name)
            if part is None or part.is_empty():
                continue
            matched += part.height
            if in_head < first:
                head.append(part.head(first - in_head))
                part = part.slice(first - in_head)
                in_head += head[-1].height
            if part.height:
                tail.append(part)
                in_tail += part.height
                while in_tail - tail[0].height >= last:
                    in_tail -= tail.popleft().height
        if failed is None:
            failed = self.failure
        if failed is not None:
            warnings.append(f"{self.name}: could not be read as text ({failed}) - skipped")
            return None, 0
        warnings.extend(lossy[:1])
        parts = head + list(tail)
        return (pl.concat(parts) if parts else empty(_KEPT_SCHEMA)), matched

    def finish(self, then: Then) -> tuple[pl.DataFrame | None, list[str], int]:
        """The file's kept lines with `then` applied (a file to be capped: after its cap, by the caller), the
        warnings met and how many lines matched, as its blocks are scanned: in a thread of its own, while the file
        and the next ones are read."""
        met: list[str] = []
        frame, matched = self.frame(met)
        return _then(frame, then, self.keep if matched <= self.keep else -1), met, matched


def _is_big(src: Source) -> bool:
    try:
        assert src.path is not None
        if src.container:  # its lines in blocks, unless `_text` would re-join them whole (SMALL_TEXT at most)
            if src.path.stat().st_size < SMALL_TEXT and src.path.suffix != ".gz":
                return False  # (a small file: read whole all the same, `_text` tells whether re-joined)
            try:
                return len(src.read_head(SMALL_TEXT + 1)) > SMALL_TEXT
            except (EOFError, zlib.error):
                return True  # (`_blocks` says it cannot be read)
        with src.path.open("rb") as fh:
            gz = fh.read(2) == b"\x1f\x8b"
        return gz or src.path.stat().st_size > CHUNK_BYTES
    except OSError:
        return False


def _text(src: Source, line_start: str, block: Block | None = None) -> _Text:
    """A source read whole: into `block` if there is room (a file is read straight into it, other texts copied),
    else as Python bytes. A small text is read as Python splits lines, so that lines a terminal hard-wrapped are
    re-joined before the prefilter."""
    python_decode = _needs_python_decode(src)
    if block is not None and not python_decode and src.data is None and src.path is not None:
        at = block.used
        if (size := block.read_file(os.fspath(src.path))) >= 0:
            view = memoryview(block)[at : at + size]
            whole = bool(line_start) and size <= SMALL_TEXT and _small(src)
            # (gzipped since `_is_big` looked, or a small copy in colours: read below)
            if view[:2] != b"\x1f\x8b" and not (whole and _COLOURED.search(view)):
                return _Text(src.name, view, view, whole)
            view.release()
            block.pop()
    data = src.read_bytes()
    whole = bool(line_start) and len(data) <= SMALL_TEXT and (python_decode or _small(src))
    utf8 = decode_text(data).encode("utf-8") if utf16_codec(data) else data
    if whole and _COLOURED.search(utf8):
        data = utf8 = _COLOURED.sub(b"", utf8)
    if block is not None and (at := block.used, block.append(utf8))[1] >= 0:
        utf8 = memoryview(block)[at : at + len(utf8)]
    return _Text(src.name, utf8, data, whole)


def _collect(
    pending: dict[str, pl.LazyFrame], warnings: list[str], engine: str = "auto"
) -> dict[str, pl.DataFrame | None]:
    """The pending sources' kept lines, in one `collect_all` (one by one if that fails)."""
    names, lazies = list(pending), list(pending.values())
    try:
        return dict(zip(names, pl.collect_all(lazies, engine=engine), strict=True))  # type: ignore[arg-type]
    except pl.exceptions.PolarsError:
        pass
    out: dict[str, pl.DataFrame | None] = {}
    for name, lazy in zip(names, lazies, strict=True):
        try:
            out[name] = lazy.collect()
        except pl.exceptions.PolarsError as exc:
            warnings.append(f"{name}: could not be read as text ({exc}) - skipped")
            out[name] = None
    return out


def _capped(frame: pl.DataFrame, limit: int, matched: int) -> pl.DataFrame:
    """At most `limit` lines of one source (`allowances`): its first and its last halves (how the job started, and
    how it ended - where failures are). A log of millions of matching progress lines would need gigabytes.
    `matched`: how many of its lines matched, the ones already dropped included."""
    if frame.height <= limit and matched <= limit:
        return frame
    first = limit // 2
    return pl.concat([frame.head(first), frame.tail(min(frame.height - first, limit - first))])


def _say_capped(cut: list[tuple[str, int, int]], warnings: list[str]) -> None:
    """One warning per source cut to its own cap, one for the sources cut to their share of the job's."""
    shares = []
    for name, matched, limit in cut:
        first = limit // 2
        if limit >= MAX_KEPT_LINES:
            warnings.append(
                f"{name}: {matched:,} lines match a pattern; the first {first:,} and the last {limit - first:,} "
                f"were kept, {matched - limit:,} in between dropped"
            )
        else:
            shares.append((name, matched, limit))
    if shares:
        shown = "; ".join(f"{n}: {m:,} -> {k:,}" for n, m, k in shares[:3])
        more = f"; and {len(shares) - 3} more" if len(shares) > 3 else ""
        dropped = sum(m - k for _, m, k in shares)
        warnings.append(
            f"the job's logs hold more lines matching a pattern than the {JOB_KEPT_LINES:,} kept for a job: "
            f"{len(shares)} source{'s' if len(shares) != 1 else ''} kept only the first and last lines of their "
            f"share ({shown}{more}), {dropped:,} lines in between dropped"
        )


def _group_bytes(left: int) -> int:
    """How many bytes the group being read may hold, `left` bytes of the job still unscanned (its own included):
    GROUP_BYTES, then less and less towards the end, so that both scan threads finish about together (with the
    last groups whole, one core idled while the other scanned the last one)."""
    return max(TAIL_GROUP_BYTES, min(GROUP_BYTES, left // 3))


_POOL: tuple[int, ThreadPoolExecutor] | None = None  # (the process that made it, the scan threads)


def _scan_pool() -> ThreadPoolExecutor:
    """The scan threads, kept for the life of the process: polars keeps its compiled regexes per thread, and a job's
    fresh threads compiled the per-line columns' regexes (the envelopes' ~40 groups...) again: ~6 ms a thread, for
    each of a triage worker's jobs. A forked child makes its own (the parent's threads are not in it)."""
    global _POOL
    if _POOL is None or _POOL[0] != os.getpid():
        _POOL = (os.getpid(), ThreadPoolExecutor(max_workers=SCAN_THREADS, thread_name_prefix="ncclpm-scan"))
    return _POOL[1]


def read_kept_lines(
    sources: list[Source], anchors: list[str], warnings: list[str], line_start: str = "", then: Then = None
) -> pl.DataFrame:
    """Prefiltered lines of all text sources, in source order; unreadable sources become warnings. Groups of small
    texts are scanned in worker threads (polars runs the regex without the GIL) while this one reads the next
    group; the warnings keep the order of a one-by-one reading. `then` (per-line columns: `extract.source_columns`)
    runs in the workers too, on a group's lines at a time: less memory than on all lines at once, and in
    parallel."""
    frames: dict[str, pl.DataFrame | None] = {}
    log: list[str | _Chunked | Future[_Scanned]] = []  # in order
    group: list[_Text] = []
    memory = new_block(BLOCK_BYTES)  # the group's texts' bytes (None: Python bytes)
    sizes = [src.size() for src in sources]  # (a stat per file: once)
    keep = dict(zip((s.name for s in sources), allowances(sizes), strict=True))
    dropped: dict[str, int] = {}  # hit lines cut when scanned (`_precap`)
    matched: dict[str, int] = {}  # a big file's matching lines (`_Chunked`)
    left = sum(sizes)  # not read yet
    spare: queue.SimpleQueue[bytearray] = queue.SimpleQueue()  # big files' block buffers, their scans over
    pool = _scan_pool()  # (every scan this call submits is waited for below)
    with ThreadPoolExecutor(max_workers=1) as finishing:
        running: set[Future] = set()

        def submit(texts: list[_Text], rejoin: str, then: Then, memory: Block | None = None) -> Future:
            if len(running) >= SCAN_THREADS:  # memory holds a few groups, not the job; the first thread free takes it
                running.difference_update(wait(running, return_when=FIRST_COMPLETED).done)
            scan = pool.submit(_scan, texts, anchors, rejoin, then, None if memory is None else [memory])
            running.add(scan)
            return scan

        for src, size in zip(sources, sizes, strict=True):
            left -= size
            if not _python_name(src) and _is_big(src):  # (UTF-16 too: decoded block by block)
                chunked = _Chunked(src.name, keep[src.name])
                chunked.finished = finishing.submit(chunked.finish, then)  # takes the blocks as they are scanned
                try:
                    for block in _blocks(src, spare):  # `then` on the whole file (its ranks), by `finish`
                        back = _give_back(spare, block)  # (before the scan lets go of its bytes)
                        scan = submit([block], "", None)
                        scan.add_done_callback(back)
                        chunked.blocks.put(scan)
                        del block, scan
                except _FAILURES as exc:
                    chunked.failure = exc
                chunked.blocks.put(None)
                log.append(chunked)
                continue
            try:
                group.append(replace(_text(src, line_start, memory), keep=keep[src.name]))
            except (OSError, ValueError) as exc:
                log.append(f"{src.name}: could not be read as text ({exc}) - skipped")
                frames[src.name] = None
            held = sum(len(t.data) for t in group)
            if len(group) >= GROUP_FILES or held >= _group_bytes(left + held):
                log.append(submit(list(group), line_start, then, memory))
                group.clear()
                memory = new_block(BLOCK_BYTES)
        if group:
            log.append(submit(list(group), line_start, then, memory))
        del memory
        trim_blocks()  # all read: the blocks of the last scans are freed as they end, in their threads
        for entry in log:
            if isinstance(entry, str):
                warnings.append(entry)
            elif isinstance(entry, _Chunked):
                assert entry.finished is not None
                frames[entry.name], met, matched[entry.name] = entry.finished.result()
                warnings += met
            else:
                kept, met, cut = entry.result()
                frames |= kept
                warnings += met
                dropped |= cut
    cut_lines: list[tuple[str, int, int]] = []
    kept_lines = []
    for s in sources:
        if (f := frames.get(s.name)) is None:
            continue
        n = matched.get(s.name, f.height + dropped.get(s.name, 0))
        if n > keep[s.name]:
            cut_lines.append((s.name, n, keep[s.name]))
        kept_lines.append(_capped(f, keep[s.name], n))
    _say_capped(cut_lines, warnings)
    if then is not None:  # the sources capped: after their cap
        kept_lines = [then(f) if f.columns == list(_KEPT_SCHEMA) else f for f in kept_lines]
    if not kept_lines:
        return empty(_SCHEMA)  # (`then` not applied)
    lines = pl.concat(kept_lines, how="vertical")
    for src, n in lines.filter(pl.col("cut")).group_by("source", maintain_order=True).len().iter_rows():
        warnings.append(f"{src}: {n} line(s) longer than {MAX_LINE_CHARS} characters; only their start was parsed")
    return lines.drop("cut")
