"""Settings read from the job's code and configuration files - never log evidence.

Input: `Source`s of kind "code" (recognised by `sources/code.py`). Output: the `code_settings` table
(`CODE_SETTINGS_SCHEMA`), one row per fact a reading of `parsers/code_settings.toml` found in a statement
(`code_statements.py`): what is configured (`setting`, `name`), the value as written and as a number
(`number`, in `unit`: "s" for durations, "count" for counts; null when the value is decided at run time), and
where (`source`, `line`, `text` = that physical line). Two kinds of rows are derived: a timeout given by a name
bound to a literal in the same file (`PG_TIMEOUT = timedelta(minutes=45)`) gets that number; and
`cuda_set_device` = "absent" when the code calls `init_process_group` (with a backend other than gloo alone)
but neither `torch.cuda.set_device` nor `device_id=` shows anywhere in the code read. Nothing here becomes an event.

Stages read the facts with `code_facts(t, setting)` (the analysis: the timeout the code sets).
"""

from __future__ import annotations

import ast
import math
import re
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import polars as pl

from ncclpm.ingest.code.rank_branches import rank_branch_facts
from ncclpm.ingest.code.statements import Statement, statements
from ncclpm.ingest.unwrap import NO_ENVELOPE, unwrap_lines
from ncclpm.sources.code import MAX_CODE_BYTES, code_language
from ncclpm.sources.discover import HEAD_BYTES, Source
from ncclpm.tables.schema import empty
from ncclpm.util.encoding import decode_text
from ncclpm.util.frames import filtered
from ncclpm.util.resources import data_dir, read_toml
from ncclpm.util.structure import MAX_NESTING, TooDeep, toml_too_deep

if TYPE_CHECKING:
    from ncclpm.tables import Tables

CODE_SETTINGS_SCHEMA = pl.Schema(
    {
        "setting": pl.String(),
        "name": pl.String(),
        "value": pl.String(),
        "number": pl.Float64(),
        "unit": pl.String(),
        "source": pl.String(),
        "line": pl.Int64(),
        "text": pl.String(),
        "lang": pl.String(),
        "reading": pl.String(),
        "target": pl.String(),  # the name the statement assigns (`timeout = ...`), for what an env read feeds
    }
)
SETTINGS = (
    "pg_timeout",
    "subgroup_timeout",
    "pg_init",
    "cuda_set_device",
    "dataloader_num_workers",
    "dataloader_timeout",
    "env",
    "job_env",
    "env_read",
    "launcher_arg",
    "script_arg",
    "arg_def",
    "constant",
    "rank_collective",  # derived: a collective only the ranks of one branch issue (rank_branches.py)
    "job_id",
)
UNITS: dict[str, str | None] = {"duration": "s", "count": "count", "text": None}
STATEMENT_LANGS = ("python", "shell", "yaml", "toml", "json", "dockerfile")
READINGS_FILE = "code_settings.toml"
MAX_STATEMENT = 100_000  # characters; a longer statement is a data literal, not a setting
MAX_QUOTE = 200
_TIMEDELTA_SECONDS = {
    "days": 86400.0,
    "seconds": 1.0,
    "microseconds": 1e-6,
    "milliseconds": 1e-3,
    "minutes": 60.0,
    "hours": 3600.0,
    "weeks": 604800.0,
}
_OPS = {ast.Add: float.__add__, ast.Sub: float.__sub__, ast.Mult: float.__mul__, ast.Div: float.__truediv__}


class ReadingError(ValueError):
    """`parsers/code_settings.toml` is malformed; the message names the reading."""


@dataclass(frozen=True)
class Reading:
    """How one setting is read from code (`parsers/code_settings.toml`): the literals, regex and languages."""

    id: str
    setting: str
    name: str
    langs: frozenset[str]
    anchors: tuple[str, ...]
    regex: re.Pattern[str]
    within: re.Pattern[str] | None
    unit: str
    examples: tuple[dict[str, Any], ...] = ()
    counterexamples: tuple[dict[str, Any], ...] = ()


