"""Read job archives in memory, member by member, safely against hostile content.

Role: users of a cluster upload whatever their failed job left behind (``.tar``, ``.tar.gz``/``.tgz``,
``.tar.bz2``, ``.tar.xz``, ``.tar.zst``, ``.zip``, single-file ``.gz``, archives inside archives). This module
turns such an archive into a stream of :class:`Member` (name + decompressed bytes). Nothing is ever extracted
or written to disk; links, devices, FIFOs and directories are never followed or read.

Inputs: the archive as ``bytes`` or a ``Path`` (read as a stream), a display name, and a ``warnings`` list.
Outputs: an iterator of members; every problem becomes a line in ``warnings`` and never an exception
(only programming errors raise). Members read before a problem are still yielded.

Formats are sniffed by content (magic bytes; tar by its header checksum or ``ustar`` magic); the name is only
a hint when the content is ambiguous (a gzip whose first block is too short to tell ``gz`` from ``tar.gz``).

Member names: normalised, relative, '/'-separated, prefixed with the archive's display name and ``!/``:
``job.tar.gz!/logs/rank3.log``; a nested archive adds one more level:
``job.zip!/node1.tar.gz!/logs/rank3.log``. A ``.gz`` member is decompressed and keeps its own name
(``job.tar!/rank0.log.gz``); a single-file ``.gz`` yields one member named like the archive. Absolute
names, drive letters and ``..`` are made relative and resolved lexically inside the archive ("/etc/passwd"
-> "etc/passwd", "../../escape.log" -> "escape.log"), control characters become "?"; the data is kept
(it is only a label, nothing is written) and ONE warning per archive lists how many names were changed.
A name that normalises to nothing is skipped.

Limits (:class:`Limits`) and why:
- ``max_members``: entries of any type across the whole archive, nested included (tar bomb of tiny
  members, zip with millions of entries). Reaching it stops everything.
- ``max_member_bytes``: one member, decompressed; held in memory at once. Over it the member is skipped.
- ``max_total_bytes``: every decompressed byte processed (tar stream bytes, zip/gz member bytes, nested
  archives counted both as the member that holds them and as their contents, the holes of a sparse tar member
  counted as the zeros they become). Reaching it stops everything.
- ``max_ratio``: decompressed bytes so far / size of the outer archive, checked while streaming once more
  than ``ratio_min_bytes`` were produced (small archives of zeros are legitimately very compressible).
  It catches zip/gzip/tar bombs and overlapping-entry zip bombs long before the byte limits. Stops everything.
- ``max_depth``: the outer archive is depth 0; an archive found inside one at depth d is at depth d + 1
  and is expanded only if d + 1 <= max_depth (a ``.gz`` member counts as a level too, which also stops
  gzip quines). Deeper ones are skipped with a warning.
Declared sizes in headers are never trusted: every read is bounded by the limits as the bytes come.

Damage: a truncated or corrupt archive stops with one warning and keeps the members read before it (tar is
checked for its end-of-archive marker, since tarfile silently stops at a bad header). A zip whose central
directory is lost (a cut upload) is read from its local headers, in order, until the first problem; such
entries carry no file type, so a symlink entry there would come out as a small file holding the link text.
Encrypted zip members, unsupported compression methods and CRC errors skip that member only.
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import os
import stat
import struct
import sys
import zipfile
import zlib
from collections import Counter
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING

from ncclpm.util.escape import UNSAFE_IN_NAMES

if TYPE_CHECKING:  # (`tarfile`, ~3 ms, is imported when a tar archive is read: a job of plain logs never is)
    import tarfile

CHUNK = 1 << 20
SNIFF_BYTES = 65536
BLOCK = 512
MAX_EXAMPLES = 5

# Exceptions that mean "this content is bad", raised by the stdlib readers on hostile or damaged input (and
# `tarfile.TarError`: `_bad_content`).
BAD_CONTENT: tuple[type[BaseException], ...] = (
    zipfile.BadZipFile,
    zipfile.LargeZipFile,
    OSError,
    EOFError,
    zlib.error,
    lzma.LZMAError,
    struct.error,
    ValueError,
    NotImplementedError,
    RuntimeError,
    UnicodeError,
    OverflowError,
    MemoryError,
)


def _bad_content() -> tuple[type[BaseException], ...]:
    """BAD_CONTENT, `tarfile.TarError`, and the error of the optional zstandard package once it has been imported
    (called by `except` clauses: only once something was raised)."""
    import tarfile

    zstandard = sys.modules.get("zstandard")
    error = getattr(zstandard, "ZstdError", None)
    return (tarfile.TarError, *BAD_CONTENT, error) if isinstance(error, type) else (tarfile.TarError, *BAD_CONTENT)


@dataclass(frozen=True)
class Limits:
    """Bounds applied while reading one archive (see the module docstring for why)."""

    max_members: int = 100_000
    max_member_bytes: int = 2 * 1024**3
    max_total_bytes: int = 8 * 1024**3
    max_ratio: float = 200.0
    max_depth: int = 2
    ratio_min_bytes: int = 16 * 1024**2  # max_ratio applies only past this many decompressed bytes


DEFAULT_LIMITS = Limits()


@dataclass(frozen=True)
class Member:
    """One regular file of an archive: ``name`` like ``job.tar.gz!/logs/rank3.log``, ``data`` decompressed."""

    name: str
    data: bytes


class _LimitHit(Exception):
    """An archive-wide limit was reached: stop reading everything."""


class _TooBig(Exception):
    """One member is larger than max_member_bytes: skip it."""


class _NeedsZstd(Exception):
    """The zstandard package is not installed."""


# ----------------------------------------------------------------------------------------------- sniffing


def _tar_checksum_ok(block: bytes) -> bool:
    if len(block) < BLOCK:
        return False
    field = block[148:156].split(b"\0", 1)[0].strip()
    try:
        stored = int(field, 8)
    except ValueError:
        return False
    rest = block[:148] + b" " * 8 + block[156:BLOCK]
    return stored in (sum(rest), sum(struct.unpack("512b", rest)))


def _is_tar_block(block: bytes) -> bool:
    return block[257:262] == b"ustar" or _tar_checksum_ok(block)


def _sniff_gzip(name: str, head: bytes) -> str:
    dec = zlib.decompressobj(31)
    try:
        out = dec.decompress(head, BLOCK)
    except zlib.error:
        return "gz"
    if len(out) >= BLOCK or (len(out) >= 262 and out[257:262] == b"ustar"):
        return "tar.gz" if _is_tar_block(out) else "gz"
    if dec.eof:
        return "gz"
    return "tar.gz" if name.lower().endswith((".tar.gz", ".tgz")) else "gz"


def archive_kind(name: str, head: bytes) -> str | None:
    """Kind of archive from its first bytes (magic numbers); the name is only a hint for ambiguous gzip.

    Returns "tar" | "tar.gz" | "tar.bz2" | "tar.xz" | "tar.zst" | "zip" | "gz", or None for anything else.
    bz2/xz/zstd content is always taken as a compressed tar (single-file .bz2/.xz/.zst logs are not read).
    """
    if head[:2] == b"\x1f\x8b":
        return _sniff_gzip(name, head)
    if head[:4] in (b"PK\x03\x04", b"PK\x05\x06", b"PK\x07\x08"):
        return "zip"
    if head[:4] == b"\x28\xb5\x2f\xfd":
        return "tar.zst"
    if head[:6] == b"\xfd7zXZ\x00":
        return "tar.xz"
    if head[:3] == b"BZh" and head[4:10] in (b"1AY&SY", b"\x17rE8P\x90"):
        return "tar.bz2"
    if _is_tar_block(head[:BLOCK]):
        return "tar"
    return None


# ------------------------------------------------------------------------------------------ gzip helper


def _read_bounded(fh: IO[bytes], limit: int, charge: Callable[[int], None] | None = None) -> bytes:
    """Read all of ``fh`` in chunks; raise _TooBig past ``limit`` bytes (at most limit + CHUNK are read)."""
    parts: list[bytes] = []
    size = 0
    while chunk := fh.read(CHUNK):
        size += len(chunk)
        if charge is not None:
            charge(len(chunk))
        if size > limit:
            raise _TooBig(size)
        parts.append(chunk)
    return b"".join(parts)


def read_gzip_bounded(data: bytes, limit: int) -> bytes:
    """Decompress gzip ``data`` (several concatenated members allowed), refusing more than ``limit`` bytes.

    Raises ValueError naming the limit when the content is larger, and OSError (gzip.BadGzipFile) when the
    data is not gzip, is corrupt or is truncated.
    """
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(data), mode="rb") as gz:
            return _read_bounded(gz, limit)
    except _TooBig:
        raise ValueError(f"gzip content is larger than the limit of {limit} bytes (gzip bomb?)") from None
    except (EOFError, zlib.error) as exc:
        raise gzip.BadGzipFile(f"corrupt or truncated gzip data: {exc}") from exc


# ------------------------------------------------------------------------------------- budget and report


class _Budget:
    """Archive-wide counters shared by the outer archive and everything nested in it."""

    def __init__(self, limits: Limits, compressed_size: int) -> None:
        self.limits = limits
        self.compressed = max(compressed_size, 1)
        self.total = 0
        self.members = 0
        self.current = "(archive header)"

    def charge(self, n: int) -> None:
        self.total += n
        lim = self.limits
        if self.total > lim.max_total_bytes:
            raise _LimitHit(f"more than max_total_bytes={lim.max_total_bytes} decompressed")
        ratio = self.total / self.compressed
        if self.total > lim.ratio_min_bytes and ratio > lim.max_ratio:
            raise _LimitHit(
                f"decompressed/compressed ratio over max_ratio={lim.max_ratio:g} "
                f"({self.total} bytes from {self.compressed}) - decompression bomb?"
            )

    def count_member(self) -> None:
        self.members += 1
        if self.members > self.limits.max_members:
            raise _LimitHit(f"more than max_members={self.limits.max_members} entries (tar/zip bomb?)")


class _Metered:
    """Readable wrapper that charges every byte it returns to the budget.

    It reads with ``read1`` where it can, so that a truncated compressed stream loses as little as possible,
    and it refuses to be read again and again past the end: tarfile "seeks" over a member by reading, and a
    header may declare an absurd size (base-256 sizes go up to 2**95), which would otherwise loop for ever.
    """

    MAX_EMPTY_READS = 2

    def __init__(self, raw: IO[bytes], budget: _Budget) -> None:
        self._raw = raw
        self._read1 = getattr(raw, "read1", raw.read)
        self._budget = budget
        self._empty = 0

    def read(self, n: int = -1) -> bytes:
        if n is None or n < 0:
            return _read_bounded(self, self._budget.limits.max_total_bytes)
        data = self._read1(n) if n else b""
        if n and not data:
            self._empty += 1
            if self._empty > self.MAX_EMPTY_READS:
                raise EOFError("read past the end of the data (truncated, or a header declares more data)")
        else:
            self._empty = 0
        self._budget.charge(len(data))
        return data


@dataclass
class _Ctx:
    """What every member of one archive is read with: the warnings list, the limits and the budget left."""

    warnings: list[str]
    limits: Limits
    budget: _Budget


class _Scan:
    """What was skipped or renamed in one archive; reported as a few summary warnings at its end."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.special: Counter[str] = Counter()
        self.renamed: list[tuple[str, str]] = []
        self.skipped: dict[str, list[str]] = {}

    def member_name(self, raw: str) -> str | None:
        safe, changed = _safe_name(raw)
        if changed:
            self.renamed.append((raw, safe))
        return f"{self.name}!/{safe}" if safe else None

    def skip(self, member: str, reason: str) -> None:
        self.skipped.setdefault(reason, []).append(member)

    def flush(self, warnings: list[str]) -> None:
        if self.special:
            counts = ", ".join(f"{n} {kind}" for kind, n in sorted(self.special.items()))
            warnings.append(f"{self.name}: skipped {counts} - links and special files are never followed or read")
        if self.renamed:
            raw, safe = self.renamed[0]
            example = f"{_short(raw)} -> {_short(safe or '(skipped)')}"
            warnings.append(
                f"{self.name}: {len(self.renamed)} member name(s) were absolute, had '..' or "
                f"control characters - made relative (e.g. {example})"
            )
        for reason, names in self.skipped.items():
            shown = ", ".join(_short(n) for n in names[:MAX_EXAMPLES])
            more = f" (+{len(names) - MAX_EXAMPLES} more)" if len(names) > MAX_EXAMPLES else ""
            warnings.append(f"{self.name}: {len(names)} member(s) skipped - {reason}: {shown}{more}")
        self.special.clear()
        self.renamed.clear()
        self.skipped.clear()


