"""Cross-rank FR matching on the real corpora and on synthetic faults."""

from __future__ import annotations

import random
from pathlib import Path

import polars as pl
import pytest

from ncclpm.analysis.fr_match import analyze_fr
from ncclpm.ingest.flight_recorder.load import load_fr_dumps
from tests.shared import ABSENT, corpus
from tests.synth.fr_dumps import FAULTS, culprit_rank, generate

NVRX = corpus("nvrx-fr")
GLOO = corpus("real-gloo")
needs_corpus = pytest.mark.skipif(not GLOO.is_dir() or not NVRX.is_dir(), reason=ABSENT)


def _items(folder: Path, suffix: str | None = None) -> list[tuple[str, bytes]]:
    out = []
    for p in sorted(folder.rglob("*")):
        if not p.is_file() or "fr_trace" in p.parts or p.suffix in (".txt", ".log", ".md", ".meta", ".out"):
            continue
        if suffix is None or p.suffix == suffix:
            out.append((str(p), p.read_bytes()))
    return out


def _analyze(items: list[tuple[str, bytes]]):
    return analyze_fr(load_fr_dumps(items))


@needs_corpus
@pytest.mark.parametrize(
    ("name", "culprits", "group", "seq"),
    [("gpu_error_1st", (12, 14), "74", 20537), ("lock_gil_1st", (9, 14), "72", 45265)],
)
def test_nvrx_injected_ranks(name: str, culprits: tuple[int, ...], group: str, seq: int) -> None:
    a = _analyze(_items(NVRX / name))
    assert a.culprit_ranks == culprits
    assert a.root_group == group and a.culprit_kind == "never_joined"
    root = a.missing.filter(pl.col("group_key") == group)
    assert root["collective_seq_id"].unique().to_list() == [seq]
    assert "EXPERT_MODEL_PARALLEL_GROUP" in a.summary
    facts = a.rank_facts.filter("culprit")
    assert facts["rank"].to_list() == list(culprits)


@needs_corpus
def test_nvrx_gpu_error_second_rank_only_stopped_completing() -> None:
    """NVIDIA's analyzer misses rank 14 here: it joined everything but stopped completing."""
    a = _analyze(_items(NVRX / "gpu_error_1st"))
    assert 14 not in a.missing["missing_rank"].to_list()
    assert 14 in a.stuck["rank"].to_list()
    kinds = dict(a.rank_facts.select("rank", "culprit_kind").drop_nulls().iter_rows())
    assert kinds == {12: "never_joined", 14: "stopped_completing"}


@needs_corpus
@pytest.mark.parametrize(
    ("scenario", "rank", "seq"),
    [
        ("rank0_slow_work/torchrun_3ranks", 0, 10),
        ("rank0_slow_work/torchrun_3ranks_fr_env", 0, 10),
        ("dataloader_hang/dl_timeout", 1, 16),
        ("dataloader_hang/no_dl_timeout", 1, 16),
        ("dataloader_hang/worker_sigkill", 1, 6),
        ("rank_crash/exception_4ranks", 3, 10),
        ("rank_crash/sigkill", 1, 10),
        ("rank_crash/sigabrt", 1, 10),
        ("rank_crash/os_exit", 1, 10),
    ],
)
@pytest.mark.parametrize("fmt", ["pickle", "json"])
def test_gloo_never_joined(scenario: str, rank: int, seq: int, fmt: str) -> None:
    folder = GLOO / scenario
    if not folder.is_dir():
        pytest.skip("variant absent")
    items = _items(folder / "fr", ".json" if fmt == "json" else "")
    if fmt == "json":
        items = [(n, b) for n, b in items if n.endswith(".json")]
    a = _analyze(items)
    if fmt == "json" and rank not in a.rank_facts.filter("dump_present")["rank"].to_list():
        pytest.skip("the faulty rank wrote no JSON dump")
    assert a.culprit_ranks == (rank,) and a.culprit_kind == "never_joined"
    row = a.missing.row(0, named=True)
    assert (row["missing_rank"], row["collective_seq_id"]) == (rank, seq)


@needs_corpus
@pytest.mark.parametrize(("variant", "kind"), [("size", "size"), ("skip", "size"), ("op", "op"), ("dtype", "dtype")])
@pytest.mark.parametrize("subset", ["fr/combined", "fr", "."])
def test_gloo_mismatch_two_ranks(variant: str, kind: str, subset: str) -> None:
    a = _analyze(_items(GLOO / "mismatched_collectives" / variant / subset))
    assert a.culprit_kind == "mismatch"
    m = a.mismatches.row(0, named=True)
    assert (m["kind"], m["collective_seq_id"]) == (kind, 4)
    assert set(a.culprit_ranks) == {0, 1} and not m["decided"]  # 1 vs 1: undecidable, both reported


