"""docs/VOCABULARY.md's frameworks section (issue 29, "coverage, visible"): every message of the frameworks'
extraction (scripts/vocab/data/frameworks_messages.jsonl) is counted once, as read by the declared entry that reads
its line (with that entry's category), as benign / out of scope / part of a line by the group of
parsers/frameworks/declared.toml that takes it (with its reason), or as missing - nothing is called benign or out of
scope that no entry or group says."""

from __future__ import annotations

import json
from collections import Counter
from types import ModuleType

from tests import nccl_vocab_instances as nvi


def doc() -> ModuleType:
    return nvi.vocabulary_doc()


def rows() -> list[dict]:
    return [json.loads(x) for x in doc().FRAMEWORKS.read_text(encoding="utf-8").splitlines()]


def test_every_extracted_message_is_counted_once() -> None:
    section = doc().frameworks()
    assert section.total("total") == len(rows()) and not section.goal
    cov = doc()._frameworks_coverage().coverage()
    statuses = Counter(v.status for v in cov.verdicts)
    # out of scope only where a group of parsers/frameworks/declared.toml says so, with its reason
    assert section.total("out_of_scope") == statuses["out_of_scope"] > 0
    read = section.total("cause") + section.total("no_cause") + section.total("benign")
    _, readers, missing = doc().framework_counts(rows())
    assert read == sum(readers.values()) + statuses["benign"]
    assert section.total("missing") == sum(missing.values()) == statuses["undeclared"]


def test_a_message_is_counted_by_the_entry_that_reads_its_line() -> None:
    """vLLM's own entries: a benign notice, a worker's failure; a message no entry reads and no group takes is
    missing."""
    picked = {
        "Custom allreduce is disabled because this process group spans across nodes.": "benign",
        "EngineCore failed to start.": "no_cause",  # vllm.worker_raised: the traceback after it names the cause
    }
    chosen = [r for r in rows() if r["template"] in picked and r["package"] == "vllm"]
    assert {r["template"] for r in chosen} == set(picked)
    for r in chosen:
        areas, _, _ = doc().framework_counts([r])
        (area,) = areas
        assert getattr(area, picked[r["template"]]) == 1, (r["template"], area)
    # a KV connector's per-request error: out of scope by its group; a warning no group takes: missing
    logged = {"id": "x", "package": "vllm", "component": "vllm.distributed.kv_transfer", "template": "NIXL is sad"}
    areas, _, missing = doc().framework_counts([logged | {"call": "log", "severity": ["error"]}])
    assert areas[0].out_of_scope == 1 and missing == {}
    unread = logged | {"package": "verl", "component": "verl.utils", "call": "log", "severity": ["warning"]}
    areas, _, missing = doc().framework_counts([unread])
    assert areas[0].missing == 1 and missing == {"verl.utils": 1}


def test_the_section_is_in_the_generated_document() -> None:
    text = doc().DOC.read_text(encoding="utf-8")
    assert f"## Frameworks on torch (vLLM, SGLang, verl, OpenRLHF, Ray) - {len(rows())} messages" in text