def _short(name: str, limit: int = 160) -> str:
    """repr() of a member name for a warning, cut in the middle when a hostile name is very long."""
    text = repr(name)
    return text if len(text) <= limit else f"{text[: limit // 2]}...{text[-limit // 2 :]}"


def _safe_name(raw: str) -> tuple[str, bool]:
    """Relative '/'-separated name with '..' resolved inside the archive; True if it had to change."""
    text = UNSAFE_IN_NAMES.sub("?", raw)  # C0/C1 controls, bidi overrides, undecodable bytes
    text = text.replace("\\", "/")
    changed = text != raw.replace("\\", "/") or text.startswith("/")
    if len(text) >= 2 and text[1] == ":" and text[0].isalpha():
        text, changed = text[2:], True
    parts: list[str] = []
    for part in text.split("/"):
        if part == "..":
            changed = True
            if parts:
                parts.pop()
        elif part not in ("", "."):
            parts.append(part)
    return "/".join(parts), changed


# ---------------------------------------------------------------------------------------- the readers


def _emit(name: str, data: bytes, scan: _Scan, ctx: _Ctx, depth: int) -> Iterator[Member]:
    """Yield one member, or expand it when its content is itself an archive (bounded by max_depth)."""
    kind = archive_kind(name, data[:SNIFF_BYTES])
    if kind is None:
        yield Member(name, data)
        return
    if depth + 1 > ctx.limits.max_depth:
        scan.skip(name, f"nested archive ({kind}) deeper than max_depth={ctx.limits.max_depth}")
        return
    yield from _iter_kind(io.BytesIO(data), name, kind, ctx, depth + 1)


