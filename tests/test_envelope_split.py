"""A big frame's envelopes are captured by the composition of the envelopes its lines use, the lines where another
may match at a slot's start by the whole one (`extract._head_groups`): the same groups as the whole composition
gives every line, whatever envelopes the sample finds or a previous frame left as a hint."""

from __future__ import annotations

import random
from pathlib import Path

import polars as pl
import pytest

from ncclpm.api import catalog
from ncclpm.ingest import envelopes as env_mod
from ncclpm.ingest.text import extract

ROOT = Path(__file__).resolve().parents[1]


def _lines_of_the_repo() -> list[str]:
    paths = sorted((ROOT / "tests" / "cases").rglob("*.log")) + sorted((ROOT / "sample_logs").rglob("*"))
    out: list[str] = []
    for p in paths:
        if p.is_file() and p.stat().st_size < 4_000_000:
            text = p.read_bytes().decode("utf-8", "replace")
            out += [line for line in text.split("\n") if "\r" not in line]
    return out


@pytest.fixture(scope="module")
def repo_lines() -> list[str]:
    return _lines_of_the_repo()


def _whole(raw: pl.Series) -> pl.DataFrame:
    full = catalog().envelope_regex()
    return extract._captures(raw, f"^(?<_envelope_head>{full[1 : -len(extract._REST)]})")


def _split(raw: pl.Series, monkeypatch) -> pl.DataFrame:
    monkeypatch.setattr(extract, "_SPLIT_ROWS", 0)
    return extract._head_groups(raw, catalog())


def test_every_line_of_the_repo(repo_lines, monkeypatch) -> None:
    raw = pl.Series("raw", repo_lines)
    assert raw.len() > 5_000
    monkeypatch.setattr(extract, "_WIDENED", {})
    assert _split(raw, monkeypatch).equals(_whole(raw))


def test_frames_of_one_shape_with_a_few_others(repo_lines, monkeypatch) -> None:
    """Mostly one file's lines (the sample sees their envelopes), a few lines of any other shape among them (the
    sample may miss them: the whole composition captures them), with and without a wrong hint."""
    rnd = random.Random(28)
    by_file = [lines for lines in _repo_files() if len(lines) >= 50]
    cat = catalog()
    for trial in range(40):
        base = rnd.choice(by_file)
        frame = [rnd.choice(base) for _ in range(rnd.randint(300, 3000))]
        for _ in range(rnd.randint(0, 40)):
            frame.insert(rnd.randrange(len(frame) + 1), rnd.choice(repo_lines))
        raw = pl.Series("raw", frame)
        hints: dict = {}
        if trial % 2:  # a hint of any envelopes, for whatever the sample finds
            keep = frozenset(rnd.sample(range(len(cat.envelopes)), rnd.randint(0, 6)))
            sampled = extract._marked(extract._sample(raw), cat.envelope_marks(), "_used")
            hints[(id(cat), sampled)] = keep
        monkeypatch.setattr(extract, "_WIDENED", hints)
        assert _split(raw, monkeypatch).equals(_whole(raw)), trial


def _repo_files() -> list[list[str]]:
    paths = sorted((ROOT / "tests" / "cases").rglob("*.log")) + sorted((ROOT / "sample_logs").rglob("*"))
    return [
        [line for line in p.read_bytes().decode("utf-8", "replace").split("\n") if "\r" not in line]
        for p in paths
        if p.is_file() and p.stat().st_size < 4_000_000
    ]


def test_others_reachable_marks_a_slot_start_only() -> None:
    """An envelope left out is looked for where a slot may start, not anywhere in the line."""
    cat = catalog()
    index = {e.id: i for i, e in enumerate(cat.envelopes)}
    keep = frozenset({index["nccl.debug_prefix"]})
    others = env_mod.others_reachable(cat.envelopes, keep)
    assert others is not None
    nccl = "node000:10000:10098 [0] NCCL INFO Ring 26 : 63 -> 0 -> 1"  # `[0] ` is horovod's tag, but not at a start
    rank = "[rank3]: step 1 loss 0.5"
    found = pl.Series([nccl, rank]).str.contains(others).to_list()
    assert found == [False, True]
    assert env_mod.others_reachable(cat.envelopes, frozenset(range(len(cat.envelopes)))) is None
    assert env_mod.compose_slots(cat.envelopes) == cat.envelope_regex()[1 : -len("(?<message>.*)$")]
