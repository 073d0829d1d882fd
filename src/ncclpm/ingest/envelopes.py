"""Line envelopes: the prefixes that wrap a message (`[rank3]:`, `[E1122 08:24:16.797 file.cpp:2] `, `host:pid:tid
[dev] `...), declared in `parsers/envelopes.toml`, and everything derived from them.

Each envelope says which of its named groups fill which `lines` column (`columns = { rank = "c10_rank" }`), the
format of its timestamp, and a `head` (the start that identifies it when a pasted line was cut short). From
the declarations come: the one composed polars regex (`compose`), the order in which envelopes are trusted for
each column (`column_sources`), and two Python regexes - the prefixes triage strips from an error line, and
the starts paste re-joining takes as "a new log line begins here". A new envelope in TOML (shipped or
`--patterns DIR`) is therefore honoured by extraction, paste and triage alike.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from ncclpm.util.ascii_classes import ascii_classes

COLUMNS = ("rank", "local_rank", "role", "host", "pid", "ts", "level")
# a full date; a US one (month/day/year); glog's month-day without a year (the year comes from the job)
TS_FORMATS = ("iso", "mdy", "mmdd")
RESERVED_GROUPS = frozenset({"source", "line", "raw", "message"})
_KEYS = frozenset({"id", "slot", "regex", "notes", "example", "columns", "ts_format", "level", "head"})
GROUP_NAME = re.compile(r"\(\?P?<([A-Za-z_]\w*)>")  # a named group; its name
_NAMED_GROUP = re.compile(r"(?<!\\)\(\?P?<[A-Za-z_]\w*>")


@dataclass(frozen=True)
class Envelope:
    """A line prefix of the catalog (`parsers/envelopes.toml`): its regex, slot and the columns its groups fill."""

    id: str
    slot: str
    regex: str
    origin: str
    examples: tuple = ()
    columns: dict[str, str] = field(default_factory=dict)
    ts_format: str | None = None
    level_default: str | None = None  # the level of every line this envelope wraps, unless a word says otherwise
    level_words: dict[str, str] = field(default_factory=dict)  # message word -> level (NCCL's "NCCL WARN")
    head: str = ""

    @property
    def groups(self) -> tuple[str, ...]:
        return tuple(GROUP_NAME.findall(self.regex))


def to_python(rx: str) -> str:
    """A catalog regex (polars' Rust dialect) as a Python regex without capture names, for matching only."""
    return _NAMED_GROUP.sub("(?:", rx)


def parse_envelope(
    raw: dict,
    origin: str,
    check_regex: Callable[[str, str], None],
    error: type[Exception],
    examples: tuple,
    compile_it: bool = True,
) -> Envelope:
    """`compile_it=False` (the shipped catalog, which the tests compile) skips compiling the regexes in Python."""
    where = f"{origin}: envelope {raw.get('id', '?')!r}"
    unknown = set(raw) - _KEYS
    if unknown:
        raise error(f"{where}: unknown keys {sorted(unknown)} (known: {sorted(_KEYS)})")
    for key in ("id", "slot", "regex"):
        if key not in raw:
            raise error(f"{where}: missing key {key!r}")
    regex = ascii_classes(raw["regex"])
    check_regex(regex, where)
    groups = set(GROUP_NAME.findall(regex))
    bad = sorted(g for g in groups if g in RESERVED_GROUPS or g.startswith("_"))
    if bad:
        raise error(f"{where}: group names {bad} are reserved (source, line, raw, message, _*)")
    columns = dict(raw.get("columns", {}))
    for col, group in columns.items():
        if col not in COLUMNS:
            raise error(f"{where}: column {col!r} is not an envelope column (known: {', '.join(COLUMNS)})")
        if group not in groups:
            raise error(f"{where}: column {col!r} names group {group!r}, which the regex does not have")
    ts_format = raw.get("ts_format")
    if ("ts" in columns) != (ts_format is not None) or (ts_format is not None and ts_format not in TS_FORMATS):
        raise error(f"{where}: a `ts` column needs `ts_format` (one of {', '.join(TS_FORMATS)}), and only it does")
    level = dict(raw.get("level", {}))
    if set(level) - {"default", "words"}:
        raise error(f"{where}: [level] takes `default` and `words` only")
    if level and "level" in columns:
        raise error(f"{where}: `level` is either a column (a group) or a [level] table, not both")
    if level and not groups:
        raise error(f"{where}: a [level] table needs a named group to tell the lines this envelope matched")
    head = ascii_classes(raw.get("head", raw["regex"]))
    check_regex(head, f"{where} head")
    for rx, what in ((regex, "regex"), (head, "head")) if compile_it else ():
        try:
            re.compile(to_python(rx))
        except re.error as exc:
            raise error(
                f"{where}: {what} must also compile as a Python regex (paste and triage use it): {exc}"
            ) from exc
    return Envelope(
        id=raw["id"],
        slot=raw["slot"],
        regex=regex,
        origin=origin,
        examples=examples,
        columns=columns,
        ts_format=ts_format,
        level_default=level.get("default"),
        level_words=dict(level.get("words", {})),
        head=head,
    )


def check_envelopes(envelopes: tuple[Envelope, ...], error: type[Exception]) -> None:
    """Group names are unique across envelopes (they become columns of one composed regex)."""
    seen: dict[str, str] = {}
    for env in envelopes:
        for g in env.groups:
            if g in seen:
                raise error(f"{env.origin}: envelope {env.id!r} reuses group name {g!r} of envelope {seen[g]!r}")
            seen[g] = env.id


def slots(envelopes: tuple[Envelope, ...]) -> dict[str, list[Envelope]]:
    """Slots in composition order (first appearance in file order); each slot's envelopes are alternatives."""
    out: dict[str, list[Envelope]] = {}
    for env in envelopes:
        out.setdefault(env.slot, []).append(env)
    return out


def compose(envelopes: tuple[Envelope, ...]) -> str:
    """One regex: every slot optional, in order, then the rest of the line as `message`."""
    return f"^{compose_slots(envelopes)}(?<message>.*)$"


def compose_slots(envelopes: tuple[Envelope, ...], keep: frozenset[int] | None = None, mark: bool = False) -> str:
    """`compose`'s slots, without its anchor and message: only the envelopes whose index is in `keep` (None: all),
    the slots in the whole catalog's order; `mark` wraps envelope i in a group `_used{i}`, telling which matched
    (a group does not change which way a regex matches)."""
    index = {e.id: i for i, e in enumerate(envelopes)}  # (ids are unique in a catalog)
    parts = []
    for alts in slots(envelopes).values():
        regexes = [
            f"(?<_used{index[e.id]}>{e.regex})" if mark else e.regex
            for e in alts
            if keep is None or index[e.id] in keep
        ]
        if regexes:
            parts.append(f"(?:{'|'.join(regexes)})?")
    return "".join(parts)


def others_reachable(envelopes: tuple[Envelope, ...], keep: frozenset[int], mark: bool = False) -> str | None:
    """A regex (no groups) matching a line where an envelope not in `keep` matches at the start of its slot on some
    way through the slots before (any of their envelopes, or none): the lines whose composed match may use one of
    them. On the others, the slots of `keep` alone capture what the whole composition does: under leftmost-first
    each slot takes its first envelope matching where the slot starts (what follows always matches: every slot is
    optional, then `.*$`), so an envelope left out changes nothing where it matches at no slot's start. None: every
    envelope is kept. `mark` wraps envelope i left out in a group `_other{i}`: one of those a line may use."""
    index = {e.id: i for i, e in enumerate(envelopes)}
    tail: str | None = None
    for alts in reversed(slots(envelopes).values()):
        others = [
            f"(?<_other{index[e.id]}>{to_python(e.regex)})" if mark else to_python(e.regex)
            for e in alts
            if index[e.id] not in keep
        ]
        options = [f"(?:{'|'.join(others)})"] if others else []
        if tail is not None:
            options.append(f"(?:{'|'.join(to_python(e.regex) for e in alts)})?{tail}")
        tail = f"(?:{'|'.join(options)})" if options else None
    return None if tail is None else f"^{tail}"


def column_sources(envelopes: tuple[Envelope, ...], column: str) -> list[Envelope]:
    """Envelopes that fill `column`, most trusted first: the innermost (closest to the message: the process's
    own logger over a launcher's or collector's wrapper); for `ts`, a full date before a date without a year."""
    ordered = [e for alts in reversed(slots(envelopes).values()) for e in alts]
    if column == "level":
        return [e for e in ordered if "level" in e.columns or e.level_default or e.level_words]
    found = [e for e in ordered if column in e.columns]
    if column == "ts":
        found.sort(key=lambda e: TS_FORMATS.index(e.ts_format or "iso"))  # stable: innermost first within a format
    return found


def prefix_regex(envelopes: tuple[Envelope, ...]) -> str:
    """Python regex: any one envelope (to strip a run of them from the start of a line)."""
    return "|".join(f"(?:{to_python(e.regex)})" for e in envelopes)


def head_regex(envelopes: tuple[Envelope, ...]) -> str:
    """Python regex: the start of any envelope (a line that starts like a log line)."""
    return "|".join(f"(?:{to_python(e.head)})" for e in envelopes)
