"""The declared event kinds (`parsers/kinds.toml`) and the checked accessor code uses to name them.

A kind is one `[[kind]]` entry: `name`, `meaning`, `victim` (a line a rank prints because another rank failed),
`any_program` (any Python or CUDA program prints it, not only a distributed job: alone it does not make the input a
distributed job's log), `benign` (a notice of something the stack works around by itself: never a cause), and
`[[kind.reading]]`s: constant attributes its events get (`set = { net_class = "ib" }`), for all of them or
only `when` their text matches a regex - so a rule reads a column instead of re-matching the text.
The catalog loader refuses a pattern whose kind is not declared; code writes `K.collective_timeout` instead of
the string, and a name that is not declared raises `UnknownKind` when the module that uses it is imported - so
a misspelt kind in a rule fails every test at once instead of making the rule silently never fire.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from ncclpm.util.ascii_classes import ascii_classes
from ncclpm.util.resources import data_dir, read_toml, toml_error

KINDS_FILE = "kinds.toml"
_KEYS = frozenset({"name", "meaning", "victim", "any_program", "benign", "reading"})
_READING_KEYS = frozenset({"when", "set"})


class KindError(ValueError):
    """A kind declaration is malformed or duplicated; the message names the file."""


class UnknownKind(AttributeError):
    """Code or a catalog names a kind that no kinds.toml declares."""


@dataclass(frozen=True)
class Reading:
    """Attributes (`set`) an event of the kind gets - always, or when its text matches `when`."""

    set: dict[str, str | float | int | bool]
    when: str | None = None


@dataclass(frozen=True)
class KindDecl:
    """A declared event kind (`parsers/kinds.toml`): what it means, whether it is a victim's, its readings."""

    name: str
    meaning: str
    victim: bool
    origin: str
    readings: tuple[Reading, ...] = ()
    any_program: bool = False  # printed by any Python/CUDA program: no sign of a distributed job by itself
    benign: bool = False  # something the stack works around by itself: never a cause


def _readings(raw: list, where: str) -> tuple[Reading, ...]:
    out = []
    for r in raw:
        if not isinstance(r, dict) or set(r) - _READING_KEYS or not isinstance(r.get("set"), dict) or not r["set"]:
            raise KindError(f"{where}: a [[kind.reading]] has `set = {{attr = value}}` and an optional `when` regex")
        if not isinstance(r.get("when", ""), str):
            raise KindError(f"{where}: `when` must be a regex string")
        out.append(Reading(dict(r["set"]), None if r.get("when") is None else ascii_classes(r["when"])))
    return tuple(out)


def parse_kinds(doc: dict, origin: str) -> list[KindDecl]:
    """The `[[kind]]` entries of one parsed kinds.toml, validated."""
    out = []
    for raw in doc.get("kind", []):
        where = f"{origin}: kind {raw.get('name', '?')!r}"
        unknown = set(raw) - _KEYS
        if unknown:
            raise KindError(f"{where}: unknown keys {sorted(unknown)} (known: {sorted(_KEYS)})")
        name, meaning = raw.get("name"), raw.get("meaning")
        if not isinstance(name, str) or not name.isidentifier() or name.startswith("_"):
            raise KindError(f"{where}: `name` must be a lower-case identifier")
        if not isinstance(meaning, str) or not meaning.strip():
            raise KindError(f"{where}: `meaning` (what an event of this kind says) is required")
        flags = {key: raw.get(key, False) for key in ("victim", "any_program", "benign")}
        for key, value in flags.items():
            if not isinstance(value, bool):
                raise KindError(f"{where}: `{key}` must be true or false")
        readings = _readings(raw.get("reading", []), where)
        out.append(
            KindDecl(
                name,
                meaning.strip(),
                flags["victim"],
                origin,
                readings,
                any_program=flags["any_program"],
                benign=flags["benign"],
            )
        )
    return out


def merge_kinds(decls: list[KindDecl]) -> dict[str, KindDecl]:
    """One entry per name; a second declaration of a name is an error naming both files."""
    merged: dict[str, KindDecl] = {}
    for d in decls:
        if d.name in merged:
            raise KindError(f"kind {d.name!r} is declared twice ({merged[d.name].origin} and {d.origin})")
        merged[d.name] = d
    return merged


def load_kinds(path: Path) -> list[KindDecl]:
    try:
        doc = read_toml(path)
    except toml_error() as exc:
        raise KindError(f"{path.name}: invalid TOML: {exc}") from exc
    return parse_kinds(doc, path.name)


def unknown_kind_message(name: str, known: Mapping[str, KindDecl] | set[str], where: str) -> str:
    import difflib  # (an error's suggestion: not loaded by every run)

    close = difflib.get_close_matches(name, list(known), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"{where}: event kind {name!r} is not declared in {KINDS_FILE}{hint}"


class Kinds:
    """Read-only view of the declared kinds: `K.name` -> "name" (checked), `in`, iteration."""

    def __init__(self, decls: Mapping[str, KindDecl]) -> None:
        self._decls = dict(decls)

    def __getattr__(self, name: str) -> str:
        if name.startswith("__"):
            raise AttributeError(name)
        self.check(name)
        self.__dict__[name] = (
            name  # checked once: later reads are plain attribute reads (rules read K.* ~100 times a job)
        )
        return name

    def check(self, *names: str, where: str = "code") -> tuple[str, ...]:
        """`names` unchanged when every one is declared; else `UnknownKind` naming the first that is not."""
        for name in names:
            if name not in self._decls:
                raise UnknownKind(unknown_kind_message(name, self._decls, where))
        return names

    @property
    def victims(self) -> tuple[str, ...]:
        """Kinds a rank prints because another rank failed (declared `victim = true`)."""
        return tuple(n for n, d in self._decls.items() if d.victim)

    @property
    def any_program(self) -> tuple[str, ...]:
        """Kinds any Python or CUDA program prints (declared `any_program = true`): no sign of a distributed job."""
        return tuple(n for n, d in self._decls.items() if d.any_program)

    @property
    def benign(self) -> tuple[str, ...]:
        """Kinds that are notices of something the stack works around by itself (declared `benign = true`)."""
        return tuple(n for n, d in self._decls.items() if d.benign)

    def __contains__(self, name: object) -> bool:
        return name in self._decls

    def __iter__(self) -> Iterator[KindDecl]:
        return iter(self._decls.values())

    def __len__(self) -> int:
        return len(self._decls)


K = Kinds(merge_kinds(load_kinds(data_dir("parsers") / KINDS_FILE)))
