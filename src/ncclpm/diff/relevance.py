"""Judge a difference: how much can it explain BAD's diagnosis? (data: `parsers/diff_factors.toml`)

In order: a difference BAD's own failure points at is `high` (its error names the new value; its culprit rank
did not exist in GOOD or runs on a host GOOD did not use; its collectives timed out after exactly the new
timeout; it crashed natively after a version change). A variable that nothing reads, or a value that is a path
on both sides, is `none` whatever else holds. Otherwise the family's base level, raised to what BAD's category
makes plausible.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any

from ncclpm.diff_model import RELEVANCE, Difference, Quote
from ncclpm.util.durations import coarse_duration, seconds_of
from ncclpm.util.resources import data_dir, read_toml

VERSION_FAMILIES = (
    "torch_version",
    "nccl_version",
    "cuda_version",
    "driver_version",
    "python_version",
    "library_version",
)
NAMEABLE_SECTIONS = ("settings", "launcher", "nccl", "shape")
BOOLEAN_WORDS = ("true", "false", "yes", "no", "on", "off")


@lru_cache(maxsize=1)
def factors() -> dict[str, Any]:
    return read_toml(data_dir("parsers") / "diff_factors.toml")


def family_order(family: str) -> int:
    names = list(factors()["family"])
    return names.index(family) if family in names else len(names)


def family_label(family: str) -> str:
    return str(factors()["family"].get(family, {}).get("label", family))


def _classify(entries: list[dict[str, Any]], name: str, default: str) -> str:
    for e in entries:
        if name in e.get("names", []):
            return str(e["family"])
    for e in entries:
        if any(name.startswith(p) for p in e.get("prefixes", [])):
            return str(e["family"])
    return default


def setting_family(var: str) -> str:
    return _classify(factors()["setting"], var, "setting")


def launcher_family(option: str) -> str:
    return _classify(factors()["launcher"], option, "launcher_other")


@dataclass(frozen=True)
class BadContext:
    """What BAD's diagnosis says, in the terms the judge needs."""

    category: str
    failure_lines: tuple[Quote, ...]  # the lines BAD's diagnosis rests on (decisive evidence, first errors)
    culprit_ranks: tuple[int, ...] = ()
    culprit_hosts: dict[int, str] = field(default_factory=dict)
    good_world_size: int | None = None
    good_hosts: frozenset[str] = frozenset()
    timeout_lines: dict[int, Quote] = field(default_factory=dict)  # timeout_ms -> a line that timed out after it
    native_crash: Quote | None = None
    api_error: Quote | None = None  # an option/attribute/module this version does not have
    unread_settings: dict[str, str] = field(default_factory=dict)  # var -> why nothing reads it


def _max(a: str, b: str) -> str:
    return a if RELEVANCE.index(a) <= RELEVANCE.index(b) else b


def _named_in(value: str, lines: tuple[Quote, ...]) -> Quote | None:
    """A line of BAD's failure that names `value` as a word (values like `1`, `0` or `true` name nothing)."""
    token = value.strip()
    number = token.replace(".", "").isdigit()
    if len(token) < 2 or (number and len(token) < 4) or token.lower() in BOOLEAN_WORDS:
        return None  # (`1`, `0`, `true`, `60` name nothing; a port or a size of 4+ digits does)
    word = re.compile(rf"(?<![\w.-]){re.escape(token)}(?![\w-])")
    return next((q for q in lines if word.search(q.text)), None)


