"""Container runtimes' log files, read as the lines the process wrote.

Two formats wrap each write of a container's stdout/stderr, not each line:
- Docker's json-file driver (`/var/lib/docker/containers/<id>/<id>-json.log`): one JSON object per write,
  `{"log":"<text>\\n","stream":"stderr","time":"<RFC 3339>"}`, the text JSON-escaped (`<` as `\\u003c`); a line
  longer than the driver's 16 KiB buffer is several objects, only the last one's text ending in a newline.
- The CRI format of containerd and CRI-O (`/var/log/pods/<ns>_<pod>_<uid>/<container>/0.log`, what `kubectl logs`
  reads): `<RFC 3339> <stream> <tag> <text>`, the tag `F` for a full line and `P` for a piece of one (a line over
  the runtime's buffer, or a write without its newline yet), continued by the next record of the same stream.
A catalog pattern needs the whole line: each file is read as the lines `docker logs` / `kubectl logs` would
print, the pieces of a line joined (per stream: stdout and stderr interleave), each line keeping its write's time
as an ISO prefix (`parsers/envelopes.toml`'s wrapper.iso_timestamp reads it). Line numbers are those of the lines
read, as the user sees them through `docker logs`. A CRI file without a `P` record is read as it is (the envelope
reads each record). Lines that are not records of the format are kept as they are.

A file on disk (a rotated `.gz` too) is decoded as it is read (`ContainerLogReader`: a few MB of records at a time,
the pieces of a line carried over from one chunk to the next, per stream): memory holds a chunk and its lines, not
the file. A file already in memory (an archive's member, stdin) is decoded whole (`decode_container_log`): the same
lines.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import BinaryIO

_DOCKER_HEAD = re.compile(rb'\s{0,8}\{\s?"log"\s?:\s?"')
_CRI_RECORD = rb"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d{1,9})?(?:Z|[+-]\d{2}:?\d{2}) (?:stdout|stderr) [FP]\S* "
_CRI_HEAD = re.compile(rb"(?:[^\n]*\n){0,4}?" + _CRI_RECORD)  # (a file cut mid-record starts with a piece of one)
_CRI_PARTIAL = re.compile(rb"(?m)^\S+ (?:stdout|stderr) P\S* ")
_CRI_LINE = re.compile(r"(\S+) (stdout|stderr) ([FP])\S* (.*)", re.DOTALL)


def container_format(head: bytes) -> str | None:
    """ "docker" or "cri" for a file whose first bytes are records of that format; None otherwise."""
    if _DOCKER_HEAD.match(head):
        return "docker"
    if _CRI_HEAD.match(head):
        return "cri"
    return None


def needs_decoding(fmt: str, data: bytes) -> bool:
    """A CRI file is read as it is unless a line of it was written in pieces."""
    return fmt == "docker" or _CRI_PARTIAL.search(data) is not None


def has_pieces(fmt: str, fh: BinaryIO) -> bool:
    """`needs_decoding` of a stream, read a chunk at a time (up to the first piece found)."""
    return fmt == "docker" or any(_CRI_PARTIAL.search(chunk) for chunk in _record_chunks(fh, CHUNK_BYTES))


def decode_container_log(fmt: str, data: bytes) -> bytes:
    """The lines the container wrote (`<time> <line>` for Docker, a CRI record per line), pieces joined: the whole
    of `data` at once (an archive's member, already in memory; a file on disk is read by `ContainerLogReader`)."""
    decoder = _Decoder(fmt)
    return decoder.feed(data) + decoder.close()


CHUNK_BYTES = 4 * 1024 * 1024  # records decoded at a time (in polars: its frame is a few times this)


class ContainerLogReader:
    """A container log file (`fh`: its bytes, decompressed if gzipped) read as the lines the container wrote, a
    chunk of whole records at a time (`readinto`/`read`, as a binary file): memory holds a chunk and its lines, not
    the file. The pieces of a line still waiting for their end when a chunk ends are carried to the next (per
    stream), so the lines are those of `decode_container_log` on the whole file, whatever the chunk size."""

    def __init__(self, fh: BinaryIO, fmt: str, chunk: int | None = None) -> None:
        self._chunks = _record_chunks(fh, chunk or CHUNK_BYTES)
        self._decoder: _Decoder | None = _Decoder(fmt)
        self._out = memoryview(b"")

    def _more(self) -> bool:
        """Decode the next chunk into `_out`; False at the end."""
        while self._decoder is not None and not self._out:
            chunk = next(self._chunks, None)
            if chunk is None:
                self._out, self._decoder = memoryview(self._decoder.close()), None
            else:
                self._out = memoryview(self._decoder.feed(chunk))
        return bool(self._out)

    def readinto(self, view: memoryview) -> int:
        n = 0
        while n < len(view) and self._more():
            take = min(len(view) - n, len(self._out))
            view[n : n + take] = self._out[:take]
            self._out, n = self._out[take:], n + take
        return n

    def read(self, size: int = -1) -> bytes:
        parts: list[bytes] = []
        while (size < 0 or size > 0) and self._more():
            take = len(self._out) if size < 0 else min(size, len(self._out))
            parts.append(bytes(self._out[:take]))
            self._out = self._out[take:]
            size = size - take if size > 0 else size
        return b"".join(parts)


def _record_chunks(fh: BinaryIO, size: int) -> Iterator[bytes]:
    """`fh` in chunks of about `size` bytes, each ending at a line end (the last one: at the end). A line longer
    than a chunk is carried whole into the next: its records are needed whole (one record is at most the runtime's
    16 KiB buffer; a longer line that is no record is as long as the file makes it). A chunk never ends inside a
    record, a JSON escape or a UTF-8 character (no byte of one is a newline)."""
    held: list[bytes] = []  # read since the last line end (a long line's parts: joined once)
    while data := fh.read(size):
        cut = data.rfind(b"\n") + 1
        if cut == 0:
            held.append(data)
            continue
        yield b"".join([*held, data[:cut]]) if held else data[:cut] if cut < len(data) else data
        held = [data[cut:]] if cut < len(data) else []
    if held:
        yield b"".join(held)


class _Decoder:
    """Chunks of records (each ending at a line end) to the lines' bytes, each line ending in a newline; the pieces
    of a line not ended yet wait in `pending` (per stream, in the order they began) for the next chunk."""

    def __init__(self, fmt: str) -> None:
        self.fmt = fmt
        self.pending: dict[str, tuple[str, list[str]]] = {}  # stream -> (its first piece's time, pieces)
        self.lines = 0

    def feed(self, data: bytes) -> bytes:
        text = data.decode("utf-8", errors="replace")  # (cut at a newline: as decoding the whole file)
        lines = _docker_lines(text, self.pending) if self.fmt == "docker" else _cri_lines(text, self.pending)
        self.lines += len(lines)
        return "".join(f"{line}\n" for line in lines).encode("utf-8")

    def close(self) -> bytes:
        """The lines whose end never came, and a newline for a file without a line."""
        if self.fmt == "docker":
            lines = [line for time, pieces in self.pending.values() if (line := _stamped(time, "".join(pieces)))]
        else:
            lines = [f"{first} {stream} F {''.join(pieces)}" for stream, (first, pieces) in self.pending.items()]
        self.pending.clear()
        if not lines and not self.lines:
            lines = [""]
        self.lines += len(lines)
        return "".join(f"{line}\n" for line in lines).encode("utf-8")


def _docker_lines(text: str, pending: dict[str, tuple[str, list[str]]]) -> list[str]:
    """Decoded in polars (~20x faster than `json.loads` a record: a log of millions of writes); joined in Python
    only when a line was written in pieces (rare: a line over 16 KiB, or a write without its newline), or pieces
    of one wait from the chunk before."""
    import polars as pl  # (imported here: collecting sources does without it otherwise)

    if pending:
        return _docker_pieces_joined(text, pending)
    frame = pl.DataFrame({"raw": pl.Series("raw", text.split("\n"), dtype=pl.String)})
    frame = frame.filter(pl.col("raw").str.len_bytes() > 0)
    fields = ("log", "stream", "time")
    try:
        decoded = pl.col("raw").str.json_decode(pl.Struct(dict.fromkeys(fields, pl.String)))
        records = frame.select("raw", decoded.alias("_r")).unnest("_r")
    except pl.exceptions.PolarsError:  # a line that is not JSON: each field looked up on its own, null there
        records = frame.lazy().select("raw", *(pl.col("raw").str.json_path_match(f"$.{k}").alias(k) for k in fields))
        records = records.collect()
    log = pl.col("log")
    if records.select((log.is_not_null() & ~log.str.ends_with("\n")).any()).item():
        return _docker_pieces_joined(text, pending)
    stamped = pl.when(pl.col("time").is_not_null()).then(
        pl.concat_str(pl.col("time"), pl.lit(" "), log.str.slice(0, log.str.len_chars() - 1))
    )
    line = (
        pl.when(log.is_not_null())
        .then(pl.coalesce(stamped, log.str.slice(0, log.str.len_chars() - 1)).str.strip_suffix("\r"))
        .otherwise(pl.col("raw"))
    )
    return [r for r in records.select(line.alias("line"))["line"].to_list() if r]


def _docker_pieces_joined(text: str, pending: dict[str, tuple[str, list[str]]] | None = None) -> list[str]:
    """Record by record; a line whose end is not in `text` is left in `pending` (None: ended with the text). An
    empty line is dropped, as in polars' reading above."""
    out: list[str] = []
    waiting = pending if pending is not None else {}
    for raw in text.split("\n"):
        try:
            record = json.loads(raw) if raw.lstrip().startswith("{") else None
        except ValueError:
            record = None
        if not isinstance(record, dict) or not isinstance(record.get("log"), str):
            if raw:
                out.append(raw)
            continue
        stream = str(record.get("stream", ""))
        time, pieces = waiting.pop(stream, (str(record.get("time", "")), []))
        log = record["log"]
        pieces.append(log)
        if not log.endswith("\n"):
            waiting[stream] = (time, pieces)
            continue
        if line := _stamped(time, "".join(pieces)[:-1]):
            out.append(line)
    if pending is None:
        out.extend(line for time, pieces in waiting.values() if (line := _stamped(time, "".join(pieces))))
    return out


def _stamped(time: str, line: str) -> str:
    return f"{time} {line.removesuffix(chr(13))}" if time else line.removesuffix("\r")


def _cri_lines(text: str, pending: dict[str, tuple[str, list[str]]]) -> list[str]:
    out: list[str] = []
    for raw in text.split("\n"):
        m = _CRI_LINE.fullmatch(raw)
        if m is None:
            if raw:
                out.append(raw)
            continue
        time, stream, tag, piece = m.groups()
        first, pieces = pending.pop(stream, (time, []))
        pieces.append(piece)
        if tag == "P":
            pending[stream] = (first, pieces)
        else:
            out.append(f"{first} {stream} F {''.join(pieces)}")
    return out
