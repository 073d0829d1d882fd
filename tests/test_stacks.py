"""Stack dumps as sources (real dumps made by tests/stack_hangs/, and real users' dumps from ../shared when present):
every format is read with the right rank and main thread, the merged tree names the odd rank, logs beside the
stacks never make the verdict worse, and hostile dump text neither crashes nor reaches a report unescaped."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from ncclpm.analysis.stack_tree import build_stack_tree
from ncclpm.api import diagnose
from ncclpm.ingest.build import build_tables
from ncclpm.ingest.catalog import load_catalog
from ncclpm.render import render
from ncclpm.sources.discover import collect
from ncclpm.sources.stack_sniff import stack_format
from tests.shared import ABSENT, corpus

ROOT = Path(__file__).resolve().parents[1]
CASES = ROOT / "tests" / "cases"
ISSUES = corpus("real-issues", "cases")


def _stacks(path: Path) -> pl.DataFrame:
    return build_tables(collect([path]), load_catalog()).extra["stacks"]


def _main(stacks: pl.DataFrame) -> pl.DataFrame:
    return stacks.filter(pl.col("main_thread") & pl.col("parent_pid").is_null())


@pytest.mark.parametrize(
    ("case", "fmt", "rank_from"),
    [
        ("stacks__checkpoint_pyspy_only", "py-spy", "file"),
        ("stacks__dataloader_pyspy_json_only", "py-spy-json", "file"),
        ("stacks__collective_faulthandler_only", "faulthandler", "file"),
        ("stacks__checkpoint_gdb_only", "gdb-py", "file"),
        ("stacks__debugserver_stacks_only", "faulthandler", "section"),
        ("stacks__checkpoint_pyspy_with_logs", "py-spy", "pid"),  # torchrun's failure summary maps pid -> rank
        ("stacks__collective_with_logs", "faulthandler", "log"),  # SIGUSR1 output inside the ranks' stderr
    ],
)
def test_each_format_gives_every_rank_one_main_stack(case: str, fmt: str, rank_from: str) -> None:
    main = _main(_stacks(CASES / case / "input")).filter(pl.col("format") == fmt)
    per_rank = main.group_by("rank").agg(pl.col("rank_from").first(), pl.col("func").last())
    assert sorted(per_rank["rank"].to_list()) == [0, 1, 2, 3]
    assert set(per_rank["rank_from"]) == {rank_from}
    outermost = main.filter(pl.col("depth") == 0)["func"].unique().to_list()
    assert outermost == ["<module>"]


def test_native_and_locals_dumps() -> None:
    stacks = _stacks(CASES / "stacks__checkpoint_native_locals" / "input")
    native = stacks.filter(pl.col("native"))
    assert {"clock_nanosleep", "time_sleep"} <= set(native["func"])  # py-spy --native C frames
    locals_ = stacks.filter(pl.col("source").str.starts_with("locals/"))
    assert set(locals_["rank_from"]) == {"locals"}  # the `rank` local of `main`
    assert sorted(locals_["rank"].unique().to_list()) == [0, 1, 2, 3]


def test_gdb_c_frames_and_threads() -> None:
    stacks = _stacks(CASES / "stacks__checkpoint_gdb_only" / "input")
    c_main = stacks.filter((pl.col("format") == "gdb") & pl.col("main_thread"))
    assert "Py_BytesMain" in set(c_main["func"]) and c_main["native"].all()
    others = stacks.filter((pl.col("format") == "gdb") & ~pl.col("main_thread"))
    assert {"pt_gloo_runloop", "gloo_tcp_loop"} <= set(others["thread"])
    assert others["rank"].null_count() == 0  # other threads take the process's rank too


def test_dataloader_workers_belong_to_their_rank() -> None:
    stacks = _stacks(CASES / "stacks__dataloader_with_logs" / "input")
    workers = stacks.filter(pl.col("parent_pid").is_not_null() & pl.col("main_thread"))
    parents = _main(stacks).select(pl.col("pid").alias("parent_pid"), pl.col("rank").alias("parent_rank")).unique()
    joined = workers.join(parents, on="parent_pid")
    assert joined.height == workers.height and (joined["rank"] == joined["parent_rank"]).all()
    stalled = workers.filter(pl.col("user") & (pl.col("func") == "Samples.__getitem__"))
    assert stalled["rank"].unique().to_list() == [1]  # the worker stuck reading the sample is rank 1's
    d = diagnose([CASES / "stacks__dataloader_with_logs" / "input"])
    assert "Its DataLoader worker (pid 25002) is in Samples.__getitem__ (hang_train.py:66)" in d.primary.explanation
    assert any(e.text == "Samples.__getitem__ (hang_train.py:66)" for e in d.primary.evidence)


@pytest.mark.parametrize(
    ("case", "category", "odd", "where"),
    [
        ("stacks__checkpoint_pyspy_only", "slow_rank_work", [2], "torch.save ← save_checkpoint (hang_train.py:53)"),
        (
            "stacks__dataloader_pyspy_json_only",
            "dataloader_hang",
            [1],
            "DataLoader __next__ ← main (hang_train.py:101)",
        ),
        (
            "stacks__collective_faulthandler_only",
            "mismatched_collectives",
            [3],
            "all_gather ← evaluate (hang_train.py:83)",
        ),
    ],
)
def test_folder_of_only_stack_dumps_names_the_odd_rank(case: str, category: str, odd: list[int], where: str) -> None:
    d = diagnose([CASES / case / "input"])
    assert str(d.category) == category and list(d.culprit_ranks) == odd
    assert where in d.summary
    assert d.stack_tree is not None and d.stack_tree["summary"].startswith("ranks ")
    majority = [c for c in d.stack_tree["classes"] if not c["suspect"]]
    assert majority[0]["where"].startswith("all_reduce ← train_step (hang_train.py:76)")


@pytest.mark.parametrize(
    ("alone", "with_logs"),
    [
        ("stacks__checkpoint_pyspy_only", "stacks__checkpoint_pyspy_with_logs"),
        ("stacks__dataloader_pyspy_json_only", "stacks__dataloader_with_logs"),
        ("stacks__collective_faulthandler_only", "stacks__collective_with_logs"),
    ],
)
def test_logs_beside_the_stacks_improve_the_verdict_never_worsen(alone: str, with_logs: str) -> None:
    only = diagnose([CASES / alone / "input"])
    both = diagnose([CASES / with_logs / "input"])
    logs = diagnose([CASES / with_logs / "input"], ignore=["SK01"])  # what the logs alone decide
    assert both.category == only.category and both.culprit_ranks == only.culprit_ranks
    assert both.confidence > only.confidence
    assert both.confidence >= logs.confidence
    assert both.stack_check and both.stack_check.startswith(("Logs and stacks agree", "Stacks overrule", "Only"))


def test_stacks_overrule_logs_that_misread_a_dataloader_hang() -> None:
    d = diagnose([CASES / "stacks__dataloader_with_logs" / "input"])
    logs = diagnose([CASES / "stacks__dataloader_with_logs" / "input"], ignore=["SK01"])
    assert str(logs.category) == "slow_rank_work"  # the logs only see a silent rank 1
    assert str(d.category) == "dataloader_hang"
    assert d.stack_check and d.stack_check.startswith("Stacks overrule the logs")


def test_flight_recorder_frames_make_a_tree_when_no_dump_exists() -> None:
    stacks = _stacks(CASES / "rank0_slow_work__torchrun_3ranks" / "input")
    tree = build_stack_tree(stacks)
    assert tree is not None and tree.source == "fr"
    assert [c.ranks for c in tree.suspects] == [(0,)]  # rank 0 never reached the barrier the others entered
    assert "barrier" in tree.majority.where


def test_tree_in_markdown_html_and_json() -> None:
    d = diagnose([CASES / "stacks__checkpoint_pyspy_only" / "input"])
    md = render(d, "md")
    assert "## Where each rank was stuck" in md and "◀ odd one out" in md
    assert "1 rank [2]  ◀ odd one out  main (hang_train.py:105) → save_checkpoint (hang_train.py:53)" in md
    html = render(d, "html")
    assert 'class="picture stacks"' in html and '<li class="suspect">' in html and "<details open>" in html
    data = json.loads(render(d, "json"))
    assert data["stack_tree"]["processes"] == 4 and data["stack_tree"]["tree"][0]["count"] == 4


def test_sniffing_by_content() -> None:
    assert stack_format(b'Process 12: python train.py\nPython v3.11.7\n\nThread 12 (idle): "MainThread"\n') == "text"
    assert stack_format(b'Thread 0x7FA6E7C01740 (idle): "MainThread"\n    wait (threading.py:302)\n') == "text"
    assert stack_format(b'[\n  {\n    "pid": 1,\n    "thread_id": 2,\n    "frames": []\n  }\n]') == "json"
    fh = b'Current thread 0x00007f (most recent call first):\n  File "t.py", line 3 in f\n'
    assert stack_format(fh) == "text"
    assert stack_format(fh + b"Traceback (most recent call last):\n") is None  # a log holding a dump stays a log
    assert (
        stack_format(b'[New LWP 5]\nwarning: x\n\nThread 1 (Thread 0x7f (LWP 5) "python"):\n#0  0x1 in f ()\n')
        == "text"
    )
    assert stack_format(b"2026-01-01 INFO starting\nThread 1 started\n") is None


def test_a_pyspy_dump_pasted_from_its_middle_is_a_dump() -> None:
    """Its top not copied: frames of a thread first (or py-spy's separator), then the next header."""
    cut = (
        b"    Thread._bootstrap_inner (threading.py:1045)\n    Thread._bootstrap (threading.py:1002)\n\n"
        + b"-" * 80
        + b"\nProcess 25002: /opt/venv/bin/python3 -u train.py\nPython v3.11.7 (/usr/local/bin/python3.11)\n"
        b'Parent Process 24886: /opt/venv/bin/python3 -u train.py\n\nThread 25002 (idle): "MainThread"\n'
        b"    Samples.__getitem__ (train.py:66)\n"
    )
    assert stack_format(cut) == "text"
    assert (
        stack_format(b"-" * 80 + b'\nProcess 25028: python3 train.py\n\nThread 25028 (idle): "MainThread"\n') == "text"
    )
    # a log whose lines merely look like frames at first is not one: a header must follow the frames
    assert stack_format(b"    step (train.py:5)\n2026-01-01 10:00:00 INFO epoch 1\nThread 1 (idle)\n") is None
    assert stack_format(b"-" * 80 + b"\nEpoch 1 done\n") is None


def test_hostile_dump_text_is_read_safely(tmp_path: Path) -> None:
    evil = "<script>alert(1)</script>`"
    dumps = {
        "rank0.txt": 'Process 10: x\n\nThread 10 (idle): "MainThread"\n    all_reduce (torch/distributed/distributed_c10d.py:1)\n'
        "    step (t.py:5)\n    <module> (t.py:9)\n",
        "rank1.txt": f'Process 11: x\n\nThread 11 (idle): "MainThread"\n    {evil} (t.py:7)\n    <module> (t.py:9)\n'
        + "    "
        + "x" * 100_000
        + " (t.py:1\n",  # a huge, cut line
        "rank2.json": '[{"pid": "x", "thread_id": [], "frames": [{"name": 5, "line": "7"}, null, 3]}]',
        "rank3.txt": "Process 13: x\n\nThread 13 (idle)\n" + "    (unbalanced ((( (t.py:x)\n" * 50,
    }
    for name, text in dumps.items():
        (tmp_path / name).write_text(text)
    d = diagnose([tmp_path])
    html = render(d, "html")
    assert "<script>alert" not in html and "&lt;script&gt;" in html
    md = render(d, "md")
    verdict = md.splitlines()[2]
    assert "\\<script>" in verdict and "<script>" not in verdict.replace("\\<", "")  # outside code: backslash-escaped
    tree_block = md.split("```")[1]
    assert "<script>" in tree_block and "`" not in tree_block  # inside the fence: as text, no backtick to break it


def test_real_users_pyspy_dump_of_a_dataloader_hang() -> None:
    case = ISSUES / "d018"
    if not case.exists():
        pytest.skip(f"{ABSENT} (real-issues)")
    d = diagnose([case])
    assert str(d.category) == "dataloader_hang" and list(d.culprit_ranks) == [0]
    assert "__next__ (fairseq/data/iterators.py:648)" in d.summary
    assert d.primary.rule == "SK01"


def test_real_users_gdb_backtrace_of_a_stuck_watchdog() -> None:
    case = ISSUES / "d050"
    if not case.exists():
        pytest.skip(f"{ABSENT} (real-issues)")
    stacks = _stacks(case)
    assert stacks["format"].unique().to_list() == ["gdb"]
    assert stacks["thread"].unique().to_list() == ["9"] or stacks["main_thread"].sum() == 0
    assert {"cudaGetLastError", "c10d::ProcessGroupNCCL::workCleanupLoop"} <= set(stacks["func"])
    d = diagnose([case])  # no main thread: the stuck watchdog thread is read, and the verdict hedges
    assert str(d.category) == "rank_crash" and d.band == "possible" and not d.culprit_ranks
    assert "cudaGetLastError ← c10d::ProcessGroupNCCL::WorkNCCL::finishedGPUExecutionInternal" in d.summary


# Ray Train's hang detector (ray/train/v2/_internal/callbacks/nccl_ras.py, Apache-2.0) writes
# hang_detector/stack_traces/rank_<N>.log: `py-spy dump --native` output, or - when py-spy is missing - these
# lines from its `dump_stack_trace`, run here in a real process whose main thread is blocked.
RAY_FALLBACK = """
import sys, threading, traceback

def wait_for_peers(ev):
    ev.wait()

def dump():
    stderr = "py-spy not installed"
    lines = [f"[py-spy unavailable: {stderr}; Python-only traceback follows]"]
    for thread_id, frame in sys._current_frames().items():
        lines.append(f"\\n# Thread {thread_id}")
        lines.append("".join(traceback.format_stack(frame)))
    print("\\n".join(lines), flush=True)
    done.set()

done = threading.Event()
threading.Timer(0.2, dump).start()
wait_for_peers(done)
"""


def test_ray_train_stack_traces_fallback(tmp_path: Path) -> None:
    import subprocess
    import sys

    script = tmp_path / "train_loop.py"
    script.write_text(RAY_FALLBACK)
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60, check=True)
    folder = tmp_path / "hang_detector" / "stack_traces"
    folder.mkdir(parents=True)
    (folder / "rank_2.log").write_text(out.stdout)
    assert stack_format(out.stdout.encode()) == "text"
    main = _main(_stacks(tmp_path)).sort("depth")
    assert set(main["format"]) == {"traceback"} and set(main["rank"]) == {2} and set(main["rank_from"]) == {"file"}
    assert main["func"].to_list()[0] == "<module>" and "wait_for_peers" in main["func"].to_list()
