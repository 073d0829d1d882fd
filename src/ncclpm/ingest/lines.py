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
import zlib
from dataclasses import dataclass

import polars as pl

from ncclpm.ingest.rawscan import (
    Hit,
    anchor_regex,
    hit_line_regex,
    hit_rows,
    locate,
    next_line,
    previous_line,
    utf8_text,
)
from ncclpm.ingest.unwrap import MIN_WIDTH, joins, python_start, rejoin_wrapped, unwrap_lines
from ncclpm.sources.discover import Source

__all__ = ["anchor_regex", "read_kept_lines"]

MAX_LINE_CHARS = 8192
SMALL_TEXT = 2 * 1024**2  # a text this small is read whole and re-joined (hard wraps) before the prefilter
MAX_KEPT_LINES = 200_000  # per source (~1.5 kB each through the pipeline): see `_capped`
TQDM_END = r"(\[\d+:\d{2}(?::\d{2})?<[^\]\r]{0,80}\])"
GROUP_FILES = 64  # texts scanned together (one regex pass, one query for the kept lines) ...
GROUP_BYTES = 32 * 1024 * 1024  # ... holding at most about this many bytes
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


@dataclass
class _Text:
    """One text to scan: its UTF-8 bytes, and how its lines are read."""

    name: str
    data: bytes
    original: bytes  # as read: the slow path (`_frame_from_bytes`) decodes it itself
    whole: bool  # a small text, re-joined whole if hard-wrapped (Python's lines); else polars' lines
    first_line: int = 1  # of a block of a big file


def _as_strings(texts: list[_Text], warnings: list[str]) -> pl.Series:
    """The texts as one string Series, validated in Rust; a text with invalid UTF-8 is decoded with its invalid
    bytes replaced, with a warning."""
    try:
        return pl.Series([t.data for t in texts], dtype=pl.Binary).cast(pl.String)
    except pl.exceptions.ComputeError:  # "invalid utf8": find which
        pass
    for t in texts:
        if utf8_text(t.data) is None:
            warnings.append(f"{t.name}: not valid UTF-8; read with invalid bytes replaced")
            t.data = t.data.decode("utf-8", errors="replace").encode("utf-8")
    return pl.Series([t.data for t in texts], dtype=pl.Binary).cast(pl.String)


def _scan(texts: list[_Text], anchors: list[str], warnings: list[str], line_start: str) -> dict[str, pl.LazyFrame]:
    """The kept lines of each text, found in its raw bytes (`rawscan`): one regex pass over all the texts, then
    only the hit lines (and the line after each: `line_start` re-joins wrapped lines) are cut out."""
    if not texts:
        return {}
    series = _as_strings(texts, warnings)
    found: list[list[str]] = [[] for _ in texts]
    for whole in (False, True):
        idx = [i for i, t in enumerate(texts) if t.whole == whole]
        if idx:
            pattern = hit_line_regex(tuple(anchors), across_newlines=whole)
            for i, lines in zip(idx, series.gather(idx).str.extract_all(pattern).to_list(), strict=True):
                found[i] = lines or []
    hits = [
        None if t.whole and any("\n" in line for line in f) else locate(t.data, f, t.first_line)
        for t, f in zip(texts, found, strict=True)
    ]
    slow = _may_join([(t, h) for t, h in zip(texts, hits, strict=True) if t.whole and h], line_start)
    out: dict[str, pl.LazyFrame] = {}
    for t, h in zip(texts, hits, strict=True):
        if h is None or t.name in slow:  # re-joined whole, the slow way
            out[t.name] = _keep(_frame_from_bytes(t.original, line_start), t.name, anchors, line_start)
        else:
            numbers, lines = hit_rows(t.data, h, with_next=bool(line_start), python_lines=t.whole)
            out[t.name] = _keep(_rows(numbers, lines), t.name, anchors, line_start)
    return out


