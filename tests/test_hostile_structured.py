"""Hostile and unlucky input, round three (issue 27), part 1: tiny structured files that ended the whole job.

Every parser of a structured input (TOML, JSON, notebooks, py-spy `--json`, `=== Rank N ===` sections, py-spy
`--locals`) is bounded in depth and in integer range before it builds anything (`util/structure.py`, the LIMITS
of `ingest/stacks/parse.py`): a value past its bound is a warning naming the file and a blank, and the rest of the
job is diagnosed as without the file. Each test here failed before (exit 3: RecursionError, an Int32/Int64 overflow,
or a rank of 999999999 taken for real).
"""

from __future__ import annotations

import json
import random
import shutil
from itertools import accumulate
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from ncclpm.api import build, diagnose
from ncclpm.cli import main
from ncclpm.ingest.code.settings import read_code_text, to_number
from ncclpm.sources.code import code_language
from ncclpm.util.structure import MAX_NESTING, Huge, TooDeep, json_too_deep, load_json, nesting_exceeds

ROOT = Path(__file__).resolve().parents[1]
CASES = ROOT / "tests" / "cases"
OOM_CASE = CASES / "excerpt_cuda_error_out_of_memory" / "input"
PYSPY_JSON_CASE = CASES / "stacks__dataloader_pyspy_json_only" / "input"
LOCALS_CASE = CASES / "stacks__checkpoint_native_locals" / "input"
SECTIONS_CASE = CASES / "stacks__debugserver_stacks_only" / "input"


def _copy(case: Path, tmp_path: Path) -> Path:
    job = tmp_path / "job"
    shutil.copytree(case, job)
    return job


def _verdict(path: Path) -> tuple[str, tuple[int, ...]]:
    d = diagnose([path])
    return str(d.category), tuple(d.culprit_ranks)


def _cli(*args: str | Path) -> tuple[int, str]:
    result = CliRunner().invoke(main, [str(a) for a in args])
    return result.exit_code, result.output


def _thread(pid: object = 24885, line: object = 327, frames: object = None) -> dict:
    return {
        "pid": pid,
        "thread_id": 140468728452800,
        "thread_name": "MainThread",
        "os_thread_id": pid,
        "active": True,
        "owns_gil": False,
        "frames": frames
        if frames is not None
        else [{"name": "train", "filename": "/w/train.py", "short_filename": "train.py", "line": line, "locals": None}],
    }


# ------------------------------------------------------------------------------------------ depth, TOML and JSON


def test_a_600_deep_toml_config_is_a_warning_and_the_job_is_diagnosed(tmp_path: Path) -> None:
    job = _copy(OOM_CASE, tmp_path)
    before = _verdict(job)
    (job / "config.toml").write_text("x = " + "[" * 600 + "]" * 600 + "\n")  # 1.2 KB
    assert _verdict(job) == before
    t = build([job])
    assert any("config.toml" in w and "nested more than" in w for w in t.warnings), t.warnings
    code, out = _cli("diagnose", job, "-f", "json")
    assert code == 0, out


def test_diff_survives_the_same_hostile_files_on_either_side(tmp_path: Path) -> None:
    bad = _copy(OOM_CASE, tmp_path)
    (bad / "config.toml").write_text("x = " + "[" * 600 + "]" * 600 + "\n")
    (bad / "pyspy.json").write_text(json.dumps([_thread(pid=2**70, line=2**70)]))
    (bad / "deep.json").write_text('[{"pid": 1, "thread_id": 2, "frames": ' + "[" * 1500 + "]" * 1500 + "}]")
    good = tmp_path / "good"
    shutil.copytree(OOM_CASE, good)
    for a, b in ((good, bad), (bad, good)):
        code, out = _cli("diff", a, b, "-f", "json")
        assert code == 0, out


def test_toml_with_a_5000_digit_integer_or_deep_inline_tables_is_still_toml() -> None:
    for text in ("x = " + "1" * 5000 + "\n", "x = " + "{a=" * 600 + "1" + "}" * 600 + "\n"):
        assert code_language("config.toml", text.encode()) == "toml"


def test_a_deep_notebook_is_a_warning_not_the_end() -> None:
    warnings: list[str] = []
    cell = '{"cell_type": "code", "source": "dist.init_process_group(timeout=timedelta(seconds=60))"}'
    text = '{"cells": [' + cell + ', {"cell_type": "code", "source": ' + "[" * 2000 + "]" * 2000 + "}]}"
    assert read_code_text("deep.ipynb", text, "notebook", warnings) == []
    assert warnings and "deep.ipynb" in warnings[0] and "nested more than" in warnings[0]


