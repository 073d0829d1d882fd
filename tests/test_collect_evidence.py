"""Every piece of evidence a report asks the user to collect is something ncclpm reads.

The texts are every string of every rule module (fixes, explanations, the "Collect ..." list of IN01, the
docstrings `ncclpm explain` prints). Each tool or setting named in backticks there is either an evidence producer -
then a real sample of what it produces must be read into the table that holds it - or an action that produces no
file for ncclpm (raising a limit, checking a node), listed below with the reason. A new tool in a rule's text that
is in neither list fails this test: either teach ncclpm to read its output or do not ask for it.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from pathlib import Path

import polars as pl
import pytest

from ncclpm.ingest.build import build_tables
from ncclpm.ingest.catalog import load_catalog
from ncclpm.sources.discover import collect
from ncclpm.tables import Tables

ROOT = Path(__file__).resolve().parents[1]
CASES = ROOT / "tests" / "cases"
RULES = ROOT / "src" / "ncclpm" / "rules"
TOOLS = re.compile(
    r"\b(py-spy|gdb|faulthandler|kill -USR1|NCCL_DEBUG_FILE|NCCL_DEBUG|TORCH_NCCL_TRACE_BUFFER_SIZE|"
    r"TORCH_NCCL_DUMP_ON_TIMEOUT|TORCH_FR_DUMP_TEMP_FILE|dmesg|journalctl|nvidia-smi|ncclras|--log-dir|"
    r"TORCH_DISTRIBUTED_DEBUG|TORCH_CPP_LOG_LEVEL|TORCH_SHOW_CPP_STACKTRACES|ulimit|df -h|torch\.__version__|"
    r"nccl\.version)"
)


def _stack_formats(t: Tables) -> set[str]:
    return set(t.extra["stacks"]["format"].unique().to_list())


def _kinds(t: Tables) -> set[str]:
    return set(t.events["kind"].unique().to_list())


# tool -> (a job holding real output of it, what reading that job must give)
PRODUCERS: dict[str, tuple[Path, Callable[[Tables], bool]]] = {
    "py-spy": (CASES / "stacks__checkpoint_pyspy_only" / "input", lambda t: "py-spy" in _stack_formats(t)),
    "faulthandler": (
        CASES / "stacks__collective_faulthandler_only" / "input",
        lambda t: "faulthandler" in _stack_formats(t),
    ),
    "kill -USR1": (  # faulthandler's output inside each rank's stderr
        CASES / "stacks__collective_with_logs" / "input",
        lambda t: not t.extra["stacks"].filter(pl.col("rank_from") == "log").is_empty(),
    ),
    "gdb": (CASES / "stacks__checkpoint_gdb_only" / "input", lambda t: {"gdb", "gdb-py"} <= _stack_formats(t)),
    "NCCL_DEBUG": (ROOT / "sample_logs" / "nccl_allgather_timeout_4gpu", lambda t: "nccl_comm_init" in _kinds(t)),
    "NCCL_DEBUG_FILE": (CASES / "issue4_ib_error_nccl230_two_hosts" / "input", lambda t: "nccl_warn" in _kinds(t)),
    "TORCH_NCCL_TRACE_BUFFER_SIZE": (
        CASES / "rank0_slow_work__torchrun_3ranks" / "input",
        lambda t: t.has("fr_entries"),
    ),
    "TORCH_NCCL_DUMP_ON_TIMEOUT": (CASES / "rank0_slow_work__torchrun_3ranks" / "input", lambda t: t.has("fr_entries")),
    "TORCH_FR_DUMP_TEMP_FILE": (CASES / "rank0_slow_work__torchrun_3ranks" / "input", lambda t: t.has("fr_entries")),
    "TORCH_DISTRIBUTED_DEBUG": (
        CASES / "mismatched_collectives__op_debug_detail" / "input",
        lambda t: "mismatch_detected" in _kinds(t),
    ),
    "dmesg": (CASES / "issue4_xid79_kernlog" / "input", lambda t: "xid" in _kinds(t)),
    # `journalctl -k` prints the kernel log in the same syslog form as kern.log
    "journalctl": (CASES / "issue4_xid79_kernlog" / "input", lambda t: "xid" in _kinds(t)),
    "nvidia-smi": (ROOT / "sample_logs" / "nccl_nvml_unknown_error", lambda t: "nvml_error" in _kinds(t)),
    "torch.__version__": (
        CASES / "issue4_nccl_version_differs_by_host" / "input",
        lambda t: "torch_version" in _kinds(t),
    ),
    "nccl.version": (CASES / "issue4_nccl_version_differs_by_host" / "input", lambda t: "nccl_version" in _kinds(t)),
}
NOT_EVIDENCE = {
    "ulimit": "raising the file-descriptor limit is a fix, not a file to collect",
    "df -h": "checking /dev/shm's size on the node is a manual check",
}


def _rule_texts() -> list[tuple[str, str]]:
    out = []
    for path in sorted(RULES.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                out += [(path.name, span) for span in re.findall(r"`([^`]+)`", node.value)]
    return out


def _tools_named() -> dict[str, set[str]]:
    named: dict[str, set[str]] = {}
    for module, span in _rule_texts():
        for m in TOOLS.finditer(span):
            named.setdefault(m.group(1), set()).add(module)
    return named


def test_every_tool_the_reports_name_is_read_or_explained() -> None:
    named = _tools_named()
    assert "py-spy" in named and "TORCH_NCCL_TRACE_BUFFER_SIZE" in named  # the scan itself works
    unknown = {tool: sorted(mods) for tool, mods in named.items() if tool not in PRODUCERS and tool not in NOT_EVIDENCE}
    assert not unknown, f"reports ask for evidence ncclpm does not read: {unknown}"


@pytest.mark.parametrize("tool", sorted(PRODUCERS))
def test_collected_evidence_is_read(tool: str) -> None:
    job, check = PRODUCERS[tool]
    if not job.exists():
        pytest.skip(f"{job} not found")
    t = build_tables(collect([job]), load_catalog())
    assert check(t), f"the output of {tool} in {job.relative_to(ROOT)} was not read into its table"


def test_insufficient_evidence_asks_only_for_what_is_missing() -> None:
    from ncclpm.api import diagnose

    stacks_only = diagnose([CASES / "stacks__checkpoint_pyspy_only" / "input"], select=["IN01"])
    asked = " ".join(stacks_only.primary.facts.get("missing_evidence", []))
    assert "stack dumps" not in asked and "flight-recorder dumps" in asked
    nothing = diagnose([ROOT / "sample_logs" / "nccl_rank0_sample_generation"], select=["IN01"])
    assert "py-spy dump --pid" in " ".join(nothing.primary.facts["missing_evidence"])