def _may_join(texts: list[tuple[_Text, list[Hit]]], line_start: str) -> set[str]:
    """The small texts where re-joining hard-wrapped lines may change what is kept. With no anchor cut by a
    newline (checked by the caller), that needs a hit line glued to the line before or after it
    (`unwrap.joins`). Lengths and the line start are checked in one query first (Rust's reading of the start
    trusted only on ASCII lines, where it never matches more than Python's); the pairs left are checked exactly."""
    rows: list[tuple[int, str, str]] = []
    for i, (t, hits) in enumerate(texts):
        for hit in hits:
            line = t.data[hit.start : hit.end].decode("utf-8")
            before, after = previous_line(t.data, hit), next_line(t.data, hit, python_lines=True)
            if before is not None:
                rows.append((i, before.decode("utf-8"), line))
            if after is not None:
                rows.append((i, line, after.decode("utf-8")))
    if not rows:
        return set()
    frame = pl.DataFrame(rows, schema={"text": pl.Int64(), "head": pl.String(), "tail": pl.String()}, orient="row")
    head, tail = pl.col("head"), pl.col("tail")
    ascii_tail = tail.str.len_bytes() == tail.str.len_chars()
    candidates = frame.filter(
        (head.str.len_chars() >= MIN_WIDTH)
        & (tail.str.len_chars() <= head.str.len_chars())
        & (tail != "")
        & ~(ascii_tail & tail.str.contains(f"^(?:{line_start})"))
    )
    start = python_start(line_start)
    return {texts[i][0].name for i, a, b in candidates.iter_rows() if joins(a, b, start)}


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
            # a process's log: nothing to re-join
            block_text = _Text(src.name, data, data, whole=False, first_line=line0)
            parts.append(_scan([block_text], anchors, lossy, "")[src.name].collect())
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


def _text(src: Source, line_start: str) -> _Text:
    """A source read whole. A small text is read as Python splits lines, so that lines a terminal hard-wrapped
    are re-joined before the prefilter."""
    python_decode = _needs_python_decode(src)
    data = src.read_bytes()
    whole = bool(line_start) and len(data) <= SMALL_TEXT and (python_decode or _small(src))
    utf8 = _decode(data).encode("utf-8") if data[:2] in (b"\xff\xfe", b"\xfe\xff") else data
    return _Text(src.name, utf8, data, whole)


def _collect(pending: dict[str, pl.LazyFrame], warnings: list[str]) -> dict[str, pl.DataFrame | None]:
    """The pending sources' kept lines, in one `collect_all` (one by one if that fails)."""
    names, lazies = list(pending), list(pending.values())
    try:
        return dict(zip(names, pl.collect_all(lazies), strict=True))
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
    group: list[_Text] = []
    for src in sources:
        if src.path is not None and not _needs_python_decode(src) and _is_big(src):
            try:
                frames[src.name] = _chunked(src, anchors, warnings)
            except (OSError, EOFError, zlib.error, pl.exceptions.PolarsError) as exc:
                warnings.append(f"{src.name}: could not be read as text ({exc}) - skipped")
                frames[src.name] = None
            continue
        try:
            group.append(_text(src, line_start))
        except (OSError, ValueError) as exc:
            warnings.append(f"{src.name}: could not be read as text ({exc}) - skipped")
            frames[src.name] = None
        if len(group) >= GROUP_FILES or sum(len(t.data) for t in group) >= GROUP_BYTES:
            frames |= _collect(_scan(group, anchors, warnings, line_start), warnings)
            group = []
    frames |= _collect(_scan(group, anchors, warnings, line_start), warnings)
    kept = [_capped(f, s.name, warnings) for s in sources if (f := frames.get(s.name)) is not None]
    if not kept:
        return pl.DataFrame(schema=_SCHEMA)
    lines = pl.concat(kept, how="vertical")
    for src, n in lines.filter(pl.col("cut")).group_by("source", maintain_order=True).len().iter_rows():
        warnings.append(f"{src}: {n} line(s) longer than {MAX_LINE_CHARS} characters; only their start was parsed")
    return lines.drop("cut")
