"""Fuzz targets for the parsers round three bounded (issue 27), used by tests/test_fuzz.py (CI budget) and
scripts/fuzz_long.py (long budget).

- structured_json: JSON-ish text (brackets, strings with escapes, huge and negative integers, unterminated pieces)
  through `structure.load_json` and the depth checks: only ValueError escapes; what loads nests at most
  MAX_NESTING levels and holds no integer past Int64 (those are `Huge`); the depth check agrees with a counter.
- pyspy_json: py-spy `--json` documents with type-confused, out-of-range and deeply nested values through the
  stacks table of a job: every number in the table within its bound, the document named in a warning or used.
- stack_text_numbers: py-spy / faulthandler / gdb / debug-server text with random numbers (thousands of digits,
  non-ASCII digits, section ranks past any bound) through the stacks table.
- code_or_log: printed configs, env dumps, code and job lines mixed at random through discovery: the kind is one of
  the known ones, decided the same way twice, and a file whose head reads as code with two or more job lines at a
  line start is a log unless it parses as JSON or Python.
- code_statements: code with long continuations, open brackets, quotes, YAML items, notebooks with random sources
  through `statements` and the settings reader (`read_code_text`): nothing escapes.
- huge_lines: text of `\\r`-separated segments (some longer than a block) read in small blocks and whole: the same
  hit segments with the same line numbers.
- job_identity_layouts: folders with random names (Slurm ids, attempts, hosts, pods, plain words) holding random
  logs (ranks, stamps or none, Slurm ids, master addresses, world sizes) through `job_identity` and `diagnose`:
  exit 0 or 2, units sharing one Slurm id are never split, the refusal names jobs that exist.
"""

from __future__ import annotations

import json
import os
import tempfile
from datetime import datetime, timedelta
from pathlib import Path

import polars as pl
from click.testing import CliRunner
from hypothesis import strategies as st

from ncclpm.api import build, catalog
from ncclpm.cli import main
from ncclpm.ingest.code.settings import read_code_text
from ncclpm.ingest.code.statements import statements
from ncclpm.ingest.stacks.build import build_stacks
from ncclpm.ingest.stacks.parse import LIMITS
from ncclpm.ingest.text import lines as lines_mod
from ncclpm.sources.code import LANGUAGES, code_language, is_log_after_all
from ncclpm.sources.discover import Job, Source, SourceKind, classify, collect
from ncclpm.util.clamp import MAX_RANK
from ncclpm.util.structure import MAX_NESTING, Huge, json_too_deep, load_json

# ------------------------------------------------------------------------------------------ structured_json

JSON_PIECES = ["[", "]", "{", "}", ",", ":", '"', '\\"', "\\\\", '"a"', "1", "-1", "9" * 25, "-" + "9" * 30, "1e999"]
JSON_PIECES += ["null", "true", " ", "\n", "[" * 70, "]" * 70, '{"a":', '"pid":', str(2**63), str(-(2**63) - 1)]
json_text = st.lists(st.sampled_from(JSON_PIECES), max_size=60).map("".join)


def _deepest(doc: object) -> int:
    level, todo, deepest = 0, [(doc, 1)], 0
    while todo:
        value, level = todo.pop()
        if isinstance(value, list | dict):
            deepest = max(deepest, level)
            todo += [(v, level + 1) for v in (value.values() if isinstance(value, dict) else value)]
    return deepest


def _ints(doc: object) -> list[object]:
    out, todo = [], [doc]
    while todo:
        value = todo.pop()
        if isinstance(value, list | dict):
            todo += list(value.values() if isinstance(value, dict) else value)
        elif isinstance(value, int | Huge) and not isinstance(value, bool):
            out.append(value)
    return out


def run_structured_json(text: str) -> str:
    deep = json_too_deep(text)
    try:
        doc = load_json(text)
    except ValueError as exc:
        return json.dumps(["refused", deep, type(exc).__name__])
    assert not deep, "a document the depth check refused was loaded"
    assert _deepest(doc) <= MAX_NESTING
    for v in _ints(doc):
        assert isinstance(v, Huge) or -(2**63) <= v < 2**63, v
    return json.dumps(["loaded", repr(doc)[:2000]])