def _reading(raw: dict[str, Any], parts: dict[str, str]) -> Reading:
    where = f"{READINGS_FILE}: reading {raw.get('id', '?')!r}"
    for key in ("id", "setting", "name", "langs", "anchor", "regex", "unit"):
        if key not in raw:
            raise ReadingError(f"{where}: missing key {key!r}")
    if raw["setting"] not in SETTINGS or raw["unit"] not in UNITS:
        raise ReadingError(f"{where}: setting must be one of {SETTINGS}, unit one of {tuple(UNITS)}")
    if not set(raw["langs"]) <= set(STATEMENT_LANGS):
        raise ReadingError(f"{where}: langs must be among {STATEMENT_LANGS}")

    def compile_(rx: str) -> re.Pattern[str]:
        for part, text in parts.items():
            rx = rx.replace("{{" + part + "}}", text)
        try:
            return re.compile(rx)
        except re.error as exc:
            raise ReadingError(f"{where}: regex does not compile: {exc}") from exc

    regex = compile_(raw["regex"])
    within = compile_(raw["within"]) if "within" in raw else None
    if "value" not in regex.groupindex or (within is not None and "span" not in within.groupindex):
        raise ReadingError(f"{where}: the regex needs a `value` group (and `within` a `span` group)")
    if not raw.get("example"):
        raise ReadingError(f"{where}: at least one [[reading.example]] is required")
    anchors = (raw["anchor"],) if isinstance(raw["anchor"], str) else tuple(raw["anchor"])
    return Reading(
        raw["id"],
        raw["setting"],
        raw["name"],
        frozenset(raw["langs"]),
        anchors,
        regex,
        within,
        raw["unit"],
        tuple(raw.get("example", [])),
        tuple(raw.get("counterexample", [])),
    )


@lru_cache(maxsize=1)
def load_readings() -> tuple[tuple[Reading, ...], dict[str, float]]:
    """The readings, validated, and the named constants they may resolve (torch's default timeouts)."""
    doc = read_toml(data_dir("parsers") / READINGS_FILE)
    found = tuple(_reading(r, doc.get("parts", {})) for r in doc.get("reading", []))
    ids = [r.id for r in found]
    if len(ids) != len(set(ids)):
        raise ReadingError(f"{READINGS_FILE}: duplicate reading ids")
    return found, {k: float(v) for k, v in doc.get("constants", {}).items()}


def _arith(node: ast.AST, names: dict[str, float]) -> float | None:
    """A number from literal arithmetic (`6 * 1800`, `2.5`) or a known name; None for anything else."""
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float) and not isinstance(node.value, bool):
        try:
            value: float | None = float(node.value)
        except OverflowError:  # an int past what a float holds (10**400 written out): no setting means that
            return None
    elif isinstance(node, ast.Name | ast.Attribute):
        value = names.get(node.id if isinstance(node, ast.Name) else node.attr)
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        inner = _arith(node.operand, names)
        value = None if inner is None else (-inner if isinstance(node.op, ast.USub) else inner)
    elif isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        left, right = _arith(node.left, names), _arith(node.right, names)
        if left is None or right is None or (isinstance(node.op, ast.Div) and right == 0):
            return None
        value = _OPS[type(node.op)](left, right)
    else:
        return None
    return value if value is not None and math.isfinite(value) else None


