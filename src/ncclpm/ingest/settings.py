"""Settings lint: environment variables set in the job (launch scripts, env dumps, NCCL's own echo) and
what each really does, plus the other settings read from code (process-group timeout, DataLoader, launcher).

Input: `setting` events (var, value, file, line) and the `code_settings` table. Output: the `settings` table
(var, value, file, line, verdict, severity) - one row per variable (its last assignment) and one per setting
found in code (`code_verdicts.py`), sorted by severity. Verdicts come from
`parsers/env_vars.toml`: read by nothing, deprecated alias, masks faults at a cost, a probable misspelling of
a variable that is read (edit distance ≤ 2), or a note on what it does. A report section, not a root cause.
"""

from __future__ import annotations

from functools import lru_cache

import polars as pl

from ncclpm.ingest.code.verdicts import code_setting_rows, env_rows
from ncclpm.tables.kinds import K
from ncclpm.util.resources import data_dir, read_toml

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
SEVERITY_ORDER = {"error": 0, "warn": 1, "info": 2}
FALSE_VALUES = {"0", "false", "no", "off", ""}


@lru_cache(maxsize=1)
def env_knowledge() -> dict:
    return read_toml(data_dir("parsers") / "env_vars.toml")


def _distance(a: str, b: str, cap: int = 3) -> int:
    """Levenshtein distance, stopping early once it exceeds `cap`."""
    if abs(len(a) - len(b)) > cap:
        return cap + 1
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        if min(cur) > cap:
            return cap + 1
        prev = cur
    return prev[-1]


def verdict(var: str, value: str) -> tuple[str, str]:
    """(verdict text, severity) for one variable."""
    k = env_knowledge()
    if var in k["unread"]:
        return f"does nothing: {k['unread'][var]}", "error"
    if var in k["deprecated"]:
        return f"deprecated torch alias; use `{k['deprecated'][var]}` (NCCL itself ignores it)", "warn"
    if var in k["masks_faults"]:
        if value.strip().lower() in FALSE_VALUES:
            return "set to its default (off)", "info"
        return f"masks faults at a cost: {k['masks_faults'][var]}", "warn"
    known = set(k["known"]["names"]) | set(k["notes"]) | set(k["deprecated"]) | set(k["masks_faults"])
    if var not in known:
        near = sorted((d, name) for name in known if (d := _distance(var, name)) <= 2)
        if near:
            return f"probably a misspelling of `{near[0][1]}`: read by nothing as written", "error"
    if var in k["notes"]:
        return k["notes"][var], "info"
    return "", "info"


TIMEOUT_VARS = ("NCCL_TIMEOUT", "TORCH_NCCL_TIMEOUT", "NCCL_TIMEOUT_MS")


def _observed_timeout(events: pl.DataFrame) -> str:
    """`; this job's collectives still timed out after 10 min (Timeout(ms)=600000)` when the logs show it."""
    ms = events.filter(pl.col("kind") == K.collective_timeout)["timeout_ms"].drop_nulls()
    if ms.is_empty():
        return ""
    value = int(ms.max())  # type: ignore[arg-type]
    return f"; this job's collectives still timed out after {value / 60000:g} min (Timeout(ms)={value})"


def settings_table(events: pl.DataFrame, code: pl.DataFrame | None = None) -> pl.DataFrame:
    """One row per variable. Where it is set (script, env dump, `os.environ`) wins over NCCL's echo of it (which only
    proves the setting reached NCCL), then the last occurrence. Then one row per other setting found in code."""
    rows = events.filter((pl.col("kind") == K.setting) & pl.col("var").is_not_null())
    rows = rows.select("var", "value", "source", "line", "event")
    if code is not None:
        rows = pl.concat([rows, env_rows(code)], how="vertical_relaxed")
    out = [] if code is None else code_setting_rows(code, events)
    if rows.is_empty() and not out:
        return pl.DataFrame(schema=SETTINGS_SCHEMA)
    rows = rows.with_columns((pl.col("event") != "nccl.env_echo").alias("_set_here"))
    last = rows.sort("_set_here", "source", "line").group_by("var", maintain_order=True).last()
    seen = _observed_timeout(events)
    for r in last.iter_rows(named=True):
        text, severity = verdict(r["var"], r["value"] or "")
        if r["var"] in TIMEOUT_VARS and severity == "error":
            text += seen
        out.append(
            {
                "var": r["var"],
                "value": r["value"],
                "file": r["source"],
                "line": r["line"],
                "verdict": text,
                "severity": severity,
            }
        )
    table = pl.DataFrame(out, schema=SETTINGS_SCHEMA)
    return table.sort(pl.col("severity").replace_strict(SEVERITY_ORDER, return_dtype=pl.Int8), "var")
