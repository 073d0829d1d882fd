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
"""

from __future__ import annotations

import json
import re

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


def decode_container_log(fmt: str, data: bytes) -> bytes:
    """The lines the container wrote (`<time> <line>` for Docker, a CRI record per line), pieces joined."""
    text = data.decode("utf-8", errors="replace")
    lines = _docker_lines(text) if fmt == "docker" else _cri_lines(text)
    return "\n".join(lines).encode("utf-8") + b"\n"


def _docker_lines(text: str) -> list[str]:
    """Decoded in polars (~20x faster than `json.loads` a record: a log of millions of writes); joined in Python
    only when a line was written in pieces (rare: a line over 16 KiB, or a write without its newline)."""
    import polars as pl  # (imported here: collecting sources does without it otherwise)

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
        return _docker_pieces_joined(text)
    stamped = pl.when(pl.col("time").is_not_null()).then(
        pl.concat_str(pl.col("time"), pl.lit(" "), log.str.slice(0, log.str.len_chars() - 1))
    )
    line = (
        pl.when(log.is_not_null())
        .then(pl.coalesce(stamped, log.str.slice(0, log.str.len_chars() - 1)).str.strip_suffix("\r"))
        .otherwise(pl.col("raw"))
    )
    return [r for r in records.select(line.alias("line"))["line"].to_list() if r]


def _docker_pieces_joined(text: str) -> list[str]:
    out: list[str] = []
    pending: dict[str, tuple[str, list[str]]] = {}  # stream -> (time of its first piece, pieces)
    for raw in text.split("\n"):
        try:
            record = json.loads(raw) if raw.lstrip().startswith("{") else None
        except ValueError:
            record = None
        if not isinstance(record, dict) or not isinstance(record.get("log"), str):
            if raw.strip():
                out.append(raw)
            continue
        stream = str(record.get("stream", ""))
        time, pieces = pending.pop(stream, (str(record.get("time", "")), []))
        log = record["log"]
        pieces.append(log)
        if not log.endswith("\n"):
            pending[stream] = (time, pieces)
            continue
        out.append(_stamped(time, "".join(pieces)[:-1]))
    out.extend(_stamped(time, "".join(pieces)) for time, pieces in pending.values())
    return out


def _stamped(time: str, line: str) -> str:
    return f"{time} {line.removesuffix(chr(13))}" if time else line.removesuffix("\r")


def _cri_lines(text: str) -> list[str]:
    out: list[str] = []
    pending: dict[str, tuple[str, list[str]]] = {}  # stream -> (its first piece's time, pieces)
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
    out.extend(f"{first} {stream} F {''.join(pieces)}" for stream, (first, pieces) in pending.items())
    return out
