"""scripts/vocab: the extracted torch/framework vocabulary is well-formed and sorted, and the readers it was made
with (ast templates, .rodata strings, piece joining) do what they say. No network: only the committed data is read."""

from __future__ import annotations

import json
import re
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
VOCAB = ROOT / "scripts" / "vocab"
DATA = VOCAB / "data"
sys.path.insert(0, str(VOCAB))

import cppscan  # noqa: E402
import elfstrings  # noqa: E402
import pyscan  # noqa: E402
from frameworks_extract import PINS  # noqa: E402
from torch_fetch import TORCH_VERSIONS  # noqa: E402


def _rows(name: str) -> list[dict]:
    lines = (DATA / name).read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines]


@pytest.fixture(scope="module")
def torch_rows() -> list[dict]:
    return _rows("torch_messages.jsonl")


@pytest.fixture(scope="module")
def framework_rows() -> list[dict]:
    return _rows("frameworks_messages.jsonl")


def test_torch_messages_well_formed_and_sorted(torch_rows):
    assert len(torch_rows) > 1000
    ids = [r["id"] for r in torch_rows]
    assert len(ids) == len(set(ids))
    for r in torch_rows:
        assert r["kind"] in {"python", "cpp"}
        assert r["scope"] in {"core", "extended"}
        assert r["first"] in TORCH_VERSIONS and r["last"] in TORCH_VERSIONS
        assert TORCH_VERSIONS.index(r["first"]) <= TORCH_VERSIONS.index(r["last"])
        for v in r.get("missing", []):
            assert TORCH_VERSIONS.index(r["first"]) < TORCH_VERSIONS.index(v) < TORCH_VERSIONS.index(r["last"])
        if r["kind"] == "python":
            assert r["template"] and r["call"] and r["sites"] and r["severity"]
        else:
            assert r["text"] and r["libraries"]
            if "pieces" in r:
                assert r["text"] in r["pieces"] and r["shape"] == "{}".join(r["pieces"])
    keys = [(r["kind"], r["component"], r.get("template", r.get("text")), r["id"]) for r in torch_rows]
    assert keys == sorted(keys)
    # One object per line, keys sorted: the file is byte-stable for diffs.
    for line in (DATA / "torch_messages.jsonl").read_text(encoding="utf-8").splitlines()[:50]:
        assert line == json.dumps(json.loads(line), sort_keys=True, ensure_ascii=False)


def test_torch_messages_hold_the_known_wordings(torch_rows):
    def has(component_prefix: str, needle: str) -> bool:
        return any(
            r["component"].startswith(component_prefix) and needle in r.get("template", r.get("text", ""))
            for r in torch_rows
        )

    assert has("c10d.ProcessGroupNCCL", "Watchdog caught collective operation timeout")
    assert has("c10d.ProcessGroupNCCL", "timed out in blocking wait")
    assert has("c10d.socket", "The server socket has failed to listen on any local network address")
    assert has("gloo.transport", "Connection closed by peer")
    assert has("c10.cuda", "CUDA out of memory. Tried to allocate")
    assert has("torchelastic.multiprocessing", "Root Cause (first observed failure)")
    assert has("dataloader", "exited unexpectedly")
    assert has("multiprocessing", "terminated with")


def test_torch_versions_span_the_range(torch_rows):
    firsts = {r["first"] for r in torch_rows}
    lasts = {r["last"] for r in torch_rows}
    assert TORCH_VERSIONS[0] in firsts and TORCH_VERSIONS[-1] in lasts
    wheels = json.loads((DATA / "torch_wheels.json").read_text())
    assert [w["version"] for w in wheels] == list(TORCH_VERSIONS)
    assert all(re.fullmatch(r"[0-9a-f]{64}", w["sha256"]) for w in wheels)


def test_framework_messages_well_formed_and_sorted(framework_rows):
    pins = dict(PINS)
    assert {r["package"] for r in framework_rows} == set(pins)
    ids = [r["id"] for r in framework_rows]
    assert len(ids) == len(set(ids))
    for r in framework_rows:
        assert r["versions"] and all(v in pins[r["package"]] for v in r["versions"])
        assert r["template"] and r["sites"]
    keys = [(r["package"], r["component"], r["template"], r["call"], r["id"]) for r in framework_rows]
    assert keys == sorted(keys)


def _regex(pattern: str) -> re.Pattern:
    return re.compile(pattern.replace("(?<", "(?P<").replace("(?P<=", "(?<=").replace("(?P<!", "(?<!"))


