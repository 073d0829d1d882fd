"""Read text sources into a polars frame of the lines worth parsing.

Input: `Source`s of kind "text". Output: one DataFrame (source, line, raw) holding only the lines that contain a
catalog anchor (case-sensitive: catalogs list the spellings they accept). The anchors are searched in each text's
raw bytes (`rawscan`): only the hit lines, and the line after each (wrapped-line re-joining looks at it), are cut
out with their line numbers - the rest never becomes a line. One file is read at a time; files over 8 MB and
gzipped files in blocks cut at line ends. Invalid UTF-8 is replaced (with a warning); UTF-16 (BOM) is decoded.
Progress-bar output glued with `\\r` is split so each segment is read on its own, with the line number of its
physical line. Huge lines are cut to `MAX_LINE_CHARS` after the prefilter.
"""

from __future__ import annotations

import gzip
import re
import zlib

import polars as pl

from ncclpm.ingest.rawscan import (
    Hit,
    anchor_regex,
    hit_line_regex,
    hit_rows,
    locate,
    matched_lines,
    next_line,
    previous_line,
    utf8_text,
)
from ncclpm.ingest.unwrap import joins, python_start, rejoin_wrapped, unwrap_lines
from ncclpm.sources.discover import Source

__all__ = ["anchor_regex", "read_kept_lines"]

MAX_LINE_CHARS = 8192
SMALL_TEXT = 2 * 1024**2  # a text this small is read whole and re-joined (hard wraps) before the prefilter
MAX_KEPT_LINES = 200_000  # per source (~1.5 kB each through the pipeline): see `_capped`
TQDM_END = r"(\[\d+:\d{2}(?::\d{2})?<[^\]\r]{0,80}\])"
CHUNK_BYTES = 8 * 1024 * 1024  # a bigger (or gzipped) file is read in blocks of this size, cut at line ends
_SCHEMA = {"source": pl.String(), "line": pl.Int64(), "raw": pl.String()}


def _decode(data: bytes) -> str:
    if data[:2] in (b"\xff\xfe", b"\xfe\xff"):
        return data.decode("utf-16", errors="replace")
    return data.decode("utf-8", errors="replace")


def _frame_from_bytes(data: bytes, line_start: str = "") -> pl.LazyFrame:
    """Every line of `data`, read the slow way (a small text hard-wrapped near an anchor is re-joined first)."""
    text = _decode(data)
    if line_start and len(data) <= SMALL_TEXT:  # copied text: re-join what a terminal hard-wrapped first
        lines = unwrap_lines(text.split("\n"), python_start(line_start))
        return pl.LazyFrame(lines, schema={"line": pl.UInt32(), "raw": pl.String()}, orient="row")
    return pl.read_lines(text.encode("utf-8"), name="raw", row_index_name="line", row_index_offset=1).lazy()


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


def _keep(lf: pl.LazyFrame, name: str, anchors: list[str], line_start: str = "") -> pl.LazyFrame:
    hit = pl.col("raw").str.contains(anchor_regex(tuple(anchors)))
    return (
        rejoin_wrapped(lf, hit, line_start)
        # A tqdm bar ends in "[elapsed<remaining, rate]"; text glued right after it is another line.
        .with_columns(pl.col("raw").str.replace_all(TQDM_END, "$1\r").str.split("\r"))
        .explode("raw")
        .filter(hit)
        .select(
            pl.lit(name).alias("source"),
            pl.col("line").cast(pl.Int64),
            pl.col("raw").str.slice(0, MAX_LINE_CHARS).str.strip_chars_start("\ufeff\x00").str.strip_chars_end(),
            (pl.col("raw").str.len_chars() > MAX_LINE_CHARS).alias("cut"),
        )
    )


def _needs_python_decode(src: Source) -> bool:
    if src.path is None or not str(src.path).isprintable() or not _utf8(str(src.path)):
        return True  # polars takes only UTF-8 paths: a Latin-1 file name is read by Python
    try:
        with src.path.open("rb") as fh:
            return fh.read(2) in (b"\xff\xfe", b"\xfe\xff")
    except OSError:  # gone or unreadable since discovery: `_read_one` reports it as a warning
        return True


def _utf8_series(data: bytes, name: str, warnings: list[str]) -> tuple[bytes, pl.Series]:
    """`data` as UTF-8 bytes and a one-row Series; invalid bytes are replaced (with a warning)."""
    text = utf8_text(data)
    if text is None:
        warnings.append(f"{name}: not valid UTF-8; read with invalid bytes replaced")
        data = data.decode("utf-8", errors="replace").encode("utf-8")
        text = pl.Series([data.decode("utf-8")])
    return data, text


def _scan(
    data: bytes, name: str, anchors: list[str], warnings: list[str], line_start: str, first_line: int = 1
) -> pl.DataFrame:
    """The kept lines of one text (or one block of a big file: `first_line` is its first line's number), found
    in the raw text (`rawscan`). Lines are read as polars reads them; `line_start` re-joins wrapped lines."""
    data, text = _utf8_series(data, name, warnings)
    hits = locate(data, matched_lines(text, hit_line_regex(tuple(anchors))), first_line)
    numbers, lines = hit_rows(data, hits, with_next=bool(line_start), python_lines=False)
    return _keep(_rows(numbers, lines), name, anchors, line_start).collect()


