"""Facts from the code and configuration files of a run (the `code_settings` table, `parsers/code_settings.toml`):
the process-group timeout and backend the code sets, DataLoader arguments. (Variables, launcher options and script
arguments are the analysis's job settings: `diff/facts.py` reads those.) Code is what was written, logs are what
ran: `config_facts` lets a log's fact win over the same fact read from code."""

from __future__ import annotations

import polars as pl

from ncclpm.diff_model import Fact, Quote
from ncclpm.ingest.code.settings import code_facts
from ncclpm.tables import Tables
from ncclpm.util.durations import coarse_duration


def _quote(r: dict) -> Quote:
    return Quote(str(r["source"]), r["line"], str(r["text"] or ""))


def _last(rows: pl.DataFrame) -> dict:
    return rows.sort("source", "line").row(-1, named=True)


def code_config_facts(t: Tables) -> list[Fact]:
    facts: list[Fact] = []
    timeout = code_facts(t, "pg_timeout").filter(pl.col("number").is_not_null())
    if not timeout.is_empty() and timeout["number"].n_unique() == 1:
        r = _last(timeout)
        facts.append(
            Fact(
                "pg_timeout", "process-group timeout", "pg_timeout", "settings", coarse_duration(r["number"]), _quote(r)
            )
        )
    backend = code_facts(t, "pg_init").filter(pl.col("value").is_not_null())
    if not backend.is_empty():
        r = _last(backend)
        facts.append(Fact("pg_backend", "process-group backend", "backend", "settings", str(r["value"]), _quote(r)))
    for setting, arg in (("dataloader_num_workers", "num_workers"), ("dataloader_timeout", "timeout")):
        rows = code_facts(t, setting)
        if not rows.is_empty():
            r = _last(rows)
            fact = Fact(f"dataloader:{arg}", f"DataLoader {arg}", "dataloader_setting", "settings", str(r["value"]))
            facts.append(Fact(**{**fact.__dict__, "evidence": _quote(r)}))
    return facts
