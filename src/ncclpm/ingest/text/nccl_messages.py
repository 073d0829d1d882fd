"""NCCL's own messages, read for what they mean: the declared vocabulary of parsers/nccl/<area>.toml (issue 29).

Every format NCCL's `WARN` prints (2.3 to the pinned snapshot) is one `[[message]]` entry: the format as printed
(the regex is derived from it with `printf_regex`, or written by hand where the format is too loose), its typed
fields, its meaning, the category it points to, how strong it is alone, whom it incriminates, the fix, the NCCL
versions that print it, and the event kind it produces (with more attributes: `net_class`, `strength`).

Cost: the hot scan keeps lines by literal anchors as before (`NCCL WARN`, the old `file:line WARN` head through the
`.cc:` anchors, `Last error:`); only the texts of the kept WARN lines and of torch's `Last error:` (the line after
it, or the rest of the line) are read here, each against the few entries whose longest literal it contains (one
Aho-Corasick pass over the distinct texts); an entry's regex is compiled the first time it is a candidate.
The most specific entry that matches wins (the most literal characters): `Connect to %s failed : %s` reads what a
generic `%s: %s` would too.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any

import polars as pl

from ncclpm.tables.kinds import K, KindDecl
from ncclpm.tables.schema import EVENT_FIELDS, EVENTS_SCHEMA, Category, empty
from ncclpm.util.resources import read_toml

FOLDER = "nccl"  # parsers/nccl/<area>.toml
STRENGTHS = ("decisive", "supporting", "benign")
BENIGN = "benign"
CATEGORIES = {c.value for c in Category} | {BENIGN}
INCRIMINATES = ("this_rank", "this_host", "peer", "nobody")
# A field's name (printf_regex's, or a hand regex's group) -> the events column it fills (the first field of a
# column fills it; `peer_2`-style repeats and names with no column are matched, not kept).
COLUMNS = {
    "peer": "peer",
    "peer_rank": "peer",
    "device": "hca",
    "interface": "interface",
    "qp": "qp",
    "errno_text": "error_type",
    "cuda_error": "error_type",
    "nccl_error": "error_type",
    "nvml_error": "error_type",
    "wc_status": "error_type",
    "wc_status_text": "error_type",
    "status": "error_type",
    "ib_event": "error_type",
    "nranks": "nranks",
    "expected": "expected",
    "count": "count",
    "numel_in": "numel_in",
    "numel_out": "numel_out",
    "rank": "subject_rank",
    "local_rank": "local_rank",
    "cuda_dev": "cuda_dev",
    "bus_id": "bus_id",
    "size": "count",
    "host": "node",
    "path": "detail",
    "comm_id": "comm_id",
    "version": "version",
}
_ENTRY_KEYS = frozenset(
    {"id", "format", "regex", "key", "fields", "nccl", "meaning", "category", "strength", "alone", "incriminates",
     "kind", "set", "fix", "note", "case", "example", "columns"}
)  # fmt: skip
_CASE_KEYS = frozenset(
    {"when", "when_file", "category", "strength", "alone", "kind", "set", "incriminates", "meaning", "fix"}
)
_CHANGES = ("category", "strength", "alone", "kind", "set", "incriminates", "meaning", "fix")
_GROUP = re.compile(r"\(\?P?<([A-Za-z_]\w*)>")


class MessageError(ValueError):
    """A message entry is malformed; the message names the file and the entry."""


@dataclass(frozen=True)
class Case:
    """A reading that replaces some of the entry's when a field's value (`when`, regexes) or where NCCL was
    (`when_file`: NCCL's `file:line` of the call and the return-code trace after it) says so."""

    when: tuple[tuple[str, str], ...]
    when_file: str | None
    changes: dict[str, Any]

    def applies(self, groups: dict[str, str | None], where: str | None) -> bool:
        if self.when_file is not None and (where is None or not re.search(self.when_file, where)):
            return False
        return all(groups.get(name) is not None and re.search(rx, groups[name] or "") for name, rx in self.when)


@dataclass(frozen=True)
class Message:
    """One of NCCL's messages (`parsers/nccl/`): its format or hand regex, the literal it holds, its reading."""

    id: str
    area: str
    origin: str
    format: str | None
    hand_regex: str | None  # a regex written by hand (else it is derived from the format, when first needed)
    key: str  # a literal every line it reads contains (the candidate filter)
    weight: int  # literal characters: the most specific matching entry wins
    columns: dict[str, str]  # regex group -> events column
    meaning: str
    category: str
    strength: str
    alone: float | None
    incriminates: str
    kind: str
    set: dict[str, Any]
    fix: str
    nccl: str
    cases: tuple[Case, ...] = ()
    examples: tuple[str, ...] = ()
    fields: tuple[str, ...] = ()  # a format's declared field per conversion of its first line ("" for none)

    @cached_property
    def regex(self) -> str:
        """What the entry matches: its hand regex, or its format's first line as printf prints it, fields named."""
        if self.hand_regex is not None or self.format is None:
            return self.hand_regex or ""
        from ncclpm.ingest.printf_regex import printf_regex  # (its ~30 regexes: only for a job with NCCL messages)

        return printf_regex(_first_line(self.format), names=self.fields)

    def reading(self, groups: dict[str, str | None], where: str | None) -> tuple[int | None, dict[str, Any]]:
        """What a line it read means: the index of the first case that applies (None: the entry's own reading),
        and the entry's reading with that case laid over it."""
        for i, case in enumerate(self.cases):
            if case.applies(groups, where):
                return i, self.case_reading(i)
        return None, self.case_reading(None)

    def case_reading(self, case: int | None) -> dict[str, Any]:
        out = {k: getattr(self, k) for k in _CHANGES}
        if case is not None:
            changes = self.cases[case].changes
            out |= changes
            if "set" in changes:
                out["set"] = {**self.set, **changes["set"]}
        return out


@dataclass(frozen=True)
class Vocabulary:
    """NCCL's declared messages, indexed by the literal each holds."""

    messages: tuple[Message, ...]
    _by_key: dict[str, tuple[int, ...]] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        by: dict[str, list[int]] = {}
        for i, m in enumerate(self.messages):
            by.setdefault(m.key, []).append(i)
        object.__setattr__(self, "_by_key", {k: tuple(v) for k, v in by.items()})

    def by_id(self) -> dict[str, Message]:
        return {m.id: m for m in self.messages}

    def read(self, texts: Sequence[str]) -> list[tuple[Message, dict[str, str | None]] | None]:
        """For each text, the most specific entry whose regex matches it from its start, and the groups."""
        if not texts:
            return []
        keys = list(self._by_key)
        uniq = list(dict.fromkeys(texts))
        found = pl.Series(uniq, dtype=pl.String).str.extract_many(keys, overlapping=True).to_list()
        best: dict[str, tuple[Message, dict[str, str | None]] | None] = {}
        for text, hits in zip(uniq, found, strict=True):
            chosen: tuple[Message, dict[str, str | None]] | None = None
            rank = (False, -1)  # a whole-text match beats a prefix one (a line cut short); then the most literal
            for i in sorted({i for k in set(hits or ()) for i in self._by_key[k]}):
                m = self.messages[i]
                if (True, m.weight) <= rank:
                    continue
                hit = _compiled(m.regex).match(text)
                if hit and (hit.end() == len(text), m.weight) > rank:
                    chosen, rank = (m, hit.groupdict()), (hit.end() == len(text), m.weight)
            best[text] = chosen
        return [best[t] for t in texts]


@lru_cache(maxsize=4096)
def _compiled(rx: str) -> re.Pattern[str]:
    return re.compile(rx)


# --- loading ----------------------------------------------------------------------------------------------------


def _first_line(fmt: str) -> str:
    """What one log line of the format holds: NCCL's multi-line messages print their first line on the WARN line
    (trailing blanks are invisible in a log, and stripped from the text read)."""
    return fmt.rstrip("\n").split("\n", 1)[0].rstrip()


# A printf conversion (printf_regex's, without its groups: splitting 1000 formats with it costs a tenth of building
# their Conversion objects, and the regexes themselves are derived only for the entries a job's lines need)
_SPEC = re.compile(r"%[-+ #0']*(?:\*|\d+)?(?:\.(?:\*|\d*))?(?:hh|h|ll|l|z|j|t|L|q)?[diouxXeEfFgGaAcspnm%]")


def _regex_of(raw: dict, where: str) -> tuple[str | None, str, int, tuple[str, ...], int]:
    """(hand regex or None, key, weight, group names, conversions of the line) of an entry: from its format (its
    regex is derived when first needed: deriving all of them costs more than a small job's whole read), or its
    hand regex and key."""
    if "format" in raw and "regex" not in raw:
        names = list(raw.get("fields", []))
        first = _first_line(raw["format"])
        pieces = _SPEC.split(first)
        convs = range(len(pieces) - 1)
        if len(names) < len(convs):
            raise MessageError(f"{where}: `fields` has one name per conversion of the format")
        chunks = [c for c in pieces if c]
        if not chunks:
            raise MessageError(f"{where}: the format has no literal text to read it by")
        named = tuple(n for n in names[: len(convs)] if n)
        return None, max(chunks, key=len), sum(len(c) for c in chunks), named, len(convs)
    if "regex" in raw:
        rx, key = raw["regex"], raw.get("key")
        if not isinstance(key, str) or not key:
            raise MessageError(f"{where}: a hand `regex` needs a `key` (a literal every line it reads contains)")
        if not raw.get("example"):
            raise MessageError(f"{where}: a hand `regex` needs at least one [[message.example]]")
        try:
            re.compile(rx)
        except re.error as exc:
            raise MessageError(f"{where}: regex does not compile: {exc}") from exc
        return rx, key, len(re.sub(r"\\.|[()\[\]?*+{}|^$.]|\(\?P?<\w+>", "", rx)), tuple(_GROUP.findall(rx)), 0
    raise MessageError(f"{where}: a message has a `format` (or a hand `regex` and `key`)")


def _columns(groups: tuple[str, ...], explicit: dict, where: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for g in groups:
        col = explicit.get(g, COLUMNS.get(g))
        if col is None or col in out.values():
            continue
        if col not in EVENT_FIELDS:
            raise MessageError(f"{where}: field {g!r} fills {col!r}, which is not an events column")
        out[g] = col
    return out


def _check_reading(r: dict, kinds: dict[str, KindDecl], where: str) -> None:
    if "category" in r and r["category"] not in CATEGORIES:
        raise MessageError(f"{where}: category {r['category']!r} is not one of {sorted(CATEGORIES)}")
    if "strength" in r and r["strength"] not in STRENGTHS:
        raise MessageError(f"{where}: strength must be one of {STRENGTHS}")
    if "incriminates" in r and r["incriminates"] not in INCRIMINATES:
        raise MessageError(f"{where}: incriminates must be one of {INCRIMINATES}")
    if "kind" in r and r["kind"] not in kinds:
        raise MessageError(f"{where}: kind {r['kind']!r} is not declared in kinds.toml")
    alone = r.get("alone")
    if alone is not None and not (isinstance(alone, (int, float)) and 0 <= alone <= 1):
        raise MessageError(f"{where}: `alone` is how much the line alone proves its cause, 0 to 1")
    for attr in r.get("set", {}):
        if attr not in EVENT_FIELDS:
            raise MessageError(f"{where}: set.{attr} is not an events column")


def _message(raw: dict, area: str, origin: str, kinds: dict[str, KindDecl]) -> Message:
    where = f"{origin}: message {raw.get('id', '?')!r}"
    unknown = set(raw) - _ENTRY_KEYS
    if unknown:
        raise MessageError(f"{where}: unknown keys {sorted(unknown)}")
    for key in ("id", "meaning", "category", "strength", "kind", "fix", "nccl"):
        if not raw.get(key):
            raise MessageError(f"{where}: missing key {key!r}")
    _check_reading(raw, kinds, where)
    if (raw["strength"] == BENIGN) != (raw["category"] == BENIGN):
        raise MessageError(f"{where}: a benign message has category and strength `benign`, and only it")
    hand, key, weight, groups, kept = _regex_of(raw, where)
    cases = []
    for c in raw.get("case", []):
        if set(c) - _CASE_KEYS:
            raise MessageError(f"{where}: case keys {sorted(set(c) - _CASE_KEYS)} unknown")
        _check_reading(c, kinds, f"{where} case")
        when = tuple((k, v) for k, v in c.get("when", {}).items())
        if any(k not in groups for k, _ in when):
            raise MessageError(f"{where}: a case keys on a field the entry does not read ({dict(when)})")
        cases.append(Case(when, c.get("when_file"), {k: c[k] for k in _CHANGES if k in c}))
    return Message(
        id=raw["id"],
        area=area,
        origin=origin,
        format=raw.get("format"),
        hand_regex=hand,
        key=key,
        weight=weight,
        columns=_columns(groups, raw.get("columns", {}), where),
        meaning=raw["meaning"],
        category=raw["category"],
        strength=raw["strength"],
        alone=raw.get("alone"),
        incriminates=raw.get("incriminates", "this_rank"),
        kind=raw["kind"],
        set=dict(raw.get("set", {})),
        fix=raw["fix"],
        nccl=raw["nccl"],
        cases=tuple(cases),
        examples=tuple(e["line"] for e in raw.get("example", [])),
        fields=tuple(raw.get("fields", []))[:kept],
    )


def load_messages(dirs: Sequence[Path], kinds: dict[str, KindDecl]) -> tuple[Message, ...]:
    """Every `[[message]]` of `<dir>/nccl/*.toml` for each catalog directory, validated (ids unique)."""
    out: list[Message] = []
    for directory in dirs:
        for path in sorted((directory / FOLDER).glob("*.toml")):
            doc = read_toml(path)
            area = doc.get("area", {}).get("name", path.stem)
            out += [_message(raw, area, f"{FOLDER}/{path.name}", kinds) for raw in doc.get("message", [])]
    dupes = sorted(i for i, n in Counter(m.id for m in out).items() if n > 1)
    if dupes:
        raise MessageError(f"duplicate message ids: {dupes[:5]}")
    return tuple(out)


# --- reading the kept lines -------------------------------------------------------------------------------------

LAST_ERROR = "Last error:"
CASE_MARK = "#"  # an event read by an entry's case: `<entry id>#<case index>`
_WHERE = re.compile(r"^[\w./+-]+\.(?:cc|h|cu|cpp|c)")
TEXTS_SCHEMA = {"source": pl.String(), "line": pl.Int64(), "msg": pl.String(), "where": pl.String()}


# NCCL's last WARN message as other wrappers quote it (ncclGetLastError): nccl2's `NCCL Last Error: <msg>`, XLA's
# `... failed: <class>. Last NCCL warning(error) log entry (may be unrelated) '<msg>'.`, nccl-tests' (NCCL 2.13+)
# `Test NCCL failure <file>:<line> '<class> / <msg>'`
_XLA_LAST = r"Last NCCL warning\(error\) log entry \(may be unrelated\) '"
_TESTS_LAST = r"NCCL failure [\w./-]+:\d+ '[^'/]*? / "
_QUOTED_LAST = r"Last [Ee]rror:|" + _XLA_LAST + "|" + _TESTS_LAST


def _last_errors(parsed: pl.DataFrame) -> pl.DataFrame:
    """torch's `Last error:` texts (NCCL's last WARN message without its prefix): the rest of the line, or the line
    after a line that ends with it (torch >= 2.0 prints it on its own line); nccl2's and XLA's quotes of it too."""
    if parsed.is_empty():
        return empty(TEXTS_SCHEMA)
    msg = pl.col("message").str.strip_chars()
    has = parsed.filter(pl.col("message").str.contains(_QUOTED_LAST))
    if has.is_empty():
        return empty(TEXTS_SCHEMA)
    quoted = pl.coalesce(
        msg.str.extract(_XLA_LAST + r"(.*)'\.?$", 1),
        msg.str.extract(_TESTS_LAST + r"(.*)'$", 1),
        msg.str.extract(r"Last [Ee]rror:(.*)$", 1),
    )
    same = has.select("source", "line", quoted.str.strip_chars().alias("msg")).filter(pl.col("msg").fill_null("") != "")
    heads = has.filter(msg.str.ends_with(LAST_ERROR)).select("source", (pl.col("line") + 1).alias("line"))
    after = parsed.join(heads, on=["source", "line"], how="semi").select("source", "line", msg.alias("msg"))
    return pl.concat([same, after]).with_columns(pl.lit(None, pl.String).alias("where")).cast(TEXTS_SCHEMA)


def _texts(parsed: pl.DataFrame, events: pl.DataFrame) -> pl.DataFrame:
    """(source, line, msg, where) of every NCCL message to read: the WARN lines' messages (`where`: NCCL's
    `file:line` of the call, then the return-code trace NCCL printed after it on the same thread, `bootstrap.cc:100
    -> 2 init.cc:695 -> 2`: where the failure went) and the `Last error:` texts."""
    from ncclpm.ingest.text.nccl import nccl_warnings

    if not (events["kind"] == K.nccl_warn).any():  # (most jobs: no WARN line - only the quoted ones, if any)
        last = _last_errors(parsed)
        return last if last.is_empty() else last.unique(["source", "line"], keep="first")
    warns = events.filter((pl.col("kind") == K.nccl_warn) & pl.col("value").is_not_null()).select(
        "source", "line", pl.col("value").str.strip_chars().alias("msg"), pl.col("detail").alias("where")
    )
    if not warns.is_empty() and not events.filter(pl.col("kind") == K.nccl_retcode).is_empty():
        chains = nccl_warnings(events).select(
            pl.col("file").alias("source"), "line", pl.col("chain").list.join(" ").alias("_chain")
        )
        warns = warns.join(chains, on=["source", "line"], how="left").select(
            "source", "line", "msg", pl.concat_str("where", "_chain", separator=" ", ignore_nulls=True).alias("where")
        )
    return pl.concat([warns.cast(TEXTS_SCHEMA), _last_errors(parsed)]).unique(["source", "line"], keep="first")


def read_messages(
    parsed: pl.DataFrame, events: pl.DataFrame, vocab: Callable[[], Vocabulary], kinds: dict[str, KindDecl]
) -> pl.DataFrame:
    """`events` with one more row per NCCL message an entry reads (event = the entry's id, its kind, typed fields,
    `strength` = how much it proves alone, its attributes); the other readings of those lines are dropped (the
    declared message is the reading of its line), but for the `nccl_warn` record itself."""
    texts = _texts(parsed, events)
    if texts.is_empty():
        return events
    hits = vocab().read(texts["msg"].to_list())
    rows = []
    for (source, line, msg, where), hit in zip(texts.iter_rows(), hits, strict=True):
        if hit is None:
            continue
        m, groups = hit
        case, r = m.reading(groups, where)
        event = m.id if case is None else f"{m.id}{CASE_MARK}{case}"
        row: dict[str, Any] = {"source": source, "line": line, "event": event, "kind": r["kind"]}
        row["severity"] = "info" if r["category"] == BENIGN else "error"
        for g, col in m.columns.items():
            row[col] = groups.get(g)
        row.setdefault("detail", msg[:500])
        row["strength"] = None if r["category"] == BENIGN else r["alone"]
        row |= r["set"]
        rows.append(row)
    if not rows:
        return events
    return _merged(events, parsed, rows, kinds)


def _typed(rows: list[dict[str, Any]]) -> pl.DataFrame:
    """The rows read, each column as the events table types it (a field's text cast: `111` to an integer)."""
    data = {}
    for c in ("source", "line", "event", "kind", "severity", *EVENT_FIELDS):
        values = [r.get(c) for r in rows]
        if c not in ("source", "line", "event", "kind", "severity") and all(v is None for v in values):
            continue
        dtype = EVENTS_SCHEMA[c]
        if dtype == pl.Float64():
            data[c] = pl.Series(c, [None if v is None else float(v) for v in values], dtype=pl.Float64)
        elif dtype == pl.Boolean():
            data[c] = pl.Series(c, values, dtype=pl.Boolean)
        else:
            text = pl.Series(c, [None if v is None else str(v) for v in values], dtype=pl.String)
            data[c] = text.cast(dtype, strict=False)
    return pl.DataFrame(data)


def _merged(
    events: pl.DataFrame, parsed: pl.DataFrame, rows: list[dict[str, Any]], kinds: dict[str, KindDecl]
) -> pl.DataFrame:
    from ncclpm.ingest.readings import apply_readings

    read = _typed(rows)
    where = parsed.select("source", "line", "rank", "host", "ts", "level", pl.col("raw").alias("text")).unique(
        ["source", "line"], keep="first", maintain_order=True
    )
    new = read.join(where, on=["source", "line"], how="left")
    set_here = {c for r in rows for c in r if c in ("net_class", "exhausted", "strength", "victim")}
    full = new.select(
        [pl.col(c) if c in new.columns else pl.lit(None, dtype).alias(c) for c, dtype in EVENTS_SCHEMA.items()]
    ).cast(EVENTS_SCHEMA)  # type: ignore[arg-type]
    kept = {c: full[c] for c in set_here}
    full = apply_readings(full, kinds)  # the kind's readings (victim...), then the entry's own attributes over them
    full = full.with_columns([pl.coalesce(kept[c], pl.col(c)).alias(c) for c in kept])
    # (in a fixed order: a pattern's several rows on one line - one per device NCCL lists - stay as matched)
    read_lines = full.select("source", "line")
    others = events.join(read_lines, on=["source", "line"], how="anti", maintain_order="left")
    own_warn = events.join(read_lines, on=["source", "line"], how="semi", maintain_order="left").filter(
        pl.col("kind") == K.nccl_warn
    )
    return pl.concat([others, own_warn, full], how="vertical").sort("source", "line", "event", maintain_order=True)


@lru_cache(maxsize=1)
def shipped() -> dict[str, Message]:
    """The shipped entries by id (what a rule or a report says about an event an entry produced)."""
    from ncclpm.tables.kinds import KINDS_FILE, load_kinds, merge_kinds
    from ncclpm.util.resources import data_dir

    parsers = data_dir("parsers")
    return {m.id: m for m in load_messages((parsers,), merge_kinds(load_kinds(parsers / KINDS_FILE)))}


def reading(event_id: str | None) -> dict[str, Any] | None:
    """What the declared NCCL message an event was read by says (meaning, fix, category, ... - with the case that
    applied), if an entry read it."""
    if not event_id or not event_id.startswith("nccl."):
        return None
    base, _, case = event_id.partition(CASE_MARK)
    m = shipped().get(base)
    if m is None:
        return None
    return m.case_reading(int(case) if case.isdigit() and int(case) < len(m.cases) else None)
