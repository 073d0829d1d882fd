"""torch's messages, declared (issue 29): every message torch 2.0-2.15 prints from c10d, gloo, the flight recorder,
torchelastic and torchrun is read by a declared entry or declared benign / out of scope with a reason
(parsers/torch/declared.toml); every declared entry's lines, alone in a log, get the entry's category (a victim's
line never makes its own rank a culprit); each release's wording of the messages ncclpm reads is read."""

from __future__ import annotations

import re
import sys
from collections import defaultdict
from functools import cache
from pathlib import Path

import polars as pl
import pytest

from ncclpm.api import diagnose
from ncclpm.ingest.catalog import BENIGN, Pattern, load_catalog
from ncclpm.ingest.selftest import parse_one
from ncclpm.model import Category

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts" / "vocab"))

import torch_coverage as tc  # noqa: E402

CONCLUSIVE = 0.85  # the band a lone supporting or victim line never reaches
GATE = 0.90  # of torch 2.15's gated messages read or declared with a reason (issue 29's "done when")
# the catalogs that hold torch's own messages: every pattern there declares what its message means
TORCH_FILES = re.compile(r"^(?:torch/.*|torch_processgroup\.toml|gloo\.toml)$")


@cache
def catalog():  # type: ignore[no-untyped-def]
    return load_catalog()


@cache
def gated_coverage(all_versions: bool) -> tc.Coverage:
    """The gate's messages and the debugging tools' (counted apart, declared all the same)."""
    rows = [
        r
        for r in tc.rows()
        if (tc.gated(r["component"], r["scope"]) or tc.tool(r["component"], r["scope"]))
        and (all_versions or r["last"] == tc.NEWEST)
    ]
    return tc.coverage(rows)


# --- coverage ----------------------------------------------------------------------------------------------------


def test_every_gated_message_of_the_newest_torch_is_read_or_declared() -> None:
    """The coverage gate: a message of torch 2.15's c10d/gloo/flight-recorder/elastic/torchrun list that no entry
    reads and no group of parsers/torch/declared.toml declares fails here (`python scripts/vocab/torch_coverage.py
    --unread` lists them)."""
    cov = gated_coverage(False)
    gaps = [(v.row["id"], v.row["component"]) for v in cov.gaps()]
    assert gaps == [], f"{len(gaps)} torch 2.15 messages neither read nor declared: {gaps[:10]}"
    accounted = sum(v.status != "undeclared" for v in cov.verdicts) / len(cov.verdicts)
    assert accounted >= GATE


def test_the_debugging_tools_are_counted_apart() -> None:
    """The debug server's and the flight-recorder analyser's own messages are outside the gate's denominator (their
    interface, not a failing job's log); the flight recorder a job runs (c10d.flight_recorder) stays in it."""
    assert tc.tool("debug_server") and tc.tool("c10d.control_plane") and tc.tool("flight_recorder")
    assert not tc.gated("debug_server") and not tc.gated("c10d.control_plane") and not tc.gated("flight_recorder")
    assert tc.gated("c10d.flight_recorder") and not tc.tool("c10d.flight_recorder")
    assert tc.gated("c10d.ProcessGroupNCCL") and tc.gated("torchelastic.agent")


# --- what is not a message ------------------------------------------------------------------------------------------


