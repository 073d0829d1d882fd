"""What the settings section says about the settings found in code: the process-group timeout and whether it
is the one the logs show in force, DataLoader workers and timeout, a GPU never pinned per rank, launcher
arguments (notes in `parsers/code_settings.toml`). Rows have the settings table's columns (var, value, file,
line, verdict, severity); environment variables set in code go through the env-var lint instead (`env_rows`).
`timeout_origin` gives rules the sentence naming where the timeout in force was set."""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, Any

import polars as pl

from ncclpm.ingest.code.settings import READINGS_FILE, configured_pg_timeout
from ncclpm.tables.kinds import K
from ncclpm.util.resources import data_dir, read_toml

if TYPE_CHECKING:
    from ncclpm.tables import Tables

NCCL_DEFAULT_TIMEOUT_S = 600


@lru_cache(maxsize=1)
def launcher_notes() -> dict[str, str]:
    doc = read_toml(data_dir("parsers") / READINGS_FILE)
    return dict(doc.get("launcher_notes", {}))


def human_seconds(seconds: float) -> str:
    """`60 s`, `30 min`, `1 h 30 min`, `2 days 1 h`."""
    s = round(seconds)
    if abs(seconds - s) > 1e-6 or s < 120:
        return f"{seconds:g} s"
    days, rest = divmod(s, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{days} day{'s' if days != 1 else ''}" if days else "", f"{hours} h" if hours else ""]
    parts += [f"{minutes} min" if minutes else "", f"{secs} s" if secs else ""]
    return " ".join(p for p in parts if p)


def _observed_ms(events: pl.DataFrame) -> list[int]:
    ms = events.filter(pl.col("kind") == K.collective_timeout)["timeout_ms"].drop_nulls().unique().sort()
    return [int(v) for v in ms.to_list()]


def _pg_timeout(r: dict[str, Any], observed: list[int]) -> tuple[str, str]:
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


def _verdict(r: dict[str, Any], observed: list[int]) -> tuple[str, str]:
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


def code_setting_rows(code: pl.DataFrame, events: pl.DataFrame) -> list[dict[str, Any]]:
    """Settings-table rows for the facts found in code, except environment variables."""
    observed = _observed_ms(events)
    rows = []
    for r in code.filter(pl.col("setting") != "env").iter_rows(named=True):
        text, severity = _verdict(r, observed)
        if text:
            rows.append(
                {"var": r["name"], "value": r["value"], "file": r["source"], "line": r["line"], "verdict": text}
                | {"severity": severity}
            )
    return rows


def env_rows(code: pl.DataFrame) -> pl.DataFrame:
    """Environment variables set in code, shaped like `setting` events (var, value, source, line, event)."""
    return code.filter(pl.col("setting") == "env").select(
        pl.col("name").alias("var"), "value", "source", "line", pl.col("reading").alias("event")
    )


def timeout_origin(t: Tables, observed_ms: int | None) -> str:
    """Where the timeout in force comes from, as a clause for a rule's text: "set by `init_process_group(timeout=)`
    = `timedelta(seconds=60)` at distributed.py:41"; or, when the code sets another value than the one the logs
    show, a clause saying so; "" when the code read does not set it."""
    conf = configured_pg_timeout(t)
    if conf is None:
        return ""
    where = f"`{conf['name']}` = `{conf['value']}` at {conf['file']}:{conf['line']}"
    if observed_ms is None or round(conf["seconds"] * 1000) == observed_ms:
        return f"set by {where}"
    return (
        f"the code sets {human_seconds(conf['seconds'])} with {where}, but {human_seconds(observed_ms / 1000)} was "
        "in force: that setting never reached this process group"
    )
