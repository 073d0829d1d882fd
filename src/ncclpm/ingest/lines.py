"""Read text sources into a polars frame of the lines worth parsing.

Input: `Source`s of kind "text". Output: one DataFrame (source, line, raw) holding only the lines that
contain a catalog anchor (Aho-Corasick prefilter, case-insensitive) - everything else is never turned
into a Python string. Files on disk are scanned lazily by polars (gzip is decompressed transparently);
files with invalid UTF-8 fall back to a lossy decode; UTF-16 (BOM) is decoded. Progress-bar output glued
with `\\r` is split so each segment is read on its own, with the line number of its physical line.
Huge lines are cut to `MAX_LINE_CHARS` after the prefilter.
"""

from __future__ import annotations

import polars as pl

from ncclpm.sources.discover import Source

MAX_LINE_CHARS = 8192
_SCHEMA = {"source": pl.String(), "line": pl.Int64(), "raw": pl.String()}


def _decode(data: bytes) -> str:
    if data[:2] in (b"\xff\xfe", b"\xfe\xff"):
        return data.decode("utf-16", errors="replace")
    return data.decode("utf-8", errors="replace")


def _frame_from_bytes(data: bytes) -> pl.LazyFrame:
    text = _decode(data)
    return pl.read_lines(text.encode("utf-8"), name="raw", row_index_name="line", row_index_offset=1).lazy()


def _keep(lf: pl.LazyFrame, name: str, anchors: list[str]) -> pl.LazyFrame:
    hit = pl.col("raw").str.contains_any(anchors, ascii_case_insensitive=True)
    return (
        lf.filter(hit)
        .with_columns(pl.col("raw").str.split("\r"))
        .explode("raw")
        .filter(hit)
        .select(
            pl.lit(name).alias("source"),
            pl.col("line").cast(pl.Int64),
            pl.col("raw").str.slice(0, MAX_LINE_CHARS).str.strip_chars_end(),
        )
    )


def _needs_python_decode(src: Source) -> bool:
    if src.path is None:
        return True
    with src.path.open("rb") as fh:
        return fh.read(2) in (b"\xff\xfe", b"\xfe\xff")


def read_kept_lines(sources: list[Source], anchors: list[str], warnings: list[str]) -> pl.DataFrame:
    """Prefiltered lines of all text sources, in source order; unreadable sources become warnings."""
    frames: list[pl.DataFrame] = []
    for src in sources:
        try:
            if _needs_python_decode(src):
                frames.append(_keep(_frame_from_bytes(src.read_bytes()), src.name, anchors).collect())
                continue
            assert src.path is not None
            lf = pl.scan_lines(src.path, name="raw", row_index_name="line", row_index_offset=1)
            try:
                frames.append(_keep(lf, src.name, anchors).collect())
            except pl.exceptions.ComputeError as exc:
                if "utf8" not in str(exc).lower() and "utf-8" not in str(exc).lower():
                    raise
                warnings.append(f"{src.name}: not valid UTF-8; read with invalid bytes replaced")
                frames.append(_keep(_frame_from_bytes(src.read_bytes()), src.name, anchors).collect())
        except (OSError, ValueError, pl.exceptions.PolarsError) as exc:
            warnings.append(f"{src.name}: could not be read as text ({exc}) - skipped")
    if not frames:
        return pl.DataFrame(schema=_SCHEMA)
    return pl.concat(frames, how="vertical")
