"""Load and validate the TOML line-pattern catalogs in `parsers/`, and compile them to polars expressions.

Inputs: `parsers/envelopes.toml` (line prefixes; each says which of its groups fill the `rank`, `local_rank`,
`role`, `host`, `pid`, `ts` (with its format) and `level` columns), `parsers/kinds.toml` (the declared event
kinds) and every other `parsers/*.toml` (message patterns → typed rows of the `events` table). Output: a
`Catalog` holding the validated patterns, envelopes and kinds, the composed envelope regex, the literal anchors
used by the prefilter, and the envelope-derived Python regexes that paste re-joining and triage signatures use.

Limits: patterns are single-line; multi-line constructs (tracebacks, torchrun failure blocks) are stitched
in `multiline.py`. Regexes use polars' Rust dialect (no look-around, no back-references): the loader says
so explicitly instead of letting polars fail later with a less helpful message.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from ncclpm.ingest import envelopes as env_mod
from ncclpm.ingest.envelopes import Envelope
from ncclpm.ingest.text.nccl_messages import MessageError, Vocabulary, load_messages
from ncclpm.tables.kinds import KINDS_FILE, KindDecl, KindError, load_kinds, merge_kinds, unknown_kind_message
from ncclpm.tables.schema import DTYPE_NAMES, EVENT_FIELDS, Category
from ncclpm.util.ascii_classes import ascii_classes
from ncclpm.util.resources import data_dir, read_toml, toml_error

_UNSUPPORTED = re.compile(r"\(\?<?[=!]|\\[1-9]")
# A pattern field named `rank` is the rank the message names itself (`[7] is setting up NCCL communicator`):
# it fills the event's rank where the line's prefix gave none.
MESSAGE_RANK = "rank"
SEVERITIES = ("info", "warn", "error")
# A pattern that reads a producer's message declares what it means (parsers/torch/README.md): all of these keys, or
# none. `category` is what a log holding only that line is diagnosed as (`benign`: never a failure); `strength`
# decisive (names the cause), supporting (points at it), benign, or victim (printed because another rank failed:
# its kind is a victim kind, it never makes its rank a culprit).
DECLARED_KEYS = ("meaning", "category", "strength", "incriminates", "fix", "versions")
BENIGN = "benign"
STRENGTHS = ("decisive", "supporting", "benign", "victim")
INCRIMINATES = ("this_rank", "this_host", "peer", "nobody")
DECLARED_CATEGORIES = frozenset({c.value for c in Category} - {Category.SYMPTOM, Category.NOT_A_TRAINING_LOG}) | {
    BENIGN
}
# the producers' catalogs in sub-folders of parsers/ read as line patterns (parsers/nccl/ is NCCL's WARN vocabulary,
# read by its own reader); `declared.toml` there lists the messages no pattern reads, with why (tests and docs only)
PATTERN_FOLDERS = ("torch",)
DECLARED_FILE = "declared.toml"


class CatalogError(ValueError):
    """A catalog file is malformed; the message names the file and the pattern."""


@dataclass(frozen=True)
class Example:
    """A line a pattern or envelope must read, with the fields it must give (the tests run them)."""

    line: str
    expect: dict[str, object]


@dataclass(frozen=True)
class Declared:
    """What a producer's message means, as its pattern declares it; `cases` are readings that replace some of it
    when a field's value says so (`when = { error_type = "regex" }`: NCCL's result class decides the category of
    a wrapper's line)."""

    meaning: str
    category: str
    strength: str
    incriminates: str
    fix: str
    versions: str  # the producer's releases that print it (`torch 2.0-2.15`, `vllm 0.8-0.11`)
    cases: tuple[tuple[tuple[tuple[str, str], ...], dict[str, str]], ...] = ()

    def reading(self, fields: dict[str, object]) -> dict[str, str]:
        """The reading of a line whose fields are `fields`: the first case whose every `when` regex matches."""
        base = {k: getattr(self, k) for k in DECLARED_KEYS}
        for when, changes in self.cases:
            if all(fields.get(f) is not None and re.search(rx, str(fields[f])) for f, rx in when):
                return base | changes
        return base


