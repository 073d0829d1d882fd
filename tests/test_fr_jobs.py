"""Whole-job diagnosis from flight-recorder dumps alone: the real 16-rank Megatron dumps from NVIDIA's
nvidia-resiliency-ext (read from ../shared, third-party data not copied here) must name exactly the injected
faulty ranks, with the group and collective where they stopped."""

from __future__ import annotations

from pathlib import Path

import pytest

from ncclpm.api import diagnose
from tests.shared import ABSENT, corpus

NVRX = corpus("nvrx-fr")
SETS = {"gpu_error_1st": (12, 14), "lock_gil_1st": (9, 14)}


@pytest.mark.skipif(not NVRX.is_dir(), reason=ABSENT)
@pytest.mark.parametrize(("name", "injected"), SETS.items())
def test_nvrx_dumps_name_exactly_the_injected_ranks(name: str, injected: tuple[int, ...]) -> None:
    d = diagnose(sorted((NVRX / name).glob("_dump_*")))
    assert d.culprit_ranks == injected
    assert d.primary.rule == "FR02"
    fc = d.failing_collective
    assert fc is not None and fc["op"] == "all_to_all" and fc["pg_desc"] == "EXPERT_MODEL_PARALLEL_GROUP"
    assert d.world_size == 16
    assert all(e.file.startswith("_dump_") for e in d.primary.evidence)


@pytest.mark.skipif(not NVRX.is_dir(), reason=ABSENT)
def test_dump_order_does_not_change_the_verdict() -> None:
    files = sorted((NVRX / "lock_gil_1st").glob("_dump_*"))
    assert diagnose(files).culprit_ranks == diagnose(files[::-1]).culprit_ranks == SETS["lock_gil_1st"]


CASES = Path(__file__).resolve().parent / "cases"


@pytest.mark.parametrize("variant", ["size", "skip", "op", "dtype"])
def test_real_gloo_mismatch_from_the_dumps_alone(variant: str) -> None:
    d = diagnose([CASES / f"mismatched_collectives__{variant}" / "input" / "fr"])
    assert str(d.category) == "mismatched_collectives" and d.primary.rule == "FR01"
    # 1-vs-1: the call site that changed decides (size, dtype); otherwise both ranks are named
    assert d.culprit_ranks == {"size": (1,), "dtype": (1,)}.get(variant, (0, 1))
    assert d.failing_collective is not None and d.failing_collective["seq"] == 4


@pytest.mark.parametrize(
    ("variant", "culprit"),
    [("rank0_slow_work__torchrun_3ranks", 0), ("dataloader_hang__no_dl_timeout", 1), ("rank_crash__sigkill", 1)],
)
def test_real_gloo_stalled_rank_from_the_dumps_alone(variant: str, culprit: int) -> None:
    d = diagnose([CASES / variant / "input" / "fr"])
    assert d.culprit_ranks == (culprit,) and d.primary.rule == "FR02"
