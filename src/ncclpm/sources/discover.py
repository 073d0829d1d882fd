"""Turn what the user pointed at (a folder, files, archives, or stdin) into one `Job` of sources.

Folders are walked recursively without following symlinks (no loops, nothing outside the tree); FIFOs,
devices and unreadable files are skipped with a warning. Archives are read in memory member by member
(`archives.py`). Every source is classified by its content: flight-recorder dump, torchelastic error file,
stack dump, code or configuration (`code.py`: read for settings only, never as evidence), text log, or binary
junk. Nothing is written anywhere.
"""

from __future__ import annotations

import contextlib
import gzip
import os
import re
import stat
import zlib
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from ncclpm.sources import archives, sparse
from ncclpm.sources.code import MAX_CODE_BYTES, code_language, is_log_after_all
from ncclpm.sources.container_logs import (
    ContainerLogReader,
    container_format,
    decode_container_log,
    has_pieces,
    needs_decoding,
)
from ncclpm.sources.fr_sniff import looks_like_fr_dump
from ncclpm.sources.names import unique_names
from ncclpm.sources.own_reports import is_own_report
from ncclpm.sources.stack_sniff import looks_like_stack_dump
from ncclpm.util.encoding import decode_text, utf16_codec
from ncclpm.util.escape import clean_name

HEAD_BYTES = 65536
MAX_TEXT_BYTES = 16 * 1024**3  # a decompressed .gz log larger than this is refused (gzip bomb)


class SourceKind(StrEnum):
    """What a source is, from its content."""

    TEXT = "text"  # a log
    FR = "fr"  # a flight-recorder dump (pickle or JSON)
    ERROR_FILE = "errorfile"  # a torchelastic error file (error.json)
    STACK = "stack"  # a stack dump of a hung process (py-spy, gdb, faulthandler)
    CODE = "code"  # a script or configuration file, read for settings only


@dataclass(frozen=True)
class Source:
    """One input file: on disk (`path`) or in memory (`data`, from an archive or stdin). `container`: a container
    log file on disk ("docker" or "cri", `container_logs.py`), read as the lines the container wrote - decoded as
    it is read (`open_lines`), never whole."""

    name: str
    kind: SourceKind
    path: Path | None = None
    data: bytes | None = None
    container: str | None = None

    @contextmanager
    def open_lines(self) -> Iterator[Any]:
        """A file on disk as a binary stream of its text (decompressed for a .gz; a container log decoded)."""
        assert self.path is not None
        with _open_stored(self.path) as fh:
            yield ContainerLogReader(fh, self.container) if self.container else fh

    def read_head(self, limit: int) -> bytes:
        """At most the first `limit` bytes (decompressed for a .gz on disk), without reading the rest."""
        if self.data is not None:
            return self.data[:limit]
        assert self.path is not None
        if self.container:
            with self.open_lines() as fh:
                return fh.read(limit)
        return _read_at_most(self.path, limit)

    def size(self) -> int:
        """Its bytes as stored (a .gz on disk: compressed); 0 if it is gone."""
        if self.data is not None:
            return len(self.data)
        try:
            return self.path.stat().st_size if self.path is not None else 0
        except OSError:
            return 0

    def read_bytes(self) -> bytes:
        if self.data is not None:
            return self.data
        assert self.path is not None
        if self.container:
            with self.open_lines() as fh:
                return fh.read(MAX_TEXT_BYTES)
        raw = self.path.read_bytes()
        return archives.read_gzip_bounded(raw, MAX_TEXT_BYTES) if raw[:2] == b"\x1f\x8b" else raw


@dataclass
class Job:
    """All sources of one failed job, plus the warnings met while collecting them."""

    name: str
    sources: list[Source] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    seen_files: dict[tuple[int, int], str] = field(default_factory=dict, repr=False)  # (st_dev, st_ino) -> name

    def of_kind(self, kind: SourceKind) -> list[Source]:
        return [s for s in self.sources if s.kind == kind]


_NOT_CONTROL = bytes(b for b in range(256) if not (b < 9 or 13 < b < 32))