def _decompressor(fh: IO[bytes], kind: str) -> IO[bytes]:
    if kind == "tar.gz":
        return gzip.GzipFile(fileobj=fh, mode="rb")
    if kind == "tar.bz2":
        return bz2.BZ2File(fh)
    if kind == "tar.xz":
        return lzma.LZMAFile(fh)
    if kind == "tar.zst":
        try:
            import zstandard
        except ImportError:
            raise _NeedsZstd from None
        return zstandard.ZstdDecompressor().stream_reader(fh, read_across_frames=True)  # type: ignore[return-value]
    return fh


def _special_kind(info: tarfile.TarInfo) -> str:
    if info.issym() or info.islnk():
        return "symlink(s)" if info.issym() else "hard link(s)"
    if info.ischr() or info.isblk():
        return "device file(s)"
    return "FIFO(s)" if info.isfifo() else "other special entry(ies)"


def _tar_member(tf: tarfile.TarFile, info: tarfile.TarInfo, scan: _Scan, ctx: _Ctx, depth: int) -> Iterator[Member]:
    if info.isdir():
        return
    if not info.isreg():
        scan.special[_special_kind(info)] += 1
        return
    name = scan.member_name(info.name)
    if name is None:
        return
    ctx.budget.current = name
    if info.size > ctx.limits.max_member_bytes:
        scan.skip(name, f"larger than max_member_bytes={ctx.limits.max_member_bytes}")
        return
    fobj = tf.extractfile(info)
    try:
        data = _read_charged(fobj, ctx) if fobj is not None else b""
    except _TooBig:
        scan.skip(name, f"larger than max_member_bytes={ctx.limits.max_member_bytes}")
        return
    yield from _emit(name, data, scan, ctx, depth)