def test_a_huge_integer_in_code_is_no_setting() -> None:
    assert to_number("1" + "0" * 400, "duration", {}) is None
    assert to_number("timedelta(days=1e308)", "duration", {}) is None
    facts = read_code_text(
        "train.py", "dist.init_process_group('nccl', timeout=timedelta(seconds=1" + "0" * 400 + "))\n", "python", []
    )
    assert [f["number"] for f in facts if f["setting"] == "pg_timeout"] == [None]


# ------------------------------------------------------------------------------------------ py-spy --json


def test_pyspy_json_with_a_pid_and_line_of_2_to_the_70_is_read_with_them_blank(tmp_path: Path) -> None:
    """A real rank's dump with its pid and its innermost frame's line made 2**70: read, with those two blank (the
    rank still comes from the file name); alone (300 bytes) it is read too."""
    job = _copy(PYSPY_JSON_CASE, tmp_path)
    before = _verdict(job)
    threads = json.loads((job / "rank0.json").read_text())
    threads[0]["pid"] = 2**70  # (a thread of the process; the others still name it)
    for th in threads:
        th["frames"][0]["line"] = 2**70
    (job / "rank0.json").write_text(json.dumps(threads))
    assert _verdict(job) == before
    t = build([job])
    said = [w for w in t.warnings if w.startswith("rank0.json")]
    assert said and "pid" in said[0] and "line" in said[0], t.warnings
    mine = t.extra["stacks"].filter(t.extra["stacks"]["source"] == "rank0.json")
    assert mine["pid"].null_count() > 0 and set(mine["rank"]) == {0}
    assert mine.filter(mine["depth"] == mine["depth"].max())["code_line"].null_count() > 0
    (job / "rank0.json").write_text(json.dumps([_thread(pid=2**70, line=2**70)]))
    assert _cli("diagnose", job, "-f", "json")[0] == 0


@pytest.mark.parametrize("where", ["frames", "document", "locals"])
def test_pyspy_json_nested_1500_deep_is_skipped_with_a_warning(tmp_path: Path, where: str) -> None:
    job = _copy(PYSPY_JSON_CASE, tmp_path)
    before = _verdict(job)
    deep = "[" * 1500 + "]" * 1500
    text = {
        "frames": '[{"pid": 1, "thread_id": 2, "frames": ' + deep + "}]",
        "document": '[{"pid": 1, "thread_id": 2, "frames": []}, ' + deep + "]",
        "locals": json.dumps([_thread()]).replace('"locals": null', '"locals": ' + deep),
    }[where]
    (job / "pyspy_deep.json").write_text(text)
    assert _verdict(job) == before
    assert any(w.startswith("pyspy_deep.json") and "nested more than" in w for w in build([job]).warnings)


def test_pyspy_json_values_of_the_wrong_type_are_ignored(tmp_path: Path) -> None:
    job = _copy(PYSPY_JSON_CASE, tmp_path)
    th = _thread(pid=-5, line=True)
    th["frames"][0]["locals"] = 7
    th["thread_id"] = "x"
    (job / "pyspy_odd.json").write_text(json.dumps([th]))
    code, out = _cli("diagnose", job, "-f", "json")
    assert code == 0, out


# ------------------------------------------------------------------------------------------ ranks of a dump


def test_a_locals_rank_past_int32_is_a_warning_and_no_rank(tmp_path: Path) -> None:
    job = _copy(LOCALS_CASE, tmp_path)
    dump = job / "locals" / "17504.txt"
    dump.write_text(dump.read_text().replace("            rank: 1\n", "            rank: 99999999999\n"))
    code, out = _cli("diagnose", job, "-f", "json")
    assert code == 0, out
    t = build([job])
    assert any("17504.txt" in w and "rank" in w for w in t.warnings), t.warnings
    assert 99999999999 not in t.extra["stacks"]["rank"].to_list()


@pytest.mark.parametrize("rank", ["999999999", "1048576", "99999999999", "9" * 5000])
def test_a_section_rank_past_the_rank_bound_is_not_a_rank(tmp_path: Path, rank: str) -> None:
    """The rank bound is `clamp.MAX_RANK` (2^20 - 1), the one every other rank column has: the largest jobs run
    ~10^5 ranks, and a rank means the same in every table. A section header past it still ends the section before
    it (its frames are not given to the rank above)."""
    job = _copy(SECTIONS_CASE, tmp_path)
    dump = next(job.glob("*.txt"))
    dump.write_text(dump.read_text().replace("=== Rank 1:", f"=== Rank {rank}:", 1))
    t = build([job])
    ranks = set(t.extra["stacks"]["rank"].drop_nulls().to_list())
    assert ranks == {0, 2, 3}, ranks
    assert any(dump.name in w and "rank" in w for w in t.warnings), t.warnings
    assert _cli("diagnose", job, "-f", "json")[0] == 0


