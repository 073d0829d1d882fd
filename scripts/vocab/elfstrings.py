"""Read the NUL-terminated strings of an ELF shared library's read-only data (what `strings` shows, in file order).

Only `.rodata` is read: that is where a compiler puts string literals (TORCH_CHECK pieces, LOG messages, `__FILE__`
paths). The order is kept because it carries meaning: a translation unit's literals are laid out together, in the
order the unit first uses them, so neighbours of a message are usually the other pieces of the same message.
"""

from __future__ import annotations

import re
import struct
from pathlib import Path

MIN_LEN = 4  # as `strings`: shorter runs are mostly table bytes (the pattern below says 4)


def rodata(path: Path) -> bytes:
    """The bytes of the `.rodata` section of a 64-bit little-endian ELF file (empty when there is none)."""
    with open(path, "rb") as f:
        head = f.read(64)
        if head[:4] != b"\x7fELF" or head[4] != 2 or head[5] != 1:
            raise ValueError(f"{path}: not a 64-bit little-endian ELF file")
        shoff = struct.unpack_from("<Q", head, 0x28)[0]
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", head, 0x3A)
        f.seek(shoff)
        table = f.read(shentsize * shnum)
        sections = [struct.unpack_from("<IIQQQQIIQQ", table, i * shentsize) for i in range(shnum)]
        names_off, names_size = sections[shstrndx][4], sections[shstrndx][5]
        f.seek(names_off)
        names = f.read(names_size)
        for name_idx, _type, _flags, _addr, offset, size, *_ in sections:
            name = names[name_idx : names.index(b"\0", name_idx)]
            if name == b".rodata":
                f.seek(offset)
                return f.read(size)
    return b""


# A run is matched from its start only (the look-behind): a long printable run with no NUL after it (embedded text
# data) is then rejected once, not retried from each of its bytes.
_LITERAL = re.compile(rb"(?<![\x20-\x7e\t\n])[\x20-\x7e\t\n]{4,}(?=\x00)")


def strings(data: bytes) -> list[tuple[int, str]]:
    """(offset, text) of every run of printable ASCII (tab and newline included) ended by a NUL, at least
    MIN_LEN long, in order. Unlike `strings`, a run must end at a NUL, as a C string literal does: runs cut by
    other bytes are table data."""
    return [(m.start(), m.group().decode("ascii")) for m in _LITERAL.finditer(data)]
