"""What a rule is, and what it returns.

A rule is one small class in its own module: metadata (id, name, category, the tables it needs, base
confidence, which symptom rules it explains) plus two steps - `evidence(tables)`, a polars query whose
rows are the facts it relies on (zero rows = silent), and `assess(tables, evidence)`, which turns those rows
into a `Finding` with culprit ranks, a confidence and quotable evidence (file:line). Facts derived across
sources (victims, crashes, store waits, the stack tree, the timeout in force...) are the analysis stage's: a
rule reads them from `self.facts`, never from another rule; who silences whom is `precedence.EXPLAINS`. The
docstring of a rule is its user documentation (`ncclpm explain RULE`), written in fixed sections checked by a
meta-test; its `## How to fix` section is generated from the rule's `FIXES`, the same texts its findings carry.
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import polars as pl

from ncclpm.analysis.job import UNLESS, JobFacts
from ncclpm.model import MAX_QUOTE, Category, Evidence, Finding, ranks_text  # noqa: F401 - rules use them from here
from ncclpm.tables import TABLE_NAMES, Tables
from ncclpm.tables.kinds import K

if TYPE_CHECKING:
    from ncclpm.analysis import Analysis

DOC_SECTIONS = ("## What it detects", "## Why it matters", "## Example", "## How to fix")
LIVE_PREFIX = "Next time it hangs, "  # a `live` fix, given for a job that is over
_SLOT = re.compile(r"\{(\w+)\|([^{}]*)\}")  # `{hosts|the named hosts}`: a value, and what the docs show


@dataclass(frozen=True)
class Fix:
    """One fix a rule can give. `text` may hold slots `{name|doc text}`, filled by the finding with its own
    values and shown with the doc text in `ncclpm explain`; `when` says (in the docs) when the fix is given;
    `unless` names a job fact (`analysis/job.py`) under which it is not given (the job already does it); `live`
    marks advice about a running process, given for the next run when the job is over."""

    text: str
    when: str = ""
    unless: str = ""
    live: bool = False

    def __post_init__(self) -> None:
        if self.unless and self.unless not in UNLESS:
            raise RuleError(f"Fix.unless names an unknown job fact {self.unless!r} (known: {sorted(UNLESS)})")

    def render(self, values: dict[str, Any] | None = None) -> str:
        """The text with its slots filled from `values`, or with their doc text when `values` is None."""
        return _SLOT.sub(lambda m: m[2] if values is None else str(values[m[1]]), self.text)

    def doc(self) -> str:
        text = f"{f'When {self.when}: ' if self.when else ''}{self.render()}"
        return text + (f" (Not given when {UNLESS[self.unless]}.)" if self.unless else "")


WARN_TAG = "NCCL WARN "


def warn_message(text: str | None) -> str | None:
    """An NCCL WARN line's message, without NCCL's prefix (`host:pid:tid [dev] file:line NCCL WARN `); None for a
    line without the tag."""
    cut = (text or "").find(WARN_TAG)
    return None if cut < 0 else (text or "")[cut + len(WARN_TAG) :]


def quotes(frame: pl.DataFrame, limit: int = 6, text_col: str = "text") -> tuple[Evidence, ...]:
    """Evidence from rows with source/line/rank/text, de-duplicated, first `limit` rows."""
    if frame.is_empty():
        return ()
    rows = frame.unique(subset=["source", "line"], keep="first", maintain_order=True).head(limit)
    return tuple(
        Evidence(r["source"], r["line"], (r[text_col] or "")[:MAX_QUOTE], r.get("rank"))
        for r in rows.iter_rows(named=True)
    )


class RuleError(TypeError):
    """A rule is declared wrong (unknown table in `needs`, unknown rule id in `explains`...): raised when it is
    defined or registered, never later."""


class Rule:
    """Base class: subclasses set the class attributes and implement `evidence` and `assess`."""

    id: ClassVar[str]
    name: ClassVar[str]
    category: ClassVar[Category]
    needs: ClassVar[frozenset[str]] = frozenset({"events"})
    # Event kinds without one of which `evidence` is empty whatever else the job holds: the engine does not run the
    # rule on a job with none of them (as if it had found nothing; it is not "not evaluated"). Empty: always run.
    # Exact or nothing - tests/test_rules_fires_on.py runs every rule on every case to check it.
    fires_on: ClassVar[frozenset[str]] = frozenset()
    base_confidence: ClassVar[float] = 0.5
    explains: ClassVar[tuple[str, ...]] = ()
    fallback: ClassVar[bool] = False  # run only when no other rule found a root cause
    FIXES: ClassVar[dict[str, Fix]] = {}  # what to change, by key: the findings' fixes and the doc's How to fix

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        unknown = sorted(set(cls.needs) - TABLE_NAMES)
        if unknown:
            raise RuleError(f"{cls.__name__}: `needs` names unknown tables {unknown} (known: {sorted(TABLE_NAMES)})")
        K.check(*cls.fires_on, where=f"{cls.__name__}.fires_on")
        if not isinstance(cls.explains, tuple):
            raise RuleError(f"{cls.__name__}: `explains` must be a tuple of rule ids")
        if "## How to fix" in (cls.__doc__ or ""):
            raise RuleError(f"{cls.__name__}: the How to fix section is generated from FIXES; do not write it")

    def evidence(self, t: Tables) -> pl.DataFrame:  # pragma: no cover - abstract
        raise NotImplementedError

    def assess(self, t: Tables, ev: pl.DataFrame) -> Finding | None:  # pragma: no cover - abstract
        raise NotImplementedError

    def __init__(self, facts: Analysis) -> None:
        self.facts = facts  # the job's derived facts (the analysis stage): what the rule reads besides its tables

    @property
    def job(self) -> JobFacts:
        return self.facts.job

    @classmethod
    def may_fire(cls, t: Tables) -> bool:
        """False when the job holds none of the kinds the rule's evidence needs (`fires_on`): it cannot fire."""
        return not cls.fires_on or t.has_kinds(*cls.fires_on)

    def run(self, t: Tables) -> Finding | None:
        ev = self.evidence(t)
        if ev.is_empty():
            return None
        return self.assess(t, ev)

    def why_not(self, t: Tables, winner: Finding, mine: Finding | None) -> str | None:
        """Why this rule's explanation is not the cause, in one clause from evidence the rule can state: `mine` is
        its finding when it fired and lost (a rival), None when it did not fire (a suspect a reader would have
        given the winner). None: nothing to say (the engine then compares the two findings' own lines)."""
        return None

    def finding(self, **kw: Any) -> Finding:
        kw.setdefault("explains", self.explains)
        conf = max(0.0, min(1.0, kw.pop("confidence", self.base_confidence)))
        category = kw.pop("category", self.category)  # rules that classify from evidence may refine it
        return Finding(rule=self.id, name=self.name, category=category, confidence=conf, **kw)

    def fixes(self, *keys: str, **values: Any) -> tuple[str, ...]:
        """The texts of the fixes `keys` (all of them, in order, when none is given), slots filled from `values`;
        a fix the job already follows (`unless`) is left out, one about a live process is put for the next run."""
        out = []
        for fix in (self.FIXES[k] for k in (keys or tuple(self.FIXES))):
            if fix.unless and getattr(self.job, fix.unless):
                continue
            text = fix.render(values)
            out.append(f"{LIVE_PREFIX}{text[:1].lower()}{text[1:]}" if fix.live and self.job.over else text)
        return tuple(out)

    @classmethod
    def doc(cls) -> str:
        """The docstring, with the `## How to fix` section generated from FIXES."""
        fixes = "\n".join(f"- {f.doc()}" for f in cls.FIXES.values())
        return f"{inspect.cleandoc(cls.__doc__ or '')}\n\n## How to fix\n{fixes}"