def _read_charged(fobj: IO[bytes], ctx: _Ctx) -> bytes:
    """A tar member's bytes, charging the budget for those the metered stream did not: the holes of a sparse
    member (GNU `tar -S`) cost nothing in the archive and everything in memory."""
    budget, parts, size = ctx.budget, [], 0
    start = budget.total
    while chunk := fobj.read(CHUNK):
        size += len(chunk)
        if (uncharged := size - (budget.total - start)) > 0:
            budget.charge(uncharged)
        if size > ctx.limits.max_member_bytes:
            raise _TooBig(size)
        parts.append(chunk)
    return b"".join(parts)


def _check_tar_end(tf: tarfile.TarFile, scan: _Scan, warnings: list[str]) -> None:
    """A complete tar ends with two zero blocks; tarfile silently stops at a truncated or bad header."""
    rest = tf.fileobj.read(SNIFF_BYTES) if tf.fileobj is not None else b""
    if len(rest) < BLOCK:
        warnings.append(
            f"{scan.name}: truncated - it ends {tf.offset} bytes in without its end-of-archive "
            "marker; members read before were kept"
        )
    elif rest.count(0) != len(rest):
        warnings.append(
            f"{scan.name}: unreadable tar header or data after the end-of-archive marker at "
            f"offset {tf.offset} - the rest is ignored"
        )