# ------------------------------------------------------------------------------------------ py-spy json, stack text

odd_value = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**80), max_value=2**80),
    st.sampled_from([2**63, 2**70, -1, 0, 99999999999, 2**31]),
    st.text(max_size=8),
    st.lists(st.integers(), max_size=2),
    st.just({"a": 1}),
)
pyspy_frame = st.fixed_dictionaries(
    {"name": odd_value, "filename": odd_value, "short_filename": odd_value, "line": odd_value},
    optional={
        "locals": st.one_of(
            odd_value,
            st.lists(st.fixed_dictionaries({"name": st.sampled_from(["rank", "x"]), "repr": odd_value}), max_size=2),
        )
    },
)
pyspy_thread = st.fixed_dictionaries(
    {"pid": odd_value, "thread_id": odd_value, "frames": st.one_of(odd_value, st.lists(pyspy_frame, max_size=4))},
    optional={"os_thread_id": odd_value, "thread_name": odd_value, "active": odd_value},
)


def _stack_job(name: str, data: bytes) -> str:
    warnings: list[str] = []
    job = Job("fuzz", [Source(name, SourceKind.STACK, data=data)])
    lines = pl.DataFrame(schema={"source": pl.String, "line": pl.Int64, "message": pl.String, "rank": pl.Int32})
    table = build_stacks(job, lines, {}, None, warnings)
    for col, high in (("rank", MAX_RANK), ("pid", LIMITS["pid"]), ("code_line", LIMITS["line"])):
        values = table[col].drop_nulls()
        assert values.is_empty() or (values.min() >= 0 and values.max() <= high), (col, values.to_list()[:5])
    return json.dumps([table.height, sorted(warnings)])


def run_pyspy_json(args: tuple[list[dict], int]) -> str:
    threads, depth = args
    text = json.dumps(threads, default=repr)
    if depth:
        text = text.replace('"frames": []', '"frames": ' + "[" * depth + "]" * depth, 1)
    text = text.replace("[{", '[{"pid": 1, "thread_id": 2, ', 1) if not text.startswith('[{"pid"') else text
    return _stack_job("rank3.json", text.encode())


STACK_LINES = [
    "Process {n}: python train.py",
    'Thread {n} (idle): "MainThread"',
    "    all_reduce (torch/distributed/distributed_c10d.py:{n})",
    "            rank: {n}",
    "=== Rank {n}: http://vm:{n}/handler ===",
    "Current thread 0x{h} (most recent call first):",
    '  File "train.py", line {n} in main',
    'Thread {n} (Thread 0x{h} (LWP {n}) "python"):',
    "#0  0x{h} in poll () at ../sysdeps/poll.c:{n}",
    "# Thread {n}",
    '  File "train.py", line {n}, in main',
]
numbers = st.one_of(
    st.integers(min_value=0, max_value=2**70).map(str),
    st.sampled_from(["9" * 5000, "999999999", "1048576", "١٢٣", "²", "0" * 30 + "1"]),
)
stack_text = st.lists(st.tuples(st.sampled_from(STACK_LINES), numbers, st.sampled_from(["7f", "f" * 40])), max_size=30)


def run_stack_text(lines: list[tuple[str, str, str]]) -> str:
    text = "\n".join(t.format(n=n, h=h) for t, n, h in lines)
    return _stack_job("stacks_rank2.txt", text.encode())


# ------------------------------------------------------------------------------------------ code or log, statements

CONFIG_LINES = ["model:", "  dim: 4096", "  - item", "{", '  "lr": 0.001,', "}", "{'a': 1,", " 'b': [1, 2]}"]
CONFIG_LINES += ["Namespace(lr=0.1, bs=8)", "PATH=/usr/bin", "SLURM_JOB_ID=4471201", "export X=1", "import torch"]
CONFIG_LINES += ["def f(x):", "    return x", "x = dict(", ")", "[tool.x]", "a = [[1]]", "#!/bin/bash", "  key: \\"]
JOB_LINES = ["Traceback (most recent call last):", '  File "train.py", line 3, in <module>', "[rank0]: step 1"]
JOB_LINES += ["[default1]:x", "E0601 10:00:00.000 1 api.py:1] x", "2024-06-01 10:00:00,123 INFO x", "srun: error: x"]
JOB_LINES += [
    "host:1:2 [0] NCCL WARN x",
    "torch.OutOfMemoryError: CUDA out of memory.",
    " 10%|#   | 1/10 [00:01<00:09]",
]
mixed_file = st.tuples(
    st.sampled_from(["train.log", "config.yaml", "run.sh", "x.py", "cfg.toml", "a.json", "stdout"]),
    st.lists(st.one_of(st.sampled_from(CONFIG_LINES), st.sampled_from(JOB_LINES)), max_size=80),
    st.integers(0, 3),
)


