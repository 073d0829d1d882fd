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


def _status_log(rank2: tuple[int, int], pg2: str = "0") -> str:
    """Rank 5 timed out in #4411 of the default group; rank 2 printed its own watchdog status on rank 5's signal
    (torch >= 2.3 wording, two spaces before `rank` as torch prints it)."""
    return (
        "[rank5]:[E1015 10:02:01.123456789 ProcessGroupNCCL.cpp:616] [PG ID 0 PG GUID 0(default_pg) Rank 5] Watchdog "
        "caught collective operation timeout: WorkNCCL(SeqNum=4411, OpType=ALLREDUCE, NumelIn=1048576, "
        "NumelOut=1048576, Timeout(ms)=600000) ran for 600032 milliseconds before timing out.\n"
        f"[rank2]:[E1015 10:02:03.123456789 ProcessGroupNCCL.cpp:1515] [PG ID {pg2} PG GUID {pg2}(default_pg) Rank 2] "
        "Received a dump signal due to a collective timeout from  rank 5 and we will try our best to dump the debug "
        f"info. Last enqueued NCCL work: {rank2[0]}, last completed NCCL work: {rank2[1]}.This is most likely caused "
        "by incorrect usages of collectives\n"
    )


@pytest.mark.parametrize(
    ("rank2", "pg2", "idle"),
    [
        ((4410, 4410), "0", True),  # everything it issued done, the last before #4411: it never entered #4411
        ((4411, 4410), "0", False),  # it had enqueued #4411 too: it was in the collective with rank 5
        ((4409, 4408), "0", False),  # still in #4409: stuck in an earlier collective, not idle
        ((17, 17), "3", False),  # another process group counts its own sequence numbers
    ],
)
def test_a_ranks_own_status_shows_it_never_entered_the_timed_out_collective(
    tmp_path: Path, rank2: tuple[int, int], pg2: str, idle: bool
) -> None:
    log = tmp_path / "job.log"
    log.write_text(_status_log(rank2, pg2))
    facts = analyse(build([log]))
    assert (2 in facts.lagging) is idle
    d = diagnose_facts(facts)
    if idle:
        assert d.primary.rule == "ST01" and d.culprit_ranks == (2,), (d.primary.rule, d.culprit_ranks)
        assert "the last #4410" in d.primary.explanation
    else:
        assert 2 not in d.culprit_ranks or d.primary.rule != "ST01"
