"""ncclpm's own reports left beside a job's logs (`ncclpm diagnose -o report.md`, the report.md and report.json
`ncclpm watch` writes into each collection, with its manifest): they quote the job's lines, and read again as a
log their quotes would be evidence a second time. Recognised by their first bytes, whatever their name."""

from __future__ import annotations

import re

_START = re.compile(rb"\A(?:\xef\xbb\xbf)?(?:# NCCL post-mortem: |ncclpm \xc2\xb7 )")  # Markdown, text
_HTML = b'<meta name="generator" content="ncclpm '
_JSON_KEYS = (b'"action_reason":', b'"culprit_ranks":', b'"decisive_evidence":')  # -f json, keys sorted
_MANIFEST = re.compile(rb'\A\s*\{\s*"tool": "ncclpm [^"]* watch"')


def is_own_report(head: bytes) -> bool:
    if _START.match(head) or _HTML in head[:2048] or _MANIFEST.match(head):
        return True
    return head.lstrip()[:1] == b"{" and all(k in head for k in _JSON_KEYS)