@dataclass(frozen=True)
class Pattern:
    """A message pattern of the catalog: the literals that select a line, its regex, the typed fields it reads."""

    id: str
    kind: str
    anchors: tuple[str, ...]
    regex: str
    fields: dict[str, str]
    severity: str
    origin: str
    examples: tuple[Example, ...] = ()
    counterexamples: tuple[str, ...] = ()
    notes: str = ""
    supersedes: tuple[str, ...] = ()  # kinds this more specific reading replaces on the same line
    repeat: bool = False  # every match on a line is an event (one-line env dumps, command lines)
    declared: Declared | None = None  # what the message means (a producer's message), else None


@dataclass(frozen=True)
class Catalog:
    """The validated catalogs: message patterns, envelopes, kinds, prefilter literals and what is derived from them."""

    patterns: tuple[Pattern, ...]
    envelopes: tuple[Envelope, ...]
    keep_anchors: tuple[str, ...] = field(default=())
    kinds: dict[str, KindDecl] = field(default_factory=dict)
    stack_anchors: tuple[str, ...] = field(default=())  # scope.toml's stack words: kept apart from the lines
    dirs: tuple[Path, ...] = ()  # the catalog directories (shipped first): their nccl/ folders hold NCCL's messages
    _vocabulary: list = field(default_factory=list, compare=False, repr=False)
    # What is derived from the catalog, computed once (a triage worker reads a thousand jobs with one catalog: the
    # anchors and the envelopes' column sources were rebuilt from every pattern ~20 times a job, ~4 ms)
    _memo: dict = field(default_factory=dict, init=False, compare=False, repr=False)

    def _once(self, key: object, make: Callable[[], Any]) -> Any:
        if key not in self._memo:
            self._memo[key] = make()
        return self._memo[key]

    def vocabulary(self) -> Vocabulary:
        """NCCL's declared messages (parsers/nccl/), loaded the first time a job has an NCCL message to read."""
        if not self._vocabulary:
            try:
                self._vocabulary.append(Vocabulary(load_messages(self.dirs or (data_dir("parsers"),), self.kinds)))
            except MessageError as exc:
                raise CatalogError(str(exc)) from exc
        return self._vocabulary[0]

    @property
    def anchors(self) -> list[str]:
        """Every literal that makes a line worth parsing (prefilter input), deduplicated, sorted."""
        return list(self._once("anchors", lambda: sorted(set(self.read_anchors) | set(self.stack_anchors))))

    @property
    def read_anchors(self) -> list[str]:
        """The literals of the lines that are read (patterns and `[prefilter] keep`): a line kept only for a word
        of the stack (`stack_anchors`) goes to the scope's table, not to `lines`."""
        return list(
            self._once(
                "read_anchors", lambda: sorted({a for p in self.patterns for a in p.anchors} | set(self.keep_anchors))
            )
        )

    def envelope_regex(self) -> str:
        """One regex: every slot optional, in file order, then the rest of the line as `message`."""
        return self._once("envelope_regex", lambda: env_mod.compose(self.envelopes))

    def envelope_head_groups(self, head: str) -> list[str]:
        """The groups the composed envelope head `head` captures, in order (an unnamed one is named by its number)."""
        return self._once(
            ("head_groups", head), lambda: pl.Series([], dtype=pl.String).str.extract_groups(head).struct.fields
        )

    def envelope_marks(self) -> str:
        """The composed envelope slots, each envelope in a group `_used{i}` (`i` its index): which ones a line uses."""
        return self._once("envelope_marks", lambda: f"^{env_mod.compose_slots(self.envelopes, mark=True)}")

    def envelope_subset(self, keep: frozenset[int]) -> tuple[str, str | None, str | None]:
        """The composed slots of the envelopes in `keep` (indices); the regex of the lines where another one may
        match at a slot's start (`envelopes.others_reachable`: on the other lines both capture the same); the same
        with those others marked."""
        return self._once(
            ("envelope_subset", keep),
            lambda: (
                env_mod.compose_slots(self.envelopes, keep),
                env_mod.others_reachable(self.envelopes, keep),
                env_mod.others_reachable(self.envelopes, keep, mark=True),
            ),
        )

    def column_sources(self, column: str) -> list[Envelope]:
        """Envelopes that fill a `lines` column, most trusted first (see `envelopes.column_sources`)."""
        return list(self._once(("column_sources", column), lambda: env_mod.column_sources(self.envelopes, column)))

    def prefix_regex(self) -> str:
        """Python regex matching any one envelope: what triage strips from the start of an error line."""
        return self._once("prefix_regex", lambda: env_mod.prefix_regex(self.envelopes))

    def line_start_regex(self) -> str:
        """The envelopes' heads in polars' dialect: what a line that starts a log line starts with."""
        return self._once("line_start", lambda: "|".join(f"(?:{e.head})" for e in self.envelopes))

    def head_regex(self) -> str:
        """Python regex matching the start of any envelope: a line that starts like a log line (paste)."""
        return self._once("head_regex", lambda: env_mod.head_regex(self.envelopes))