def test_the_committed_list_holds_no_string_the_extraction_rejects() -> None:
    """`torch_extract.not_a_message` is applied by the extraction (and `--refilter` to the committed list): no row
    of scripts/vocab/data/torch_messages.jsonl is one it rejects."""
    import torch_extract

    rejected = [(r["id"], r["text"]) for r in tc.rows() if torch_extract.not_a_message(r)]
    assert rejected == []


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("/last_member", "identifier"),
        ("~ProcessGroupNCCL", "identifier"),
        ("c10d.backend_{}", "identifier"),
        (" --nonblocking", "identifier"),
        ("Gets the timeout of the store.", "docstring"),
        ("\nReturns a list of all keys in the store.\n", "docstring"),
        ("batch_p2p_ops(str[] op_list, int[] peer_list)-> Tensor[]", "signature"),
        ("distributed c10d bindings", "module_doc"),
        ("%s: __pos (which is %zu) > __size (which is %zu)", "linked_library"),
        ("chrono value is out of range", "linked_library"),
        ("Invalid Container Length", "linked_library"),  # libnop's
        ("Invalid IP address", ""),  # gloo's own
        # messages, and pieces of messages, that stay
        ("WorkNCCL(", ""),  # opens the watchdog's timeout line
        ("[rank={}]", ""),  # nccl2's line prefix
        ("\nLast error:\n", ""),  # before NCCL's last WARN in torch's NCCL error
        ("\nCUDA kernel errors might be asynchronously reported at some other API call", ""),  # after a CUDA error
        ("context_->getPair(rank)", ""),  # a GLOO_ENFORCE condition, printed in the enforce line
        ("Set timeout is now only supported for either nccl or gloo", ""),
        ("Tensors must be CUDA and dense", ""),
        ("Timeout", "identifier"),  # one word: cppscan.is_message drops such names at the source already
    ],
)
def test_what_is_not_a_message(text: str, why: str) -> None:
    import torch_extract

    assert torch_extract.not_a_message({"kind": "cpp", "text": text}) == why
    assert torch_extract.not_a_message({"kind": "cpp", "text": text, "pieces": [text, "x"]}) == ""
    assert torch_extract.not_a_message({"kind": "python", "template": text}) == ""


def test_every_release_of_torch_is_accounted_for_too() -> None:
    """torch 2.0-2.14's wordings that 2.15 no longer prints are read or declared as well: logs of every release."""
    gaps = [(v.row["id"], v.row["first"], v.row["last"]) for v in gated_coverage(True).gaps()]
    assert gaps == []


def test_declarations_are_live_and_point_at_entries() -> None:
    """Every group of declared.toml takes at least one message (a group nothing matches is a stale declaration),
    and every `part_of` names a declared entry (checked when the coverage is computed)."""
    groups = tc.groups()
    rows = [r for r in tc.rows() if tc.gated(r["component"], r["scope"]) or tc.tool(r["component"], r["scope"])]
    taken = {i for r in rows for i, g in enumerate(groups) if g.takes(r)}
    dead = [f"group {i + 1} ({g.reason[:50]})" for i, g in enumerate(groups) if i not in taken]
    assert dead == []
    ids = {p.id for p in catalog().patterns if p.declared is not None}
    assert {g.part_of for g in groups if g.part_of} <= ids


def test_the_torch_catalogs_declare_every_pattern() -> None:
    undeclared = [p.id for p in catalog().patterns if TORCH_FILES.match(p.origin) and p.declared is None]
    assert undeclared == []


def test_instances_fill_templates_as_a_log_would() -> None:
    row = {"template": "Timed out waiting on barrier on rank {rank}, key {key} (missing_ranks={f\"[{', '.join(x)}]\"})"}
    assert (
        tc.instance(row) == "Timed out waiting on barrier on rank 3, key /default_pg/0 (missing_ranks=[rank_3, rank_5])"
    )
    assert tc.instance({"text": "Failed to get NCCL unique ID: "}) == "Failed to get NCCL unique ID: 7"
    assert tc.instance({"text": "a", "shape": "x {} y"}) == "x 7 y"


# --- each release's wording of what ncclpm reads -------------------------------------------------------------------

