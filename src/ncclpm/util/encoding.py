"""Which UTF-16 a text is written in, from its first bytes: with a BOM (PowerShell's `Out-File`, `>` in Windows
PowerShell 5) or without one (`[IO.File]::WriteAllText(..., [Text.Encoding]::Unicode)`, .NET loggers, a log copied
out of a Windows tool). Without a BOM, a log's mostly-ASCII text shows as a NUL beside nearly every other byte, at
one parity: that is what tells it from binary (NULs anywhere) and from UTF-8 (no NULs)."""

from __future__ import annotations

BOMS = (b"\xff\xfe", b"\xfe\xff")
SNIFF_BYTES = 1024  # enough pairs to be sure, few enough to read twice
_MIN_PAIRS = 8  # "ab\n" alone proves nothing
_SHARE = 0.9  # of the pairs with a NUL at the expected place (non-ASCII characters have none)


def utf16_codec(head: bytes | memoryview) -> str | None:
    """`utf-16` (BOM), `utf-16-le` / `utf-16-be` (no BOM, mostly-ASCII text), or None: not UTF-16."""
    head = bytes(head[:SNIFF_BYTES])
    if head[:2] in BOMS:
        return "utf-16"
    pairs = len(head) // 2
    if pairs < _MIN_PAIRS:
        return None
    low, high = head[0 : pairs * 2 : 2], head[1 : pairs * 2 : 2]
    for codec, zeros, chars in (("utf-16-le", high, low), ("utf-16-be", low, high)):
        if zeros.count(0) >= _SHARE * pairs and pairs - chars.count(0) >= _SHARE * pairs:
            return codec
    return None


def decode_text(data: bytes | memoryview) -> str:
    """Bytes as text: UTF-16 where `utf16_codec` says so, else UTF-8; undecodable bytes replaced."""
    return bytes(data).decode(utf16_codec(data) or "utf-8", errors="replace")