def _check_regex(rx: str, where: str, compile_it: bool = True) -> None:
    """The regex is in polars' dialect (`compile_it`: and compiles there - ~1 ms each, so the shipped catalog,
    which tests/test_catalog.py compiles, is not compiled again at every start)."""
    if _UNSUPPORTED.search(rx):
        raise CatalogError(
            f"{where}: look-around and back-references are not supported by polars' Rust regex dialect "
            "(see https://docs.rs/regex/latest/regex/#syntax)"
        )
    if not compile_it:
        return
    try:
        pl.select(pl.lit("").str.extract_groups(rx))
    except Exception as exc:  # polars raises ComputeError subclasses; report them all the same way
        raise CatalogError(f"{where}: regex does not compile in polars: {exc}") from exc


def _examples(raw: dict, key: str) -> tuple[Example, ...]:
    return tuple(Example(e["line"], dict(e.get("expect", {}))) for e in raw.get(key, []))


_CASE_CHANGES = ("meaning", "category", "strength", "incriminates", "fix")


def _cases(raw: dict, fields: dict[str, str], where: str) -> tuple:
    out = []
    for c in raw.get("case", []):
        if not isinstance(c, dict) or not isinstance(c.get("when"), dict) or not c["when"]:
            raise CatalogError(f"{where}: a [[pattern.case]] has `when = {{field = regex}}` and readings to change")
        if set(c) - {"when", *_CASE_CHANGES} or not set(c) & set(_CASE_CHANGES):
            raise CatalogError(f"{where}: a case changes some of {_CASE_CHANGES} (unknown: {set(c) - {'when'}})")
        if set(c["when"]) - set(fields):
            raise CatalogError(f"{where}: a case keys on a field the pattern does not read ({c['when']})")
        out.append((tuple(c["when"].items()), {k: str(c[k]) for k in _CASE_CHANGES if k in c}))
    return tuple(out)


def _check_declared(d: dict[str, str], kind: KindDecl, where: str) -> None:
    if d["category"] not in DECLARED_CATEGORIES:
        raise CatalogError(f"{where}: category {d['category']!r} is not one of {sorted(DECLARED_CATEGORIES)}")
    if d["strength"] not in STRENGTHS:
        raise CatalogError(f"{where}: strength must be one of {STRENGTHS}")
    if d["incriminates"] not in INCRIMINATES:
        raise CatalogError(f"{where}: incriminates must be one of {INCRIMINATES}")
    if (d["strength"] == BENIGN) != (d["category"] == BENIGN):
        raise CatalogError(f"{where}: a benign message has category and strength `benign`, and only it")
    victim = kind.victim or any(r.set.get("victim") is True for r in kind.readings)
    if d["strength"] == "victim" and not victim:
        raise CatalogError(f"{where}: a victim message needs a victim kind (kinds.toml `victim = true`)")
    if kind.victim and d["strength"] not in ("victim", BENIGN):
        raise CatalogError(f"{where}: kind {kind.name!r} is a victim's: the message's strength is `victim`")