@needs_corpus
@pytest.mark.parametrize("variant", ["size_debug_detail", "skip_debug_detail", "op_debug_detail", "dtype_debug_detail"])
def test_gloo_debug_detail_no_nonsense(variant: str) -> None:
    a = _analyze(_items(GLOO / "mismatched_collectives" / variant / "fr"))
    assert a.culprit_ranks == () or set(a.culprit_ranks) <= {0, 1}
    assert any("pg_id" in n for n in a.notes)


@pytest.mark.parametrize("n_ranks", [16, 64])
@pytest.mark.parametrize("fault", FAULTS)
def test_synthetic_faults(fault: str, n_ranks: int) -> None:
    a = _analyze(list(generate(n_ranks, 200, 3, fault, seed=n_ranks).items()))
    assert a.culprit_ranks == (culprit_rank(n_ranks, fault),)
    expected_kind = "mismatch" if "mismatch" in fault or fault == "skip" else fault
    assert a.culprit_kind == expected_kind
    if fault == "skip":
        assert a.mismatches["kind"].to_list() == ["size"]


def test_synthetic_clean_and_json() -> None:
    assert _analyze(list(generate(16, 200, 3, None).items())).culprit_ranks == ()
    a = _analyze(list(generate(16, 200, 3, "never_joined", fmt="json").items()))
    assert a.culprit_ranks == (culprit_rank(16, "never_joined"),)


def test_synthetic_culprit_frames() -> None:
    a = _analyze(list(generate(16, 100, 2, "never_joined").items()))
    assert a.culprit_frames["summary"].str.contains("save_checkpoint").any()


@pytest.mark.parametrize("fault", ["size_mismatch", "stopped_completing", "never_joined"])
def test_order_independent(fault: str) -> None:
    items = list(generate(16, 100, 3, fault, seed=5).items())
    base = _analyze(items)
    random.Random(1).shuffle(items)
    again = _analyze(items)
    assert (again.culprit_ranks, again.culprit_kind, again.root_group, again.summary) == (
        base.culprit_ranks,
        base.culprit_kind,
        base.root_group,
        base.summary,
    )
    assert again.missing.equals(base.missing) and again.mismatches.equals(base.mismatches)


def test_two_rank_tie_order_independent() -> None:
    items = list(generate(2, 50, 1, "size_mismatch").items())
    a, b = _analyze(items), _analyze(items[::-1])
    assert a.culprit_ranks == b.culprit_ranks == (0, 1)


def test_missing_dump_noted_not_blamed() -> None:
    items = [(n, b) for n, b in generate(16, 100, 2, "never_joined").items() if not n.endswith("_10")]
    a = _analyze(items)
    assert 10 not in a.culprit_ranks
    assert any("10" in n and "missing" in n for n in a.notes)


def test_2000_entries() -> None:
    a = _analyze(list(generate(16, 2000, 3, "stopped_completing").items()))
    assert a.culprit_ranks == (culprit_rank(16, "stopped_completing"),)


def _last_rows_reference(e: pl.DataFrame) -> dict[int, tuple[int, int]]:
    """rank -> (entries, index of its last row: the highest record_id, nulls lowest, the later row on ties)."""
    out: dict[int, tuple[int, int]] = {}
    for i, (rank, rid) in enumerate(e.select("rank", "record_id").iter_rows()):
        n, best, at = out.get(rank, (0, None, -1)) if rank in out else (0, None, -1)
        key = -(2**63) if rid is None else rid
        if best is None or key >= best:
            best, at = key, i
        out[rank] = (n + 1, best, at)
    return {r: (n, at) for r, (n, _, at) in out.items()}


@pytest.mark.parametrize(
    "order", ["ascending", "ascending_ties", "null_last", "shuffled", "ties_and_nulls", "rank_split"]
)
def test_last_rows_any_record_order(order: str) -> None:
    """The runs of a table in rank order whose record ids never go down within a rank, and the slice-by-slice
    group_by of any other table, give the row a stable sort by record_id would."""
    from ncclpm.analysis.fr_match import _last_rows

    rng = random.Random(order)
    ranks, ids = [], []
    for rank in range(40):
        n = rng.randint(1, 90)
        rid = list(range(n))
        if order == "shuffled" or (order == "ties_and_nulls" and rank % 3):
            rng.shuffle(rid)
        if order == "ties_and_nulls":
            rid = [None if rng.random() < 0.2 else v // 3 for v in rid]
        if order == "ascending_ties":
            rid = [v // 3 for v in rid]
        if order == "null_last":  # the highest id is not the last row's (nulls are lowest)
            rid = [*rid[:-1], None]
        ranks += [rank] * n
        ids += rid
    if order == "rank_split":  # a rank's rows in two runs (a second dump of the rank)
        ranks += [3] * 5
        ids += [1, 2, 0, 2, 1]
    e = pl.DataFrame({"rank": ranks, "record_id": ids}, schema={"rank": pl.Int32, "record_id": pl.Int32})
    want = _last_rows_reference(e)
    for step in (7, 64, 65536):
        got = {r: (n, i) for r, n, i in _last_rows(e, step).select("rank", "n_entries", "_i").iter_rows()}
        assert got == want, step
