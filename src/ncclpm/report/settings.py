"""The report's settings section: each setting found in the job with what it really does, in words.

Environment variables come from the analysis's lint (`analysis/settings.py`: read by nothing, a deprecated alias,
masks faults, a misspelling, a note); the other settings read from code (`code_settings`: the process-group
timeout and whether it is the one the logs show in force, DataLoader workers and timeout, a GPU never pinned per
rank, launcher arguments) are worded here from their facts (notes in `parsers/code_settings.toml`). Rows: var,
value, file, line, verdict, severity - the most severe first."""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, Any

import polars as pl

from ncclpm.analysis.settings import SEVERITY, SEVERITY_ORDER, classify
from ncclpm.ingest.code.settings import READINGS_FILE
from ncclpm.util.durations import human_seconds
from ncclpm.util.frames import filtered
from ncclpm.util.resources import data_dir, read_toml

if TYPE_CHECKING:
    from ncclpm.analysis import Analysis

NCCL_DEFAULT_TIMEOUT_S = 600
TIMEOUT_VARS = ("NCCL_TIMEOUT", "TORCH_NCCL_TIMEOUT", "NCCL_TIMEOUT_MS")
SETTINGS_SCHEMA = pl.Schema(
    {
        "var": pl.String(),
        "value": pl.String(),
        "file": pl.String(),
        "line": pl.Int64(),
        "verdict": pl.String(),
        "severity": pl.String(),
    }
)
ENV_WORDS = {
    "unread": "does nothing: {}",
    "deprecated": "deprecated torch alias; use `{}` (NCCL itself ignores it)",
    "default_off": "set to its default (off)",
    "masks_faults": "masks faults at a cost: {}",
    "misspelt": "probably a misspelling of `{}`: read by nothing as written",
    "note": "{}",
    "": "",
}


@lru_cache(maxsize=1)
def launcher_notes() -> dict[str, str]:
    doc = read_toml(data_dir("parsers") / READINGS_FILE)
    return dict(doc.get("launcher_notes", {}))


def verdict(var: str, value: str) -> tuple[str, str]:
    """(verdict text, severity) for one environment variable."""
    finding, detail = classify(var, value)
    return ENV_WORDS[finding].format(detail), SEVERITY.get(finding, "info")


def _pg_timeout(r: dict[str, Any], observed: tuple[int, ...]) -> tuple[str, str]:
    n = r["number"]
    seen = ", ".join(f"Timeout(ms)={ms} ({human_seconds(ms / 1000)})" for ms in observed)
    if n is None:
        text = f"process-group timeout decided at run time (`{r['value']}`): its value is not in the code read"
        return (text + (f"; the logs show {seen}" if seen else ""), "info")
    text, severity = f"process-group timeout {human_seconds(n)}: a collective that runs longer is aborted", "info"
    if n < NCCL_DEFAULT_TIMEOUT_S:
        text += "; below torch's 10-min NCCL default, so a checkpoint, an evaluation or a slow first step outlasts it"
        severity = "warn"
    if observed and round(n * 1000) in observed:
        text += f"; the logs' Timeout(ms)={round(n * 1000)} is this setting"
    elif observed:
        text += (
            f"; but the logs show {seen}: this is not the timeout in force (the group is created elsewhere with "
            "its own - a Trainer's `ddp_timeout`, a launcher - or other code ran)"
        )
        severity = "warn"
    return text, severity


def _code_verdict(r: dict[str, Any], observed: tuple[int, ...]) -> tuple[str, str]:
    setting, n = r["setting"], r["number"]
    if setting == "pg_timeout":
        return _pg_timeout(r, observed)
    if setting == "subgroup_timeout" and n is not None:
        return f"timeout of this subgroup's collectives: {human_seconds(n)}", "info"
    if setting == "dataloader_timeout" and n is not None:
        if n == 0:
            return "0 (the default): the DataLoader waits for a stuck worker forever", "info"
        return f"a batch not ready within {human_seconds(n)} raises `DataLoader timed out after {n:g} seconds`", "info"
    if setting == "dataloader_num_workers" and n is not None:
        if n == 0:
            return "batches are loaded in the main process (no worker can die or hang)", "info"
        return f"{n:g} worker processes per rank: one that dies (shm, OOM killer) or hangs stops its rank", "info"
    if setting == "cuda_set_device" and r["value"] == "absent":
        return (
            "not seen in the code read: it creates a process group but never pins a GPU per rank "
            "(`torch.cuda.set_device(local_rank)` or `device_id=`); unless a launcher or library does, every rank "
            "of a node uses cuda:0 (NCCL `Duplicate GPU detected`)",
            "info",
        )
    if setting == "launcher_arg":
        flag = r["name"].rsplit(" ", 1)[-1].lstrip("-").replace("-", "_")
        return launcher_notes().get(flag, ""), "info"
    return "", "info"


def _code_rows(code: pl.DataFrame | None, observed: tuple[int, ...]) -> list[dict[str, Any]]:
    """Rows for the settings found in code, except environment variables (the lint words those)."""
    if code is None:
        return []
    rows = []
    for r in filtered(code, pl.col("setting") != "env").iter_rows(named=True):
        text, severity = _code_verdict(r, observed)
        if text:
            rows.append(
                {"var": r["name"], "value": r["value"], "file": r["source"], "line": r["line"], "verdict": text}
                | {"severity": severity}
            )
    return rows


def _still_timed_out(ms: int | None) -> str:
    """`; this job's collectives still timed out after 10 min (Timeout(ms)=600000)` when the logs show it."""
    return "" if ms is None else f"; this job's collectives still timed out after {ms / 60000:g} min (Timeout(ms)={ms})"


def settings_rows(facts: Analysis) -> tuple[dict, ...]:
    """Settings found in the job that deserve a word (notes on harmless ones are kept too, last)."""
    out = _code_rows(facts.t.extra.get("code_settings"), facts.timeout.observed)
    for s in facts.settings:
        text = ENV_WORDS[s.finding].format(s.detail)
        if s.var in TIMEOUT_VARS and s.severity == "error":
            text += _still_timed_out(facts.timeout.ms)
        out.append(
            {"var": s.var, "value": s.value, "file": s.file, "line": s.line, "verdict": text, "severity": s.severity}
        )
    if not out:
        return ()
    table = pl.DataFrame(out, schema=SETTINGS_SCHEMA)
    table = table.sort(pl.col("severity").replace_strict(SEVERITY_ORDER, return_dtype=pl.Int8), "var")
    return tuple(table.filter(pl.col("verdict") != "").iter_rows(named=True))