def _declared(raw: dict, kind: KindDecl, fields: dict[str, str], where: str) -> Declared | None:
    present = [k for k in DECLARED_KEYS if k in raw]
    if not present:
        if "case" in raw:
            raise CatalogError(f"{where}: [[pattern.case]] belongs to a pattern with a declared reading")
        return None
    missing = [k for k in DECLARED_KEYS if not isinstance(raw.get(k), str) or not raw[k].strip()]
    if missing:
        raise CatalogError(f"{where}: a declared reading has all of {DECLARED_KEYS} (missing or empty: {missing})")
    d = Declared(*(raw[k].strip() for k in DECLARED_KEYS), cases=_cases(raw, fields, where))
    for _when, changes in ((None, {}), *d.cases):
        _check_declared({k: getattr(d, k) for k in DECLARED_KEYS} | changes, kind, where)
    return d


def _pattern(raw: dict, origin: str, kinds: dict[str, KindDecl], compile_it: bool = True) -> Pattern:
    where = f"{origin}: pattern {raw.get('id', '?')!r}"
    for key in ("id", "kind", "anchor", "regex"):
        if key not in raw:
            raise CatalogError(f"{where}: missing key {key!r}")
    if raw["kind"] not in kinds:
        raise CatalogError(unknown_kind_message(raw["kind"], kinds, where))
    anchors = (raw["anchor"],) if isinstance(raw["anchor"], str) else tuple(raw["anchor"])
    fields = dict(raw.get("fields", {}))
    for name, dtype in fields.items():
        if name not in EVENT_FIELDS and name != MESSAGE_RANK:
            raise CatalogError(f"{where}: field {name!r} is not an events column (see schema.EVENT_FIELDS)")
        if dtype not in DTYPE_NAMES:
            raise CatalogError(f"{where}: unknown dtype {dtype!r} (known: {sorted(DTYPE_NAMES)})")
    regex = ascii_classes(raw["regex"])
    _check_regex(regex, where, compile_it)
    groups = set(re.findall(r"\(\?P?<([A-Za-z_]\w*)>", regex))
    if groups != set(fields):
        raise CatalogError(f"{where}: named groups {sorted(groups)} differ from fields {sorted(fields)}")
    severity = raw.get("severity", "info")
    if severity not in SEVERITIES:
        raise CatalogError(f"{where}: severity must be one of {SEVERITIES}")
    supersedes = tuple(raw.get("supersedes", ()))
    if raw["kind"] in supersedes:
        raise CatalogError(f"{where}: a pattern cannot supersede its own kind")
    for name in supersedes:
        if name not in kinds:
            raise CatalogError(unknown_kind_message(name, kinds, f"{where} supersedes"))
    examples = _examples(raw, "example")
    if not examples:
        raise CatalogError(f"{where}: at least one [[pattern.example]] is required")
    for ex in examples:
        if not any(a in ex.line for a in anchors):
            raise CatalogError(f"{where}: example does not contain any anchor: {ex.line!r}")
    return Pattern(
        id=raw["id"],
        kind=raw["kind"],
        anchors=anchors,
        regex=regex,
        fields=fields,
        severity=severity,
        origin=origin,
        examples=examples,
        counterexamples=tuple(c["line"] for c in raw.get("counterexample", [])),
        notes=raw.get("notes", ""),
        supersedes=supersedes,
        repeat=bool(raw.get("repeat", False)),
        declared=_declared(raw, kinds[raw["kind"]], fields, where),
    )


def _envelope(raw: dict, origin: str, compile_it: bool = True) -> Envelope:
    def check(rx: str, where: str) -> None:
        _check_regex(rx, where, compile_it)

    return env_mod.parse_envelope(raw, origin, check, CatalogError, _examples(raw, "example"), compile_it)


_PY_TYPES = {pl.String: str, pl.Float64: (int, float), pl.Int64: int, pl.Boolean: bool}


