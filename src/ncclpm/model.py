"""The model: what a diagnosis says, with no dependency beyond the standard library.

Closed vocabularies (`Category`, `Band`, `FRCulprit`), a quoted line (`Evidence`), what one rule concluded
(`Finding`) and the record a diagnosis produces (`Diagnosis`; `to_dict()` is the only serialisation: JSON
output, batch tables). Renderers import this module only: rendering never loads the parsers, the tables or the
rules.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any


class Category(StrEnum):
    """Root-cause categories (stable ids used in the JSON output)."""

    SLOW_RANK_WORK = "slow_rank_work"
    DATALOADER_HANG = "dataloader_hang"
    NVML_DRIVER_FAILURE = "nvml_driver_failure"
    MISMATCHED_COLLECTIVES = "mismatched_collectives"
    RANK_CRASH = "rank_crash"
    CUDA_OOM = "cuda_oom"
    TIMEOUT_TOO_SHORT = "timeout_too_short"
    NETWORK_TRANSPORT = "network_transport"
    SHM_P2P_TOPOLOGY = "shm_p2p_topology"
    INIT_RENDEZVOUS = "init_rendezvous"
    CONFIG_VERSION = "config_version"
    SYMPTOM = "symptom"
    UNKNOWN = "unknown"
    NO_FAILURE = "no_failure"  # the logs show the job finishing and no failure: nothing to diagnose
    NOT_A_TRAINING_LOG = "not_a_training_log"  # no line of a distributed PyTorch job was recognised

    @property
    def names_a_cause(self) -> bool:
        """True for the categories that name why a job failed (not unknown, no failure, not a training log)."""
        return self not in _NO_CAUSE


_NO_CAUSE = frozenset({Category.UNKNOWN, Category.NO_FAILURE, Category.NOT_A_TRAINING_LOG})


class Band(StrEnum):
    """Named confidence bands, weakest first: conclusive ≥ 0.85, likely ≥ 0.6, possible below."""

    POSSIBLE = "possible"
    LIKELY = "likely"
    CONCLUSIVE = "conclusive"

    @classmethod
    def of(cls, confidence: float) -> Band:
        if confidence >= 0.85:
            return cls.CONCLUSIVE
        return cls.LIKELY if confidence >= 0.6 else cls.POSSIBLE

    @property
    def rank(self) -> int:
        """0 for possible ... 2 for conclusive (to compare bands)."""
        return list(Band).index(self)


class Action(StrEnum):
    """What on-call does next, in one word (derived from the verdict in `ncclpm.report.actions`)."""

    RESTART = "restart"  # transient: resubmit as is
    EXCLUDE_NODE = "exclude_node"  # hardware on a named node: drain it, resubmit without it
    FIX_CODE = "fix_code"  # the job's own code: hand it to the job owner
    FIX_CONFIG = "fix_config"  # launch, environment or container settings
    RAISE_TIMEOUT = "raise_timeout"  # the work is legitimate but outlasts a timeout or a time limit
    COLLECT_MORE = "collect_more"  # the logs do not decide: collect what the report lists, then re-run ncclpm
    NONE = "none"  # nothing failed: no action


class FRCulprit(StrEnum):
    """How the flight-recorder dumps implicate a rank (cf. torch's fr_trace MatchState)."""

    MISMATCH = "mismatch"  # it issued a different collective than the majority at the same sequence number
    NEVER_JOINED = "never_joined"  # it never reached a collective its peers were waiting in
    STOPPED_COMPLETING = "stopped_completing"  # its collectives stayed incomplete after its peers finished them


MAX_QUOTE = 400


@dataclass(frozen=True)
class Evidence:
    """One quoted line: where it is and what it says."""

    file: str
    line: int | None
    text: str
    rank: int | None = None
    also: tuple[str, ...] = ()  # other places the same message was printed ("rank0.log:12 (rank 0)"): folded here

    def to_dict(self) -> dict[str, Any]:
        return {"file": self.file, "line": self.line, "text": self.text, "rank": self.rank, "also": list(self.also)}

    @property
    def ref(self) -> str:
        """`file:line` (the file alone for a whole-file source such as a dump)."""
        return self.file if self.line is None else f"{self.file}:{self.line}"


@dataclass(frozen=True)
class Finding:
    """What one rule concluded: the cause it names, its culprits, confidence, evidence and fixes."""

    rule: str
    name: str
    category: Category
    confidence: float
    culprit_ranks: tuple[int, ...]
    summary: str
    explanation: str
    evidence: tuple[Evidence, ...]
    fixes: tuple[str, ...] = ()
    dont: tuple[str, ...] = ()
    verify: tuple[str, ...] = ()
    explains: tuple[str, ...] = ()
    facts: dict[str, Any] = field(default_factory=dict)

    @property
    def band(self) -> Band:
        return Band.of(self.confidence)

    # The facts the engine and the report read, typed (`facts` is what the JSON report carries, by these keys).
    @property
    def victim_ranks(self) -> tuple[int, ...]:
        """The ranks that waited on the culprit (folded under it as symptoms; `waiting` in the rank table)."""
        return tuple(self.facts.get("victim_ranks", ()))

    @property
    def named_hosts(self) -> tuple[str, ...]:
        """Hosts the finding blames itself (a network or hardware fault's node), besides its culprits' hosts."""
        return tuple(str(h) for h in self.facts.get("hosts") or () if h)

    @property
    def net_classes(self) -> frozenset[str]:
        """The kinds of network failure a transport finding read (`ib`, `connect`, `interface`...)."""
        return frozenset(self.facts.get("classes", ()))

    @property
    def killed(self) -> bool:
        """The culprit was killed from outside (SIGKILL, the OOM killer), not ended by its own error."""
        return bool(self.facts.get("killed"))

    @property
    def host_pairs(self) -> tuple[tuple[str, ...], ...]:
        """The failing connections a network finding read, as host pairs (none: a host's own adapter failed)."""
        return tuple(tuple(p) for p in self.facts.get("host_pairs") or ())

    @property
    def after_work(self) -> bool:
        """The job logged the end of its work before this failure (a crash at teardown)."""
        return bool(self.facts.get("after_work"))

    def to_dict(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "name": self.name,
            "category": str(self.category),
            "confidence": round(self.confidence, 3),
            "band": self.band,
            "culprit_ranks": list(self.culprit_ranks),
            "summary": self.summary,
            "explanation": self.explanation,
            "evidence": [e.to_dict() for e in self.evidence],
            "fixes": list(self.fixes),
            "dont": list(self.dont),
            "verify": list(self.verify),
            "facts": self.facts,
        }


def ranks_text(ranks: tuple[int, ...] | list[int]) -> str:
    ranks = sorted(ranks)
    if not ranks:
        return "no rank"
    if len(ranks) > 8:
        return f"ranks {', '.join(map(str, ranks[:6]))} … ({len(ranks)} ranks)"
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))


