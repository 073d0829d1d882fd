"""Same torch, other programs (issue 29, points 5-6): vLLM's and SGLang's process prefixes carry the worker's rank
and pid, the frameworks' own distributed messages get their readings, torchelastic's store finding its own port
taken is not a store the others cannot reach, NCCL 2.32's ATTN level is read, and a log of these programs is never
`not_a_training_log`. The prefix shapes are the ones the frameworks' sources print (scripts/vocab/data/prefixes.toml
cites the code); the lines are written as those sources format them."""

from __future__ import annotations

from functools import cache

import pytest

from ncclpm.api import diagnose
from ncclpm.ingest.catalog import load_catalog
from ncclpm.ingest.selftest import parse_one
from ncclpm.model import Category


@cache
def catalog():  # type: ignore[no-untyped-def]
    return load_catalog()


def _row(line: str) -> dict:
    parsed, _ = parse_one(catalog(), line)
    return parsed.row(0, named=True)


def _events(line: str) -> list[str]:
    _, events = parse_one(catalog(), line)
    return events["event"].to_list()


def _diagnose(text: str):  # type: ignore[no-untyped-def]
    return diagnose(stdin_bytes=text.encode())


# --- prefixes: the rank and the pid are fields ----------------------------------------------------------------------

# (line, rank, rank_local, pid, message)
PREFIXES = [
    # vLLM 0.11+: Worker + _DP/_PP/_TP/_DCP/_EP, one dimension = the rank in the engine's world
    ("(Worker_TP1 pid=12345) ERROR 11-20 10:00:00 [core.py:1] boom", 1, False, 12345, "boom"),
    ("(Worker_TP3_EP3 pid=7) INFO 11-20 10:00:00 [x.py:1] hi", 3, False, 7, "hi"),
    ("(Worker_PP1 pid=8) INFO 11-20 10:00:00 [x.py:1] hi", 1, False, 8, "hi"),
    # vLLM 0.10: a space after VllmWorker
    ("(VllmWorker TP1 pid=2817) INFO 08-20 10:00:00 [x.py:1] hi", 1, False, 2817, "hi"),
    # several dimensions: the innermost is a rank within the group the others name, not the global rank
    ("(Worker_PP1_TP0 pid=5) INFO 11-20 10:00:00 [x.py:1] hi", 0, True, 5, "hi"),
    ("(Worker_DP1_TP2_EP6 pid=6) INFO 11-20 10:00:00 [x.py:1] hi", 2, True, 6, "hi"),
    # vLLM 0.8's shape keeps working
    ("(VllmWorker rank=1 pid=2817) ERROR 04-28 10:00:00 [multiproc_executor.py:470] x", 1, False, 2817, "x"),
    # Ray's actor prefix: a pid and the node's address, no rank
    ("(RayWorkerWrapper pid=3125, ip=10.0.0.12) ERROR 11-20 10:00:00 [worker_base.py:620] x", None, None, 3125, "x"),
    # the ANSI colours vLLM puts around its prefix
    ("\x1b[0;36m(Worker_TP2 pid=9)\x1b[0;0m INFO 11-20 10:00:00 [x.py:1] hi", 2, False, 9, "hi"),
    # SGLang: one dimension, milliseconds (SGLANG_LOG_MS), a trailing EP
    ("[2025-01-01 12:00:00 TP3] Scheduler hit an exception", 3, False, None, "Scheduler hit an exception"),
    ("[2025-01-01 12:00:00.123 TP3] x", 3, False, None, "x"),
    ("[2025-01-01 12:00:00 TP5 EP5] x", 5, False, None, "x"),
    # SGLang with data or pipeline parallelism: TP within the group
    ("[2025-01-01 12:00:00 DP1 TP3] x", 3, True, None, "x"),
    ("[2025-01-01 12:00:00.250 DP0 PP1 TP3 EP3] x", 3, True, None, "x"),
    ("[2025-01-01 12:00:00 DP1 PP0 ATTN_CP1 MOE_DP0 TP3 EP1] x", 3, True, None, "x"),
    ("[2025-01-01 12:00:00 DP0 TP2 EP2 PP1] x", 2, True, None, "x"),
    # SGLang inside a Ray actor (verl's and OpenRLHF's rollouts): an engine's own world, TP within it
    ("(SGLangEngine pid=5521, ip=10.0.0.3) [2025-06-01 10:00:00 TP1] x", 1, True, 5521, "x"),
    ("(WorkerDict pid=77) [2025-06-01 10:00:00 DP0 TP0 EP0 PP0] x", 0, True, 77, "x"),
    # verl's logger inside a Ray actor
    (
        "(WorkerDict pid=5521, ip=10.0.0.3) WARNING:2026-09-20 10:00:00,123:Waiting for NCCL group",
        None,
        None,
        5521,
        "Waiting for NCCL group",
    ),
]


