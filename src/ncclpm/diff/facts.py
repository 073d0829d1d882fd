"""A run's configuration as facts, read from its tables: versions, settings, launcher options, the
process-group timeout and the job's shape. (NCCL's own choices are in `nccl_facts.py`, progress in
`progress.py`.) Every fact keeps the line that states it; nothing here reads raw text - the lines were
matched by the catalogs in `parsers/` (job_meta.toml, launch.toml, settings.toml, nccl_debug.toml).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import polars as pl

from ncclpm.analysis import Analysis
from ncclpm.diff.relevance import launcher_family, setting_family
from ncclpm.diff_model import Fact, Quote
from ncclpm.tables import Tables
from ncclpm.tables.kinds import K
from ncclpm.util.durations import coarse_duration, seconds_of

MAX_LIST = 12


ENV_NAME = re.compile(r"[A-Z][A-Z0-9_]*")  # an environment variable (code settings are named as they read)


def quote(row: dict) -> Quote:
    return Quote(str(row.get("source") or row.get("file") or ""), row.get("line"), str(row.get("text") or ""))


def listed(values: Iterable[str]) -> str:
    items = sorted({v for v in values if v})
    shown = ", ".join(items[:MAX_LIST])
    return shown + (f" (+{len(items) - MAX_LIST} more)" if len(items) > MAX_LIST else "")


def builds(values: Iterable[str]) -> str:
    """Versions as a list, pip's unlabelled name of a build dropped when the labelled one is there
    (`torch==2.14.1` from collect_env next to the `2.14.1+cu130` the ranks print)."""
    items = {v for v in values if v}
    return listed(v for v in items if "+" in v or not any(o.startswith(v + "+") for o in items))


def _first(frame: pl.DataFrame) -> dict:
    return frame.sort("source", "line").row(0, named=True)


def _kind_values(t: Tables, kind: str, column: str = "version") -> pl.DataFrame:
    return t.events.filter((pl.col("kind") == kind) & pl.col(column).is_not_null())


def version_facts(t: Tables) -> list[Fact]:
    facts: list[Fact] = []
    torch = _kind_values(t, K.torch_version)
    if not torch.is_empty():
        facts.append(Fact("version:torch", "torch version", "torch_version", "versions", builds(torch["version"])))
        facts[-1] = _with_evidence(facts[-1], torch)
    nccl = t.events.filter(pl.col("kind").is_in([K.nccl_version, K.nccl_error]) & pl.col("version").is_not_null())
    if not nccl.is_empty():
        facts.append(
            _with_evidence(
                Fact("version:nccl", "NCCL version", "nccl_version", "versions", listed(nccl["version"])), nccl
            )
        )
        for host, rows in sorted(nccl.filter(pl.col("host").is_not_null()).group_by("host"), key=lambda g: g[0]):
            name = str(host[0])
            fact = Fact(f"version:nccl@{name}", f"NCCL version on {name}", "nccl_version", "versions", "", None, True)
            facts.append(_with_evidence(_valued(fact, listed(rows["version"])), rows))
    elif t.fr is not None and not t.fr.dumps.is_empty():
        libs = t.fr.dumps.filter(pl.col("comm_lib_version").fill_null("") != "")
        if not libs.is_empty():
            row = libs.row(0, named=True)
            ev = Quote(str(row.get("source") or "flight recorder"), None, f"comm_lib_version {row['comm_lib_version']}")
            facts.append(
                Fact("version:nccl", "NCCL version", "nccl_version", "versions", listed(libs["comm_lib_version"]), ev)
            )
    cuda = t.events.filter((pl.col("kind") == K.nccl_version) & pl.col("detail").is_not_null())
    if not cuda.is_empty():
        facts.append(
            _with_evidence(
                Fact("version:cuda", "CUDA version", "cuda_version", "versions", listed(cuda["detail"])), cuda
            )
        )
    driver = _kind_values(t, K.driver_version)
    if not driver.is_empty():
        value = listed(_driver_text(v) for v in driver["version"].to_list())
        facts.append(_with_evidence(Fact("version:driver", "CUDA driver", "driver_version", "versions", value), driver))
    python = _kind_values(t, K.python_version, "detail")
    if not python.is_empty():
        fact = Fact("version:python", "Python", "python_version", "versions", listed(python["detail"]))
        facts.append(_with_evidence(fact, python))
    libs = t.events.filter((pl.col("kind") == K.library_version) & pl.col("detail").is_not_null())
    for name, rows in sorted(libs.group_by("detail"), key=lambda g: str(g[0][0])):
        lib = str(name[0]).lower().replace("_", "-")
        fact = Fact(f"version:lib:{lib}", lib, "library_version", "versions", listed(rows["version"]))
        facts.append(_with_evidence(fact, rows))
    return facts


def _driver_text(v: str) -> str:
    """cudaDriverVersion 12040 -> 12.4 (12040)."""
    if v.isdigit() and len(v) >= 4:
        n = int(v)
        return f"{n // 1000}.{n % 1000 // 10} ({v})"
    return v


def _valued(fact: Fact, value: str) -> Fact:
    return Fact(fact.key, fact.what, fact.family, fact.section, value, fact.evidence, fact.paired_only)


def _with_evidence(fact: Fact, rows: pl.DataFrame) -> Fact:
    return Fact(fact.key, fact.what, fact.family, fact.section, fact.value, quote(_first(rows)), fact.paired_only)


def setting_facts(facts: Analysis) -> list[Fact]:
    """One fact per variable (the settings table already keeps where it is set over NCCL's echo of it), in the
    lint's order: the most severe first."""
    if not facts.settings:
        return []
    t = facts.t
    texts = {
        (r["source"], r["line"]): r["text"]
        for r in t.events.filter(pl.col("kind") == K.setting).select("source", "line", "text").iter_rows(named=True)
    }
    out = []
    for s in facts.settings:
        if not ENV_NAME.fullmatch(s.var):  # environment variables; the code's other settings come from code_facts.py
            continue
        ev = Quote(str(s.file), s.line, texts.get((s.file, s.line), ""))
        out.append(Fact(f"setting:{s.var}", s.var, setting_family(s.var), "settings", str(s.value or ""), ev))
    return out


def dataloader_facts(t: Tables) -> list[Fact]:
    """DataLoader arguments where a script logs its construction (or a code file of the job writes it)."""
    rows = t.events.filter((pl.col("kind") == K.dataloader_setting) & pl.col("var").is_not_null())
    facts = []
    for name, group in rows.group_by("var"):
        arg = str(name[0])
        ordered = group.sort("source", "line")
        value = listed(ordered["value"].to_list())
        ev = quote(ordered.row(-1, named=True))
        facts.append(Fact(f"dataloader:{arg}", f"DataLoader {arg}", "dataloader_setting", "settings", value, ev))
    return sorted(facts, key=lambda f: f.key)


def launcher_facts(t: Tables) -> list[Fact]:
    rows = t.events.filter((pl.col("kind") == K.launcher_option) & pl.col("var").is_not_null())
    facts = []
    for name, group in rows.with_columns(pl.col("var").str.replace_all("-", "_")).group_by("var"):
        option = str(name[0])
        last = group.sort("source", "line").row(-1, named=True)
        what = f"torchrun --{option}"
        facts.append(
            Fact(f"launcher:{option}", what, launcher_family(option), "launcher", str(last["value"]), quote(last))
        )
    return sorted(facts, key=lambda f: f.key)


def timeout_fact(t: Tables) -> Fact | None:
    """The process-group timeout: as configured (init call, ProcessGroupNCCL options), else as the flight
    recorder records it per collective, else as the timeout messages state it."""
    stated = t.events.filter(pl.col("kind") == K.pg_timeout)
    for r in stated.sort("source", "line").iter_rows(named=True):
        secs = r["timeout_ms"] / 1000 if r["timeout_ms"] is not None else seconds_of(r["value"] or "")
        if secs is not None:
            return _timeout(secs, quote(r))
    if t.fr is not None and not t.fr.compact.is_empty():
        ms = t.fr.expand(t.fr.compact.filter(pl.col("timeout_ms").is_not_null() & (pl.col("timeout_ms") > 0)))
        if not ms.is_empty():
            r = ms.sort("rank", "record_id").row(0, named=True)
            op = r["profiling_name"] or r["op"]
            text = f"flight recorder, rank {r['rank']}: {op} #{r['collective_seq_id']} timeout_ms={r['timeout_ms']}"
            return _timeout(int(ms["timeout_ms"].mode().sort()[0]) / 1000, Quote(str(r["source"]), None, text))
    timed_out = t.events.filter((pl.col("kind") == K.collective_timeout) & pl.col("timeout_ms").is_not_null())
    if not timed_out.is_empty():
        r = _first(timed_out)
        return _timeout(int(r["timeout_ms"]) / 1000, quote(r))
    return None


def _timeout(seconds: float, ev: Quote) -> Fact:
    return Fact("pg_timeout", "process-group timeout", "pg_timeout", "settings", coarse_duration(seconds), ev)


def shape_facts(t: Tables) -> list[Fact]:
    facts = []
    if t.world_size is not None:
        stated = t.events.filter(pl.col("kind") == K.world_size)
        ev = quote(_first(stated)) if not stated.is_empty() else None
        facts.append(Fact("shape:world_size", "world size", "world_size", "shape", str(t.world_size), ev))
    comms = t.extra.get("nccl_comms")
    hosts = set(t.lines["host"].drop_nulls().to_list())
    if comms is not None and not comms.is_empty():
        hosts |= set(comms["host"].drop_nulls().to_list())
    if hosts:
        facts.append(Fact("shape:hosts", "hosts", "hosts", "shape", listed(hosts)))
        facts.append(Fact("shape:nodes", "nodes", "nodes", "shape", str(len(hosts))))
    per_host = t.ranks.filter(pl.col("host").is_not_null()).group_by("host").len()
    if not per_host.is_empty():
        value = listed(str(n) for n in per_host["len"].to_list())
        facts.append(Fact("shape:ranks_per_host", "ranks per host", "ranks_per_host", "shape", value))
    if comms is not None and not comms.is_empty():
        gpus = comms.filter(pl.col("host").is_not_null()).group_by("host").agg(pl.col("cuda_dev").n_unique())
        if not gpus.is_empty():
            value = listed(str(n) for n in gpus["cuda_dev"].to_list())
            facts.append(Fact("shape:gpus_per_node", "GPUs per node", "gpus_per_node", "shape", value))
    return facts


def config_facts(facts: Analysis) -> list[Fact]:
    """Every configuration fact of the run; a fact the logs state wins over the same one read from code."""
    from ncclpm.diff.code_facts import code_config_facts

    t = facts.t
    timeout = timeout_fact(t)
    logged = [
        *version_facts(t),
        *setting_facts(facts),
        *launcher_facts(t),
        *dataloader_facts(t),
        *([timeout] if timeout else []),
        *shape_facts(t),
    ]
    keys = {f.key for f in logged}
    return logged + [f for f in code_config_facts(t) if f.key not in keys]
