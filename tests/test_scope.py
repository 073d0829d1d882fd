"""What the input is (parsers/scope.toml, analysis/scope.py, NA01): a distributed job's log on one line of the stack;
`not_a_training_log` only on positive evidence of something else, or when nothing at all is read."""

from __future__ import annotations

from pathlib import Path

import pytest

from ncclpm.analysis.scope import stack_lines, stack_words
from ncclpm.api import diagnose
from ncclpm.ingest.catalog import load_catalog
from ncclpm.ingest.selftest import parse_one

CATALOG = load_catalog()
WORDS = [(w["producer"], ex, True) for w in stack_words() for ex in w["examples"]] + [
    (w["producer"], ex, False) for w in stack_words() for ex in w.get("counterexamples", [])
]


@pytest.mark.parametrize(
    ("producer", "line", "is_stack"), WORDS, ids=[f"{p[:12]}:{i}" for i, (p, _, _) in enumerate(WORDS)]
)
def test_stack_word_examples(producer: str, line: str, is_stack: bool) -> None:
    """An example is kept by the prefilter (one anchor of its entry is in it) and its message holds the word; a
    counter-example is not a line of the stack (no word, or a line that names it without running it)."""
    parsed, events = parse_one(CATALOG, line)
    hit = not stack_lines(parsed, events).is_empty()
    assert hit is is_stack, f"{producer}: {line!r}"
    if is_stack:
        entry = next(w for w in stack_words() if w["producer"] == producer)
        assert any(a in line for a in entry["anchor"]), "an example holds one of its anchors (the prefilter keeps it)"
        assert set(entry["anchor"]) <= set(CATALOG.anchors)


def _one(tmp_path: Path, text: str, name: str = "out.txt") -> Path:
    (tmp_path / name).write_text(text)
    return tmp_path


@pytest.mark.parametrize(
    "text",
    [
        # a bare NCCL line of an unread wording, a torch native frame, a launcher's command, a serving framework
        "NET/IBext_v8 : Got completion from peer 10.0.0.2<5000> with some status nobody has seen yet\n",
        "(RayWorkerWrapper pid=4009) /usr/lib/python3.9/site-packages/torch/lib/libtorch_cuda.so(+0xe0845a) "
        "[0x7f9a817d745a] c10d::ProcessGroupNCCL::ncclCommWatchdog()\n",
        "[2023-07-20 08:31:05,714] [INFO] [runner.py:555:main] cmd = /usr/bin/python -u -m deepspeed.launcher.launch "
        "--world_info=eyJsb2NhbGhvc3QiOiBbMCwgMV19 --master_addr=127.0.0.1 --master_port=29500 main.py\n",
        "Server error: 500 - The actor died unexpectedly before finishing this task. class_name: RayWorkerVllm\n",
    ],
)
def test_a_line_of_the_stack_is_never_not_a_training_log(tmp_path: Path, text: str) -> None:
    d = diagnose([_one(tmp_path, text)])
    assert str(d.category) != "not_a_training_log", d.summary


def test_a_source_build_is_not_a_training_log_even_when_it_compiles_nccl(tmp_path: Path) -> None:
    build = (
        "  Building wheel for flash-attn (setup.py) ... error\n"
        "[12/340] Building CXX object caffe2/CMakeFiles/torch_cuda.dir/__/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp.o\n"
        "ninja: build stopped: subcommand failed.\n"
        "error: command '/usr/local/cuda/bin/nvcc' failed with exit code 1\n"
        "  ERROR: Failed building wheel for flash-attn\n"
    )
    d = diagnose([_one(tmp_path, build, "pip_install.log")])
    assert str(d.category) == "not_a_training_log" and d.primary.rule == "NA01", d.summary
    assert d.band == "conclusive" and "built from source" in d.summary


def test_a_gpu_stress_test_names_its_own_error_as_the_lead(tmp_path: Path) -> None:
    text = (
        "$ gpu_burn -d 60\nBurning for 60 seconds.\n"
        "terminate called after throwing an instance of 'std::runtime_error'\n"
        "  what():  Error (gpu_burn-drv.cpp:298): system not yet initialized\n"
        "  what():  Error (gpu_burn-drv.cpp:298): OS call failed or operation not supported on this OS\n"
    )
    d = diagnose([_one(tmp_path, text)])
    assert str(d.category) == "not_a_training_log", d.summary
    assert "stress" in d.summary


def test_one_script_run_from_a_shell_is_a_lead_only(tmp_path: Path) -> None:
    text = (
        "(env) user@host:~/proj$ python train.py --epochs 3\n"
        "Epoch 1/3:   0%|          | 0/5148 [00:01<?, ?batch/s]\n"
        "Traceback (most recent call last):\n"
        '  File "/home/user/proj/train.py", line 214, in <module>\n'
        "    train(model)\n"
        "RuntimeError: CUDA error: an illegal memory access was encountered\n"
    )
    d = diagnose([_one(tmp_path, text)])
    assert str(d.category) == "not_a_training_log" and d.band == "possible", d.summary
    # the same script started by torchrun, or printing a rank, is a distributed job's
    d = diagnose([_one(tmp_path, text.replace("$ python train.py", "$ torchrun --nproc_per_node=2 train.py"))])
    assert str(d.category) != "not_a_training_log", d.summary
    d = diagnose([_one(tmp_path, text + "[rank1]: RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1\n")])
    assert str(d.category) != "not_a_training_log", d.summary


def test_a_package_list_naming_the_stack_is_not_a_run(tmp_path: Path) -> None:
    env = "Collecting environment information...\n[pip3] deepspeed==0.10.1\n[pip3] nvidia-nccl-cu12==2.18.1\n"
    build = "Building wheel torch-2.1.0a0+git\n-- Building version 2.1.0a0+git\n['cmake',\n"
    (tmp_path / "collect_env.txt").write_text(env)
    (tmp_path / "build.log").write_text(build)
    d = diagnose([tmp_path])
    assert str(d.category) == "not_a_training_log", d.summary


def test_a_field_cut_by_the_end_of_a_paste_is_not_read() -> None:
    """`OpType=ALLREDUC` at the cut end of a paste is no op (an MC01 mismatch with `ALLREDUCE` would follow)."""
    _, events = parse_one(
        CATALOG,
        "[E ProcessGroupNCCL.cpp:474] [Rank 2] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=1, OpType=ALLREDUC",
    )
    row = events.filter(events["kind"] == "collective_timeout").row(0, named=True)
    assert row["seq"] == 1 and row["op"] is None and row["timeout_ms"] is None
    _, events = parse_one(
        CATALOG, "[rank7]:[E1129 11:56:57.218043510 ProcessGroupNCCL.cpp:616] [Rank 7] Watchdog caught collective oper"
    )
    assert events.filter(events["kind"] == "collective_timeout")["rank"].to_list() == [7]
