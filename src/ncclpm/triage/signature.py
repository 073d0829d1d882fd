"""A failure signature: the top error message of a job with everything that changes from run to run masked
(numbers, hex, ids, paths, IP addresses, timestamps), so that the same failure in 40 jobs is one string.

    "[rank3]: ValueError: shard 17 of 64 has checksum 0xdeadbeef (/lustre/ckpt/run42/shard_17.pt)"
 -> "ValueError: shard <n> of <n> has checksum <hex> (<path>)"
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from ncclpm import model

if TYPE_CHECKING:
    from ncclpm.ingest.catalog import Catalog

MAX_LEN = 200


def _envelopes(catalog: Catalog | None) -> str:
    if catalog is None:
        from ncclpm.api import catalog as shipped

        catalog = shipped()
    return catalog.prefix_regex()


_MASKS: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(p), r)
    for p, r in (
        (r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b", "<uuid>"),
        (r"\b\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?", "<ts>"),
        (r"\b\d{1,2}:\d{2}:\d{2}(?:[.,]\d+)?\b", "<ts>"),
        (
            r"\[?(?<![\w:])(?=[0-9a-fA-F:]*::|(?:[0-9a-fA-F]{1,4}:){7})[0-9a-fA-F]{0,4}(?::[0-9a-fA-F]{0,4}){2,7}"
            r"(?![\w:])\]?(?::\d+)?",
            "<ip>",
        ),  # IPv6, [addr]:port
        (r"\b(?:\d{1,3}\.){3}\d{1,3}(?::\d+)?\b", "<ip>"),
        (r"\b0x[0-9a-fA-F]+\b", "<hex>"),
        (r"(?<![\w/.-])(?:~|\.{1,2})?(?:/[\w.@+=,%-]+){2,}/?", "<path>"),
        (r"\b(?=[0-9a-fA-F]*\d)(?=[0-9a-fA-F]*[a-fA-F])[0-9a-fA-F]{8,}\b", "<hex>"),  # ids, hashes, comm ids
        (r"\d+(?:\.\d+)?", "<n>"),
    )
)


def strip_prefix(line: str, catalog: Catalog | None = None) -> str:
    """A log line without its envelopes (rank, level, timestamp, host prefixes: every envelope of `catalog`, the
    shipped one by default) and the tags that open its message."""
    return model.strip_prefix(line, _envelopes(catalog))


def signature(message: str | None, catalog: Catalog | None = None) -> str:
    """The masked, prefix-free, whitespace-collapsed form of `message` ("" for none)."""
    if not message:
        return ""
    text = strip_prefix(message.strip().splitlines()[0] if message.strip() else "", catalog)
    for pattern, repl in _MASKS:
        text = pattern.sub(repl, text)
    text = " ".join(text.split())
    return text if len(text) <= MAX_LEN else text[: MAX_LEN - 1] + "…"