# (release, the line as that release prints it, the entry that must read it)
WORDINGS = [
    (
        "2.0",
        "[E ProcessGroupNCCL.cpp:828] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE, Timeout(ms)=1800000) ran for 1800483 milliseconds before timing out.",
        "pg.watchdog_timeout",
    ),
    (
        "2.15 nccl2",
        "RuntimeError: [PG ID 0 PG GUID 0(default_pg) Rank 1] Watchdog caught collective operation timeout: NCCL operation timed out",
        "pg.watchdog_timeout",
    ),
    (
        "2.15 nccl2",
        "[rank1]:[E1122 10:00:00.000000000 WorkNCCL.cpp:147] [TC][rank=1][name=0] Operation timed out after 600012 ms",
        "nccl2.work_timed_out",
    ),
    (
        "2.15 nccl2",
        "[rank1]:[E1122 10:00:00.000000000 ProcessGroupNCCLBackend.cpp:980] [TC][rank=1][name=0] Aborting process on rank 1 due to timeout - collective operation timed out",
        "nccl2.abort_process",
    ),
    (
        "2.15 nccl2",
        "[rank1]:[E1122 10:00:00.000000000 TorchCommNCCL.cpp:210] [TC][rank=1][name=0] Timeout watchdog caught exception: NCCL operation timed out",
        "pg.watchdog_thread_exception",
    ),
    (
        "2.15",
        "ERROR:torch.distributed._watchdog:Default timeout callback fired, calling os.abort()",
        "c10d.py_watchdog_abort",
    ),
    (
        "2.0",
        "RuntimeError: NCCL error: Work WorkNCCL(SeqNum=5, OpType=ALLREDUCE, Timeout(ms)=600000) timed out in call to wait().",
        "pg.wait_timeout_old",
    ),
    (
        "2.1",
        "RuntimeError: [Rank 1] Work WorkNCCL(SeqNum=9, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=60000) timed out in blocking wait (NCCL_BLOCKING_WAIT=1).",
        "pg.blocking_wait_timeout",
    ),
    (
        "2.2-2.5",
        "RuntimeError: [Rank 1] Work WorkNCCL(SeqNum=9, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=60000) timed out in blocking wait (TORCH_NCCL_BLOCKING_WAIT=1).",
        "pg.blocking_wait_timeout",
    ),
    (
        "2.6",
        "[rank1]:[E1122 10:00:00.000000000 ProcessGroupNCCL.cpp:1] [PG ID 0 PG GUID 0(default_pg) Rank 1] Work WorkNCCL(SeqNum=9, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=60000) timed out in blocking wait.",
        "pg.blocking_wait_timeout",
    ),
    (
        "2.0",
        "RuntimeError: Timed out initializing process group in store based barrier on rank: 3, for key: store_based_barrier_key:1 (world_size=8, worker_count=7, timeout=0:30:00)",
        "store.based_barrier_timeout",
    ),
    (
        "2.1-2.3",
        "RuntimeError: Timed out initializing process group in store based barrier on rank 3, for key: store_based_barrier_key:1 (world_size=8, num_workers_joined=7, timeout=0:30:00)",
        "store.based_barrier_timeout",
    ),
    (
        "2.4",
        "torch.distributed.DistStoreError: Timed out initializing process group in store based barrier on rank 3, for key: store_based_barrier_key:1 (world_size=8, num_workers_joined=7, timeout=0:30:00 error=Socket Timeout)",
        "store.based_barrier_timeout",
    ),
    (
        "2.0-2.2",
        "  what():  [Rank 0] NCCL watchdog thread terminated with exception: CUDA error: an illegal memory access was encountered",
        "pg.watchdog_thread_exception",
    ),
    (
        "2.3",
        "  what():  [PG 0 Rank 0] Process group watchdog thread terminated with exception: [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=3, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600057 milliseconds before timing out.",
        "pg.watchdog_thread_exception",
    ),
    (
        "2.2-2.3",
        "[rank7]:[E ProcessGroupNCCL.cpp:1537] [PG 0 Rank 7] Timeout at NCCL work: 1, last enqueued NCCL work: 1, last completed NCCL work: -1.",
        "pg.watchdog_exception_status",
    ),
    (
        "2.4-2.5",
        "[rank1]:[E1003 18:37:01.832146912 ProcessGroupNCCL.cpp:1595] [PG 0 (default_pg) Rank 1] Exception (either an error or timeout) detected by watchdog at work: 8, last enqueued NCCL work: 9, last completed NCCL work: 7.",
        "pg.watchdog_exception_status",
    ),
    (
        "2.6",
        "[rank1]:[E1218 20:27:21.484903450 ProcessGroupNCCL.cpp:2168] [PG ID 1 PG GUID 1 Rank 1]  failure detected by watchdog at work sequence id: 1 PG status: last enqueued work: 547, last completed work: -1",
        "pg.watchdog_failure_status",
    ),
    (
        "2.2",
        "[rank0]:[E ProcessGroupNCCL.cpp:1300] [Rank 0] monitoring thread detects no heartbeat and will finally kill the process!",
        "pg.watchdog_hang_detail",
    ),
    (
        "2.3-2.4",
        "[rank2]:[E ProcessGroupNCCL.cpp:1400] [PG 0 Rank 2] Heartbeat monitor timed out! Process will be terminated after dumping debug info. workMetaList_.size()=0",
        "pg.heartbeat_monitor_abort",
    ),
    (
        "2.5",
        "[rank0]:[F1122 10:00:00.000000000 ProcessGroupNCCL.cpp:1400] [PG ID 0 PG GUID 0(default_pg) Rank 0] [PG ID 0 PG GUID 0(default_pg) Rank 0] Terminating the process after attempting to dump debug info, due to ProcessGroupNCCL watchdog hang.",
        "pg.heartbeat_monitor_abort",
    ),
    (
        "2.3",
        "[rank0]:[E ProcessGroupNCCL.cpp:1200] [PG 0 Rank 0] Received a timeout signal from this local rank and will start to dump the debug info. Last enqueued NCCL work: 5, last completed NCCL work: 4.",
        "pg.dump_signal_2_4",
    ),
    (
        "2.4",
        "[rank2]:[E1122 10:00:00.000000000 ProcessGroupNCCL.cpp:1] [PG 0 Rank 2] ProcessGroupNCCL's watchdog detected a dump signal from rank 7 and notified the current rank. This is most likely caused by incorrect usages of collectives",
        "pg.dump_signal_2_4",
    ),
    (
        "2.5",
        "[rank2]:[E1122 10:00:00.000000000 ProcessGroupNCCL.cpp:1] [PG ID 0 PG GUID 0(default_pg) Rank 2] Received a dump signal due to a collective timeout from  rank 7 and we will try our best to dump the debug info. Last enqueued NCCL work: 56116, last completed NCCL work: 56115.",
        "pg.dump_signal",
    ),
    (
        "2.0-2.6",
        "[rank3]: torch.distributed.DistBackendError: [3] is setting up NCCL communicator and retrieving ncclUniqueId from [0] via c10d key-value store by key '0', but store->get('0') got error: wait timeout after 600000ms. This may indicate a possible application crash on rank 0 or a network set up issue.",
        "pg.store_uniqueid",
    ),
    (
        "2.7",
        "[rank5]: torch.distributed.DistBackendError: [5] is setting up NCCL communicators and retrieving ncclUniqueId from roots via TCPStore by key '0:0', but got error: wait timeout after 600000ms, keys: /default_pg//cuda//0:0",
        "pg.store_uniqueids_roots",
    ),
    (
        "2.3-2.5",
        "[rank3]: torch.distributed.DistBackendError: NCCL timeout in communicator initialization.",
        "pg.comm_init_timeout",
    ),
    (
        "2.5-2.13",
        '[rank1]:[W1122 10:00:00.000000000 ProcessGroupNCCL.cpp:1250] [PG ID 0 PG GUID 0(default_pg) Rank 1] Failed to check the "should dump" flag on TCPStore, (maybe TCPStore server has shut down too early), with error: Connection reset by peer',
        "pg.dump_flag_store_gone",
    ),
    (
        "2.0-2.1",
        "[E ProcessGroupNCCL.cpp:740] [Rank 2] Found key in store: NCCLABORTEDCOMM:a1b2, from rank: 5. This means that rank has aborted its NCCL communicators previously and is not in a healthy state.",
        "pg.aborted_comm_key",
    ),
    ("2.0-2.4", "torch.distributed.DistNetworkError: failed to recv, got 0 bytes", "store.connection_lost"),
    (
        "2.8",
        "torch.distributed.DistNetworkError: Failed to recv, got 0 bytes. Connection was likely closed. Did the remote server shutdown or crash?",
        "store.connection_lost",
    ),
    (
        "2.2-2.6",
        "torch.distributed.DistNetworkError: UV Store bind failed. useIpv6:0 code:-98 name:EADDRINUSE message:address already in use",
        "store.uv_bind_failed",
    ),
    (
        "2.7",
        "torch.distributed.DistNetworkError: The server socket has failed to listen on any local network address. port: 29500, useIpv6: false, code: -98, name: EADDRINUSE, message: address already in use",
        "store.server_bind_failed",
    ),
    (
        "2.0-2.1",
        "[E socket.cpp:860] [c10d] The client socket has timed out after 60s while trying to connect to (GPU03, 29500).",
        "store.client_connect_timeout",
    ),
    (
        "2.5",
        "[E1122 10:00:00.000000000 TCPStore.cpp:357] [c10d] TCP client failed to connect/validate to host node0:29500 - timed out (try=12, timeout=1800000ms): The client socket has timed out after 1800000ms while trying to connect to (node0, 29500).",
        "store.client_connect_timeout",
    ),
    (
        "2.0-2.9",
        "E1122 10:00:00.123000 4321 torch/distributed/elastic/multiprocessing/api.py:900] failed (exitcode: 1) local_rank: 0 (pid: 4410) of fn: main (start_method: spawn)",
        "elastic.worker_failed",
    ),
    (
        "2.10",
        "E1122 10:00:00.123000 4321 torch/distributed/elastic/multiprocessing/api.py:900] failed (exitcode: -9) local_rank: 2 (pid: 4412) of binary: /usr/bin/python3",
        "elastic.worker_failed",
    ),
    (
        "2.0-2.15",
        "torch.distributed.elastic.multiprocessing.api.SignalException: Process 4321 got signal: 15",
        "elastic.agent_signal_exception",
    ),
    (
        "2.13",
        "E1122 10:00:00.123000 4321 torch/distributed/elastic/agent/server/api.py:890] [default] Worker pid=4410 stuck in uninterruptible sleep (D-state) for 300s (>= 300s); marking worker group UNHEALTHY and disabling restarts.",
        "elastic.worker_dstate",
    ),
    ("2.0-2.15", "torch.distributed.DistNetworkError: on node0, port: 29500 already in use", "elastic.port_in_use"),
    (
        "2.3-2.15",
        "torch.distributed.elastic.rendezvous.api.RendezvousGracefulExitError: The node 'node3_4410_0' can't complete rendezvous: deadline reached",
        "rdzv.not_completed",
    ),
    (
        "2.0-2.15 gloo",
        "RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection closed by peer [10.0.0.2]:65076",
        "gloo.peer_closed",
    ),
    (
        "2.13 gloo",
        "[rank0]: RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:2453. This is typically caused by a remote worker crashing. Check the logs of the remote worker before reporting an error.",
        "gloo.peer_closed",
    ),
    # torch's exception around an NCCL result, as each release words it (NCCL's own `Last error:` not pasted)
    (
        "2.0",
        "RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1275, unhandled system error, NCCL version 2.14.3",
        "pg.nccl_error",
    ),
    (
        "2.1-2.3",
        "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1691, unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.19.3",
        "pg.nccl_error",
    ),
    (
        "2.4-2.15",
        "[rank3]: torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:2027, unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.20.5",
        "pg.nccl_error",
    ),
    (
        "2.4-2.15",
        "[rank1]: torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/NCCLUtils.hpp:317, remote process exited or there was a network error, NCCL version 2.21.5",
        "pg.nccl_error",
    ),
    (
        "2.7-2.15",
        "torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/NCCLUtils.cpp:77, invalid usage (run with NCCL_DEBUG=WARN for details), NCCL version 2.26.2",
        "pg.nccl_error",
    ),
    (
        "2.15 nccl2",
        "RuntimeError: NCCL AllReduce failed: unhandled system error (run with NCCL_DEBUG=INFO for details) ",
        "nccl2.call_failed",
    ),
    # the same torch under another program's prefixes: vLLM's worker and logger
    (
        "2.6 vLLM 0.8-0.10",
        "(VllmWorker rank=1 pid=2345) ERROR 05-01 10:00:00 [multiproc_executor.py:470] torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/NCCLUtils.hpp:268, unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5",
        "pg.nccl_error",
    ),
]