def test_a_rank_in_a_dump_file_name_past_the_bound_is_no_rank(tmp_path: Path) -> None:
    job = _copy(LOCALS_CASE, tmp_path)
    (job / "native_rank0.txt").rename(job / "native_rank99999999999.txt")
    code, out = _cli("diagnose", job, "-f", "json")
    assert code == 0, out


# ------------------------------------------------------------------------------------------ the bounds themselves


def _depth(brackets: str) -> int:
    """Reference: the deepest a parser recurses (unmatched closings ignored, unmatched openings counted)."""
    level = 0
    deepest = 0
    for ch in brackets:
        level = level + 1 if ch == "(" else max(0, level - 1)
        deepest = max(deepest, level)
    return deepest


@settings(max_examples=400, deadline=None, derandomize=True)
@given(st.text(alphabet="()", max_size=300), st.integers(min_value=1, max_value=80))
def test_nesting_check_agrees_with_a_counter(brackets: str, limit: int) -> None:
    """Never lets past a nesting deeper than the limit; refuses a nesting within it only when brackets are
    unmatched (what no parser accepts)."""
    deep = _depth(brackets) > limit
    said = nesting_exceeds(brackets, limit)
    assert said or not deep
    balanced = min(accumulate(1 if c == "(" else -1 for c in brackets), default=0) >= 0 and brackets.count(
        "("
    ) == brackets.count(")")
    if balanced:
        assert said == deep


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    st.recursive(
        st.none() | st.integers() | st.text(alphabet='[]{}"\\ab', max_size=6),
        lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(alphabet='[]"\\x', max_size=4), c, max_size=3),
        max_leaves=40,
    )
)
def test_json_depth_counts_only_brackets_outside_strings(doc: object) -> None:
    text = json.dumps(doc)
    depth = _depth("".join("(" if c in "[{" else ")" for c in _structure_only(doc)))
    assert json_too_deep(text, 3) == (depth > 3)


def _structure_only(doc: object) -> str:
    if isinstance(doc, list):
        return "[" + "".join(_structure_only(x) for x in doc) + "]"
    if isinstance(doc, dict):
        return "{" + "".join(_structure_only(x) for x in doc.values()) + "}"
    return ""


def test_load_json_keeps_integers_past_int64_as_digits_only() -> None:
    text = json.dumps({"a": 2**63, "b": 2**63 - 1, "c": -(2**63), "d": -(2**63) - 1, "e": 0})
    doc = load_json(text.replace('"e": 0', '"e": ' + "9" * 5000))
    assert doc["b"] == 2**63 - 1 and doc["c"] == -(2**63)
    assert all(isinstance(doc[k], Huge) for k in "ade")
    with pytest.raises(TooDeep):
        load_json("[" * (MAX_NESTING + 1) + "]" * (MAX_NESTING + 1))
    assert load_json("[" * MAX_NESTING + "]" * MAX_NESTING) is not None


def test_the_depth_check_is_linear() -> None:
    """32 MB of brackets of every shape: checked in about the time of a few passes over it."""
    import time

    rng = random.Random(7)
    shapes = [
        "(" * 2_000_000 + ")" * 2_000_000,
        "(()" * 1_000_000 + ")" * 1_000_000,
        "".join(rng.choice("()") for _ in range(400_000)) * 10,
    ]
    for s in shapes:
        start = time.process_time()
        nesting_exceeds(s)
        assert time.process_time() - start < 5.0


@pytest.mark.parametrize("pid", [-5, 24885.0, "24885", True])
def test_a_pyspy_json_pid_that_is_no_count_is_blank_and_the_warning_names_the_file(tmp_path: Path, pid) -> None:
    """A negative, fractional, quoted or boolean pid is no process id: the dump is still read as py-spy's (it had been
    taken for no stack dump at all and dropped without a word), the pid left blank, and a warning names the dump and
    the field."""
    job = _copy(PYSPY_JSON_CASE, tmp_path)
    (job / "pyspy_odd.json").write_text(json.dumps([_thread(pid=pid)]))
    t = build([job])
    said = [w for w in t.warnings if w.startswith("pyspy_odd.json")]
    assert said and "pid" in said[0] and "not a whole number" in said[0], t.warnings
    mine = t.extra["stacks"].filter(t.extra["stacks"]["source"] == "pyspy_odd.json")
    assert not mine.is_empty()  # its threads are still read
