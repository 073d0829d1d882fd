"""Read text sources into a polars frame of the lines worth parsing.

Input: `Source`s of kind "text". Output: one DataFrame (source, line, raw) holding only the lines that
contain a catalog anchor (Aho-Corasick prefilter, case-sensitive: catalogs list the spellings they
accept, and case-insensitive matching halves the scan rate) - everything else is never turned
into a Python string. Files on disk are scanned lazily by polars (gzip is decompressed transparently);
files with invalid UTF-8 fall back to a lossy decode; UTF-16 (BOM) is decoded. Progress-bar output glued
with `\\r` is split so each segment is read on its own, with the line number of its physical line.
Huge lines are cut to `MAX_LINE_CHARS` after the prefilter.
"""

from __future__ import annotations

import polars as pl

from ncclpm.sources.discover import Source

MAX_LINE_CHARS = 8192
MAX_KEPT_LINES = 200_000  # per source (~1.5 kB each through the pipeline): see `_capped`
TQDM_END = r"(\[\d+:\d{2}(?::\d{2})?<[^\]\r]{0,80}\])"
BATCH = 16  # files scanned together: parallel enough for a few cores, bounded memory
_SCHEMA = {"source": pl.String(), "line": pl.Int64(), "raw": pl.String()}


def _decode(data: bytes) -> str:
    if data[:2] in (b"\xff\xfe", b"\xfe\xff"):
        return data.decode("utf-16", errors="replace")
    return data.decode("utf-8", errors="replace")


def _frame_from_bytes(data: bytes) -> pl.LazyFrame:
    text = _decode(data)
    return pl.read_lines(text.encode("utf-8"), name="raw", row_index_name="line", row_index_offset=1).lazy()


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _keep(lf: pl.LazyFrame, name: str, anchors: list[str]) -> pl.LazyFrame:
    hit = pl.col("raw").str.contains_any(anchors)
    return (
        lf.filter(hit)
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


def _read_one(src: Source, anchors: list[str], warnings: list[str]) -> pl.DataFrame | None:
    """One source on its own, with the lossy-decode fallback for invalid UTF-8."""
    try:
        if _needs_python_decode(src):
            return _keep(_frame_from_bytes(src.read_bytes()), src.name, anchors).collect()
        assert src.path is not None
        lf = pl.scan_lines(src.path, name="raw", row_index_name="line", row_index_offset=1)
        try:
            return _keep(lf, src.name, anchors).collect()
        except pl.exceptions.ComputeError as exc:
            if "utf8" not in str(exc).lower() and "utf-8" not in str(exc).lower():
                raise
            warnings.append(f"{src.name}: not valid UTF-8; read with invalid bytes replaced")
            return _keep(_frame_from_bytes(src.read_bytes()), src.name, anchors).collect()
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


def read_kept_lines(sources: list[Source], anchors: list[str], warnings: list[str]) -> pl.DataFrame:
    """Prefiltered lines of all text sources, in source order; unreadable sources become warnings.

    Plain files on disk are scanned together (`collect_all` runs them in parallel); if that fails because
    one of them is not valid UTF-8 or unreadable, each file is retried on its own so only that one is
    affected.
    """
    plain = [s for s in sources if s.path is not None and not _needs_python_decode(s)]
    frames: dict[str, pl.DataFrame | None] = {}
    for i in range(0, len(plain), BATCH):
        batch = plain[i : i + BATCH]
        lazies = [
            _keep(pl.scan_lines(s.path, name="raw", row_index_name="line", row_index_offset=1), s.name, anchors)
            for s in batch
            if s.path is not None
        ]
        try:
            frames |= {s.name: f for s, f in zip(batch, pl.collect_all(lazies), strict=True)}
        except (OSError, pl.exceptions.PolarsError):
            continue  # retried one by one below
    for src in sources:
        if src.name not in frames:
            frames[src.name] = _read_one(src, anchors, warnings)
    kept = [_capped(f, s.name, warnings) for s in sources if (f := frames[s.name]) is not None]
    if not kept:
        return pl.DataFrame(schema=_SCHEMA)
    lines = pl.concat(kept, how="vertical")
    for src, n in lines.filter(pl.col("cut")).group_by("source", maintain_order=True).len().iter_rows():
        warnings.append(f"{src}: {n} line(s) longer than {MAX_LINE_CHARS} characters; only their start was parsed")
    return lines.drop("cut")