def rank_runs(ranks: Iterable[int]) -> list[tuple[int, int]]:
    """[0, 1, 2, 5, 7, 8] -> [(0, 2), (5, 5), (7, 8)]: the runs of consecutive ranks, sorted, without repeats."""
    runs: list[tuple[int, int]] = []
    for r in sorted(set(ranks)):
        if runs and r == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], r)
        else:
            runs.append((r, r))
    return runs


def rank_span(ranks: tuple[int, ...] | list[int] | set[int]) -> str:
    """`rank 3`, `ranks 1–3`, `ranks 0, 2, 5–7`, `ranks 0–1023 (1024)`: consecutive ranks as a range."""
    ranks = sorted(set(ranks))
    if not ranks:
        return "no rank"
    parts = [str(a) if a == b else f"{a}, {b}" if b == a + 1 else f"{a}–{b}" for a, b in rank_runs(ranks)]
    text = ", ".join(parts)
    if len(parts) > 8:
        text = ", ".join(parts[:6]) + ", …"
    count = f" ({len(ranks)})" if len(ranks) > 8 else ""
    return ("rank " if len(ranks) == 1 else "ranks ") + text + count


# What opens a log line besides the catalog's envelopes: tags inside the message (`[Rank 3]`, `[PG ID 0 ...]`,
# `[c10d]`, any short bracketed tag) and training scripts' own `rank1 pid123:` prefix.
_OWN_PREFIXES = (r"\[[^\]]{0,80}\]:?", r"rank\d+ pid\d+:")


