"""`utf16_codec` tells UTF-16 without a BOM from binary and from UTF-8 by where the NULs are."""

from __future__ import annotations

import random

import pytest

from ncclpm.sources.discover import looks_binary
from ncclpm.util.encoding import decode_text, utf16_codec

LINE = "[rank1]:[E1122 10:00:00.000000000 ProcessGroupNCCL.cpp:616] Watchdog caught collective operation timeout\n"


@pytest.mark.parametrize(
    ("data", "codec"),
    [
        (("\ufeff" + LINE).encode("utf-16-le"), "utf-16"),
        (("\ufeff" + LINE).encode("utf-16-be"), "utf-16"),
        (LINE.encode("utf-16-le"), "utf-16-le"),
        (LINE.encode("utf-16-be"), "utf-16-be"),
        (("Épöque: café " * 3 + LINE).encode("utf-16-le"), "utf-16-le"),  # accented Latin-1 range: still one NUL
    ],
)
def test_utf16_is_recognised_with_or_without_a_bom(data: bytes, codec: str) -> None:
    assert utf16_codec(data) == codec
    assert decode_text(data).lstrip("\ufeff") == data.decode(codec).lstrip("\ufeff")
    assert not looks_binary(data)


@pytest.mark.parametrize(
    "data",
    [
        LINE.encode(),  # UTF-8
        LINE.encode() + b"\0" * 4096,  # a crashed node's zero-filled tail
        b"\0" * 4096,  # only padding
        bytes(random.Random(7).randrange(256) for _ in range(4096)),  # binary junk
        b"\x7fELF\x02\x01\x01" + b"\0" * 9 + bytes(range(256)) * 4,  # an executable's head
        "a\n".encode("utf-16-le"),  # too short to tell
        ("中文日志行 " * 40).encode("utf-16-le"),  # CJK: no NUL halves; not claimed (UTF-8 decoding replaces)
    ],
)
def test_other_bytes_are_not_taken_for_utf16(data: bytes) -> None:
    assert utf16_codec(data) is None