def _scan_small(data: bytes, name: str, anchors: list[str], warnings: list[str], line_start: str) -> pl.DataFrame:
    """A small text (read as Python splits lines) whose hard-wrapped lines are re-joined before the prefilter.
    Re-joining can only change what is kept where an anchor is cut by a newline or a hit line is cut from (or
    continued by) its neighbour; without either, the hits are read as they are, else the whole text is re-joined
    the slow way (`unwrap.unwrap_lines`)."""
    original = data
    if data[:2] in (b"\xff\xfe", b"\xfe\xff"):
        data = _decode(data).encode("utf-8")
    elif utf8_text(data) is None:
        warnings.append(f"{name}: not valid UTF-8; read with invalid bytes replaced")
    data, text = _utf8_series(data, name, [])
    found = matched_lines(text, hit_line_regex(tuple(anchors), across_newlines=True))
    hits = [] if any("\n" in f for f in found) else locate(data, found)
    start = python_start(line_start)
    if (found and not hits) or any(_joins_neighbour(data, h, start) for h in hits):
        return _keep(_frame_from_bytes(original, line_start), name, anchors, line_start).collect()
    numbers, lines = hit_rows(data, hits, with_next=True, python_lines=True)
    return _keep(_rows(numbers, lines), name, anchors, line_start).collect()


def _joins_neighbour(data: bytes, hit: Hit, start: re.Pattern[str]) -> bool:
    line = data[hit.start : hit.end].decode("utf-8")
    before, after = previous_line(data, hit), next_line(data, hit, python_lines=True)
    return (before is not None and joins(before.decode("utf-8"), line, start)) or (
        after is not None and joins(line, after.decode("utf-8"), start)
    )


def _rows(numbers: list[int], lines: list[str]) -> pl.LazyFrame:
    return pl.LazyFrame({"line": numbers, "raw": lines}, schema={"line": pl.Int64(), "raw": pl.String()})


def _chunked(src: Source, anchors: list[str], warnings: list[str]) -> pl.DataFrame:
    """A big or gzipped file in blocks cut at line ends: memory holds a block, not the file (a line longer than a
    block is carried over whole). Invalid UTF-8 in a block is replaced (one warning)."""
    assert src.path is not None
    parts, line0, rest, lossy = [], 1, b"", []
    with src.path.open("rb") as raw:
        fh = gzip.GzipFile(fileobj=raw, mode="rb") if raw.read(2) == b"\x1f\x8b" else raw
        raw.seek(0)
        while True:
            block = fh.read(CHUNK_BYTES)
            data = rest + block
            if block:
                cut = data.rfind(b"\n") + 1
                data, rest = data[:cut], data[cut:]
                if not data:
                    continue
            if not data:
                break
            parts.append(_scan(data, src.name, anchors, lossy, "", line0))  # a process's log: nothing to re-join
            line0 += data.count(b"\n") + (not data.endswith(b"\n"))
            if not block:
                break
    warnings.extend(lossy[:1])
    return pl.concat(parts) if parts else _keep(_rows([], []), src.name, anchors).collect()


def _is_big(src: Source) -> bool:
    try:
        assert src.path is not None
        with src.path.open("rb") as fh:
            gz = fh.read(2) == b"\x1f\x8b"
        return gz or src.path.stat().st_size > CHUNK_BYTES
    except OSError:
        return False


def _read_one(src: Source, anchors: list[str], warnings: list[str], line_start: str = "") -> pl.DataFrame | None:
    """One source read whole. A small text is read as Python splits lines, so that lines a terminal hard-wrapped
    are re-joined before the prefilter."""
    try:
        python_decode = _needs_python_decode(src)
        data = src.read_bytes()
        if line_start and len(data) <= SMALL_TEXT and (python_decode or _small(src)):
            return _scan_small(data, src.name, anchors, warnings, line_start)
        if data[:2] in (b"\xff\xfe", b"\xfe\xff"):
            data = _decode(data).encode("utf-8")
        return _scan(data, src.name, anchors, warnings, line_start)
    except (OSError, ValueError, pl.exceptions.PolarsError) as exc:
        warnings.append(f"{src.name}: could not be read as text ({exc}) - skipped")
        return None


def _capped(frame: pl.DataFrame, name: str, warnings: list[str]) -> pl.DataFrame:
    """At most MAX_KEPT_LINES lines of one source: its first and its last halves (how the job started, and how
    it ended - where failures are). A log of millions of matching progress lines would need gigabytes."""
    if frame.height <= MAX_KEPT_LINES:
        return frame
    half = MAX_KEPT_LINES // 2
    warnings.append(
        f"{name}: {frame.height:,} lines match a pattern; the first {half:,} and the last {half:,} were kept, "
        f"{frame.height - 2 * half:,} in between dropped"
    )
    return pl.concat([frame.head(half), frame.tail(half)])


def read_kept_lines(
    sources: list[Source], anchors: list[str], warnings: list[str], line_start: str = ""
) -> pl.DataFrame:
    """Prefiltered lines of all text sources, in source order; unreadable sources become warnings."""
    frames: dict[str, pl.DataFrame | None] = {}
    for src in sources:
        if src.path is not None and not _needs_python_decode(src) and _is_big(src):
            try:
                frames[src.name] = _chunked(src, anchors, warnings)
            except (OSError, EOFError, zlib.error, pl.exceptions.PolarsError) as exc:
                warnings.append(f"{src.name}: could not be read as text ({exc}) - skipped")
                frames[src.name] = None
        else:
            frames[src.name] = _read_one(src, anchors, warnings, line_start)
    kept = [_capped(f, s.name, warnings) for s in sources if (f := frames[s.name]) is not None]
    if not kept:
        return pl.DataFrame(schema=_SCHEMA)
    lines = pl.concat(kept, how="vertical")
    for src, n in lines.filter(pl.col("cut")).group_by("source", maintain_order=True).len().iter_rows():
        warnings.append(f"{src}: {n} line(s) longer than {MAX_LINE_CHARS} characters; only their start was parsed")
    return lines.drop("cut")