def _iter_tar(fh: IO[bytes], kind: str, scan: _Scan, ctx: _Ctx, depth: int) -> Iterator[Member]:
    import tarfile

    stream = _Metered(_decompressor(fh, kind), ctx.budget)
    try:
        tf = tarfile.open(fileobj=stream, mode="r|")  # type: ignore[call-overload]  # noqa: SIM115
    except tarfile.ReadError as exc:
        what = "tar archive" if kind == "tar" else f"tar archive inside the {kind[4:]} compression"
        ctx.warnings.append(f"{scan.name}: not a readable {what} ({exc}) - skipped")
        return
    with tf:
        for info in tf:
            ctx.budget.count_member()
            yield from _tar_member(tf, info, scan, ctx, depth)
        _check_tar_end(tf, scan, ctx.warnings)


def _zip_special(mode: int) -> str | None:
    if not stat.S_IFMT(mode) or stat.S_ISREG(mode):  # no type bits: written by a tool that only sets perms
        return None
    if stat.S_ISLNK(mode):
        return "symlink(s)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "device file(s)"
    return "FIFO(s)" if stat.S_ISFIFO(mode) else "other special entry(ies)"


def _zip_member(zf: zipfile.ZipFile, info: zipfile.ZipInfo, scan: _Scan, ctx: _Ctx, depth: int) -> Iterator[Member]:
    mode = info.external_attr >> 16
    if info.filename.endswith("/") or stat.S_ISDIR(mode):
        return
    special = _zip_special(mode)
    if special is not None:
        scan.special[special] += 1
        return
    name = scan.member_name(info.filename)
    if name is None:
        return
    ctx.budget.current = name
    if info.flag_bits & 0x1:
        scan.skip(name, "encrypted")
        return
    try:
        with zf.open(info) as member:
            data = _read_bounded(member, ctx.limits.max_member_bytes, ctx.budget.charge)
    except _TooBig:
        scan.skip(name, f"larger than max_member_bytes={ctx.limits.max_member_bytes}")
        return
    except _bad_content() as exc:
        scan.skip(name, f"unreadable ({type(exc).__name__}: {exc})")
        return
    yield from _emit(name, data, scan, ctx, depth)


def _iter_zip(fh: IO[bytes], scan: _Scan, ctx: _Ctx, depth: int) -> Iterator[Member]:
    try:
        zf = zipfile.ZipFile(fh)
    except zipfile.BadZipFile as exc:
        outcome = yield from _iter_zip_salvage(fh, scan, ctx, depth)
        ctx.warnings.append(f"{scan.name}: zip central directory missing or damaged ({exc}) - truncated? {outcome}")
        return
    with zf:
        for info in zf.infolist():
            ctx.budget.count_member()
            yield from _zip_member(zf, info, scan, ctx, depth)