@pytest.mark.parametrize(("release", "line", "entry"), WORDINGS, ids=[f"{r} {e}" for r, _, e in WORDINGS])
def test_each_release_wording_is_read_by_its_entry(release: str, line: str, entry: str) -> None:
    _, events = parse_one(catalog(), line)
    assert entry in events["event"].to_list(), (release, events.select("event", "kind").rows())


# --- a log holding one declared line ---------------------------------------------------------------------------------


def _readings() -> list[tuple[Pattern, str, dict]]:
    """One example per distinct reading the rules can tell apart (the entry's kind, its declared reading with the
    case its fields select, the fields it fills): instances alike give the same verdict."""
    seen: dict[tuple, tuple[Pattern, str, dict]] = {}
    for p in catalog().patterns:
        if p.declared is None:
            continue
        for ex in p.examples:
            _, events = parse_one(catalog(), ex.line)
            mine = events.filter(pl.col("event") == p.id)
            assert not mine.is_empty(), (p.id, ex.line)
            fields = mine.row(0, named=True)
            want = p.declared.reading(fields)
            filled = tuple(sorted(f for f in p.fields if fields.get(f) is not None))
            key = (p.kind, want["category"], want["strength"], want["incriminates"], filled)
            seen.setdefault(key, (p, ex.line, want))
    return list(seen.values())


