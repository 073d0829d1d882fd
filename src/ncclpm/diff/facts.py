"""A run's configuration as facts, read from its tables: versions, settings, launcher options, the
process-group timeout and the job's shape. (NCCL's own choices are in `nccl_facts.py`, progress in
`progress.py`.) Every fact keeps the line that states it; nothing here reads raw text - the lines were
matched by the catalogs in `parsers/` (job_meta.toml, launch.toml, settings.toml, nccl_debug.toml).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import replace

import polars as pl

from ncclpm.analysis import Analysis
from ncclpm.analysis.configuration import JobSetting, job_settings
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
        if lib == "torch" and not torch.is_empty():
            continue  # the torch version, said above
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
    return replace(fact, value=value)


def _with_evidence(fact: Fact, rows: pl.DataFrame) -> Fact:
    return replace(fact, evidence=quote(_first(rows)))


# what a variable feeds -> the relevance family of the setting it controls
FEED_FAMILY = {
    "pg_timeout": "pg_timeout",
    "subgroup_timeout": "pg_timeout",
    "dataloader_num_workers": "dataloader_setting",
    "dataloader_timeout": "dataloader_setting",
    "cuda_set_device": "gpus_per_node",
    "pg_init": "backend",
}


def _controls(s: JobSetting) -> Quote | None:
    return Quote(s.controls_file, s.controls_line, s.controls_text) if s.controls_file and s.controls_text else None


def file_setting_facts(settings: tuple[JobSetting, ...]) -> list[Fact]:
    """The settings the job's files write (analysis/configuration.py), named as written, with what each controls:
    variables (section `settings`), launcher options and the script's own arguments (section `launcher`)."""
    out = []
    for s in settings:
        ev = Quote(s.file, s.line, s.text)
        if s.kind == "env":
            known = setting_family(s.name)
            family = FEED_FAMILY.get(s.feeds) or (known if known != "setting" or not s.controls else "job_setting")
            key, section = f"setting:{s.name}", "settings"
        elif s.kind == "launcher":
            option = s.name.lstrip("-").replace("-", "_")
            key, section, family = f"launcher:{option}", "launcher", launcher_family(option)
        else:
            key, section = f"arg:{s.tool} {s.name}", "launcher"
            family = FEED_FAMILY.get(s.feeds, "script_argument")
        out.append(
            Fact(
                key, s.name, family, section, s.value, ev, of=s.tool, controls=s.controls,
                controls_evidence=_controls(s), seconds=s.seconds,
            )
        )  # fmt: skip
    return out


def setting_facts(facts: Analysis, written: set[str]) -> list[Fact]:
    """Variables the logs show set (NCCL's `X set by environment to Y`) that no file of the job writes (`written`:
    the variables the files write), in the lint's order."""
    if not facts.settings:
        return []
    t = facts.t
    texts = {
        (r["source"], r["line"]): r["text"]
        for r in t.events.filter(pl.col("kind") == K.setting).select("source", "line", "text").iter_rows(named=True)
    }
    out = []
    for s in facts.settings:
        if not ENV_NAME.fullmatch(s.var) or s.var in written:  # the code's other settings: code_facts.py
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
        facts.append(
            Fact(
                f"launcher:{option}", f"--{option}", launcher_family(option), "launcher", str(last["value"]),
                quote(last), of="torchrun",
            )
        )  # fmt: skip
    return sorted(facts, key=lambda f: f.key)


def timeout_fact(t: Tables, settings: tuple[JobSetting, ...] = ()) -> Fact | None:
    """The process-group timeout: as configured (init call, ProcessGroupNCCL options), else as a variable of the
    job's files sets it through the code (`PG_TIMEOUT_S` read into `init_process_group(timeout=)`), else as the
    flight recorder records it per collective, else as the timeout messages state it."""
    stated = t.events.filter(pl.col("kind") == K.pg_timeout)
    for r in stated.sort("source", "line").iter_rows(named=True):
        secs = r["timeout_ms"] / 1000 if r["timeout_ms"] is not None else seconds_of(r["value"] or "")
        if secs is not None:
            return _timeout(secs, quote(r))
    for s in settings:
        if s.feeds == "pg_timeout" and s.seconds is not None:
            via = f"arg:{s.tool} {s.name}" if s.kind == "script_arg" else f"setting:{s.name}"
            return replace(_timeout(s.seconds, Quote(s.file, s.line, s.text)), via=via)
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
    return Fact(
        "pg_timeout", "process-group timeout", "pg_timeout", "settings", coarse_duration(seconds), ev, seconds=seconds
    )