def run_code_or_log(args: tuple[str, list[str], int]) -> str:
    name, lines, repeat = args
    text = "\n".join(lines * (1 + repeat * 150)) + "\n"  # (repeated: past the 400 lines of the head)
    with tempfile.TemporaryDirectory(prefix="ncclpm-fuzz-") as d:
        Path(d, name).write_text(text)
        kinds = [str(s.kind) for s in collect([Path(d, name)]).sources]
    head = text.encode()[:65536]
    lang = code_language(name, head, truncated=len(text.encode()) > 65536)
    assert lang is None or lang in LANGUAGES
    assert kinds in ([], ["text"], ["code"], ["stack"], ["errorfile"], ["fr"]), kinds
    if classify(name, head) == SourceKind.CODE:
        assert (kinds == ["text"]) == is_log_after_all(lang or "python", text), (kinds, lang)
    return json.dumps([kinds, lang])


CODE_PIECES = ["\\", "(", ")", "[", "]", "{", "}", '"', "'", '"""', "#", " ", "\n", "- name: x", "  key: v", "x = 1"]
CODE_PIECES += ["timeout=timedelta(seconds=" + "9" * 400 + ")", "init_process_group(", "NCCL_DEBUG=INFO", "%env A=1"]
code_text = st.lists(st.sampled_from(CODE_PIECES), max_size=200).map("".join)


def run_code_statements(args: tuple[str, str, list[str]]) -> str:
    text, lang, sources = args
    if lang == "notebook":
        text = json.dumps({"cells": [{"cell_type": "code", "source": s} for s in [*sources, text]]})
    out = []
    try:
        out = [s.text for s in statements(text, lang)]
    except (ValueError, RecursionError) as exc:  # (what `read_code_text` turns into a warning)
        out = [type(exc).__name__]
    warnings: list[str] = []
    facts = read_code_text("x", text, lang, warnings)
    return json.dumps([out[:50], [(f["name"], f["value"], f["number"]) for f in facts], warnings], default=repr)


# ------------------------------------------------------------------------------------------ huge lines

segment = st.tuples(st.booleans(), st.sampled_from([0, 3, 40, 100, 255, 256, 300, 900]), st.sampled_from("ab é|"))
huge_text = st.lists(
    st.tuples(st.lists(segment, min_size=1, max_size=12), st.sampled_from(["\n", "\r\n", "\r", ""])), max_size=12
)


def run_huge_lines(lines: list[tuple[list[tuple[bool, int, str]], str]]) -> str:
    text = "".join(
        "\r".join(("NCCL WARN x " if hit else "") + ch * size for hit, size, ch in segs) + end for segs, end in lines
    )
    got = []
    with tempfile.TemporaryDirectory(prefix="ncclpm-fuzz-") as d:
        Path(d, "train.log").write_text(text, encoding="utf-8")
        job = collect([Path(d, "train.log")])
        saved = (lines_mod.CHUNK_BYTES, lines_mod._is_big, lines_mod.MAX_LINE_CHARS)
        try:
            lines_mod.MAX_LINE_CHARS = 40
            for chunk, big in ((1 << 40, False), (256, True)):
                lines_mod.CHUNK_BYTES, lines_mod._is_big = chunk, (lambda s, b=big: b)
                kept = lines_mod.read_kept_lines(job.of_kind("text"), list(catalog().anchors), [])
                got.append(kept.filter(pl.col("raw").str.starts_with("NCCL WARN")).select("line", "raw").rows())
        finally:
            lines_mod.CHUNK_BYTES, lines_mod._is_big, lines_mod.MAX_LINE_CHARS = saved
    assert got[0] == got[1], (got[0][:5], got[1][:5])
    return json.dumps(got[0])


