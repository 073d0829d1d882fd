"""A collector's tag on every line changes no verdict: every text-only case of tests/cases, its log files tagged
the way pdsh (DeepSpeed's multi-node runner), SkyPilot, docker compose, `kubectl logs --prefix` or journald tag them, gets
the category and culprits it gets untagged. Each file gets its own node's tag, as each node's output would; code
and configuration are left as they are (a collector tags a process's output, not a snapshot), and so are stack
dumps except through pdsh (`pdsh -w nodes py-spy dump --pid ...` tags the dump's lines too)."""

from __future__ import annotations

import tomllib
from collections.abc import Callable
from pathlib import Path

import pytest

from ncclpm.api import diagnose
from ncclpm.sources.code import code_language
from ncclpm.sources.stack_sniff import looks_like_stack_dump
from tests.test_wrap_invariance import CASES, _text_cases

TAGS: dict[str, Callable[[int], str]] = {
    "pdsh": lambda node: f"gpu-node-{node}: ",
    "skypilot": lambda node: f"(worker{node}, rank={node}, pid={2300 + node}, ip=10.0.0.{node}) ",
    "compose": lambda node: f"trainer-{node}  | ",
    "kubectl": lambda node: f"[pod/train-worker-{node}/pytorch] ",
    "journald": lambda node: f"May 01 12:00:0{node % 10} gpu-node-{node} python[{4100 + node}]: ",
}


TAGS_DUMPS = {"pdsh"}


def _tagged(src: Path, dst: Path, tag: Callable[[int], str], dumps: bool) -> None:
    for node, p in enumerate(sorted(q for q in src.rglob("*") if q.is_file())):
        out = dst / p.relative_to(src)
        out.parent.mkdir(parents=True, exist_ok=True)
        data = p.read_bytes()
        dump = looks_like_stack_dump(p.name, data[:65536])
        if code_language(p.name, data[:65536], len(data) > 65536) or (dump and not dumps):
            out.write_bytes(data)
            continue
        prefix = tag(node)
        lines = data.decode("utf-8").split("\n")
        out.write_text("\n".join(prefix + line if line else line for line in lines), encoding="utf-8")


def _tag_cases() -> list[str]:
    """The text cases no collector has tagged yet: a case's `collected_by` (expected.toml) says its lines already
    carry one node-level collector's tag (pdsh's host, kubectl's pod), and no collector tags another's output."""
    return [n for n in _text_cases() if "collected_by" not in tomllib.loads((CASES / n / "expected.toml").read_text())]


@pytest.mark.parametrize("name", _tag_cases())
def test_a_collector_tag_keeps_the_verdict(name: str, tmp_path: Path) -> None:
    src = CASES / name / "input"
    want = diagnose([src])
    for which, tag in TAGS.items():
        dst = tmp_path / which
        _tagged(src, dst, tag, which in TAGS_DUMPS)
        got = diagnose([dst])
        assert (got.category, got.culprit_ranks) == (want.category, want.culprit_ranks), f"tagged by {which}"