# A truncated zip has lost its central directory (at the end); its members can still be read in order from
# the local headers. Best effort: stored/deflate only, every problem ends the recovery.
_LOCAL = struct.Struct("<4s5H3I2H")  # signature, version, flags, method, time, date, crc, csize, usize, lens


class _SalvageStop(Exception):
    """The local-header recovery of a damaged zip cannot go on."""


def _inflate(fh: IO[bytes], limit: int, charge: Callable[[int], None]) -> bytes:
    """Raw deflate stream from ``fh`` up to its end marker; ``fh`` is left just after the stream."""
    dec = zlib.decompressobj(-15)
    parts: list[bytes] = []
    size, pending = 0, b""
    while not dec.eof:
        pending = pending or fh.read(CHUNK)
        if not pending:
            raise _SalvageStop("member data is truncated")
        out = dec.decompress(pending, CHUNK)
        pending = dec.unconsumed_tail
        size += len(out)
        charge(len(out))
        if size > limit:
            raise _SalvageStop(f"member larger than max_member_bytes={limit}")
        parts.append(out)
    fh.seek(-len(dec.unused_data), io.SEEK_CUR)
    return b"".join(parts)


def _descriptor_crc(fh: IO[bytes]) -> int:
    first = fh.read(4)
    rest = fh.read(12 if first == b"PK\x07\x08" else 8)
    if len(rest) < 8:
        raise _SalvageStop("data descriptor is truncated")
    return struct.unpack("<I", rest[:4] if first == b"PK\x07\x08" else first)[0]


def _salvage_data(fh: IO[bytes], flags: int, method: int, crc: int, csize: int, ctx: _Ctx) -> bytes:
    limit, charge = ctx.limits.max_member_bytes, ctx.budget.charge
    if method not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        raise _SalvageStop(f"compression method {method} cannot be recovered")
    if flags & 0x8:
        if method == zipfile.ZIP_STORED:
            raise _SalvageStop("stored member of unknown size (data descriptor)")
        data = _inflate(fh, limit, charge)
        crc = _descriptor_crc(fh)
    else:
        comp = fh.read(csize)
        if len(comp) < csize:
            raise _SalvageStop("member data is truncated")
        if method == zipfile.ZIP_STORED and csize > limit:
            raise _SalvageStop(f"member larger than max_member_bytes={limit}")
        if method == zipfile.ZIP_STORED:
            charge(len(comp))
            data = comp
        else:
            data = _inflate(io.BytesIO(comp), limit, charge)
    if zlib.crc32(data) != crc:
        raise _SalvageStop("CRC mismatch (damaged data)")
    return data


def _salvage_one(fh: IO[bytes], scan: _Scan, ctx: _Ctx, depth: int) -> Iterator[Member]:
    head = fh.read(_LOCAL.size)
    if len(head) < _LOCAL.size or head[:4] != b"PK\x03\x04":
        raise _SalvageStop("end of the members" if head[:4] == b"PK\x01\x02" else "no further member header")
    _, _, flags, method, _, _, crc, csize, _, name_len, extra_len = _LOCAL.unpack(head)
    raw_name = fh.read(name_len).decode("utf-8" if flags & 0x800 else "cp437", "replace")
    fh.read(extra_len)
    ctx.budget.count_member()
    name = scan.member_name(raw_name) or f"{scan.name}!/(unnamed)"
    ctx.budget.current = name
    if flags & 0x1:
        if flags & 0x8:
            raise _SalvageStop(f"encrypted member {_short(name)} of unknown size")
        fh.seek(csize, io.SEEK_CUR)
        scan.skip(name, "encrypted")
        return
    data = _salvage_data(fh, flags, method, crc, csize, ctx)
    if not raw_name.endswith("/"):
        yield from _emit(name, data, scan, ctx, depth)


