"""A collector's tag on every line - `worker-1: ` from pdsh (DeepSpeed's multi-node runner), `3: ` from `srun
--label` - hides each line's own start: a log's shape from the code sniffer (it read as YAML keys), a stack dump's
headers from the stack sniffer and reader. The tag is taken off when nearly every one of the first lines carries
one of a few tags (a YAML file's keys are many and different); lines without one are left as they are."""

from __future__ import annotations

import re

LINE_TAG = re.compile(r"^([\w.-]{1,64}): ")
TAG_LINES = 40  # lines that decide whether every line carries a tag


def without_line_tags(text: str) -> str:
    if not LINE_TAG.match(text.lstrip("\r\n")):
        return text  # most files: the first line has no tag
    head = [line for line in text.split("\n", TAG_LINES)[:TAG_LINES] if line.strip()]
    tags = [m[1] for line in head if (m := LINE_TAG.match(line))]
    if len(tags) < 3 or len(tags) * 10 < len(head) * 9 or len(set(tags)) * 5 > len(tags):
        return text
    return re.sub(f"(?m)^(?:{'|'.join(map(re.escape, sorted(set(tags))))}): ", "", text)


def without_line_tags_bytes(data: bytes) -> bytes:
    """The same for raw bytes (a file's head): decoded only when its first line has a tag."""
    if not LINE_TAG.match(data.lstrip(b"\r\n")[:80].decode("utf-8", errors="replace")):
        return data
    text = data.decode("utf-8", errors="replace")
    stripped = without_line_tags(text)
    return data if stripped is text else stripped.encode("utf-8")
