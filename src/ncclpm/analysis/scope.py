"""What the input is: a distributed job's log, or something else (a source build, a GPU stress test, a package
manager's log, one Python script run from a shell). Read by NA01 (not-a-training-log) and IN01.

A distributed job's text is recognised by any one of: an event of a kind not declared `any_program` (kinds.toml),
a line a rank's prefix marks, a launcher's summary, a flight-recorder or stack dump, or a line holding one of the
stack's own words (`[[stack_word]]` in parsers/scope.toml) - outside a line that is itself foreign or a package
list (a build compiling ProcessGroupNCCL.cpp, `[pip3] deepspeed==0.10.1`). Without one, the input is something
else only on positive evidence (`foreign_text`, `script_run` lines), or when nothing in it is recognised at all.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import polars as pl

from ncclpm.tables import Tables
from ncclpm.tables.kinds import K
from ncclpm.util.resources import data_dir, read_toml

SCOPE_FILE = "scope.toml"
# Lines whose words name the stack without running it: a build compiling its sources, a package list.
_NOT_A_RUN = [K.foreign_text, K.library_version]


@cache
def stack_words() -> tuple[dict, ...]:
    """The `[[stack_word]]` entries of parsers/scope.toml: producer, anchor, regex, examples, counterexamples."""
    return tuple(read_toml(data_dir("parsers") / SCOPE_FILE).get("stack_word", []))


@cache
def stack_regex() -> str:
    """Every stack word's regex as one alternation (polars' dialect)."""
    return "|".join(f"(?:{w['regex']})" for w in stack_words())


@dataclass(frozen=True)
class InputScope:
    """The job's evidence of being a distributed job's (`job`: quotable rows, none when it has none), and the
    positive evidence of being something else."""

    job: pl.DataFrame  # source, line, text: what makes it a distributed job's log
    foreign: pl.DataFrame  # foreign_text events (detail: what the text is)
    script_runs: pl.DataFrame  # script_run events: a shell running one Python script
    recognised: bool  # anything at all was read (an event, a traceback, a ranked line, a dump)
    only_code: bool  # no log at all: only code and configuration files

    @property
    def is_job(self) -> bool:
        return not self.job.is_empty()


def _job_rows(t: Tables) -> pl.DataFrame:
    """Quotable rows (source, line, text) that only a distributed job's output holds, the strongest first; empty
    when there are none. Stops at the first kind of evidence found (the lexicon is read only when needed)."""
    cols = ["source", "line", "text"]
    events = t.events.filter(~pl.col("kind").is_in(list(K.any_program)))
    if not events.is_empty():
        return events.select(cols).head(3)
    ranked = t.lines.filter(pl.col("rank").is_not_null())
    if not ranked.is_empty():
        return ranked.select("source", "line", pl.col("message").alias("text")).head(3)
    if not t.elastic.is_empty():
        return t.elastic.select("source", "line", pl.lit("the launcher's failure summary").alias("text")).head(1)
    stacks = t.extra.get("stacks")
    if t.fr is not None or (stacks is not None and not stacks.is_empty()):
        return pl.DataFrame({"source": [""], "line": [0], "text": ["a flight-recorder or stack dump"]})
    words = t.extra.get("stack_words")
    lines = t.lines.select("source", "line", "message")
    lines = pl.concat([lines, words]) if words is not None and not words.is_empty() else lines
    return stack_lines(lines, t.events).head(3)


def stack_lines(lines: pl.DataFrame, events: pl.DataFrame) -> pl.DataFrame:
    """The lines (source, line, text) holding a word of the stack, except those that name it without running it
    (a build compiling its sources, a package list)."""
    not_a_run = events.filter(pl.col("kind").is_in(_NOT_A_RUN)).select("source", "line")
    words = lines.filter(pl.col("message").str.contains(stack_regex())).join(
        not_a_run, on=["source", "line"], how="anti"
    )
    return words.select("source", "line", pl.col("message").alias("text"))


def input_scope(t: Tables) -> InputScope:
    stacks = t.extra.get("stacks")
    recognised = not (
        t.events.is_empty()
        and t.lines.filter(pl.col("rank").is_not_null()).is_empty()
        and t.tracebacks.is_empty()
        and t.elastic.is_empty()
        and t.fr is None
        and (stacks is None or stacks.is_empty())
    )
    return InputScope(
        job=_job_rows(t),
        foreign=t.kinds(K.foreign_text),
        script_runs=t.kinds(K.script_run),
        recognised=recognised,
        only_code=not t.sources and bool(t.code_sources),
    )