def _iter_zip_salvage(fh: IO[bytes], scan: _Scan, ctx: _Ctx, depth: int) -> Generator[Member, None, str]:
    """Read members in order from their local headers; returns why it stopped and how many it read."""
    fh.seek(0)
    done = 0
    while True:
        try:
            yield from _salvage_one(fh, scan, ctx, depth)
        except _SalvageStop as stop:
            where = _short(ctx.budget.current) if ctx.budget.current else "the next header"
            return f"recovered {done} entry(ies) from the local headers, then stopped at {where}: {stop}"
        done += 1
        ctx.budget.current = ""


def _iter_gz(fh: IO[bytes], scan: _Scan, ctx: _Ctx, depth: int) -> Iterator[Member]:
    ctx.budget.current = scan.name
    ctx.budget.count_member()
    try:
        with gzip.GzipFile(fileobj=fh, mode="rb") as gz:
            data = _read_bounded(gz, ctx.limits.max_member_bytes, ctx.budget.charge)
    except _TooBig:
        scan.skip(scan.name, f"decompresses to more than max_member_bytes={ctx.limits.max_member_bytes}")
        return
    yield from _emit(scan.name, data, scan, ctx, depth)


def _read_kind(fh: IO[bytes], kind: str, scan: _Scan, ctx: _Ctx, depth: int) -> Iterator[Member]:
    if kind == "zip":
        return _iter_zip(fh, scan, ctx, depth)
    if kind == "gz":
        return _iter_gz(fh, scan, ctx, depth)
    return _iter_tar(fh, kind, scan, ctx, depth)


def _iter_kind(fh: IO[bytes], name: str, kind: str, ctx: _Ctx, depth: int) -> Iterator[Member]:
    """Read one (possibly nested) archive; damage stops only this archive, limits stop everything."""
    scan = _Scan(name)
    try:
        yield from _read_kind(fh, kind, scan, ctx, depth)
    except _LimitHit:
        scan.flush(ctx.warnings)
        raise
    except _NeedsZstd:
        ctx.warnings.append(
            f"{name}: a .tar.zst archive needs the 'zstandard' package (pip install zstandard) - skipped"
        )
    except _bad_content() as exc:
        where = _short(ctx.budget.current)
        ctx.warnings.append(
            f"{name}: damaged or truncated {kind} archive while reading {where} "
            f"({type(exc).__name__}: {exc}) - members read before were kept, the rest is "
            "skipped"
        )
    scan.flush(ctx.warnings)


def _open(data_or_path: bytes | Path) -> tuple[IO[bytes], int]:
    if isinstance(data_or_path, bytes | bytearray | memoryview):
        raw = bytes(data_or_path)
        return io.BytesIO(raw), len(raw)
    fh = Path(data_or_path).open("rb")  # noqa: SIM115 - closed by iter_archive
    return fh, os.fstat(fh.fileno()).st_size


def iter_archive(
    data_or_path: bytes | Path, display_name: str, warnings: list[str], limits: Limits = DEFAULT_LIMITS, depth: int = 0
) -> Iterator[Member]:
    """Yield the regular files of an archive (nested archives expanded), never raising for bad content.

    Problems are appended to ``warnings``, each naming the archive, the member and the limit involved.
    """
    try:
        fh, size = _open(data_or_path)
    except OSError as exc:
        warnings.append(f"{display_name}: cannot be read ({exc.strerror or exc}) - skipped")
        return
    with fh:
        ctx = _Ctx(warnings, limits, _Budget(limits, size))
        head = fh.read(SNIFF_BYTES)
        fh.seek(0)
        kind = archive_kind(display_name, head)
        if kind is None:
            warnings.append(f"{display_name}: not a recognised archive (tar, tar.gz/bz2/xz/zst, zip, gz) - skipped")
            return
        try:
            yield from _iter_kind(fh, display_name, kind, ctx, depth)
        except _LimitHit as hit:
            warnings.append(
                f"{display_name}: stopped while reading {_short(ctx.budget.current)}: {hit} - "
                "members read before were kept"
            )