@pytest.mark.parametrize(("line", "rank", "local", "pid", "message"), PREFIXES, ids=[p[0][:40] for p in PREFIXES])
def test_framework_prefixes_give_rank_and_pid(line: str, rank: int | None, local: bool | None, pid, message) -> None:
    row = _row(line)
    assert (row["rank"], row["rank_local"], row["pid"], row["message"]) == (rank, local, pid, message)


def test_sglang_prefix_keeps_its_time() -> None:
    assert str(_row("[2025-01-01 12:00:00.123 TP3] x")["ts"]) == "2025-01-01 12:00:00.123000"


def test_the_same_worker_stream_takes_the_global_rank_its_lines_name() -> None:
    """A worker of several dimensions whose own lines name its global rank (vLLM's parallel_state line): the
    rank within its group gives way to it."""
    row = _row(
        "(Worker_PP1_TP0 pid=78) INFO 11-20 10:00:00 [parallel_state.py:1208] rank 2 in world size 4 is assigned "
        "as DP rank 0, PP rank 1, TP rank 0, EP rank 0"
    )
    assert (row["rank"], row["rank_local"]) == (2, False)


def test_a_vllm_worker_failure_is_read_per_rank() -> None:
    log = "\n".join(
        [
            "(Worker_TP0 pid=100) INFO 11-20 10:00:00 [pynccl.py:103] vLLM is using nccl==2.27.3",
            "(Worker_TP1 pid=101) ERROR 11-20 10:05:00 [multiproc_executor.py:815] WorkerProc hit an exception.",
            "(Worker_TP1 pid=101) ERROR 11-20 10:05:00 [multiproc_executor.py:815] Traceback (most recent call last):",
            '(Worker_TP1 pid=101) ERROR 11-20 10:05:00 [multiproc_executor.py:815]   File "/x/vllm/v1/executor/'
            'multiproc_executor.py", line 810, in worker_busy_loop',
            "(Worker_TP1 pid=101) ERROR 11-20 10:05:00 [multiproc_executor.py:815] torch.OutOfMemoryError: CUDA out "
            "of memory. Tried to allocate 2.00 GiB. GPU 1 has a total capacity of 79.10 GiB of which 1.20 GiB is free.",
            "(Worker_TP0 pid=100) INFO 11-20 10:05:30 [shm_broadcast.py:466] No available shared memory broadcast "
            "block found in 60 seconds. This typically happens when some processes are hanging or doing some "
            "time-consuming work (e.g. compilation, weight/kv cache quantization).",
            "(EngineCore_DP0 pid=90) ERROR 11-20 10:06:00 [multiproc_executor.py:231] Worker proc VllmWorker-1 died "
            "unexpectedly, shutting down executor.",
        ]
    )
    d = _diagnose(log)
    assert d.category == Category.CUDA_OOM
    assert d.culprit_ranks == (1,)


# --- the frameworks' own messages ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "entry"),
    [
        ("(Worker_TP1 pid=2817) ERROR 11-20 10:00:00 [multiproc_executor.py:815] WorkerProc hit an exception.", "vllm.worker_raised"),
        ("[2025-01-01 12:00:00 TP3] Scheduler hit an exception: Traceback (most recent call last):", "sglang.process_raised"),
        ("ERROR 11-20 10:00:00 [multiproc_executor.py:380] Worker proc VllmWorker-3 died unexpectedly (exit code: -9), shutting down executor.", "vllm.worker_died"),
        ("[2025-01-01 12:00:00 TP3] Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=False)", "sglang.watchdog_timeout"),
        ("(Worker_TP1 pid=4) WARNING 11-20 10:00:00 [custom_all_reduce.py:85] Custom allreduce is disabled because this process group spans across nodes.", "framework.custom_allreduce_disabled"),
        ("RuntimeError: Unable to get the NCCLUniqueID from the store within 30 seconds.", "framework.nccl_id_timeout"),
        ("ERROR 11-20 10:00:00 [pynccl_wrapper.py:318] Failed to load NCCL library from /opt/nccl/lib/libnccl.so.2. It is expected if you are not running on NVIDIA/AMD GPUs.", "framework.nccl_library_not_loaded"),
    ],
)  # fmt: skip
def test_framework_messages_are_read(line: str, entry: str) -> None:
    assert entry in _events(line)