def _check_readings(decl: KindDecl, compile_it: bool) -> None:
    where = f"{decl.origin}: kind {decl.name!r} reading"
    for r in decl.readings:
        if r.when is not None:
            _check_regex(r.when, where, compile_it)
        for attr, value in r.set.items():
            if attr not in EVENT_FIELDS:
                raise CatalogError(f"{where}: {attr!r} is not an events column (see schema.EVENT_FIELDS)")
            expected = _PY_TYPES[type(EVENT_FIELDS[attr])]
            if not isinstance(value, expected) or (isinstance(value, bool) and expected is not bool):
                raise CatalogError(f"{where}: {attr} = {value!r} is not a {EVENT_FIELDS[attr]}")


def _kinds(dirs: tuple[Path, ...], compile_shipped: bool) -> dict[str, KindDecl]:
    """Every kinds.toml of the shipped (`dirs[0]`) and user directories, merged (a name declared twice is an
    error); the readings' regexes compiled as `load_catalog` compiles the patterns'."""
    try:
        loaded = [(i, load_kinds(p)) for i, directory in enumerate(dirs) if (p := directory / KINDS_FILE).is_file()]
        kinds = merge_kinds([d for _, decls in loaded for d in decls])
    except KindError as exc:
        raise CatalogError(str(exc)) from exc
    for i, decls in loaded:
        for decl in decls:
            _check_readings(decl, compile_shipped or i > 0)
    return kinds


def catalog_files(directory: Path) -> list[Path]:
    """The line-pattern catalogs of a directory: its own `*.toml`, then those of its producers' sub-folders."""
    nested = [p for f in PATTERN_FOLDERS for p in sorted((directory / f).glob("*.toml")) if p.name != DECLARED_FILE]
    return sorted(directory.glob("*.toml")) + nested


def load_catalog(extra_dirs: tuple[Path, ...] = (), *, compile_shipped: bool = False) -> Catalog:
    """Load the shipped catalogs plus any user directories (`--patterns DIR`), validated (the shipped patterns'
    regexes are compiled in polars only with `compile_shipped`: the tests do it once)."""
    shipped = data_dir("parsers")
    dirs = (shipped, *(Path(d) for d in extra_dirs))
    kinds = _kinds(dirs, compile_shipped)
    patterns: list[Pattern] = []
    envelopes: list[Envelope] = []
    keep: list[str] = []
    stack: list[str] = []
    for directory in dirs:
        compile_it = compile_shipped or directory != shipped
        for path in catalog_files(directory):
            name = path.relative_to(directory).as_posix()  # `torch/store.toml` in a producer's folder
            try:
                doc = read_toml(path)
            except (toml_error(), UnicodeDecodeError, OSError) as exc:
                raise CatalogError(f"{name}: invalid TOML: {exc}") from exc
            if "kind" in doc and name != KINDS_FILE:
                raise CatalogError(f"{name}: [[kind]] entries belong in {KINDS_FILE}")
            try:
                envelopes += [_envelope(e, name, compile_it) for e in doc.get("envelope", [])]
                patterns += [_pattern(p, name, kinds, compile_it) for p in doc.get("pattern", [])]
                keep += [str(k) for k in doc.get("prefilter", {}).get("keep", [])]
                stack += [str(a) for w in doc.get("stack_word", []) for a in w["anchor"]]  # scope.toml's words
            except (KeyError, TypeError, AttributeError, ValueError) as exc:  # a table where a list was due...
                if isinstance(exc, CatalogError):
                    raise
                raise CatalogError(f"{name}: malformed catalog entry ({type(exc).__name__}: {exc})") from exc
    ids = Counter([p.id for p in patterns] + [e.id for e in envelopes])
    dupes = sorted(i for i, n in ids.items() if n > 1)
    if dupes:
        raise CatalogError(f"duplicate pattern ids: {dupes}")
    env_mod.check_envelopes(tuple(envelopes), CatalogError)
    return Catalog(
        tuple(patterns), tuple(envelopes), tuple(keep), kinds, stack_anchors=tuple(dict.fromkeys(stack)), dirs=dirs
    )