# ------------------------------------------------------------------------------------------ job identity

UNIT_NAMES = ["4471201", "4471202", "attempt_1", "attempt_2", "restart_1", "nid001234", "nid001235", "job-a", "job-b"]
UNIT_NAMES += ["myjob-worker-0", "myjob-master-0", "logs", "console.log", "run_a.log", "slurm-4471203.out", "fr"]
unit = st.tuples(
    st.sampled_from(UNIT_NAMES),
    st.lists(st.integers(0, 7), min_size=0, max_size=4),  # global ranks in its log
    st.one_of(st.none(), st.integers(0, 48)),  # hours after T0 (None: undated)
    st.sampled_from(
        ["", "SLURM_JOB_ID=4471201\n", "SLURM_JOB_ID=4471209\n", "MASTER_ADDR=gpu-a01\n", "WORLD_SIZE=4\n"]
    ),
    st.booleans(),  # local-rank stream instead of global ranks
)
T0 = datetime(2024, 6, 1, 10)


def run_job_identity(units: list[tuple[str, list[int], int | None, str, bool]]) -> str:
    with tempfile.TemporaryDirectory(prefix="ncclpm-fuzz-") as d:
        root = Path(d, "jobs")
        root.mkdir()
        for name, ranks, hours, head, local in units:
            path = root / name if name.endswith((".log", ".out")) else root / name / "train.log"
            path.parent.mkdir(parents=True, exist_ok=True)
            body = []
            for r in ranks:
                stamp = "" if hours is None else f"[{T0 + timedelta(hours=hours, seconds=r):%Y-%m-%dT%H:%M:%S}.000] "
                prefix = f"[default{r}]:" if local else f"[rank{r}]:"
                body.append(f"{prefix}{stamp}step 1 loss 0.{r}")
            path.write_text(head + "\n".join(body) + "\n" if body or head else "step 1\n")
        t = build([root])
        from ncclpm.analysis.identity import job_identity

        found = job_identity(t)
        names = {u for j in found.jobs for u in j}
        assert all(found.jobs) or not t.sources, found
        res = CliRunner().invoke(main, ["diagnose", str(root), "-f", "json"])
        assert res.exit_code in (0, 2), res.output[-2000:]
        if found.several:
            assert res.exit_code == 2 and "separate jobs" in res.stderr, (res.exit_code, found)
        elif res.exit_code == 2:  # (a job of code files only: `SLURM_JOB_ID=...` alone is an env dump, no log)
            assert "nothing readable" in res.stderr and "separate jobs" not in res.stderr, res.stderr[-2000:]
        if found.several:
            for n in names:
                assert os.path.exists(root / n), n
        return json.dumps([[list(j) for j in found.jobs], found.evidence, list(found.weak), res.exit_code])


TARGET_SPECS = {
    "structured_json": (json_text, run_structured_json, 60, 50_000),
    "pyspy_json": (
        st.tuples(st.lists(pyspy_thread, max_size=3), st.sampled_from([0, 0, 10, 70, 1500])),
        run_pyspy_json,
        30,
        10_000,
    ),
    "stack_text_numbers": (stack_text, run_stack_text, 30, 10_000),
    "code_or_log": (mixed_file, run_code_or_log, 10, 3_000),
    "code_statements": (
        st.tuples(
            code_text,
            st.sampled_from(["python", "shell", "yaml", "toml", "json", "notebook"]),
            st.lists(st.text(max_size=20), max_size=3),
        ),
        run_code_statements,
        30,
        10_000,
    ),
    "huge_lines": (huge_text, run_huge_lines, 6, 2_000),
    "job_identity_layouts": (
        st.lists(unit, min_size=1, max_size=5),
        run_job_identity,
        4,
        1_000,
        # (the long run, 2026-11-28: a job of one env dump is "nothing readable", exit 2 - the property was wrong)
        ([("4471201", [], None, "SLURM_JOB_ID=4471201\n", False)],),
    ),
}