@functools.lru_cache(maxsize=8)
def _stripper(envelopes: str) -> re.Pattern[str]:
    alternatives = "|".join(a for a in (envelopes, *_OWN_PREFIXES) if a)
    return re.compile(r"^(?:\s*(?:" + alternatives + r"))+\s*")


def strip_prefix(line: str, envelopes: str = "") -> str:
    """A log line without what opens it: the envelopes (`envelopes` = the catalog's `prefix_regex()`: rank,
    level, timestamp, host prefixes) and the tags that open its message."""
    return _stripper(envelopes).sub("", line, count=1).strip()


_SOURCE_TAG = re.compile(r"\[[^\]\s]*\.(?:cc|cpp|cu|h|hpp|py):\d+\]\s*")  # gloo's `[/__w/.../pair.cc:553] `


def said(line: str | None, envelopes: str = "", limit: int = 140) -> str:
    """A log line as prose quotes it: without its envelopes and C++ source tags, on one line, cut at a word
    boundary (never mid-word) with `…`."""
    text = " ".join(_SOURCE_TAG.sub("", strip_prefix(line or "", envelopes)).split()).replace("`", "'")
    if len(text) <= limit:
        return text
    cut = text[:limit].rsplit(" ", 1)[0]
    return (cut if len(cut) > limit // 2 else text[:limit]) + " …"


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
    """A finding that fired but lost to the primary one, with why it is not the cause."""

    finding: Finding
    why_not: str


@dataclass(frozen=True)
class RuledOut:
    """An explanation a reader would suspect that no rule found, dismissed by what the logs show."""

    rule: str
    category: str
    why_not: str

    def to_dict(self) -> dict[str, Any]:
        return {"rule": self.rule, "category": self.category, "why_not": self.why_not}


@dataclass(frozen=True)
class Moment:
    """One step of what happened: when (`ts`; `approx` when derived, e.g. a wait start = firing - timeout), who
    (`ranks`, `hosts`), what (`text`, a sentence without the time), and where the logs say so (`refs`)."""

    ts: datetime | None
    text: str
    ranks: tuple[int, ...] = ()
    hosts: tuple[str, ...] = ()
    refs: tuple[str, ...] = ()
    approx: bool = False
    kind: str = ""  # finished | last_activity | wait | error | timeout | end | note

    def to_dict(self) -> dict[str, Any]:
        return {
            "ts": self.ts,
            "approx": self.approx,
            "kind": self.kind,
            "text": self.text,
            "ranks": list(self.ranks),
            "hosts": list(self.hosts),
            "refs": list(self.refs),
        }


@dataclass(frozen=True)
class Diagnosis:
    """The verdict on one job: the primary finding, its rivals and symptoms, and what the report shows besides."""

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
    caveats: tuple[str, ...] = ()  # limits of the evidence (flight-recorder dumps missing from ranks, ...)
    action: Action = Action.COLLECT_MORE  # what on-call does next (`ncclpm.report.actions`)
    action_reason: str = ""  # why that action, in a few words
    culprit_hosts: tuple[str, ...] = ()  # hosts of the culprit ranks, or the node a hardware rule names
    story: tuple[Moment, ...] = ()  # what happened, in time order (`ncclpm.report.story`)
    ruled_out: tuple[RuledOut, ...] = ()  # suspects no rule found, dismissed by evidence
    connected: tuple[str, ...] = ()  # settings, versions, transports that bear on the verdict
    line_prefix: str = field(default="", repr=False, compare=False)  # the catalog's envelopes (not serialised)

    def clean(self, line: str) -> str:
        """A quoted log line without its envelopes and opening tags, for display."""
        return strip_prefix(line, self.line_prefix)

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
    def undecisive_evidence(self) -> tuple[Evidence, ...]:
        """The root cause's lines that the decisive evidence does not already quote (each line is quoted once)."""
        shown = {e.ref for e in self.decisive} | {a.split(" (rank ")[0] for e in self.decisive for a in e.also}
        return tuple(e for e in self.primary.evidence if e.ref not in shown)

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
                "caveats": list(self.caveats),
                "action": str(self.action),
                "action_reason": self.action_reason,
                "culprit_hosts": list(self.culprit_hosts),
                "story": [m.to_dict() for m in self.story],
                "ruled_out": [r.to_dict() for r in self.ruled_out],
                "connected": list(self.connected),
            }
        )
