"""The frameworks' messages, declared (issue 29): every message vLLM, SGLang, verl, OpenRLHF and Ray raise or log at
error level (scripts/vocab/data/frameworks_messages.jsonl) is read by a declared entry of the catalogs or declared
benign / out of scope / part of a line with a reason (parsers/frameworks/declared.toml), in the components where a
distributed failure is worded without exception and at least GOAL of them in all; the frameworks' own failures, as
their logs print them, alone or in a short excerpt, get the category the message implies at an honest confidence
and are never `not_a_training_log`."""

from __future__ import annotations

import sys
from functools import cache
from pathlib import Path

import pytest

from ncclpm.api import diagnose
from ncclpm.ingest.catalog import load_catalog
from ncclpm.model import Category

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts" / "vocab"))

import frameworks_coverage as fc  # noqa: E402
import torch_coverage as tc  # noqa: E402

CONCLUSIVE = 0.85


@cache
def coverage() -> tc.Coverage:
    return fc.coverage()


def test_every_raised_message_of_the_gated_components_is_read_or_declared() -> None:
    """The gate: a message raised or logged at error level by vllm.distributed, vLLM's engine and executor,
    SGLang's distributed code, managers and entry points, ray.util.collective, Ray's exceptions and channels, verl's
    rollouts and checkpoint engines, OpenRLHF - that no entry reads and no group declares - fails here
    (`python scripts/vocab/frameworks_coverage.py --errors --unread` lists them)."""
    gaps = [
        (v.row["id"], v.row["template"][:60])
        for v in coverage().verdicts
        if v.status == "undeclared" and fc.gated(v.row)
    ]
    assert gaps == [], f"{len(gaps)} raised framework messages neither read nor declared: {gaps[:10]}"


def test_the_raised_messages_are_accounted_for_above_the_goal() -> None:
    errors = [v for v in coverage().verdicts if fc.raised(v.row)]
    done = sum(v.status != "undeclared" for v in errors)
    assert len(errors) > 2000 and done / len(errors) >= fc.GOAL
    read = sum(v.status in ("read", "part_of") for v in errors)
    assert read >= 330  # the frameworks' own failures, torch's and NCCL's words in them, the usage families


def test_declarations_are_live_and_point_at_entries() -> None:
    """Every group takes at least one message (a group nothing matches is stale) that no entry reads; part_of names a
    declared entry (checked when the coverage is computed)."""
    groups = fc.groups()
    taken = {v.by for v in coverage().verdicts if v.status not in ("read", "undeclared")}
    ids = {p.id for p in load_catalog().patterns if p.declared is not None}
    dead = [g.reason[:60] for g in groups if ({"part_of": g.part_of}.get(g.status, g.reason)) not in taken]
    assert dead == []
    assert {g.part_of for g in groups if g.part_of} <= ids


def test_a_group_needs_a_reason_and_a_way_to_take_messages(tmp_path: Path) -> None:
    bad = tmp_path / "declared.toml"
    bad.write_text('[[group]]\nstatus = "out_of_scope"\nreason = "x"\n', encoding="utf-8")
    with pytest.raises(ValueError, match="takes messages"):
        tc.groups(bad)
    bad.write_text('[[group]]\nstatus = "benign"\nmatch = ["x"]\n', encoding="utf-8")
    with pytest.raises(ValueError, match="reason"):
        tc.groups(bad)


def test_levels_and_exceptions_narrow_a_group() -> None:
    g = tc.Group("benign", "healthy", components=("vllm.",), levels=("info", "debug"))
    row = {"id": "x", "component": "vllm.v1.engine", "template": "t", "severity": ["info"]}
    assert g.takes(row) and not g.takes(row | {"severity": ["error"]})
    assert not g.takes(row | {"component": "sglang.srt"})
    e = tc.Group("out_of_scope", "checks", components=("vllm.",), exceptions=("ValueError",))
    assert e.takes(row | {"exception": ["ValueError"]}) and not e.takes(row | {"exception": ["RuntimeError"]})


def test_instances_write_a_loggers_percent_arguments() -> None:
    row = {"template": "No available shared memory broadcast block found in %d seconds.", "call": "constant"}
    assert fc.instance(row) == "No available shared memory broadcast block found in 60 seconds."
    assert fc.instance({"template": "%m-%d %H:%M:%S", "call": "constant"}) == "%m-%d %H:%M:%S"


# --- the frameworks' failures as their logs print them ---------------------------------------------------------------

