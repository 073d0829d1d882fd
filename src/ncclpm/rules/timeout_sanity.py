"""TS01 timeout-set-too-short."""

from __future__ import annotations

from typing import ClassVar

import polars as pl

from ncclpm.analysis.timeout import ConfiguredTimeout
from ncclpm.rules._timeout import timeout_origin
from ncclpm.rules._why import never_joined
from ncclpm.rules.base import Finding, Fix, Rule, quotes, ranks_text
from ncclpm.tables import Tables
from ncclpm.tables.schema import Category
from ncclpm.util.durations import human_seconds
from ncclpm.util.frames import filtered

# Below torch's own defaults (10 min for NCCL since 2.2, 30 min otherwise) by far: a value someone chose, and one
# that normal step-to-step variance, a checkpoint or a slow first collective can exceed.
SHORT_MS = 300_000


class TimeoutSetTooShort(Rule):
    """The collective timeout in force is far below torch's defaults, or is not the one the code sets.

    ## What it detects
    Watchdog or gloo timeouts whose `Timeout(ms)` is a few minutes or less (`Timeout(ms)=60000`), and jobs whose
    code sets a process-group timeout (`init_process_group(timeout=...)`, accelerate's
    `InitProcessGroupKwargs(timeout=...)`, Trainer's `ddp_timeout`) that differs from the one the logs show in
    force - typically the 30-minute default although the owner raised it.

    ## Why it matters
    A timeout of seconds or a minute turns ordinary variance (a slow step, a checkpoint, the lazy set-up of the
    first collective, start-up skew between processes) into a crash. And a timeout set where it is not applied
    (an `Accelerator` the Trainer never uses, a `timeout=` on a group that is not the one timing out) leaves the
    default in force while the owner believes it was raised.

    ## Example
    `[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=144159, OpType=ALLGATHER,
    NumelIn=4096, NumelOut=8192, Timeout(ms)=60000) ran for 60820 milliseconds` with `timeout=timedelta(seconds=60)`
    in the job's `distributed.py`.
    """

    id = "TS01"
    name = "timeout-set-too-short"
    category = Category.TIMEOUT_TOO_SHORT
    base_confidence = 0.6
    explains = ("CT01",)
    FIXES: ClassVar[dict[str, Fix]] = {
        "raise": Fix(
            "Give the process group a timeout that covers the slowest legitimate step: "
            "`init_process_group(backend, timeout=datetime.timedelta(minutes=30))` (default 10 min for NCCL)."
        ),
        "where_applied": Fix(
            "Set it where this process group is created: with the HF Trainer that is `TrainingArguments(ddp_timeout="
            "...)` (seconds), not an `Accelerator` of your own; with accelerate, `InitProcessGroupKwargs` passed to "
            "the `Accelerator` that prepares the model; with DeepSpeed, `deepspeed.init_distributed(timeout=...)`.",
            when="the code sets a timeout that is not the one in force",
        ),
    }

    def evidence(self, t: Tables) -> pl.DataFrame:
        to = filtered(self.facts.timeouts, pl.col("timeout_ms").is_not_null())
        if to.is_empty():
            return to
        observed, _, not_applied = self._in_force()
        return to if observed < SHORT_MS or not_applied else to.clear()

    def assess(self, t: Tables, ev: pl.DataFrame) -> Finding | None:
        observed, code, not_applied = self._in_force()
        origin = timeout_origin(self.facts.timeout, observed)
        limit = human_seconds(observed / 1000)
        ran = int(ev["ran_ms"].drop_nulls().max() or 0)  # type: ignore[arg-type]
        ran_text = f" (it had run {human_seconds(round(ran / 1000))})" if ran else ""
        if not_applied and code is not None:
            conf = 0.75
            summary = (
                f"The code sets a {human_seconds(code.seconds)} timeout (`{code.name}` = `{code.value}` at "
                f"{code.file}:{code.line}), but the collective timed out after {limit}{ran_text}: that setting "
                "never reached this process group."
            )
        else:
            conf = self.base_confidence + (0.1 if code is not None else 0.0)
            how = f", {origin}" if origin else ", far below torch's defaults (10 min for NCCL, 30 min otherwise)"
            summary = (
                f"The collective timeout in force is only {limit}{how}; the collective ran just past it{ran_text}. "
                "Ordinary variance, a checkpoint or start-up skew is enough to trip a timeout this short."
            )
        return self.finding(
            confidence=conf,
            culprit_ranks=(),
            summary=summary,
            explanation="No rank in these logs failed on its own; the rank(s) shown waited exactly as long as the "
            "timeout allows. With a timeout this short (or not the one intended) the timeout is the first thing to "
            "fix; if the job still fails with a generous timeout, a slow or stuck rank is the next suspect.",
            evidence=quotes(ev, 3),
            fixes=self.fixes("raise", *(("where_applied",) if not_applied else ())),
            dont=("`NCCL_TIMEOUT` is read by nothing; only `timeout=` of the process group counts.",),
            verify=("The logs of the next run show the new `Timeout(ms)` value in any watchdog line.",),
            facts={"timeout_ms": observed} | ({"timeout_origin": origin} if origin else {}),
        )

    def why_not(self, t: Tables, winner: Finding, mine: Finding | None) -> str | None:
        if mine is None:
            return None
        if winner.category == Category.MISMATCHED_COLLECTIVES:
            return "the timeout is short, but no timeout lets ranks that issued different collectives complete"
        away = never_joined(self.facts, winner.culprit_ranks)
        if away:
            return (
                f"the timeout is short, but {ranks_text(away)} never entered the collective: a longer one would only "
                "have waited longer"
            )
        return None

    def _in_force(self) -> tuple[int, ConfiguredTimeout | None, bool]:
        """(the timeout the ranks' watchdog lines show, the one the code configures, whether the code's never
        applied)."""
        timeout = self.facts.timeout
        observed = int(timeout.ranked_ms)  # type: ignore[arg-type]  (the evidence has a timeout with its value)
        return observed, timeout.configured, timeout.set_by_code(observed) is False