def test_a_worker_killed_is_a_crash_with_the_kill_named() -> None:
    d = _diagnose(
        "ERROR 11-20 10:00:00 [multiproc_executor.py:380] Worker proc VllmWorker-3 died unexpectedly (exit code: -9), "
        "shutting down executor.\n"
    )
    assert d.category == Category.RANK_CRASH
    assert any("dmesg" in f for f in d.primary.fixes)


def test_a_healthy_vllm_start_is_no_failure() -> None:
    d = _diagnose(
        "(Worker_TP0 pid=100) INFO 11-20 10:00:00 [pynccl.py:103] vLLM is using nccl==2.27.3\n"
        "(Worker_TP1 pid=101) WARNING 11-20 10:00:01 [custom_all_reduce.py:85] Custom allreduce is disabled because "
        "it's not supported on more than two PCIe-only GPUs. To silence this warning, specify "
        "disable_custom_all_reduce=True explicitly.\n"
    )
    assert d.category in (Category.NO_FAILURE, Category.UNKNOWN)
    assert not d.category.names_a_cause


# --- not_a_training_log only on positive evidence (issue 29, point 6) ------------------------------------------------

LONE = [
    "(Worker_TP1 pid=2817) ERROR 11-20 10:00:00 [multiproc_executor.py:815] WorkerProc hit an exception.",
    "(EngineCore_DP0 pid=77) ERROR 11-20 10:00:00 [core.py:842] EngineCore failed to start.",
    "[2025-01-01 12:00:00 TP3] Scheduler hit an exception: Traceback (most recent call last):",
    "(Worker_TP1 pid=1) INFO 11-20 10:00:00 [gpu_model_runner.py:1] Starting to load model /models/x...",
    "[2025-01-01 12:00:00 TP0] Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=60.10 GB",
    "(RayWorkerWrapper pid=3125, ip=10.0.0.12) INFO 11-20 10:00:00 [x.py:1] hello",
]


@pytest.mark.parametrize("line", LONE, ids=[line[:40] for line in LONE])
def test_a_lone_framework_line_is_not_called_not_a_training_log(line: str) -> None:
    assert _diagnose(line + "\n").category != Category.NOT_A_TRAINING_LOG


def test_a_script_run_that_prints_a_framework_worker_error_is_a_job() -> None:
    """`$ python serve.py` alone is a script run (NA01's lead); the vLLM worker's own error line it printed makes
    it a distributed job's log."""
    d = _diagnose(
        "$ python serve.py --model x\n"
        "(Worker_TP1 pid=12) ERROR 11-20 10:00:00 [multiproc_executor.py:815] WorkerProc hit an exception.\n"
        "Traceback (most recent call last):\n"
        '  File "a.py", line 1, in <module>\n'
        "RuntimeError: boom\n"
    )
    assert d.category != Category.NOT_A_TRAINING_LOG


# --- torchelastic's store finding its own port taken -----------------------------------------------------------------

RETRY = "W1122 10:00:0{n}.123000 4321 torch/distributed/elastic/utils/distributed.py:97] port: 29500 already in use, attempt: [{n}/3]"


def test_port_retries_are_the_store_port_taken_not_an_unreachable_store() -> None:
    d = _diagnose("\n".join(RETRY.format(n=n) for n in (1, 2)) + "\n")
    assert d.category == Category.INIT_RENDEZVOUS
    assert d.confidence < 0.6
    assert "could not reach" not in d.summary
    assert "port 29500 was taken" in d.summary
    assert "ss -ltnp" in d.primary.fixes[0]


def test_a_port_retry_that_then_bound_is_no_cause() -> None:
    d = _diagnose(
        RETRY.format(n=1) + "\n"
        "I1122 10:00:10.000000 4321 torch/distributed/elastic/agent/server/api.py:1] [default] Rendezvous complete.\n"
        "[rank0]: step 10 loss 0.3\n"
    )
    assert d.category != Category.INIT_RENDEZVOUS


