"""OK01 job-finished-cleanly."""

from __future__ import annotations

from typing import ClassVar

import polars as pl

from ncclpm.model import said
from ncclpm.rules.base import Finding, Fix, Rule, quotes, ranks_text
from ncclpm.tables import Tables
from ncclpm.tables.kinds import K
from ncclpm.tables.schema import Category
from ncclpm.util.frames import filtered


class JobFinishedCleanly(Rule):
    """The logs show the job finishing and nothing failing: there is no failure to diagnose.

    ## What it detects
    Lines that say the run ended well - a script's `training done`, `Training completed`, Lightning's
    `Trainer.fit stopped: max_epochs=N reached`, torchrun's `worker group successfully finished`, nccl-tests'
    `# Out of bounds values : 0 OK` - in a job with no error of any kind: no exception, timeout, crash, NCCL or
    launcher error, and no non-zero exit.

    ## Why it matters
    A healthy run handed to a post-mortem tool must not come back with a made-up cause, and must not look like
    "nothing conclusive" either (which reads as "something failed, we do not know what"). Confident only when
    every rank of the job says it finished.

    ## Example
    `[rank0] training done` and `[rank1] training done`, then torchrun exits without a failure summary.
    """

    id = "OK01"
    name = "job-finished-cleanly"
    category = Category.NO_FAILURE
    base_confidence = 0.6
    explains = ()
    FIXES: ClassVar[dict[str, Fix]] = {
        "nothing": Fix(
            "Nothing to fix in these logs. If the job did fail, the failing rank's log is missing: add every rank's "
            "stderr (`torchrun --log-dir DIR --tee 3`) and the launcher's console."
        ),
    }

    def evidence(self, t: Tables) -> pl.DataFrame:
        errors = filtered(t.events, pl.col("severity") == "error")
        failed_exits = filtered(t.elastic, pl.col("exit_code").fill_null(0) != 0)
        if not errors.is_empty() or not failed_exits.is_empty():
            return t.events.clear()
        return t.kinds(K.job_done, K.test_passed)

    def assess(self, t: Tables, ev: pl.DataFrame) -> Finding | None:
        done = set(ev["rank"].drop_nulls().to_list())
        known = self.facts.known_ranks
        everyone = bool(known) and known <= done
        # the agent's own success line (or one that says all ranks finished) speaks for all its workers; a
        # process's own `training done` with no rank on it speaks for one process
        launcher = (ev["event"] == "activity.group_finished").any()
        tested = ev.filter(pl.col("kind") == K.test_passed)  # nccl-tests validated every rank's results
        return self.finding(
            confidence=0.85 if everyone or launcher or not tested.is_empty() else self.base_confidence,
            culprit_ranks=(),
            summary="No failure: the job finished ("
            + (
                f"nccl-tests checked every value it moved: `{said(tested['text'][0], t.line_prefix)}`"
                if not tested.is_empty()
                else f"every rank it ran - {ranks_text(sorted(done))} - said so"
                if everyone
                else "the launcher said so"
                if launcher
                else f"{ranks_text(sorted(done))} said so"
                if done
                else "a process said so; its rank is not on the line"
            )
            + ") and no error, timeout or crash appears in the logs.",
            explanation="Every line that says how the run ended says it ended well, and nothing failed before it.",
            evidence=quotes(ev, 4),
            fixes=self.fixes(),
            dont=("Do not tune NCCL or timeouts for a run that did not fail.",),
            verify=("The job's exit status (scheduler record, `echo $?` of torchrun) is 0.",),
        )