def _link(d: Difference, ctx: BadContext) -> tuple[str, Quote | None] | None:
    """Why BAD's own failure points at this difference (and the line that does), or None."""
    if d.bad and d.section in NAMEABLE_SECTIONS and d.family not in ("hosts", "nodes", "world_size"):
        q = _named_in(d.bad, ctx.failure_lines)
        if q is not None:
            return f"BAD's failure names `{d.bad}`", q
    if d.family in ("world_size", "launcher_shape", "nodes") and ctx.good_world_size is not None:
        new = [r for r in ctx.culprit_ranks if r >= ctx.good_world_size]
        if new:
            return f"BAD's culprit rank {new[0]} does not exist in GOOD (world size {ctx.good_world_size})", None
    if d.family in ("hosts", "nodes"):
        for rank, host in ctx.culprit_hosts.items():
            if ctx.good_hosts and host not in ctx.good_hosts:
                return f"BAD's culprit rank {rank} ran on {host}, a host GOOD did not use", None
    if d.family == "pg_timeout" and d.bad:
        secs = d.bad_seconds if d.bad_seconds is not None else seconds_of(d.bad)
        q = ctx.timeout_lines.get(round(secs * 1000)) if secs is not None else None
        if q is not None:
            return f"BAD's collectives timed out after exactly {coarse_duration(secs)}", q
    if d.family in VERSION_FAMILIES and ctx.native_crash is not None:
        return f"BAD crashed natively after {family_label(d.family)} changed", ctx.native_crash
    if d.family in VERSION_FAMILIES and d.good and d.bad and ctx.api_error is not None:
        named = _library_named(d, ctx.failure_lines)
        if named is not None:
            return f"BAD failed on an API mismatch naming {d.what} after {d.what} changed", named
        if d.family != "library_version":  # a library the failure does not name is no lead
            why = f"BAD failed on an API or command-line mismatch after {family_label(d.family)} changed"
            return why, ctx.api_error
    return None


def _library_named(d: Difference, lines: tuple[Quote, ...]) -> Quote | None:
    """A line of BAD's failure that names the library (`numpy`, `NumPy`, a frame in site-packages/numpy/)."""
    name = d.what.split()[0].lower().replace("-", "_")
    if len(name) < 3:
        return None
    word = re.compile(rf"(?<![\w-]){re.escape(name)}(?![\w-])", re.I)
    return next((q for q in lines if word.search(q.text.replace("-", "_"))), None)


def _is_path(value: str | None) -> bool:
    return value is not None and "/" in value and not value.startswith(("NET/", "P2P/", "SHM/"))


def api_error(lines: tuple[Quote, ...]) -> Quote | None:
    """The first line of BAD's failure that is an API or command-line mismatch (data: `[link]` of the factors)."""
    words = factors().get("link", {}).get("api_error_words", [])
    return next((q for q in lines if any(w in q.text for w in words)), None)


def judge(d: Difference, ctx: BadContext) -> Difference:
    """The difference with its relevance, the reason, and whether BAD's failure points at it."""
    if d.section == "progress" and d.relevance == "none":
        return d  # where BAD stopped, or a BAD that was not slower: already said why
    fam = factors()["family"].get(d.family, {})
    base = str(fam.get("base", "low"))
    if d.section == "settings" and d.what in ctx.unread_settings:
        return replace(d, relevance="none", why=f"read by nothing: {ctx.unread_settings[d.what]}")
    if _is_path(d.good) and _is_path(d.bad) and d.section in ("settings", "launcher"):
        return replace(d, relevance="none", why="a path: paths differ between any two runs")
    link = _link(d, ctx)
    if link is not None:
        return replace(d, relevance="high", why=link[0], linked=True, failure_evidence=link[1])
    if base == "none":
        return replace(d, relevance="none", why=str(fam.get("note", "")))
    plausible = factors()["category"].get(ctx.category, {})
    level, why = base, str(fam.get("note", ""))
    for affinity in ("high", "medium"):
        if d.family in plausible.get(affinity, []) and _max(affinity, level) == affinity:
            level = affinity
            verb = "often follows" if affinity == "high" else "can follow"
            why = f"a `{ctx.category}` failure {verb} a change of {family_label(d.family)}"
            break
    if d.family == "step_time":
        why = f"{d.why}; {why}"
    return replace(d, relevance=level, why=why)
