"""NA01 not-a-training-log."""

from __future__ import annotations

from typing import ClassVar

import polars as pl

from ncclpm.model import said
from ncclpm.rules.base import Finding, Fix, Rule, quotes
from ncclpm.tables import Tables
from ncclpm.tables.kinds import K
from ncclpm.tables.schema import Category

SEVERAL = 3  # distinct lines only that other kind of text has: the text is that, not a job's log with a quote of it


class NotATrainingLog(Rule):
    """The input is not a distributed job's log: it is recognisably something else, or holds nothing ncclpm knows.

    ## What it detects
    Input with no line of the distributed stack (no NCCL, torch.distributed, launcher, Ray/vLLM/SGLang, Horovod,
    DeepSpeed or nccl-tests words, no rank prefix, no launcher summary, no dump) that is, on positive evidence,
    another kind of text: a source build (`Building wheel torch-...`, CMake and ninja steps), a GPU stress test
    (gpu_burn, DCGM diagnostics, deviceQuery), a package manager's or a web server's log, one Python script run
    from a shell prompt (`$ python train.py`); or a folder of code only. Text in which nothing is recognised,
    or files that could not be read, are no evidence of anything (unknown). One line of the distributed stack
    makes it a job's log, whatever surrounds it.

    ## Why it matters
    A post-mortem of the wrong files sends the reader after a cause that is not there. Saying what the text is
    (and what its own errors mean: a stress test failing with CUDA's `system not yet initialized` still says the
    host's fabric manager is down) gets the right logs, or the right team, next.

    ## Example
    `$ gpu_burn -d 60` / `Burning for 60 seconds.` / `what():  Error (gpu_burn-drv.cpp:298): system not yet
    initialized`, and nothing else.
    """

    id = "NA01"
    name = "not-a-training-log"
    category = Category.NOT_A_TRAINING_LOG
    base_confidence = 0.75
    needs = frozenset()  # absence is part of what it reads
    FIXES: ClassVar[dict[str, Fix]] = {
        "job_logs": Fix(
            "If a distributed job failed, diagnose its own logs: every rank's stderr and stdout (`torchrun --log-dir "
            "DIR --tee 3`) and the launcher's console; NCCL's with `NCCL_DEBUG=INFO`."
        ),
        "lead": Fix(
            "The text's own error still says something about the host: {lead|the lead named above}.",
            when="the text holds an error with a meaning of its own",
        ),
    }

    def evidence(self, t: Tables) -> pl.DataFrame:
        scope = self.facts.scope
        if scope.foreign.is_empty() and scope.script_runs.is_empty() and scope.recognised:
            return pl.DataFrame()  # a job's own error, or a process's: no positive evidence of anything else
        if scope.is_job:
            return pl.DataFrame()
        rows = pl.concat([scope.foreign, scope.script_runs])
        if rows.is_empty() and not scope.only_code:
            return pl.DataFrame()  # nothing recognised at all is no evidence of anything else: unknown (IN01)
        return rows if not rows.is_empty() else pl.DataFrame({"job": [t.job_name]})

    def assess(self, t: Tables, ev: pl.DataFrame) -> Finding | None:
        scope = self.facts.scope
        lead = _lead(t)
        lead_said = f"`{said(lead['text'][0], t.line_prefix)}` ({_meaning(lead['kind'][0])})" if lead.height else ""
        if not scope.foreign.is_empty():
            what = scope.foreign["event"].unique(maintain_order=True).to_list()
            kinds = "; ".join(dict.fromkeys(_FOREIGN.get(e, "another kind of text") for e in what))
            lines = scope.foreign.unique("text").height
            conf = 0.85 if lines >= SEVERAL else 0.75
            summary = f"Not a training log: the text is {kinds}, with no line of a distributed job."
            evidence = quotes(scope.foreign, 3)
        elif not scope.script_runs.is_empty():
            script = scope.script_runs["detail"][0]
            conf = 0.55  # one prompt line: the script may start workers of its own that the paste does not show
            summary = (
                f"Probably not a distributed job: a shell runs `{script}` directly (no launcher), and nothing it "
                "printed comes from torch.distributed, NCCL or a launcher."
            )
            evidence = quotes(scope.script_runs, 1)
        else:  # code and configuration files only (evidence() lets nothing else through)
            conf = 0.85
            summary = "Not a training log: the input holds code and configuration files only, no log."
            evidence = ()
        if lead_said:
            summary += f" Its own error: {lead_said}."
        return self.finding(
            confidence=conf,
            culprit_ranks=(),
            summary=summary,
            explanation="ncclpm answers `not_a_training_log` on positive evidence only: lines that only another "
            "kind of text has, a script run directly, or code alone. A single line of "
            "NCCL, torch.distributed, a launcher or a serving/RL framework would make it a job's log. If these are "
            "the right files, their format is one ncclpm does not read yet: a catalog entry in `parsers/` (or "
            "`--patterns DIR`) teaches it.",
            evidence=(*evidence, *quotes(lead, 1)),
            fixes=(
                *self.fixes("job_logs"),
                *(self.fixes("lead", lead=f"{_meaning(lead['kind'][0])}") if lead.height else ()),
            ),
            dont=(),
            verify=("`ncclpm tables PATH --table lines` lists the lines ncclpm kept from the files.",),
        )


# What each foreign pattern says the text is.
_FOREIGN = {
    "scope.package_build": "a package being built from source",
    "scope.gpu_stress_test": "a GPU stress or check run on one host",
    "scope.package_manager_log": "a package manager's log",
    "scope.web_access_log": "a web server's access log",
}

# Errors with a meaning of their own, read as the text's lead (the first one).
_LEAD_KINDS = [
    K.gpu_fabric_error,
    K.nvml_error,
    K.gpu_hw_error,
    K.xid,
    K.gpu_lost,
    K.cuda_build_mismatch,
    K.cuda_oom,
    K.gpu_unavailable,
    K.cuda_error,
]


def _lead(t: Tables) -> pl.DataFrame:
    for kind in _LEAD_KINDS:
        rows = t.kinds(kind)
        if not rows.is_empty():
            return rows.head(1)
    return t.events.clear()


def _meaning(kind: str) -> str:
    return next((d.meaning for d in K if d.name == kind), kind)