def _launched_world(settings: tuple[JobSetting, ...]) -> Fact | None:
    """The world size a launch line states: torchrun's `--nproc_per_node` times `--nnodes` (1 when not given)."""
    opts = {s.name.lstrip("-").replace("-", "_"): s for s in settings if s.kind == "launcher"}
    nproc, nnodes = opts.get("nproc_per_node"), opts.get("nnodes")
    if nproc is None or not nproc.value.isdigit() or (nnodes is not None and not nnodes.value.isdigit()):
        return None
    size = int(nproc.value) * (int(nnodes.value) if nnodes is not None else 1)
    return Fact(
        "shape:world_size", "world size", "world_size", "shape", str(size), Quote(nproc.file, nproc.line, nproc.text)
    )


def _ranks_per_host(t: Tables, settings: tuple[JobSetting, ...]) -> Fact | None:
    """The ranks per host as the launch line states them (`--nproc_per_node`), else counted where the logs place every
    rank of a stated world size on its host: the ranks a launcher's failure summary happens to list are no count."""
    nproc = next((s for s in settings if s.kind == "launcher" and s.name.lstrip("-") == "nproc_per_node"), None)
    if nproc is not None and nproc.value.isdigit():
        return Fact(
            "shape:ranks_per_host", "ranks per host", "ranks_per_host", "shape", nproc.value,
            Quote(nproc.file, nproc.line, nproc.text),
        )  # fmt: skip
    placed = t.ranks.filter(pl.col("host").is_not_null())
    if not t.world_size_declared or t.world_size is None or placed["rank"].n_unique() < t.world_size:
        return None
    per_host = placed.unique("rank").group_by("host").len()
    value = listed(str(n) for n in per_host["len"].to_list())
    return Fact("shape:ranks_per_host", "ranks per host", "ranks_per_host", "shape", value)


def shape_facts(t: Tables, settings: tuple[JobSetting, ...] = ()) -> list[Fact]:
    """The job's shape. The world size only where a line or the launch states it: the highest rank a run's logs
    happen to show is no world size (a script that logs on rank 0 only shows one rank of many)."""
    facts = []
    if t.world_size is not None and t.world_size_declared:
        stated = t.events.filter(pl.col("kind") == K.world_size)
        ev = quote(_first(stated)) if not stated.is_empty() else None
        facts.append(Fact("shape:world_size", "world size", "world_size", "shape", str(t.world_size), ev))
    elif (launched := _launched_world(settings)) is not None:
        facts.append(launched)
    comms = t.extra.get("nccl_comms")
    hosts = set(t.lines["host"].drop_nulls().to_list())
    if comms is not None and not comms.is_empty():
        hosts |= set(comms["host"].drop_nulls().to_list())
    if hosts:
        facts.append(Fact("shape:hosts", "hosts", "hosts", "shape", listed(hosts)))
        facts.append(Fact("shape:nodes", "nodes", "nodes", "shape", str(len(hosts))))
    if (per_host := _ranks_per_host(t, settings)) is not None:
        facts.append(per_host)
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
    settings = job_settings(t)
    written = {s.name for s in settings if s.kind == "env"}
    timeout = timeout_fact(t, settings)
    logged = [
        *version_facts(t),
        *setting_facts(facts, written),
        *launcher_facts(t),
        *dataloader_facts(t),
        *([timeout] if timeout else []),
        *shape_facts(t, settings),
    ]
    keys = {f.key for f in logged}
    from_files = [*file_setting_facts(settings), *code_config_facts(t)]
    out = logged + [f for f in from_files if f.key not in keys]
    return list({f.key: f for f in out}.values())
