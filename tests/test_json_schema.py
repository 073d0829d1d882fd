"""`--format json` is `Diagnosis.to_dict()`: stable keys and types (schema_version 1), checked on jobs of every
shape - a timeout with a failing collective, a crash with flight-recorder dumps, no rank at all, nothing
readable - against the published contract (docs/report.schema.json, with `jsonschema`) and kept in step with
the key list documented in the README."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from ncclpm.api import diagnose
from ncclpm.render import render
from ncclpm.tables.schema import Category

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = json.loads((ROOT / "docs" / "report.schema.json").read_text(encoding="utf-8"))
VALIDATOR = Draft202012Validator(SCHEMA)
CASES = ROOT / "tests" / "cases"
JOBS = {
    "timeout": ROOT / "sample_logs" / "nccl_rank0_sample_generation",
    "crash_with_fr_dumps": CASES / "rank_crash__exception_4ranks" / "input",
    "oom_8_ranks": CASES / "nccl_cuda_oom_rank5" / "input",
    "no_rank": CASES / "init_rendezvous_failure__torchrun_port_in_use" / "input",
    "mismatch": CASES / "mismatched_collectives__op" / "input",
}
OPT_INT, OPT_STR = (int, type(None)), (str, type(None))
TOP: dict[str, Any] = {
    "schema_version": int,
    "job": str,
    "category": str,
    "confidence": (float, int),
    "band": str,
    "culprit_ranks": list,
    "summary": str,
    "failing_collective": (dict, type(None)),
    "world_size": OPT_INT,
    "world_size_declared": bool,
    "findings": list,
    "rivals": list,
    "supporting": list,
    "symptoms": list,
    "cross_check": OPT_STR,
    "stack_tree": (dict, type(None)),
    "stack_check": OPT_STR,
    "noticed": list,
    "decisive_evidence": list,
    "ranks": list,
    "versions": dict,
    "settings": list,
    "warnings": list,
    "not_evaluated": list,
    "sources": int,
    "action": str,
    "action_reason": str,
    "culprit_hosts": list,
    "story": list,
    "ruled_out": list,
    "connected": list,
}
ACTIONS = {"restart", "exclude_node", "fix_code", "fix_config", "raise_timeout", "collect_more", "none"}
COLLECTIVE = {
    "op": OPT_STR,
    "seq": OPT_INT,
    "numel_in": OPT_INT,
    "numel_out": OPT_INT,
    "timeout_ms": OPT_INT,
    "pg": OPT_STR,
}
FINDING = {
    "rule": str,
    "name": str,
    "category": str,
    "confidence": (float, int),
    "band": str,
    "culprit_ranks": list,
    "summary": str,
    "explanation": str,
    "evidence": list,
    "fixes": list,
    "dont": list,
    "verify": list,
    "facts": dict,
}
EVIDENCE = {"file": str, "line": OPT_INT, "text": str, "rank": OPT_INT}
RANK = {
    "rank": int,
    "role": str,
    "timed_out": bool,
    "timeout_op": OPT_STR,
    "timeout_seq": OPT_INT,
    "first_error_ts": OPT_STR,
    "first_error": OPT_STR,
    "last_activity_ts": OPT_STR,
    "exit_code": OPT_INT,
    "signal": OPT_STR,
    "host": OPT_STR,
}
BANDS = {"possible", "likely", "conclusive"}


def _typed(obj: dict, spec: dict[str, Any], where: str) -> None:
    missing = spec.keys() - obj.keys()
    assert not missing, f"{where}: missing {sorted(missing)}"
    for key, types in spec.items():
        assert isinstance(obj[key], types), f"{where}.{key} = {obj[key]!r}"
        assert not (isinstance(obj[key], bool) and bool not in (types if isinstance(types, tuple) else (types,))), key


def _ranks(values: list) -> None:
    assert all(isinstance(r, int) and not isinstance(r, bool) and r >= 0 for r in values)
    assert values == sorted(set(values))


def _check(d: dict) -> None:
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message[:200]}" for e in VALIDATOR.iter_errors(d)]
    assert not errors, errors
    _typed(d, TOP, "diagnosis")
    assert d["schema_version"] == 1
    assert d["category"] in {str(c) for c in Category} and d["band"] in BANDS
    assert 0.0 <= d["confidence"] <= 1.0
    _ranks(d["culprit_ranks"])
    if d["failing_collective"] is not None:
        _typed(d["failing_collective"], COLLECTIVE, "failing_collective")
    assert d["findings"], "the primary finding is always first"
    for i, f in enumerate(d["findings"]):
        _typed(f, FINDING, f"findings[{i}]")
        assert 0.0 <= f["confidence"] <= 1.0 and f["band"] in BANDS
        _ranks(f["culprit_ranks"])
        assert all(isinstance(x, str) for x in f["fixes"] + f["dont"] + f["verify"])
        for j, e in enumerate(f["evidence"]):
            _typed(e, EVIDENCE, f"findings[{i}].evidence[{j}]")
    p = d["findings"][0]
    assert (p["category"], p["confidence"], p["culprit_ranks"]) == (d["category"], d["confidence"], d["culprit_ranks"])
    for e in d["decisive_evidence"]:
        _typed(e, EVIDENCE, "decisive_evidence")
    for r in d["rivals"]:
        assert isinstance(r["rule"], str) and isinstance(r["why_not"], str)
    assert all(isinstance(x, str) for x in d["supporting"] + d["symptoms"] + d["warnings"] + d["not_evaluated"])
    for r in d["ranks"]:
        _typed(r, RANK, f"ranks[{r.get('rank')}]")
        assert r["role"] in {"culprit", "waiting", ""}
    assert [r["rank"] for r in d["ranks"]] == sorted({r["rank"] for r in d["ranks"]})
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in d["versions"].items())
    assert d["action"] in ACTIONS and d["culprit_hosts"] == sorted(set(d["culprit_hosts"]))
    for m in d["story"]:
        assert (
            isinstance(m["text"], str)
            and isinstance(m["approx"], bool)
            and (m["ts"] is None or isinstance(m["ts"], str))
        )


@pytest.mark.parametrize("name", sorted(JOBS))
def test_schema(name: str) -> None:
    d = diagnose([JOBS[name]])
    out = json.loads(render(d, "json"))
    _check(out)
    assert out == json.loads(json.dumps(d.to_dict())), "to_dict() is already plain JSON"


def test_shapes_cover_the_optional_parts() -> None:
    timeout = diagnose([JOBS["timeout"]]).to_dict()
    fc = timeout["failing_collective"]
    assert (fc["op"], fc["seq"], fc["timeout_ms"]) == ("ALLREDUCE", 6764, 600000)
    no_rank = diagnose([JOBS["no_rank"]]).to_dict()
    assert no_rank["ranks"] == [] and no_rank["failing_collective"] is None and no_rank["culprit_ranks"] == []
    crash = diagnose([JOBS["crash_with_fr_dumps"]]).to_dict()
    assert crash["cross_check"] and any(r["role"] == "culprit" for r in crash["ranks"])


def test_nothing_readable_is_still_a_valid_record(tmp_path: Path) -> None:
    junk = tmp_path / "junk.bin"
    junk.write_bytes(bytes(range(256)) * 64)
    d = diagnose([junk]).to_dict()
    _check(d)
    assert d["category"] == "unknown" and d["sources"] == 0 and d["warnings"]


def test_pasted_text_record(tmp_path: Path) -> None:
    text = (JOBS["timeout"] / "slurm-48211.out").read_bytes()
    _check(diagnose(stdin_bytes=text).to_dict())


def test_readme_documents_every_key() -> None:
    readme = ROOT / "README.md"
    if not readme.exists() or "## Reports and triage" not in readme.read_text():
        pytest.skip("README section not written yet")
    section = readme.read_text().split("## Reports and triage", 1)[1]
    documented = set(re.findall(r"`([a-z_]+)`", section))
    d = diagnose([JOBS["timeout"]]).to_dict()
    keys = set(d) | set(COLLECTIVE) | set(FINDING) | set(EVIDENCE)
    assert keys <= documented, sorted(keys - documented)


def test_the_published_schema_is_valid_and_matches_every_golden_report() -> None:
    Draft202012Validator.check_schema(SCHEMA)
    golden = [p for p in sorted((ROOT / "tests" / "golden").glob("*.json")) if not p.name.endswith(".slack.json")]
    assert golden
    for path in golden:
        _check(json.loads(path.read_text(encoding="utf-8")))


def test_the_schema_refuses_what_the_contract_forbids() -> None:
    d = json.loads((ROOT / "tests" / "golden" / "nccl_rank0_sample_generation.json").read_text(encoding="utf-8"))
    for broken in (
        {**d, "band": "certain"},
        {**d, "confidence": 1.5},
        {**d, "new_key_not_in_the_schema": 1},
        {k: v for k, v in d.items() if k != "findings"},
        {**d, "culprit_ranks": [-1]},
    ):
        assert list(VALIDATOR.iter_errors(broken)), broken


def test_the_schema_lists_every_top_level_key_the_record_has() -> None:
    d = diagnose([JOBS["timeout"]]).to_dict()
    assert set(SCHEMA["required"]) == set(d) == set(SCHEMA["properties"])
