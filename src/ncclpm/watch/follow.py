"""Follow the job's log files as they grow (`tail -F` over a folder): the new complete lines of each, with their
line numbers.

Files found when the watch starts are followed from their end (their old lines are history, not a hang that
starts now); files that appear later are read from their start. A file that shrinks or is replaced (truncated,
rotated) is read again from its start. What is read at each poll is bounded (`max_read` per file, `max_line`
per line), so a flood of output delays the reading but never grows the watcher's memory. Binary files
(checkpoints, flight-recorder pickles, archives) and the watcher's own output folder are never followed.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

_BINARY_MAGIC = (b"\x80", b"\x1f\x8b", b"PK\x03\x04", b"\x28\xb5\x2f\xfd", b"BZh", b"\xfd7zXZ", b"\x93NUMPY")
_SKIP_DIRS = {".git", "__pycache__", ".hg", ".svn", "node_modules", ".cache"}
_COUNT_CHUNK = 1 << 20


@dataclass
class Chunk:
    """New complete lines of one file: `lines[i]` is line `first + i` of it (None: numbers unknown)."""

    name: str  # relative to JOBDIR, as `ncclpm diagnose JOBDIR` names it
    first: int
    lines: list[str]


@dataclass
class _Followed:
    path: Path
    name: str
    ino: int
    offset: int
    line_no: int  # complete lines before `offset`
    partial: bytes = b""
    binary: bool | None = None  # None: not decided yet (the file was empty)


def _looks_binary(head: bytes) -> bool:
    return head.startswith(_BINARY_MAGIC) or b"\0" in head[:4096]


def _history(
    path: Path, size: int, wanted: re.Pattern[bytes] | None, keep: int = 50
) -> tuple[int, list[tuple[int, str]]]:
    """The lines in the first `size` bytes, and the last `keep` of them that `wanted` finds (numbered from 1), read a
    block at a time."""
    n, found, carry = 0, [], b""
    with path.open("rb") as fh:
        left = size
        while left > 0 and (block := fh.read(min(_COUNT_CHUNK, left))):
            left -= len(block)
            data = carry + block
            cut = data.rfind(b"\n") + 1
            whole, carry = data[:cut], data[cut:][-(64 << 10) :]
            if wanted is not None and wanted.search(whole):
                for i, line in enumerate(whole.split(b"\n")[:-1]):
                    if wanted.search(line):
                        found.append((n + i + 1, line[: 64 << 10].rstrip(b"\r").decode("utf-8", "replace")))
                found = found[-keep:]
            n += whole.count(b"\n")
    return n, found


class LogFollower:
    def __init__(
        self,
        jobdir: Path,
        skip: Path | None = None,
        *,
        max_files: int = 1000,
        max_entries: int = 20000,
        max_depth: int = 8,
        max_read: int = 4 << 20,
        max_line: int = 64 << 10,
        history: re.Pattern[bytes] | None = None,
        max_count: int = 2 << 30,
    ) -> None:
        """`history`: lines worth reading in the files found at start (the settings they state), though the files
        are followed from their end; their last lines are read too (where each rank was when the watch started)."""
        self.jobdir = jobdir
        self.skip = skip.resolve() if skip is not None else None
        self.max_files, self.max_entries, self.max_depth = max_files, max_entries, max_depth
        self.max_read, self.max_line, self.max_count = max_read, max_line, max_count
        self.files: dict[str, _Followed] = {}
        self.warnings: list[str] = []
        self.history_re = history
        self.history: list[Chunk] = []  # what `history` found at start; taken by the caller
        self._started = False

    def _walk(self) -> list[tuple[Path, os.stat_result]]:
        found: list[tuple[Path, os.stat_result]] = []
        stack: list[tuple[Path, int]] = [(self.jobdir, 0)]
        visited = 0
        while stack and visited < self.max_entries:
            folder, depth = stack.pop()
            try:
                entries = sorted(os.scandir(folder), key=lambda e: e.name)
            except OSError:
                continue
            for e in entries:
                visited += 1
                path = Path(e.path)
                try:
                    st = e.stat(follow_symlinks=False)
                except OSError:
                    continue
                if stat.S_ISDIR(st.st_mode):
                    if depth + 1 < self.max_depth and e.name not in _SKIP_DIRS and not self._skipped(path):
                        stack.append((path, depth + 1))
                elif stat.S_ISREG(st.st_mode):
                    found.append((path, st))
        return found

    def _skipped(self, path: Path) -> bool:
        return self.skip is not None and path.resolve() == self.skip

    def scan(self) -> None:
        """Look for new files (and replaced ones). The first scan takes the files as they are: followed from
        their end."""
        first = not self._started
        self._started = True
        for path, st in self._walk():
            name = str(path.relative_to(self.jobdir))
            old = self.files.get(name)
            if old is not None and old.ino == st.st_ino:
                continue
            if old is None and len(self.files) >= self.max_files:
                if not any("files followed" in w for w in self.warnings):
                    self.warnings.append(
                        f"more than {self.max_files} files under the job folder: only {self.max_files} followed"
                    )
                continue
            if first:
                self._take_as_is(path, name, st)
            else:
                self.files[name] = _Followed(path, name, st.st_ino, 0, 0)

    def _take_as_is(self, path: Path, name: str, st: os.stat_result) -> None:
        """A file found at start: followed from its end, its lines counted (for true line numbers) and the ones
        `history` wants kept - except a binary file (a checkpoint: never read), and one too big to count."""
        try:
            with path.open("rb") as fh:
                binary = _looks_binary(fh.read(4096))
            if binary or st.st_size > self.max_count:
                lines, found = 0, []
                if not binary:
                    self.warnings.append(
                        f"{name}: over {self.max_count >> 20} MB when the watch started: its lines "
                        "are numbered from there"
                    )
            else:
                lines, found = _history(path, st.st_size, self.history_re)
        except OSError:
            return
        self.files[name] = _Followed(path, name, st.st_ino, st.st_size, lines, binary=binary or None)
        self.history += [Chunk(name, number, [text]) for number, text in found]
        if not binary and lines:
            tail = self._tail(path, st.st_size)
            self.history.append(Chunk(name, lines - len(tail) + 1, tail))

    def _tail(self, path: Path, size: int, n: int = 200) -> list[str]:
        """The last `n` complete lines of the first `size` bytes: where each rank was when the watch started."""
        with path.open("rb") as fh:
            fh.seek(max(0, size - (64 << 10)))
            data = fh.read(min(size, 64 << 10))
        cut = data.rfind(b"\n")
        lines = data[: cut + 1].split(b"\n")[:-1] if cut >= 0 else []
        if size > len(data) and lines:
            lines = lines[1:]  # the first one is probably cut
        return [raw[: self.max_line].rstrip(b"\r").decode("utf-8", "replace") for raw in lines[-n:]]

    def poll(self) -> list[Chunk]:
        chunks = []
        for f in list(self.files.values()):
            chunk = self._read(f)
            if chunk is not None:
                chunks.append(chunk)
        return chunks

    def _read(self, f: _Followed) -> Chunk | None:
        try:
            st = f.path.stat()
        except OSError:
            return None
        if st.st_ino != f.ino or st.st_size < f.offset:  # replaced or truncated: read it again from its start
            f.ino, f.offset, f.line_no, f.partial, f.binary = st.st_ino, 0, 0, b"", None
        if st.st_size == f.offset or f.binary:
            return None
        try:
            with f.path.open("rb") as fh:
                fh.seek(f.offset)
                data = fh.read(min(self.max_read, st.st_size - f.offset))
        except OSError:
            return None
        if f.binary is None:
            if f.offset == 0:
                f.binary = _looks_binary(data[:4096])
                if f.binary:
                    return None
            else:
                f.binary = False
        f.offset += len(data)
        data = f.partial + data
        cut = data.rfind(b"\n")
        if cut < 0:
            f.partial = data[-self.max_line :]
            return None
        f.partial = data[cut + 1 :][-self.max_line :]
        lines = [
            raw[: self.max_line].rstrip(b"\r").decode("utf-8", errors="replace")
            for raw in data[: cut + 1].split(b"\n")[:-1]
        ]
        chunk = Chunk(f.name, f.line_no + 1, lines)
        f.line_no += len(lines)
        return chunk
