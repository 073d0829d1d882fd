"""The settings lint as facts: each environment variable the job sets (launch scripts, env dumps, `os.environ` in
code, NCCL's own echo) classified by what it really does - read by nothing, a deprecated alias, a switch that masks
faults, set to its default, a probable misspelling of a variable that is read, or a note - from
`parsers/env_vars.toml`. The report words them (`report/settings.py`); `ncclpm diff` orders them the same way."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from ncclpm.tables import Tables
from ncclpm.util.resources import data_dir, read_toml

FALSE_VALUES = {"0", "false", "no", "off", ""}
# what each finding means for the job: `error` does nothing as meant, `warn` works against it, `info` a note
SEVERITY = {"unread": "error", "misspelt": "error", "deprecated": "warn", "masks_faults": "warn"}
SEVERITY_ORDER = {"error": 0, "warn": 1, "info": 2}


@lru_cache(maxsize=1)
def env_knowledge() -> dict:
    return read_toml(data_dir("parsers") / "env_vars.toml")


@dataclass(frozen=True)
class EnvLint:
    """One environment setting of the job checked against `parsers/env_vars.toml`, with what to say about it."""

    var: str
    value: str | None
    file: str
    line: int | None
    finding: str  # unread, deprecated, masks_faults, default_off, misspelt, note, or "" (nothing to say)
    detail: str  # what the catalog says: who reads nothing / the replacement / the cost / the name meant / the note

    @property
    def severity(self) -> str:
        return SEVERITY.get(self.finding, "info")


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


def classify(var: str, value: str) -> tuple[str, str]:
    """(finding, detail) for one variable."""
    k = env_knowledge()
    if var in k["unread"]:
        return "unread", k["unread"][var]
    if var in k["deprecated"]:
        return "deprecated", k["deprecated"][var]
    if var in k["masks_faults"]:
        if value.strip().lower() in FALSE_VALUES:
            return "default_off", ""
        return "masks_faults", k["masks_faults"][var]
    known = set(k["known"]["names"]) | set(k["notes"]) | set(k["deprecated"]) | set(k["masks_faults"])
    if var not in known:
        near = sorted((d, name) for name in known if (d := _distance(var, name)) <= 2)
        if near:
            return "misspelt", near[0][1]
    if var in k["notes"]:
        return "note", k["notes"][var]
    return "", ""


def env_lint(t: Tables) -> tuple[EnvLint, ...]:
    """One per variable of the `settings` table, the most severe first, then by name."""
    table = t.extra.get("settings")
    if table is None or table.is_empty():
        return ()
    out = []
    for r in table.iter_rows(named=True):
        finding, detail = classify(r["var"], r["value"] or "")
        out.append(EnvLint(r["var"], r["value"], r["file"], r["line"], finding, detail))
    return tuple(sorted(out, key=lambda s: (SEVERITY_ORDER[s.severity], s.var)))
