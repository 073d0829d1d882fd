"""The job's settings as its files write them, each linked to what it controls.

From the files a user keeps beside a run (the `code_settings` table, `parsers/code_settings.toml`): the variables a
launch script exports or an env dump holds, the launcher's options (`torchrun --nproc_per_node=2`), the arguments the
launch line gives the job's own script (`train.py --log-grad-norm`). Each is named as written and linked to what it
controls where the files say so:
- an environment variable the job's code reads (`os.environ.get("PG_TIMEOUT_S", ...)`) feeds the setting whose call
  reads it, directly or through the name the read is assigned to (`timeout = timedelta(seconds=int(...))` then
  `init_process_group(..., timeout=timeout)`): `PG_TIMEOUT_S` is the process-group timeout, in seconds;
- a launcher option: what it does (`[launcher_notes]` of the readings);
- a script argument: its argparse definition and help text in the script, and the setting whose call reads it
  (`--pg-timeout` is `args.pg_timeout` in `init_process_group(timeout=timedelta(seconds=args.pg_timeout))`).
A variable only an env dump holds is kept when the code reads it or torch/NCCL/gloo do (`code.env.shell`'s names): a
dump holds every variable of the shell (PATH, HOSTNAME...), which configures nothing of the job.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import polars as pl

from ncclpm.ingest.code.settings import READINGS_FILE
from ncclpm.tables import Tables
from ncclpm.util.resources import data_dir, read_toml

# settings an environment variable can feed, with what each is (prose)
FEEDS = {
    "pg_timeout": "the process group's timeout",
    "subgroup_timeout": "a subgroup's timeout",
    "dataloader_num_workers": "the DataLoader's worker count",
    "dataloader_timeout": "the DataLoader's timeout",
    "cuda_set_device": "the GPU each rank uses",
    "pg_init": "the process-group backend",
}
_UNIT_SECONDS = {"seconds": 1.0, "minutes": 60.0, "hours": 3600.0, "days": 86400.0, "milliseconds": 1e-3}
FLAG_SET = "(set)"


@dataclass(frozen=True)
class JobSetting:
    """One setting as a file writes it, with what it controls."""

    key: str  # unique within a run: `env:PG_TIMEOUT_S`, `launcher:torchrun --nproc_per_node`, `arg:train.py --x`
    name: str  # as written: `PG_TIMEOUT_S`, `--nproc_per_node`, `--log-grad-norm`
    kind: str  # env | launcher | script_arg
    tool: str  # who takes it: `torchrun`, `train.py`; "" for a variable
    value: str  # as written; `(set)` for a flag without a value
    file: str
    line: int | None
    text: str  # the line that sets it
    feeds: str = ""  # the known setting it feeds (`pg_timeout`...), "" when none is known
    seconds: float | None = None  # the value in seconds, when it feeds a duration
    controls: str = ""  # what it is, a noun phrase of prose (`code spans` for names): "the process group's timeout..."
    controls_file: str = ""  # where the files say so
    controls_line: int | None = None
    controls_text: str = ""


@lru_cache(maxsize=1)
def launcher_notes() -> dict[str, str]:
    return dict(read_toml(data_dir("parsers") / READINGS_FILE).get("launcher_notes", {}))


def _word(name: str) -> re.Pattern[str]:
    return re.compile(rf"(?<![\w.]){re.escape(name)}(?!\w)")


def _seconds_factor(statement: str, var: str) -> float | None:
    """How a read of `var` becomes a duration in the statement: `timedelta(seconds=int(os.environ[...var...]))`."""
    m = re.search(
        rf"\b(seconds|minutes|hours|days|milliseconds)\s*=\s*(?:[\w.]+\s*\(\s*)*os\.(?:environ|getenv)\b[^)]*?"
        rf"""["']{re.escape(var)}["']""",
        statement,
    )
    return _UNIT_SECONDS[m.group(1)] if m else None


def _number(value: str) -> float | None:
    try:
        return float(value.strip().strip("\"'"))
    except ValueError:
        return None


def _feeds(code: pl.DataFrame, read: dict[str, Any]) -> dict[str, Any] | None:
    """The known setting a read of an environment variable feeds: the setting on the same statement line whose value
    holds the read, or a setting of the same file whose value is the name the read was assigned to."""
    candidates = code.filter(pl.col("setting").is_in(list(FEEDS)) & (pl.col("source") == read["source"]))
    for r in candidates.iter_rows(named=True):
        value = r["value"] or ""
        if r["line"] == read["line"] and read["name"] in value:
            return r
        if read.get("target") and _word(read["target"]).search(value):
            return r
    return None


def _env_settings(code: pl.DataFrame) -> list[JobSetting]:
    reads = code.filter(pl.col("setting") == "env_read")
    read_names = set(reads["name"].to_list())
    sets = code.filter(pl.col("setting").is_in(["env", "job_env"]))
    # what ran: a script's export (named as the user wrote it) over an env dump's copy of it
    exported = pl.col("reading").is_in(["code.env.export_any", "code.env.shell"])
    sets = sets.with_columns(exported.alias("_script"))
    out = []
    for name, rows in sets.sort("_script", "source", "line").group_by("name", maintain_order=True):
        var = str(name[0])
        r = rows.row(-1, named=True)
        if r["setting"] == "job_env" and var not in read_names and not r["_script"]:
            continue
        feeds, seconds, controls, where = "", None, "", None
        for read in reads.filter(pl.col("name") == var).iter_rows(named=True):
            fed = _feeds(code, read)
            if fed is not None:
                feeds = fed["setting"]
                factor = _seconds_factor(read["text"] or "", var) or _seconds_factor(fed["text"] or "", var)
                n = _number(r["value"] or "")
                seconds = n * factor if n is not None and factor is not None else None
                controls = f"{FEEDS[feeds]}: `{fed['name']}` ({fed['source']}:{fed['line']})"
                where = fed
                break
            if where is None:
                controls, where = f"a value the job's code reads ({read['source']}:{read['line']})", read
        out.append(
            JobSetting(
                key=f"env:{var}",
                name=var,
                kind="env",
                tool="",
                value=str(r["value"] or ""),
                file=str(r["source"]),
                line=r["line"],
                text=str(r["text"] or ""),
                feeds=feeds,
                seconds=seconds,
                controls=controls,
                **_controlled_at(where),
            )
        )
    return out