def to_number(value: str, unit: str, names: dict[str, float]) -> float | None:
    """`value` as written -> seconds (duration) or a count; None when it is not a literal."""
    if unit == "text" or not value or len(value) > 500:
        return None
    try:
        node = ast.parse(value.strip(), mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    func = node.func if isinstance(node, ast.Call) else None
    if unit == "duration" and func is not None and getattr(func, "attr", getattr(func, "id", "")) == "timedelta":
        assert isinstance(node, ast.Call)
        pairs = [*zip(_TIMEDELTA_SECONDS, node.args, strict=False), *((k.arg, k.value) for k in node.keywords)]
        total = 0.0
        for key, arg in pairs:
            n = _arith(arg, names)
            if key not in _TIMEDELTA_SECONDS or n is None:
                return None
            total += n * _TIMEDELTA_SECONDS[key]
        return total if math.isfinite(total) else None
    return _arith(node, names)


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _clean(text: str) -> str:
    """Control characters (an ANSI escape, a bell) are never part of a setting: shown as U+FFFD, not sent on."""
    return _CONTROL.sub("\ufffd", text)


def _unquote(value: str) -> str:
    value = _clean(value).strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[1:-1]
    return value


_TARGET = re.compile(r"^\s*(?P<target>[A-Za-z_][\w.]*)\s*(?::[^=]*)?=(?!=)")


def read_statement(st: Statement, readings: Iterable[Reading]) -> Iterator[dict[str, Any]]:
    """Facts (without number) the readings find in one statement."""
    assigned = _TARGET.match(st.text) if st.lang == "python" else None
    target = assigned.group("target") if assigned else None
    for r in readings:
        if st.lang not in r.langs or not any(a in st.text for a in r.anchors):
            continue
        spans = (
            [(st.text, 0, {})]
            if r.within is None
            else [(m.group("span"), m.start("span"), m.groupdict()) for m in r.within.finditer(st.text)]
        )
        for span, base, outer in spans:
            for m in r.regex.finditer(span):
                groups = {k: v for k, v in {**outer, **m.groupdict()}.items() if v is not None}
                line, raw = st.line_at(base + (m.start("value") if m.group("value") is not None else m.start()))
                yield {
                    "setting": r.setting,
                    "name": _clean(" ".join(r.name.format_map(defaultdict(str, groups)).split())),
                    "value": _unquote(groups.get("value", "")),
                    "unit": r.unit,
                    "line": line,
                    "text": _clean(raw[:MAX_QUOTE]),
                    "reading": r.id,
                    "target": target,
                }


def read_code_text(name: str, text: str, lang: str, warnings: list[str]) -> list[dict[str, Any]]:
    """Every fact of one code file, numbers resolved (names bound to literals in the same file, torch's
    default-timeout names)."""
    readings, known = load_readings()
    if lang in ("toml", "json") and toml_too_deep(text):  # (read line by line: a warning, the lines still read)
        warnings.append(f"{name}: {lang} nested more than {MAX_NESTING} levels deep - not a config's shape")
    langs = {"python", "shell"} if lang == "notebook" else {lang}
    branches = _rank_branches(name, text) if lang == "python" else []
    active = [r for r in readings if r.langs & langs and any(a in text for a in r.anchors)]
    if not active:
        return branches
    facts: list[dict[str, Any]] = []
    # A snippet copied from a terminal may be hard-wrapped mid-name (`timede` + `lta(seconds=...)`): read it
    # re-joined, and quote each fact at its first physical line.
    rows = unwrap_lines(text.split("\n"), NO_ENVELOPE)
    try:
        for st in statements("\n".join(line for _, line in rows), lang, MAX_STATEMENT):
            facts.extend(read_statement(st, active))
    except (ValueError, RecursionError) as exc:
        why = str(exc) if isinstance(exc, TooDeep) else type(exc).__name__
        warnings.append(f"{name}: {lang} file that cannot be parsed ({why}); settings not read")
        return []
    for f in facts:
        f["line"] = rows[f["line"] - 1][0] if 0 < f["line"] <= len(rows) else f["line"]
    names = dict(known)
    for f in facts:
        if f["setting"] == "constant" and (n := to_number(f["value"], f["unit"], known)) is not None:
            names[f["name"]] = n
    for f in facts:
        f.update(source=name, lang=lang, number=to_number(f["value"], f["unit"], names))
        f["unit"] = UNITS[f["unit"]]
    return facts + branches


def _rank_branches(name: str, text: str) -> list[dict[str, Any]]:
    """`rank_collective` rows of one Python file, quoted at the call's line."""
    lines = text.split("\n")
    facts, where = rank_branch_facts(text), list(range(1, len(lines) + 1))
    if not facts:  # a snippet hard-wrapped by a terminal does not parse: read it re-joined, quote its first line
        rows = unwrap_lines(lines, NO_ENVELOPE)
        if len(rows) < len(lines):
            facts, where = rank_branch_facts("\n".join(line for _, line in rows)), [n for n, _ in rows]
    return [
        f
        | {
            "source": name,
            "lang": "python",
            "unit": None,
            "line": where[f["line"] - 1],
            "text": _clean(lines[where[f["line"] - 1] - 1].strip()[:MAX_QUOTE]),
        }
        for f in facts
        if 0 < f["line"] <= len(where)
    ]


def _read_source(src: Source, warnings: list[str]) -> list[dict[str, Any]]:
    try:
        size = src.path.stat().st_size if src.path is not None and src.data is None else len(src.data or b"")
        if size > MAX_CODE_BYTES:
            warnings.append(f"{src.name}: {size} bytes, too large for a code file - its settings were not read")
            return []
        data = src.read_bytes()
    except (OSError, ValueError) as exc:
        warnings.append(f"{src.name}: could not be read ({exc}) - skipped")
        return []
    lang = code_language(src.name, data[:HEAD_BYTES], truncated=len(data) > HEAD_BYTES)
    return read_code_text(src.name, decode_text(data), lang or "python", warnings)


def _set_device_absent(facts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One derived row when the code creates a process group but never pins a GPU per rank."""
    calls = [f for f in facts if f["setting"] == "pg_init" and f["value"] != "gloo"]  # gloo alone: CPU only
    if not calls or any(f["setting"] == "cuda_set_device" for f in facts):
        return []
    first = calls[0]
    return [
        {**first, "setting": "cuda_set_device", "name": "torch.cuda.set_device()", "value": "absent"}
        | {"number": None, "unit": None, "reading": "derived.set_device_absent"}
    ]


def code_settings_table(sources: list[Source], warnings: list[str]) -> pl.DataFrame:
    """The `code_settings` table of a job (empty, with its schema, when the job has no code)."""
    facts = [f for src in sources for f in _read_source(src, warnings)]
    facts += _set_device_absent(facts)
    if not facts:
        return empty(CODE_SETTINGS_SCHEMA)
    return pl.DataFrame(facts, schema=CODE_SETTINGS_SCHEMA).sort("source", "line", "setting", maintain_order=True)


def code_facts(t: Tables, setting: str) -> pl.DataFrame:
    """Rows of the `code_settings` table for one setting (empty when the job holds no such code)."""
    table = t.extra.get("code_settings")
    if table is None:
        return empty(CODE_SETTINGS_SCHEMA)
    return filtered(table, pl.col("setting") == setting)


def check_reading_example(r: Reading, example: dict[str, Any], counter: bool = False) -> list[str]:
    """Problems with one example (its facts must be `expect`, in order) or counter-example (no fact)."""
    lang = example.get("lang", sorted(r.langs)[0] if len(r.langs) > 1 else next(iter(r.langs)))
    got = [f for f in read_code_text("example", example["text"], lang, []) if f["reading"] == r.id]
    where = f"{READINGS_FILE}: {r.id} {'counter-example' if counter else 'example'} {example['text'].strip()[:60]!r}"
    if counter:
        return [f"{where}: gave {[(f['name'], f['value']) for f in got]}"] if got else []
    expect = example.get("expect", [])
    if len(got) != len(expect):
        return [f"{where}: {len(got)} facts {[(f['name'], f['value']) for f in got]}, expected {len(expect)}"]
    return [
        f"{where}: {key} = {fact[key]!r}, expected {want!r}"
        for fact, wanted in zip(got, expect, strict=True)
        for key, want in wanted.items()
        if fact[key] != want
    ]


def run_reading_examples() -> list[str]:
    readings, _ = load_readings()
    problems: list[str] = []
    for r in readings:
        problems += [p for ex in r.examples for p in check_reading_example(r, ex)]
        problems += [p for ex in r.counterexamples for p in check_reading_example(r, ex, counter=True)]
    return problems
