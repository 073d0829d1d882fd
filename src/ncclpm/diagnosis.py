"""The one record a diagnosis produces. `Diagnosis.to_dict()` is the only serialisation (JSON output,
batch tables); every renderer reads this record."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ncclpm.rules.base import Evidence, Finding
from ncclpm.schema import Band, Category

SCHEMA_VERSION = 1


def _jsonable(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat(sep=" ")
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


@dataclass(frozen=True)
class Rival:
    finding: Finding
    why_not: str


@dataclass(frozen=True)
class Diagnosis:
    job: str
    primary: Finding
    rivals: tuple[Rival, ...]
    symptoms: tuple[Finding, ...]
    failing_collective: dict[str, Any] | None
    world_size: int | None
    world_size_declared: bool
    ranks: tuple[dict[str, Any], ...]
    decisive: tuple[Evidence, ...]
    warnings: tuple[str, ...]
    not_evaluated: tuple[str, ...] = ()
    versions: dict[str, str] = field(default_factory=dict)
    settings: tuple[dict[str, Any], ...] = ()
    n_sources: int = 0
    supporting: tuple[Finding, ...] = ()
    cross_check: str | None = None
    stack_tree: dict[str, Any] | None = None  # merged stacks of the ranks (stack_facts.py)
    stack_check: str | None = None  # whether the stacks agree with the logs and dumps
    noticed: tuple[str, ...] = ()  # who noticed first: dump signals, propagated errors, NCCL's diagnostics
    code_files: tuple[str, ...] = ()  # code and configuration files: read for settings only, never as evidence

    @property
    def category(self) -> Category:
        return self.primary.category

    @property
    def confidence(self) -> float:
        return self.primary.confidence

    @property
    def band(self) -> Band:
        return Band.of(self.confidence)

    @property
    def culprit_ranks(self) -> tuple[int, ...]:
        return self.primary.culprit_ranks

    @property
    def summary(self) -> str:
        return self.primary.summary

    @property
    def findings(self) -> tuple[Finding, ...]:
        return (self.primary, *self.supporting, *(r.finding for r in self.rivals), *self.symptoms)

    def to_dict(self) -> dict[str, Any]:
        return _jsonable(
            {
                "schema_version": SCHEMA_VERSION,
                "job": self.job,
                "category": str(self.category),
                "confidence": round(self.confidence, 3),
                "band": self.band,
                "culprit_ranks": list(self.culprit_ranks),
                "summary": self.summary,
                "failing_collective": self.failing_collective,
                "world_size": self.world_size,
                "world_size_declared": self.world_size_declared,
                "findings": [f.to_dict() for f in self.findings],
                "rivals": [{"rule": r.finding.rule, "why_not": r.why_not} for r in self.rivals],
                "supporting": [f.rule for f in self.supporting],
                "symptoms": [f.rule for f in self.symptoms],
                "cross_check": self.cross_check,
                "stack_tree": self.stack_tree,
                "stack_check": self.stack_check,
                "noticed": list(self.noticed),
                "decisive_evidence": [e.to_dict() for e in self.decisive],
                "ranks": list(self.ranks),
                "versions": self.versions,
                "settings": list(self.settings),
                "warnings": list(self.warnings),
                "not_evaluated": list(self.not_evaluated),
                "sources": self.n_sources,
                "code_files": list(self.code_files),
            }
        )
