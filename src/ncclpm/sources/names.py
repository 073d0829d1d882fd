"""One name per source: the name is how every table, rule and report refers to a file, so two files must never
share one (their lines would be read as one file's: one copy used twice, the other dropped).

Names are relative to what the user gave: `attempt_0/0/stderr.log` inside `nodeA/`. When two arguments yield the
same name - `ncclpm diagnose nodeA/ nodeB/` where both hold `attempt_0/0/stderr.log`, `a/rank0.log b/rank0.log` -
each gets the shortest tail of its argument's folder that tells them apart: `nodeA/attempt_0/0/stderr.log`,
`nodeB/attempt_0/0/stderr.log`. Names that still collide (an archive member appended twice, a zip listing one name
twice) get `(second copy)`, `(third copy)`... - no digits, so a `rank3.log` still names rank 3.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from ncclpm.util.escape import clean_name

if TYPE_CHECKING:
    from ncclpm.sources.discover import Source

ORDINALS = ("second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth", "tenth")


def _labels(anchors: Sequence[Path]) -> dict[Path, str] | None:
    """The shortest tails of the anchors' paths that are all different (None when two anchors are equal)."""
    parts = {a: a.parts for a in set(anchors)}
    if len(parts) < 2:
        return None
    for k in range(1, max(len(p) for p in parts.values()) + 1):
        labels = {a: clean_name("/".join(p[-k:]).lstrip("/") or "/") for a, p in parts.items()}
        if len(set(labels.values())) == len(labels):
            return labels
    return None


def _copy_suffix(n: int) -> str:
    return f" ({ORDINALS[n - 2]} copy)" if n - 2 < len(ORDINALS) else f" (copy {n})"


def unique_names(sources: list[Source], anchors: list[Path | None], warnings: list[str]) -> list[Source]:
    """`sources` renamed so that no two share a name. `anchors[i]` is the folder source i's name is relative to
    (the folder given, or the folder of the file or archive given; None for stdin)."""
    groups: dict[str, list[int]] = defaultdict(list)
    for i, s in enumerate(sources):
        groups[s.name].append(i)
    names = [s.name for s in sources]
    for name, members in groups.items():
        if len(members) < 2:
            continue
        known = [anchors[i] for i in members if anchors[i] is not None]
        labels = _labels(known) or {}
        for i in members:
            label = labels.get(anchors[i]) if anchors[i] is not None else None
            if label:
                names[i] = f"{label}/{name}"
    used: set[str] = set()
    for i, name in enumerate(names):
        candidate, n = name, 1
        while candidate in used:
            n += 1
            candidate = name + _copy_suffix(n)
        used.add(candidate)
        if candidate != name:
            warnings.append(
                f"{name}: more than one source has this name (an archive member added twice?) - this one is "
                f"read as {candidate!r}"
            )
            names[i] = candidate
    return [s if n == s.name else replace(s, name=n) for s, n in zip(sources, names, strict=True)]
