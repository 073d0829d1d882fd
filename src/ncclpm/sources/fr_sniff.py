"""Is this file a flight-recorder dump? Content sniffing on its first bytes (pickle or JSON); the name is only a
hint for JSON. Used to classify sources; the dumps themselves are read by `ingest/flight_recorder/`."""

from __future__ import annotations

import re

_HEAD_KEYS = (b"version", b"pg_config", b"entries")
_JSON_META = (b'"pg_config"', b'"version"', b'"comm_lib_version"', b'"nccl_version"')
_NAME_HINT = re.compile(r"(nccl_trace_rank|_dump_|comm_lib_trace_rank|trace_rank|fr_trace)", re.I)


def looks_like_fr_dump(name: str, head: bytes) -> bool:
    """Content sniffing on the first bytes of a file; the name is only a hint for JSON."""
    head = head[:256]
    if head[:1] == b"\x80":
        return any(k in head for k in _HEAD_KEYS)
    text = head.lstrip()
    if text[:1] != b"{":
        return False
    has_entries = b'"entries"' in text
    has_meta = any(k in text for k in _JSON_META)
    hint = bool(_NAME_HINT.search(name))
    return (has_entries and (has_meta or hint)) or (has_meta and hint)