def _lone_line_wrong(entry: str, line: str, want: dict) -> tuple | None:
    """Why a log holding only `line` is diagnosed against its entry's declared reading `want`, or None if it is
    not: a cause's line gives its category (benign: no failure verdict), a supporting line alone is never
    conclusive; a victim's line never makes its own rank a culprit and gives no conclusive verdict unless it names
    the rank at fault; none of them is `not_a_training_log`."""
    d = diagnose(stdin_bytes=(line + "\n").encode())
    got = str(d.category)
    if got == Category.NOT_A_TRAINING_LOG:
        return (entry, "not_a_training_log", line)
    if want["strength"] == "victim":
        _, events = parse_one(catalog(), line)
        others = events.filter(~pl.col("victim").fill_null(False) & (pl.col("severity") == "error"))
        own = set(events["rank"].drop_nulls().to_list())
        names = want["incriminates"] == "peer"
        ok = not others.is_empty() or (
            not own & set(d.culprit_ranks) and (names or (not d.culprit_ranks and d.confidence < CONCLUSIVE))
        )
    elif want["category"] == BENIGN:
        ok = got in (Category.UNKNOWN, Category.NO_FAILURE)
    else:
        ok = got == want["category"] and (want["strength"] == "decisive" or d.confidence < CONCLUSIVE)
    if ok:
        return None
    return (entry, want["category"], want["strength"], got, round(d.confidence, 2), list(d.culprit_ranks))


