"""A dump's metadata (everything but its entries), read into plain typed values or refused field by field.

Real dumps hold ``version`` (str), ``comm_lib_version`` or the older ``nccl_version`` (str), ``pg_config``
({pg name: {"name", "desc", "ranks": "[0, 1]" or [0, 1]}}) and ``pg_status`` ({pg id: {"last_enqueued_collective":
int, ...}}, JSON gives the numbers as strings).  A field of another type or out of range (a version that is a
100-deep list, a rank past Int32, a 5000-digit pg id) is dropped and named, so the dump's entries are still
used; nothing here recurses into a value or converts an unbounded number.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

MAX_TEXT = 1000
MAX_INT_DIGITS = 19
_INT32 = 2**31
_I64 = 2**63
_INT_TEXT = re.compile(r"\s*-?\d{1,19}\s*")


@dataclass
class Meta:
    version: str = ""
    comm_lib_version: str = ""
    config: dict[str, tuple[str, tuple[int, ...]]] = field(default_factory=dict)  # key -> (desc, ranks)
    status: list[tuple[int, int | None, int | None, int | None]] = field(default_factory=list)

    @property
    def good_config(self) -> bool:
        return any(k and ranks for k, (_, ranks) in self.config.items())


def as_int(v: object) -> int | None:
    """An Int64 from an int or a short decimal string; None for anything else."""
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v if -_I64 <= v < _I64 else None
    if isinstance(v, str) and len(v) <= MAX_INT_DIGITS + 4 and _INT_TEXT.fullmatch(v):
        n = int(v)
        return n if -_I64 <= n < _I64 else None
    return None


def _text(v: object) -> str | None:
    if isinstance(v, str):
        return v[:MAX_TEXT]
    if isinstance(v, int | float) and not isinstance(v, bool):
        return str(v)[:MAX_TEXT] if abs(v) < 10**30 else None
    return None


def _ranks(raw: object) -> tuple[list[int], bool]:
    """(ranks, ok): a list of ints or the '[0, 1, 2]' string form, without eval; ranks past Int32 are errors."""
    if isinstance(raw, list):
        vals = [x for x in raw if isinstance(x, int) and not isinstance(x, bool)]
        good = [x for x in vals if 0 <= x < _INT32]
        return good, len(good) == len(raw)
    if isinstance(raw, str):
        nums = re.findall(r"\d+", raw)
        good = [int(x) for x in nums if len(x) <= 10 and int(x) < _INT32]
        return good, len(good) == len(nums)
    return [], raw is None


def _members(raw: object, shared: dict) -> tuple[tuple[int, ...], bool]:
    """`_ranks` as a tuple, read once per distinct value of the load: every dump repeats the same groups (N dumps of
    an N-rank job: parsing each dump's member lists was N^2 work, and one tuple per dump N^2 ints)."""
    if isinstance(raw, str):
        key: tuple = ("ranks", raw)
    elif isinstance(raw, list) and set(map(type, raw)) <= {int}:  # (1 and True are equal keys: ints only)
        key = ("ranks", tuple(raw))
    else:  # read each time
        ranks, ok = _ranks(raw)
        members = tuple(ranks)
        return shared.setdefault(members, members), ok
    if key not in shared:
        ranks, ok = _ranks(raw)
        members = tuple(ranks)
        shared[key] = (shared.setdefault(members, members), ok)
    return shared[key]


def _config(raw: object, problems: list[str], shared: dict) -> dict[str, tuple[str, tuple[int, ...]]]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        problems.append("pg_config")
        return {}
    out: dict[str, tuple[str, tuple[int, ...]]] = {}
    bad = False
    for key, v in raw.items():
        name = _text(key)
        if name is None or not isinstance(v, dict):
            bad = True
            continue
        members, ok = _members(v.get("ranks"), shared)
        desc = _text(v.get("desc", ""))
        bad |= not ok or desc is None
        out[name] = (desc or "", members)
    if bad:
        problems.append("pg_config")
    return out


def _status(raw: object, problems: list[str]) -> list[tuple[int, int | None, int | None, int | None]]:
    if raw is None:
        return []
    if not isinstance(raw, dict):
        problems.append("pg_status")
        return []
    out = []
    bad = False
    for pg_id, v in raw.items():
        pid = as_int(pg_id)
        if pid is None or not isinstance(v, dict):
            bad = True
            continue
        vals = [v.get(f"last_{c}_collective") for c in ("enqueued", "started", "completed")]
        nums = [as_int(x) for x in vals]
        bad |= any(n is None and x is not None for n, x in zip(nums, vals, strict=True))
        out.append((pid, nums[0], nums[1], nums[2]))
    if bad:
        problems.append("pg_status")
    return out


def parse_meta(obj: dict, shared: dict | None = None) -> tuple[Meta, list[str]]:
    """The typed metadata of a decoded dump and the names of the fields that were dropped (`shared`: one dict per
    load, so that equal member lists of different dumps are one object)."""
    problems: list[str] = []
    meta = Meta()
    for key, attr in (("version", "version"), ("comm_lib_version", "comm_lib_version")):
        raw = obj.get(key)
        if key == "comm_lib_version" and raw is None:
            raw = obj.get("nccl_version")
        if raw is None:
            continue
        text = _text(raw)
        if text is None:
            problems.append(key)
        else:
            setattr(meta, attr, text)
    meta.config = _config(obj.get("pg_config"), problems, {} if shared is None else shared)
    meta.status = _status(obj.get("pg_status"), problems)
    return meta, problems