def _launcher_settings(code: pl.DataFrame) -> list[JobSetting]:
    out = []
    for r in code.filter(pl.col("setting") == "launcher_arg").sort("source", "line").iter_rows(named=True):
        tool, _, option = str(r["name"]).rpartition(" ")
        note = launcher_notes().get(option.lstrip("-").replace("-", "_"), "")
        out.append(
            JobSetting(
                key=f"launcher:{r['name']}",
                name=option,
                kind="launcher",
                tool=tool,
                value=str(r["value"] or FLAG_SET),
                file=str(r["source"]),
                line=r["line"],
                text=str(r["text"] or ""),
                controls=f"`{tool}`'s option: {note}" if note else f"an option of `{tool}`",
                controls_file=str(r["source"]) if note else "",
            )
        )
    return out


def _arg_seconds_factor(statement: str, dest: str) -> float | None:
    """How an argument's value becomes a duration: `timedelta(seconds=args.pg_timeout)`."""
    m = re.search(
        rf"\b(seconds|minutes|hours|days|milliseconds)\s*=\s*(?:[\w.]+\s*\(\s*)*[\w.]*\.{re.escape(dest)}(?!\w)",
        statement,
    )
    return _UNIT_SECONDS[m.group(1)] if m else None


def _arg_feeds(code: pl.DataFrame, script: str, flag: str) -> dict[str, Any] | None:
    """The known setting of the script whose value reads the argument (`args.pg_timeout` for `--pg-timeout`)."""
    dest = flag.lstrip("-").replace("-", "_")
    if not dest.isidentifier():
        return None
    use = re.compile(rf"\.{re.escape(dest)}(?!\w)")
    mine = code.filter(pl.col("setting").is_in(list(FEEDS)) & pl.col("source").str.ends_with(script))
    return next((r for r in mine.sort("line").iter_rows(named=True) if use.search(r["value"] or "")), None)


def _script_settings(code: pl.DataFrame) -> list[JobSetting]:
    defs = code.filter(pl.col("setting") == "arg_def")
    out = []
    for r in code.filter(pl.col("setting") == "script_arg").sort("source", "line").iter_rows(named=True):
        script, _, flag = str(r["name"]).rpartition(" ")
        mine = defs.filter((pl.col("name") == flag) & pl.col("source").str.ends_with(script))
        defined = mine.row(0, named=True) if not mine.is_empty() else None
        if defined is not None:
            meaning = f": {defined['value']}" if defined["value"] else ""
            controls = f"`{script}`'s argument{meaning} ({defined['source']}:{defined['line']})"
        else:
            controls = f"an argument of `{script}`"
        where = defined
        fed = _arg_feeds(code, script, flag) if defined is not None else None
        feeds, seconds = "", None
        if fed is not None:  # the code hands it to a setting it knows: that is what it controls
            feeds, where = fed["setting"], fed
            factor = _arg_seconds_factor(fed["text"] or "", flag.lstrip("-").replace("-", "_"))
            n = _number(r["value"] or "")
            seconds = n * factor if n is not None and factor is not None else None
            controls = f"{FEEDS[feeds]}: `{fed['name']}` ({fed['source']}:{fed['line']})"
        out.append(
            JobSetting(
                key=f"arg:{r['name']}",
                name=flag,
                kind="script_arg",
                tool=script,
                value=str(r["value"] or FLAG_SET),
                file=str(r["source"]),
                line=r["line"],
                text=str(r["text"] or ""),
                feeds=feeds,
                seconds=seconds,
                controls=controls,
                **_controlled_at(where),
            )
        )
    return out


def job_settings(t: Tables) -> tuple[JobSetting, ...]:
    """Every setting the job's files write, each once (the last place that sets it), named as written."""
    code = t.extra.get("code_settings")
    if code is None or code.is_empty():
        return ()
    found = {s.key: s for s in (*_env_settings(code), *_launcher_settings(code), *_script_settings(code))}
    return tuple(found.values())


def launched_scripts(t: Tables) -> frozenset[tuple[str, str]]:
    """(launch file, script) pairs: the launch lines of the job's files, so that an argument absent from a run whose
    launch line is there is known to be not set, rather than not seen."""
    code = t.extra.get("code_settings")
    if code is None or code.is_empty():
        return frozenset()
    rows = code.filter(pl.col("setting").is_in(["launcher_arg", "script_arg"]))
    out = set()
    for r in rows.iter_rows(named=True):
        m = re.search(r"(?:^|[\s;&|/])([\w.-]+\.py)(?:\s|$)", r["text"] or "")
        if m:
            out.add((str(r["source"]).rsplit("/", 1)[-1], m.group(1)))
    return frozenset(out)


def _controlled_at(where: dict | None) -> dict:
    """The `controls_*` fields of a setting: the line in the code where the value takes effect, if one was found."""
    if not where:
        return {"controls_file": "", "controls_line": None, "controls_text": ""}
    return {
        "controls_file": str(where["source"]),
        "controls_line": where["line"],
        "controls_text": str(where["text"] or ""),
    }