def test_a_log_of_one_declared_line_gets_its_category() -> None:
    """Every declared entry's examples, one per distinct reading, each alone in a log (`_lone_line_wrong`)."""
    wrong = [_lone_line_wrong(p.id, line, want) for p, line, want in _readings()]
    assert [w for w in wrong if w] == []


def test_a_lone_line_of_each_release_gets_its_category() -> None:
    """What users paste from chat: only the watchdog's timeout line, only `DistBackendError: NCCL error in: ...`,
    as each release of torch words it, gets its entry's declared reading (the case its fields select)."""
    patterns = {p.id: p for p in catalog().patterns}
    wrong = []
    for release, line, entry in WORDINGS:
        _, events = parse_one(catalog(), line)
        fields = events.filter(pl.col("event") == entry).row(0, named=True)
        declared = patterns[entry].declared
        assert declared is not None, entry
        wrong.append(_lone_line_wrong(f"{release} {entry}", line, declared.reading(fields)))
    assert [w for w in wrong if w] == []


def test_declared_categories_cover_every_kind_a_rule_reads() -> None:
    """A declared entry of a cause names the category its kind leads to: two entries of one kind (and strength)
    disagreeing on it would be a reading written twice."""
    by_kind: dict[tuple[str, str], set[str]] = defaultdict(set)
    for p in catalog().patterns:
        d = p.declared
        if d is not None and d.strength == "decisive" and not d.cases:
            by_kind[(p.kind, d.strength)].add(d.category)
    mixed = {k: v for k, v in by_kind.items() if len(v) > 1}
    assert mixed == {}


