"""The analysis stage: every derived fact is worked out once per job (on first read), typed, and read by the rules
and the report from the one `Analysis` the engine makes; a rule never runs another rule's query."""

from __future__ import annotations

import ast
from dataclasses import FrozenInstanceError, replace
from pathlib import Path

import pytest

from ncclpm import precedence
from ncclpm.analysis import Analysis, analyse
from ncclpm.api import build
from ncclpm.engine import diagnose_facts, diagnose_tables
from ncclpm.rules import ALL_RULES

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "sample_logs" / "nccl_rank0_sample_generation"
RULES = ROOT / "src" / "ncclpm" / "rules"


def test_a_fact_is_worked_out_once_per_job_and_afresh_for_other_tables() -> None:
    t = build([SAMPLE])
    facts = analyse(t)
    assert facts.victim_lines is facts.victim_lines and facts.crashes is facts.crashes
    assert facts.victim_ranks == {1, 2, 3} and facts.known_ranks >= {0, 1, 2, 3}
    other = analyse(replace(t, events=t.events.head(0)))
    assert other.victim_lines.is_empty() and not facts.victim_lines.is_empty()
    with pytest.raises(FrozenInstanceError):
        facts.t = t  # type: ignore[misc]


def test_the_timeout_in_force_and_where_it_comes_from_are_one_fact() -> None:
    facts = analyse(build([SAMPLE]))
    assert facts.timeout.ms == facts.timeout.ranked_ms == 600_000 and facts.timeout.observed == (600_000,)
    assert facts.timeout.configured is None and facts.timeout.set_by_code(600_000) is None


def test_the_engine_analyses_once_and_the_rules_read_that_analysis(monkeypatch: pytest.MonkeyPatch) -> None:
    import ncclpm.engine as engine

    made: list[Analysis] = []
    real = engine.analyse
    monkeypatch.setattr(engine, "analyse", lambda t: made.append(real(t)) or made[-1])
    d = diagnose_tables(build([SAMPLE]))
    assert len(made) == 1 and d.primary.rule == "ST01"
    assert diagnose_facts(made[0]).to_dict() == d.to_dict()


def _rule_modules() -> set[str]:
    return {rule.__module__.rsplit(".", 1)[-1] for rule in ALL_RULES}


def test_no_rule_module_imports_another_rule_module() -> None:
    """Rules share facts through the analysis stage and helpers (`rules/_*.py`), never through each other."""
    rule_modules = _rule_modules()
    for path in RULES.glob("*.py"):
        if path.stem == "__init__":  # the registry lists them all
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        others = {m.rsplit(".", 1)[-1] for m in imported if m.startswith("ncclpm.rules.")} & rule_modules
        assert not others - {path.stem}, f"rules/{path.name} imports rule module(s) {sorted(others)}"


def test_who_silences_whom_is_declared_and_applied_by_the_engine(tmp_path: Path) -> None:
    """CR01 silences ST01 (a rank that died explains the wait): the engine drops ST01's finding as if it had not
    fired, also when only ST01 was selected."""
    assert ("CR01", "ST01") in {e[:2] for e in precedence.EXPLAINS}
    log = tmp_path / "console.log"
    log.write_text(
        "[default0]:Traceback (most recent call last):\n"
        '[default0]:  File "train.py", line 9, in <module>\n'
        "[default0]:RuntimeError: boom\n"
        "[default1]:[rank1]:[E204 16:42:57.121219129 ProcessGroupNCCL.cpp:688] [Rank 1] Watchdog caught collective "
        "operation timeout: WorkNCCL(SeqNum=6, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for "
        "600006 milliseconds before timing out.\n"
    )
    t = build([log])
    d = diagnose_tables(t)
    assert d.primary.rule == "CR01" and "ST01" not in {f.rule for f in (*d.symptoms, *d.supporting)}
    assert "ST01" not in {r.finding.rule for r in d.rivals}
    only = diagnose_tables(t, select=["ST01"])
    assert only.primary.rule != "ST01"