def _mostly_control(sample: bytes) -> bool:
    control = len(sample.translate(None, _NOT_CONTROL))  # C-level count of bytes < 9 or 14..31
    return control > max(8, len(sample) // 10)


# Terminal output that is text: colour and cursor escape sequences, and the backspace dance of a progress spinner
# (pip writes "\b\b\b   \b\b\b" before each frame). Three or more bytes in a fixed shape: random bytes almost
# never hold one, so removing them before counting control bytes keeps binary junk binary.
ANSI_CSI = r"\x1b\[[0-9;?]*[A-Za-z]"  # a colour or cursor code (Python and polars regex alike)
_TERMINAL_TEXT = re.compile(ANSI_CSI.encode() + rb"|(\x08+) +\1")


def looks_binary(head: bytes) -> bool:
    """True for content that is not text: many NULs/control bytes (a stray NUL in a log is fine).

    Runs of NULs are padding, not content: a node that crashed leaves its logs with a zero-filled tail or hole
    (delayed allocation), and such a log is still text. Colour codes and a spinner's backspaces are text too."""
    if not head:
        return False
    if utf16_codec(head):
        return False  # UTF-16 text, with a BOM or without
    sample = head[:8192]
    if not _mostly_control(sample):
        return False
    text = _TERMINAL_TEXT.sub(b"", re.sub(rb"\0{16,}", b"", sample))
    return not text.strip() or _mostly_control(text)


_JSON_LINES = re.compile(rb"\}[ \t]*\r?\n[ \t]*\{")


def _looks_like_error_file(name: str, head: bytes) -> bool:
    """One JSON object with a "message" (torchelastic writes one line); JSON lines (a structured log named
    *.json, one object per line) are a text log."""
    return name.endswith(".json") and b'"message"' in head[:4096] and b"{" in head[:16] and not _JSON_LINES.search(head)


def classify(name: str, head: bytes) -> SourceKind | None:
    """Kind of a source from its name and first bytes; None = not something ncclpm reads."""
    if looks_like_fr_dump(name, head):
        return SourceKind.FR
    if _looks_like_error_file(name, head):
        return SourceKind.ERROR_FILE
    if looks_like_stack_dump(name, head):
        return SourceKind.STACK
    if looks_binary(head):
        return None
    if code_language(name, head, truncated=len(head) >= HEAD_BYTES):
        return SourceKind.CODE
    return SourceKind.TEXT


def _add_gzip(path: Path, display: str, job: Job) -> None:
    """A single-file .gz on disk. One streaming pass that keeps only the head refuses a gzip bomb with the
    archive limits (ratio, size) before anything is scanned; a truncated or corrupt stream keeps the bytes
    before the damage. A sound file is left on disk for the lines scan."""
    lim = archives.DEFAULT_LIMITS
    compressed = max(path.stat().st_size, 1)
    head, total, problem = b"", 0, None
    with path.open("rb") as raw:
        try:
            with gzip.GzipFile(fileobj=raw, mode="rb") as gz:
                while chunk := gz.read1(archives.CHUNK):
                    head += chunk[: HEAD_BYTES - len(head)]
                    total += len(chunk)
                    if total > MAX_TEXT_BYTES or (total > lim.ratio_min_bytes and total > lim.max_ratio * compressed):
                        job.warnings.append(
                            f"{display}: decompresses to over {total} bytes from {compressed} (more than "
                            f"{lim.max_ratio:g} times its size) - gzip bomb? skipped"
                        )
                        return
        except (OSError, EOFError, zlib.error) as exc:
            problem = str(exc) or type(exc).__name__
    if problem is None:
        _add_classified(display, head, job, path=path)
    elif total == 0:
        job.warnings.append(f"{display}: cannot be read (corrupt gzip: {problem}) - skipped")
    elif total > lim.max_member_bytes:
        job.warnings.append(
            f"{display}: corrupt gzip ({problem}) after {total} bytes, too many to hold in memory - skipped"
        )
    else:
        job.warnings.append(
            f"{display}: truncated or corrupt gzip ({problem}); the {total} bytes before the damage were read"
        )
        _add_classified(display, head, job, data=_gzip_prefix(path, total))


def _gzip_prefix(path: Path, size: int) -> bytes:
    """The first `size` decompressed bytes of a damaged gzip file (what `_add_gzip` found readable)."""
    parts: list[bytes] = []
    got = 0
    with (
        path.open("rb") as raw,
        gzip.GzipFile(fileobj=raw, mode="rb") as gz,
        contextlib.suppress(OSError, EOFError, zlib.error),
    ):
        while got < size and (chunk := gz.read1(min(archives.CHUNK, size - got))):
            parts.append(chunk)
            got += len(chunk)
    return b"".join(parts)


def _label(path: Path, root: Path | None = None) -> str:
    """A path as a name in warnings and reports: relative to `root`, one printable line."""
    return clean_name(str(path.relative_to(root)) if root is not None and path != root else str(path))


def _listing(folder: Path, root: Path, job: Job) -> tuple[list[str], list[str]]:
    """(sub-folders, files) of one folder, sorted; symlinked folders and unlistable folders are warnings."""
    try:
        with os.scandir(folder) as it:
            entries = sorted(it, key=lambda e: e.name)
    except OSError as exc:
        job.warnings.append(f"{_label(folder, root)}: folder cannot be listed ({exc.strerror or exc}) - skipped")
        return [], []
    folders, files = [], []
    for e in entries:
        try:
            is_dir = e.is_dir(follow_symlinks=False)
        except OSError:
            is_dir = False
        if is_dir:
            folders.append(e.name)
        elif e.is_symlink() and Path(e.path).is_dir():
            job.warnings.append(f"{_label(Path(e.path), root)}: symlinked folder not followed")
        else:
            files.append(e.name)
    return folders, files


def _walk(root: Path, job: Job) -> Iterator[Path]:
    """Files under `root`, depth first in name order, without following symlinked folders. Iterative: a folder
    nested thousands of levels deep is no RecursionError."""
    stack = [root]
    while stack:
        folder = stack.pop()
        folders, files = _listing(folder, root, job)
        for fname in files:
            path = folder / fname
            if path.is_symlink():
                try:
                    inside = path.resolve().is_relative_to(root.resolve())
                except (OSError, RuntimeError):  # RuntimeError: a symlink loop (Python < 3.13)
                    job.warnings.append(f"{_label(path, root)}: symlink loop - skipped")
                    continue
                if not inside:
                    job.warnings.append(
                        f"{_label(path, root)}: symlink to a file outside the job folder - not followed"
                    )
                    continue
            yield path
        stack.extend(folder / d for d in reversed(folders))


def _first_time_seen(st: os.stat_result, display: str, job: Job) -> bool:
    """False (with a warning) for a file already read under another name: a hard link, or the same file given
    twice - its lines would count twice."""
    key = (st.st_dev, st.st_ino)
    if key in job.seen_files:
        job.warnings.append(f"{display}: same file as {job.seen_files[key]} - read once")
        return False
    job.seen_files[key] = display
    return True


def _add_file(path: Path, display: str, job: Job) -> None:
    try:
        st = path.stat()
        if not stat.S_ISREG(st.st_mode):
            job.warnings.append(f"{display}: not a regular file (FIFO, device or socket) - skipped")
            return
        if not _first_time_seen(st, display, job):
            return
        with path.open("rb") as fh:
            raw_head = fh.read(HEAD_BYTES)
        outer = archives.archive_kind(display, raw_head)
        if outer not in (None, "gz"):
            _add_archive(path, display, job)  # streamed: the archive itself is never held in memory
            return
        if outer == "gz":
            _add_gzip(path, display, job)
            return
        if sparse.has_holes(st) and _add_sparse(path, st, display, job):
            return
    except OSError as exc:
        job.warnings.append(f"{display}: cannot be read ({exc.strerror or exc}) - skipped")
        return
    _add_classified(display, raw_head, job, path=path)


def _add_sparse(path: Path, st: os.stat_result, display: str, job: Job) -> bool:
    """A sparse file read without its holes (`sparse.py`); False when the file system cannot tell them."""
    read = sparse.read_without_holes(path, st.st_size)
    if read is None:
        return False
    data, holes, cut = read
    more = f"; only its first {sparse.MAX_DATA:,} bytes of data were read" if cut else ""
    job.warnings.append(
        f"{display}: sparse file - {holes:,} bytes of holes (never written: a crashed node, a preallocated or "
        f"truncated file) skipped, {len(data):,} bytes of data read{more}"
    )
    _add_classified(display, data[:HEAD_BYTES], job, data=data)
    return True


def _add_classified(display: str, head: bytes, job: Job, path: Path | None = None, data: bytes | None = None) -> None:
    if not head:
        job.warnings.append(f"{display}: empty file")
        return
    if is_own_report(head):
        job.warnings.append(f"{display}: a report ncclpm wrote - not read as evidence")
        return
    kind = classify(display, head)
    if kind is None:
        job.warnings.append(f"{display}: binary content, not a log or a flight-recorder dump - skipped")
        return
    if kind == SourceKind.CODE and _a_log_after_all(display, head, path, data):
        kind = SourceKind.TEXT
    container = None
    if kind == SourceKind.TEXT and (fmt := container_format(head)) is not None and _decoded(fmt, path, data):
        job.warnings.append(
            f"{display}: {'Docker json-file' if fmt == 'docker' else 'CRI (Kubernetes)'} container log - read as the "
            "lines the container wrote, the pieces of each line joined; line numbers are those `docker logs` / "
            "`kubectl logs` print"
        )
        if data is not None:  # (already in memory: decoded whole)
            data = decode_container_log(fmt, data)
        else:
            container = fmt  # decoded as it is read
    job.sources.append(Source(display, kind, path=path, data=data, container=container))


def _decoded(fmt: str, path: Path | None, data: bytes | None) -> bool:
    """Whether a Docker json-file or CRI log is read as the lines the container wrote (`container_logs.py`), not
    as it is: unless its records need nothing joined, or it cannot be read (reading it again is where the warning
    comes). A file is looked through a chunk at a time (a rotated `-json.log.1.gz` decompressed as it is read)."""
    if data is not None:
        return needs_decoding(fmt, data)
    if path is None:
        return False
    try:
        with _open_stored(path) as fh:
            return has_pieces(fmt, fh)
    except (OSError, EOFError, zlib.error):
        return False


def _a_log_after_all(display: str, head: bytes, path: Path | None, data: bytes | None) -> bool:
    """Code or log is decided on the whole file, not its head (`code.is_log_after_all`): a file whose head reads
    as code is a log when the rest of it holds a job's lines. A file larger than any code is a log too."""
    if data is None and path is not None:
        if len(head) < HEAD_BYTES and path.suffix != ".gz":
            data = head  # (the head is the whole file)
        else:
            try:
                data = _read_at_most(path, MAX_CODE_BYTES + 1)
            except (OSError, EOFError, zlib.error):
                return False  # (reading it again is where the warning comes)
    if data is None or len(data) > MAX_CODE_BYTES:
        return True
    lang = code_language(display, head, truncated=len(head) >= HEAD_BYTES) or "python"
    text = decode_text(data)
    return is_log_after_all(lang, text)


@contextmanager
def _open_stored(path: Path) -> Iterator[Any]:
    """A file's bytes as a binary stream, decompressed when gzipped."""
    with path.open("rb") as fh:
        if fh.read(2) != b"\x1f\x8b":
            fh.seek(0)
            yield fh
            return
        fh.seek(0)
        with gzip.GzipFile(fileobj=fh, mode="rb") as gz:
            yield gz


def _read_at_most(path: Path, limit: int) -> bytes:
    """At most `limit` bytes of a file (decompressed when gzipped)."""
    with path.open("rb") as fh:
        if fh.read(2) != b"\x1f\x8b":
            fh.seek(0)
            return fh.read(limit)
        fh.seek(0)
        with gzip.GzipFile(fileobj=fh, mode="rb") as gz:
            return gz.read(limit)


def _add_archive(data: bytes | Path, display: str, job: Job) -> None:
    for member in archives.iter_archive(data, display, job.warnings):
        if archives.archive_kind(member.name, member.data[:512]) not in (None, "gz"):
            continue  # nested archives are expanded by iter_archive itself
        _add_classified(clean_name(member.name), member.data[:HEAD_BYTES], job, data=member.data)


def _job_name(paths: list[str | Path]) -> str:
    """The folder or archive given, or the folder shared by the files given."""
    if not paths:
        return "stdin"
    if len(paths) == 1:
        return clean_name(paths[0])
    parents = {str(Path(p).parent) for p in paths}
    return clean_name(parents.pop() if len(parents) == 1 else f"{paths[0]} (+{len(paths) - 1} more)")


def _add_path(p: str | Path, job: Job) -> Path | None:
    """Add one argument's sources; returns the folder their names are relative to (None if nothing)."""
    path = Path(p)
    if path.is_dir():
        for f in _walk(path, job):
            _add_file(f, _label(f, path), job)
        return Path(os.path.abspath(path))
    if path.exists() or path.is_symlink():
        _add_file(path, clean_name(path.name), job)
        return Path(os.path.abspath(path)).parent
    job.warnings.append(f"{clean_name(p)}: no such file or folder")
    return None


def collect(paths: Iterable[str | Path], stdin_bytes: bytes | None = None, name: str | None = None) -> Job:
    """Build a Job from paths (files, folders, archives) and/or text read from stdin. Every source gets a name
    of its own (`names.py`): two files with the same relative name in two inputs are both read."""
    paths = list(paths)
    job = Job(clean_name(name) if name else _job_name(paths))
    anchors: list[Path | None] = []
    if stdin_bytes is not None:
        if archives.archive_kind("<stdin>", stdin_bytes[:512]) not in (None, "gz"):
            _add_archive(stdin_bytes, "<stdin>", job)  # `cat job.tar.gz | ncclpm diagnose -`
        else:
            _add_classified("<stdin>", stdin_bytes[:HEAD_BYTES], job, data=stdin_bytes)
        anchors += [None] * len(job.sources)
    for p in paths:
        before = len(job.sources)
        anchor = _add_path(p, job)
        anchors += [anchor] * (len(job.sources) - before)
    job.sources = unique_names(job.sources, anchors, job.warnings)
    return job
