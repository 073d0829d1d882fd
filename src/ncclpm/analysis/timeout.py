"""The collective timeout in force, and where it comes from: what the logs show (`Timeout(ms)` of the watchdog
lines, gloo's `Timed out waiting Nms`) and what the job's code sets (`init_process_group(timeout=)`, a Trainer's
`ddp_timeout`, accelerate, DeepSpeed, Lightning: `ingest/code/`). Worked out once here; the rules and the report
word it (`rules/_timeout.py`)."""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from ncclpm.ingest.code.settings import code_facts
from ncclpm.tables import Tables
from ncclpm.tables.kinds import K
from ncclpm.util.frames import filtered

TORCH_NCCL_DEFAULT_MS = 600_000  # torch's process-group timeout for NCCL when no `timeout=` is given


@dataclass(frozen=True)
class ConfiguredTimeout:
    """The process-group timeout the code sets, as one literal value: where and how it is written."""

    seconds: float
    value: str  # as written: `timedelta(seconds=60)`
    name: str  # the reading: `init_process_group(timeout=)`
    file: str
    line: int

    def as_dict(self) -> dict[str, object]:
        return {"seconds": self.seconds, "value": self.value, "name": self.name, "file": self.file, "line": self.line}


@dataclass(frozen=True)
class TimeoutInForce:
    """The collective timeout the job ran with: the values its logs show and what its code sets."""

    observed: tuple[int, ...] = ()  # every distinct Timeout(ms) of the job's collective-timeout lines, ascending
    ranked_ms: int | None = None  # the largest of those on lines that name their rank (what rules quote with ranks)
    configured: ConfiguredTimeout | None = None  # what the code sets, when it sets exactly one literal value

    @property
    def ms(self) -> int | None:
        """The timeout in force: the largest Timeout(ms) the logs show."""
        return self.observed[-1] if self.observed else None

    def set_by_code(self, ms: int | None) -> bool | None:
        """Whether `ms` is what the code sets (None when the code read sets no single value)."""
        if self.configured is None or ms is None:
            return None
        return round(self.configured.seconds * 1000) == ms


def configured_pg_timeout(t: Tables) -> ConfiguredTimeout | None:
    """The process-group timeout the code sets, when the code read gives it as exactly one literal value; None when
    no code sets it, or when it is set to different values."""
    rows = filtered(code_facts(t, "pg_timeout"), pl.col("number").is_not_null())
    if rows.is_empty() or rows["number"].n_unique() != 1:
        return None
    r = rows.row(0, named=True)
    return ConfiguredTimeout(r["number"], r["value"], r["name"], r["source"], r["line"])


def timeout_in_force(t: Tables, ranked: pl.DataFrame) -> TimeoutInForce:
    """`ranked`: the collective timeouts that name their rank (`victims.timeouts`)."""
    ms = t.kinds(K.collective_timeout)["timeout_ms"].drop_nulls().unique().sort()
    ranked_ms = ranked["timeout_ms"].drop_nulls().max() if not ranked.is_empty() else None
    return TimeoutInForce(
        observed=tuple(int(v) for v in ms.to_list()),
        ranked_ms=int(ranked_ms) if ranked_ms is not None else None,  # type: ignore[arg-type]
        configured=configured_pg_timeout(t),
    )