def test_the_last_attempt_failing_is_decisive_and_fixed_at_the_port() -> None:
    d = _diagnose(
        "\n".join(RETRY.format(n=n) for n in (1, 2, 3))
        + "\ntorch.distributed.DistNetworkError: on node0, port: 29500 already in use\n"
    )
    assert d.category == Category.INIT_RENDEZVOUS
    assert d.confidence >= 0.85
    assert "ss -ltnp" in d.primary.fixes[0]


def test_a_port_retry_is_no_world_size() -> None:
    _, events = parse_one(catalog(), RETRY.format(n=1))
    assert events.filter(events["event"] == "elastic.port_in_use_retry")["expected"].to_list() == [None]


# --- NCCL 2.32's ATTN level ------------------------------------------------------------------------------------------

ATTN = (
    "node02:6801:6839 [1] transport/net_ib.cc:1696 (ncclIbTest) NCCL ATTN NET/IB : Got completion from peer "
    "10.0.3.14<41524> with status=12 opcode=0 len=0 vendor err 129 (Send) localGid ::ffff:10.0.3.13 "
    "remoteGids::ffff:10.0.3.14 hca mlx5_0"
)


def test_nccl_attn_lines_are_read_like_warn_lines() -> None:
    row = _row(ATTN)
    assert (row["host"], row["pid"], row["level"]) == ("node02", 6801, "W")
    assert "nccl.warn" in _events(ATTN)
    d = _diagnose(ATTN + "\n")
    assert d.category == Category.NETWORK_TRANSPORT
    assert d.category == _diagnose(ATTN.replace("NCCL ATTN", "NCCL WARN") + "\n").category


def test_an_unknown_attn_notice_alone_names_no_cause() -> None:
    d = _diagnose("node02:6801:6839 [1] init.cc:2210 (ncclCommInitRankFunc) NCCL ATTN something to notice\n")
    assert not d.category.names_a_cause
    assert d.category != Category.NOT_A_TRAINING_LOG


def test_the_prefixes_read_from_the_frameworks_sources_are_envelopes() -> None:
    """Every example of vLLM's and SGLang's prefixes in scripts/vocab/data/prefixes.toml (read from their wheels'
    sources) is stripped by an envelope, which keeps what the prefix holds: vLLM's pid, SGLang's time."""
    import re
    import tomllib
    from pathlib import Path

    data = Path(__file__).resolve().parent.parent / "scripts" / "vocab" / "data" / "prefixes.toml"
    doc = tomllib.loads(data.read_text(encoding="utf-8"))
    checked = 0
    for p in doc["prefix"]:
        if p["id"] not in ("vllm.worker_stdout_decoration", "sglang.logging_format"):
            continue
        rx = re.compile(p["regex"].replace("(?<", "(?P<"))
        for example in p["examples"]:
            m = rx.match(example)
            assert m is not None
            row = _row(example)
            assert not row["message"].startswith(("(", "[20")), (p["id"], example, row["message"])
            if p["id"].startswith("vllm"):
                assert row["pid"] == int(m.group("pid"))
            else:
                assert row["ts"] is not None
            checked += 1
    assert checked >= 6


def test_a_store_timeout_that_says_what_it_waited_for_is_not_a_bare_socket_timeout() -> None:
    """torchelastic's `timed out waiting for all N members to join` fills no `detail`: it is not torch <= 2.1's bare
    `Socket Timeout` (which says nothing of which wait gave up), and keeps its decisive reading."""
    d = _diagnose("TimeoutError: timed out waiting for all 4 members to join\n")
    assert d.category == Category.INIT_RENDEZVOUS
    assert "Socket Timeout" not in d.summary
    assert d.confidence >= 0.85
    bare = _diagnose("RuntimeError: Socket Timeout\n")
    assert "Socket Timeout" in bare.summary and bare.confidence < 0.6


def test_a_lone_framework_wait_is_said_to_be_one_not_a_collective() -> None:
    """vLLM's shared-memory broadcast wait alone: no failure named, and the report says what waited (a framework's
    process on its peers), not "ranks waiting in a collective" - no collective is in the log."""
    d = _diagnose(
        "(VllmWorker rank=1 pid=5521) WARNING 05-10 12:31:00 [shm_broadcast.py:386] No available shared memory "
        "broadcast block found in 60 second. This typically happens when some processes are hanging or doing some "
        "time-consuming work (e.g. compilation).\n"
    )
    assert d.category == Category.UNKNOWN
    assert "framework's process waited on its peers" in d.summary and "in a collective" not in d.summary, d.summary