# --- a usage error ends a rank's traceback ---------------------------------------------------------------------------

USAGE_FAMILIES = "usage."  # parsers/torch/usage.toml's families of argument checks (config_version)
PER_FAMILY = 3  # instances of each family's messages, the first by id: every family, a few of its wordings


def _rank_traceback(last: str) -> bytes:
    """A rank's traceback through a collective ending in `last` (a C++ check's text is raised as RuntimeError), then
    torchrun's line for the rank it lost."""
    if not tc.EXCEPTION_CLASS.match(last.split(":", 1)[0].rsplit(".", 1)[-1]):
        last = "RuntimeError: " + last
    frames = [
        "Traceback (most recent call last):",
        '  File "/app/train.py", line 42, in <module>',
        "    dist.all_reduce(t)",
        '  File "/usr/local/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 2501, in all_reduce',
        "    work = group.allreduce([tensor], opts)",
        *last.split("\n"),
    ]
    lines = [f"[rank1]: {line}" for line in frames]
    lines.append(
        "E1122 10:00:01.000000 4321 torch/distributed/elastic/multiprocessing/api.py:900] failed (exitcode: 1) "
        "local_rank: 1 (pid: 4411) of binary: /usr/bin/python3"
    )
    return ("\n".join(lines) + "\n").encode()


def _usage_instances() -> list[tuple[str, str]]:
    cov = gated_coverage(False)
    by: dict[str, list[str]] = defaultdict(list)
    for v in sorted(cov.verdicts, key=lambda v: v.row["id"]):
        if v.status == "read" and v.by.startswith(USAGE_FAMILIES) and v.row["last"] == tc.NEWEST:
            entry = next(p for p in catalog().patterns if p.id == v.by)
            if entry.declared is not None and entry.declared.category == "config_version":
                by[v.by].append(tc.instance(v.row))
    return [(entry, text) for entry, texts in sorted(by.items()) for text in texts[:PER_FAMILY]]


def test_a_usage_error_ending_a_rank_traceback_is_the_jobs_configuration() -> None:
    """torch's argument checks (a tensor on the wrong device, an op the backend does not support, a group used
    before init, an argument out of range...), instances of torch 2.15's own wordings that the usage families read,
    each ending a rank's traceback: config_version (CF04: the message names the cause), not "a rank crashed"."""
    cases = _usage_instances()
    families = {entry for entry, _ in cases}
    declared = {p.id for p in catalog().patterns if p.id.startswith(USAGE_FAMILIES) and p.kind == "usage_error"}
    assert families == declared  # every family reads some of torch 2.15's messages
    wrong = []
    for entry, text in cases:
        d = diagnose(stdin_bytes=_rank_traceback(text))
        if d.category != Category.CONFIG_VERSION:
            wrong.append((entry, str(d.category), text[:80]))
    assert wrong == []


def test_a_plain_python_error_ending_a_rank_traceback_is_still_a_crash() -> None:
    """The same traceback ending in an error of the program's own (no torch check) keeps the crash reading; and an
    internal assertion of torch is its rank's crash too (no cause alone), not the job's configuration."""
    for last in (
        "ZeroDivisionError: division by zero",
        "KeyError: 'input_ids'",
        'RuntimeError: ncclComm != nullptr INTERNAL ASSERT FAILED at "/pytorch/torch/csrc/distributed/c10d/'
        'ProcessGroupNCCL.cpp":2345, please report a bug to PyTorch.',
    ):
        d = diagnose(stdin_bytes=_rank_traceback(last))
        assert d.category == Category.RANK_CRASH, (last, d.category)