# (what a user pastes, the category it implies, whether a lone excerpt may be conclusive)
EXCERPTS = [
    (  # vLLM P/D disaggregation: the decode engine's NIXL connector cannot reach the prefill engine
        "(EngineCore_DP0 pid=4410) ERROR 11-28 10:05:31 [nixl_connector.py:1111] Handshake failed for request "
        "cmpl-7f3a2b0c, marking blocks as invalid",
        Category.NETWORK_TRANSPORT,
        False,
    ),
    (
        "(Worker_TP1 pid=2817) ERROR 11-28 10:05:00 [mooncake_connector.py:2611] Failed to connect to bootstrap "
        "server 10.0.0.5:8998 (ConnectError): All connection attempts failed",
        Category.NETWORK_TRANSPORT,
        False,
    ),
    (
        "(EngineCore_DP0 pid=4410) ERROR 11-28 10:05:00 [core.py:1779] RuntimeError: Executor failed.",
        Category.RANK_CRASH,
        False,
    ),
    (
        "[2025-01-01 12:03:10] Scheduler or DataParallelController 4413 terminated with -9",
        Category.RANK_CRASH,
        False,
    ),
    (
        "(SGLangEngine pid=5521, ip=10.0.0.3) [2025-06-01 10:10:00 TP0] Failed to initialize custom process group: "
        "Connection to the weight-sync master 10.0.0.2:40123 was not established.",
        Category.INIT_RENDEZVOUS,
        True,
    ),
    (
        "RuntimeError: Configuration mismatch detected for engine 2. All DP workers must have identical configurations"
        " for parameters that affect collective communication (e.g., enable_eplb, eplb_config.log_balancedness). "
        "Worker hash: 3f2a9c01, Expected hash: 91bc7e44. Please ensure all workers are started with the same "
        "command-line arguments.",
        Category.CONFIG_VERSION,
        True,
    ),
    (
        "RuntimeError: Error happened when batch testing peer-to-peer access from [0, 0, 1, 1] to [0, 1, 0, 1]:",
        Category.SHM_P2P_TOPOLOGY,
        True,
    ),
    (
        "[2025-01-01 12:00:01 TP0] RuntimeError: Prefill out of memory. Try to lower your batch size.",
        Category.CUDA_OOM,
        True,
    ),
    ("ConnectionError: Failed to connect to Ray cluster at 10.0.0.2:6379", Category.INIT_RENDEZVOUS, True),
    (  # SGLang's PD disaggregation: the decode side's transfer from the prefill engine failed
        "[2025-06-01 10:00:00 TP3] Decode transfer failed for request rank=3 decode_req.req.rid='a1b2c3' "
        "decode_req.req.bootstrap_room=81723 with exception KVTransferError(bootstrap_room=81723): Request 81723 "
        "timed out after 30.0s in KVPoll.WaitingForInput",
        Category.NETWORK_TRANSPORT,
        False,
    ),
]


@pytest.mark.parametrize(("text", "category", "conclusive"), EXCERPTS, ids=[e[0][:50] for e in EXCERPTS])
def test_a_framework_failure_gets_its_category(text: str, category: Category, conclusive: bool) -> None:
    d = diagnose(stdin_bytes=(text + "\n").encode())
    assert d.category == category, d.summary
    assert conclusive or d.confidence < CONCLUSIVE


# the waiting side: a framework that gave up on its peers names no cause and no culprit of its own
WAITS = [
    "TimeoutError: Timed out waiting for engine core processes to start. This is often caused by slow weight loading "
    "for large models. Waited 600s (configured by VLLM_ENGINE_READY_TIMEOUT_S).",
    "[2025-01-01 12:00:00 TP2] ValueError: TP rank 2 could finish the model loading, but there are other ranks that "
    "didn't finish loading. It is likely due to unexpected failures (e.g., OOM) or a slow node.",
    "ray.exceptions.RayChannelError: System error: NCCL group has been destroyed during allreduce operation. There "
    "may be a dtype mismatch between input tensors from different ranks.",
]


@pytest.mark.parametrize("text", WAITS, ids=[w[:40] for w in WAITS])
def test_a_framework_wait_is_no_cause_and_not_not_a_training_log(text: str) -> None:
    d = diagnose(stdin_bytes=(text + "\n").encode())
    assert d.category not in (Category.NOT_A_TRAINING_LOG,) and d.confidence < CONCLUSIVE
    assert not d.culprit_ranks or d.category != Category.UNKNOWN
