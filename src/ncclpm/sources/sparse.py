"""Sparse files: read the data, not the holes.

A node that crashed, a log preallocated by `fallocate` or a file someone `truncate`d leaves regions that were never
written: they cost no disk and read back as zeros. A 64 KB log followed by a 1 GiB hole would be read as a 1 GiB
line of NULs (2 GiB of memory in polars). A file whose size exceeds its allocated blocks by more than `MIN_HOLE` is
read extent by extent (`SEEK_DATA`/`SEEK_HOLE`); the extents are joined with a newline, so a line before a hole
never runs into the one after it. At most `MAX_DATA` bytes of data are read (a sparse file is read into memory).
"""

from __future__ import annotations

import os
from pathlib import Path

MIN_HOLE = 16 * 1024**2
MAX_DATA = 512 * 1024**2
CHUNK = 1 << 20


def has_holes(st: os.stat_result) -> bool:
    """True when more than MIN_HOLE bytes of the file were never written (holes)."""
    return st.st_size - getattr(st, "st_blocks", st.st_size // 512) * 512 > MIN_HOLE


def _extents(fd: int, size: int) -> list[tuple[int, int]] | None:
    """(start, end) of every data region, or None when the file system cannot tell (then read it whole)."""
    if not hasattr(os, "SEEK_DATA"):
        return None
    out, pos = [], 0
    while pos < size:
        try:
            start = os.lseek(fd, pos, os.SEEK_DATA)
        except OSError as exc:
            if exc.errno == 6:  # ENXIO: no data past pos
                break
            return None
        end = os.lseek(fd, start, os.SEEK_HOLE)
        out.append((start, end))
        pos = end
    return out


def read_without_holes(path: Path, size: int) -> tuple[bytes, int, bool] | None:
    """(data, bytes of holes skipped, cut at MAX_DATA), or None when the file system does not report holes."""
    fd = os.open(path, os.O_RDONLY)
    try:
        extents = _extents(fd, size)
        if extents is None:
            return None
        parts: list[bytes] = []
        got, cut = 0, False
        for start, end in extents:
            os.lseek(fd, start, os.SEEK_SET)
            todo = end - start
            if got + todo > MAX_DATA:
                todo, cut = MAX_DATA - got, True
            while todo > 0 and (chunk := os.read(fd, min(CHUNK, todo))):
                parts.append(chunk)
                got += len(chunk)
                todo -= len(chunk)
            parts.append(b"\n")
            if cut:
                break
        return b"".join(parts), size - sum(e - s for s, e in extents), cut
    finally:
        os.close(fd)
