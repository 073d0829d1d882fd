"""The record `ncclpm diff` produces (standard library only, like `ncclpm.model`: rendering reads only these).

A `Fact` is one thing a run's logs say about its configuration or progress (the torch version, a variable's
value, the world size, the transport between two ranks, the step time), with the line that says it. Comparing
the facts of GOOD and BAD gives `Difference`s, each judged for how much it can explain BAD's diagnosis
(`relevance`: high, medium, low, none) with the reason (`why`). `DiffReport.to_dict()` is the JSON output.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

SCHEMA_VERSION = 1
RELEVANCE = ("high", "medium", "low", "none")
SECTIONS = ("versions", "settings", "launcher", "shape", "nccl", "progress")


@dataclass(frozen=True)
class Quote:
    """A line of a run's logs (or a dump) that states a fact."""

    file: str
    line: int | None
    text: str

    def to_dict(self) -> dict[str, Any]:
        return {"file": self.file, "line": self.line, "text": self.text}


@dataclass(frozen=True)
class Fact:
    key: str  # unique within a run: "setting:GLOO_SOCKET_IFNAME", "version:nccl@node3"
    what: str  # the factor's name as shown: "GLOO_SOCKET_IFNAME", "NCCL version on node3"
    family: str  # for relevance (parsers/diff_factors.toml): "interface_setting", "torch_version"...
    section: str  # one of SECTIONS
    value: str
    evidence: Quote | None = None
    paired_only: bool = False  # per host / per rank: compared only when both runs have it (else the shape says it)
    of: str = ""  # who takes it, when `what` is an option: `torchrun`, `train.py`
    controls: str = ""  # what it controls, prose: "the process group's timeout: `init_process_group(timeout=)` ..."
    controls_evidence: Quote | None = None  # the line of the job's files that says so (the code reading it)
    seconds: float | None = None  # the value as a duration, when it is one
    via: str = ""  # the key of the setting this fact comes from (a timeout set through PG_TIMEOUT_S)


@dataclass(frozen=True)
class Difference:
    what: str
    family: str
    section: str
    good: str | None  # None: not seen in that run's logs
    bad: str | None
    relevance: str = "none"
    why: str = ""
    good_evidence: Quote | None = None
    bad_evidence: Quote | None = None
    linked: bool = False  # BAD's failure itself points at it (its error names the value, its culprit is new...)
    failure_evidence: Quote | None = None  # the line of BAD's failure that points at it
    also: tuple[str, ...] = ()  # the same change seen under other names (other hosts, rank pairs)
    of: str = ""  # who takes it, when `what` is an option (`torchrun`, `train.py`)
    controls: str = ""  # what it controls (prose), from the job's files
    controls_evidence: Quote | None = None
    good_seconds: float | None = None  # the values as durations, when they are
    bad_seconds: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "what": self.what,
            "section": self.section,
            "family": self.family,
            "good": self.good,
            "bad": self.bad,
            "relevance": self.relevance,
            "why": self.why,
            "linked_to_diagnosis": self.linked,
            "evidence": {
                "good": self.good_evidence.to_dict() if self.good_evidence else None,
                "bad": self.bad_evidence.to_dict() if self.bad_evidence else None,
                "failure": self.failure_evidence.to_dict() if self.failure_evidence else None,
                "controls": self.controls_evidence.to_dict() if self.controls_evidence else None,
            },
            "also": list(self.also),
            "of": self.of,
            "controls": self.controls,
        }


@dataclass(frozen=True)
class RunSummary:
    """One run as the diff shows it: its name and its own diagnosis."""

    job: str
    category: str
    confidence: float
    band: str
    rule: str
    summary: str
    culprit_ranks: tuple[int, ...]
    decisive: tuple[Quote, ...]
    sources: int
    world_size: int | None
    failed: bool  # some rule found a failure (category other than unknown) or an error line was seen

    def to_dict(self) -> dict[str, Any]:
        return {
            "job": self.job,
            "category": self.category,
            "confidence": round(self.confidence, 3),
            "band": self.band,
            "rule": self.rule,
            "summary": self.summary,
            "culprit_ranks": list(self.culprit_ranks),
            "decisive_evidence": [q.to_dict() for q in self.decisive],
            "sources": self.sources,
            "world_size": self.world_size,
            "failed": self.failed,
        }


@dataclass(frozen=True)
class DiffReport:
    good: RunSummary
    bad: RunSummary
    differences: tuple[Difference, ...]  # ranked: relevance, linked first, family order
    same: tuple[tuple[str, str], ...] = ()  # (what, value) of facts both runs share
    headline: str = ""
    compared: int = 0  # facts present in both runs
    warnings: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def relevant(self) -> tuple[Difference, ...]:
        return tuple(d for d in self.differences if d.relevance != "none")

    @property
    def irrelevant(self) -> tuple[Difference, ...]:
        return tuple(d for d in self.differences if d.relevance == "none")

    def by_relevance(self, level: str) -> tuple[Difference, ...]:
        return tuple(d for d in self.differences if d.relevance == level)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "kind": "ncclpm.diff",
            "headline": self.headline,
            "good": self.good.to_dict(),
            "bad": self.bad.to_dict(),
            "differences": [d.to_dict() for d in self.differences],
            "linked": [d.what for d in self.differences if d.linked],
            "same": [{"what": w, "value": v} for w, v in self.same],
            "compared": self.compared,
            "notes": list(self.notes),
            "warnings": list(self.warnings),
        }