def test_prefixes_examples_match():
    doc = tomllib.loads((DATA / "prefixes.toml").read_text(encoding="utf-8"))
    assert len(doc["prefix"]) >= 10
    ids = [p["id"] for p in doc["prefix"]]
    assert len(ids) == len(set(ids))
    for p in doc["prefix"]:
        assert p["producer"] and p["source"] and p["examples"], p["id"]
        rx = _regex(p["regex"])
        for example in p["examples"]:
            m = rx.match(example)
            assert m, (p["id"], example)
            assert example[m.end() :].strip(), (p["id"], "the prefix leaves the message")
        for counter in p.get("counterexamples", []):
            assert not rx.match(counter), (p["id"], counter)


def test_classification_draft_points_at_extracted_messages(torch_rows):
    doc = tomllib.loads((DATA / "torch_classified.toml").read_text(encoding="utf-8"))
    assert doc["draft"] is True
    categories = set(doc["categories"])
    strengths = {"decisive", "supporting", "benign", "victim"}
    ids = {r["id"] for r in torch_rows}
    seen = set()
    for entry in doc["message"]:
        assert entry["id"] in ids, entry["id"]
        assert entry["id"] not in seen
        seen.add(entry["id"])
        assert entry["category"] in categories, entry
        assert entry["strength"] in strengths, entry
        assert entry["meaning"] and entry["incriminates"] and entry["fix"], entry["id"]
    assert len(seen) >= 80


# --- the readers ------------------------------------------------------------------------------------------------


def test_pyscan_templates():
    source = """
import logging, warnings
logger = logging.getLogger(__name__)

class Agent:
    def run(self, rank, timeout):
        logger.warning("Rank %s timed out after %d s (%s%%)", rank, timeout, 5)
        msg = f"worker {rank} failed"
        msg += " with {x}".format(x=timeout)
        raise RuntimeError(msg)

def f(pids):
    warnings.warn("pids {} exited".format(pids))
    raise ValueError(e)
"""
    found = {(m.call, m.template, m.function) for m in pyscan.scan(source)}
    assert ("log", "Rank {rank} timed out after {timeout} s ({5}%)", "Agent.run") in found
    assert ("exception", "worker {rank} failed with {timeout}", "Agent.run") in found
    assert ("warn", "pids {pids} exited", "f") in found
    assert not any(t == "{e}" for _, t, _ in found)  # nothing literal: no vocabulary


def test_pyscan_keeps_literal_braces_doubled():
    (m,) = pyscan.scan('raise KeyError(f"key {{a}} is {b!r:>4}")')
    assert m.template == "key {{a}} is {b!r:>4}" and m.exception == "KeyError"


def test_elfstrings_reads_nul_terminated_literals_only():
    data = b"\x01\x02Timed out waiting \x00ms\x00\xff\xfeabc\x00" + b"x" * 50 + b"\x03Last error:\n\x00"
    assert [t for _, t in elfstrings.strings(data)] == ["Timed out waiting ", "Last error:\n"]


def test_cppscan_joins_pieces_of_one_message_and_drops_symbols():
    strings = [
        (0, "Socket Timeout"),  # before its unit's path: a unit's literals lie on both sides of it
        (32, "/__w/pytorch/pytorch/torch/csrc/distributed/c10d/TCPStore.cpp"),
        (100, "Timed out waiting "),
        (120, "ms for recv operation"),
        (160, "N4c10d6detail8UvHandleE"),
        (200, "doWait"),
        (220, "Unrelated Sentence here."),
        (300, "/__w/pytorch/pytorch/aten/src/ATen/native/Foo.cpp"),
        (360, "Expected a dense tensor here"),  # between two units of no interest, naming nothing: dropped
        (400, "/__w/pytorch/pytorch/aten/src/ATen/native/Bar.cpp"),
    ]
    pieces = {p.text: p for p in cppscan.scan(strings)}
    assert set(pieces) == {"Socket Timeout", "Timed out waiting ", "ms for recv operation", "Unrelated Sentence here."}
    assert pieces["ms for recv operation"].shape == ("Timed out waiting ", "ms for recv operation")
    assert pieces["Socket Timeout"].component == "c10d.TCPStore"
    assert pieces["Socket Timeout"].file == "torch/csrc/distributed/c10d/TCPStore.cpp"
    assert pieces["Unrelated Sentence here."].shape == ("Unrelated Sentence here.",)


def test_cppscan_keeps_stack_keywords_anywhere():
    strings = [(0, "/x/aten/src/ATen/native/Foo.cpp"), (64, "NCCL communicator was aborted"), (90, "a plain note")]
    assert [p.text for p in cppscan.scan(strings)] == ["NCCL communicator was aborted"]


def test_cppscan_normalises_build_paths_and_assert_lines():
    text = 'x INTERNAL ASSERT FAILED at "/__w/pytorch/pytorch/torch/csrc/distributed/c10d/Work.cpp":12, please report a bug'
    assert cppscan.normalise(text) == (
        'x INTERNAL ASSERT FAILED at "torch/csrc/distributed/c10d/Work.cpp":{line}, please report a bug'
    )
