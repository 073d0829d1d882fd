"""NCCL's result classes read alone (issue 29, "the message wins over its wrapper"): every class, in every wrapper
ncclpm reads, gets the class's meaning when no NCCL message says more - ncclSystemError/ncclRemoteError the network
(NW01), ncclInvalidUsage/ncclInvalidArgument a set-up mistake (CF03), ncclInternalError a set-up NCCL does not expect
(NC01, config_version), ncclUnhandledCudaError a lead with no single category (NC01, unknown) - at a lower
confidence than a message would give; an NCCL message naming the cause always wins."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from ncclpm.api import diagnose
from ncclpm.model import Band, Category
from tests import nccl_vocab_instances as nvi
from tests.test_nccl_messages import message_wins_mismatches

# ncclGetErrorString (src/init.cc, NCCL 2.18-2.30) and its older words (torch 1.x, NCCL 2.x before the hints)
STRINGS = {
    "ncclUnhandledCudaError": ("unhandled cuda error (run with NCCL_DEBUG=INFO for details)", "unhandled cuda error"),
    "ncclSystemError": ("unhandled system error (run with NCCL_DEBUG=INFO for details)", "unhandled system error"),
    "ncclInternalError": ("internal error - please report this issue to the NCCL developers", "internal error"),
    "ncclInvalidArgument": ("invalid argument (run with NCCL_DEBUG=WARN for details)", "invalid argument"),
    "ncclInvalidUsage": ("invalid usage (run with NCCL_DEBUG=WARN for details)", "invalid usage"),
    "ncclRemoteError": ("remote process exited or there was a network error",) * 2,
    "ncclInProgress": ("NCCL operation in progress",) * 2,
    "ncclTimeout": ("timeout",) * 2,
}
NUMBER = {"ncclUnhandledCudaError": 1, "ncclSystemError": 2, "ncclInternalError": 3, "ncclInvalidArgument": 4}
NUMBER |= {"ncclInvalidUsage": 5, "ncclRemoteError": 6}
# torch's getNcclErrorDetailStr (c10d/NCCLUtils.cpp)
DETAIL = {
    "ncclUnhandledCudaError": "Call to CUDA function failed.",
    "ncclSystemError": "System call (e.g. socket, malloc) or external library call failed or device error. ",
    "ncclInternalError": "Internal check failed.",
    "ncclInvalidArgument": "Invalid value for an argument.",
    "ncclInvalidUsage": "This usually reflects invalid usage of NCCL library.",
    "ncclRemoteError": "A call failed possibly due to a network error or a remote process exiting prematurely.",
}
CUPY = {
    "ncclUnhandledCudaError": "NCCL_ERROR_UNHANDLED_CUDA_ERROR",
    "ncclSystemError": "NCCL_ERROR_SYSTEM_ERROR",
    "ncclInternalError": "NCCL_ERROR_INTERNAL_ERROR",
    "ncclInvalidArgument": "NCCL_ERROR_INVALID_ARGUMENT",
    "ncclInvalidUsage": "NCCL_ERROR_INVALID_USAGE",
    "ncclRemoteError": "NCCL_ERROR_REMOTE_ERROR",
}

# each wrapper: (name, the classes it can carry, line for (class, its string))
Wrapper = tuple[str, tuple[str, ...], Callable[[str, str], str]]
SIX = tuple(DETAIL)
WRAPPERS: list[Wrapper] = [
    (
        "torch 2.x DistBackendError",
        (*SIX, "ncclInProgress"),
        lambda c, s: (
            "[rank1]: torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/"
            f"c10d/NCCLUtils.hpp:268, {s}, NCCL version 2.21.5"
        ),
    ),
    (
        "torch 2.0 RuntimeError, old string",
        SIX,
        lambda c, s: (
            "RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1275, "
            f"{STRINGS[c][1]}, NCCL version 2.14.3"
        ),
    ),
    ("torch's class spelled out", SIX, lambda c, s: f"[rank1]: {c}: {DETAIL[c]}"),
    ("torch 1.x", SIX, lambda c, s: f"RuntimeError: NCCL Error {NUMBER[c]}: {STRINGS[c][1]}"),
    ("vLLM/SGLang pynccl", SIX, lambda c, s: f"RuntimeError: NCCL error: {s}"),
    ("vLLM communicator init", SIX, lambda c, s: f"ncclCommInitRank failed with error: NCCL error: {s}"),
    ("torch nccl2", SIX, lambda c, s: f"[rank1]: RuntimeError: NCCL AllReduce failed: {s} "),
    ("nccl-tests", (*SIX, "ncclTimeout"), lambda c, s: f"node01: Test NCCL failure common.cu:1204 '{s} / '"),
    (
        "Horovod",
        SIX,
        lambda c, s: f"horovod.common.exceptions.HorovodInternalError: ncclAllReduce failed: {STRINGS[c][1]}",
    ),
    (
        "XLA/JAX",
        SIX,
        lambda c, s: (
            "jaxlib.xla_extension.XlaRuntimeError: INTERNAL: external/xla/xla/service/gpu/nccl_utils.cc:297: "
            f"NCCL operation ncclCommInitRank(&comm, nranks, id, rank) failed: {s}"
        ),
    ),
    ("cupy (Ray collective)", SIX, lambda c, s: f"cupy_backends.cuda.libs.nccl.NcclError: {CUPY[c]}: {s}"),
]
# what each class alone reads as: (category, the rule giving it)
READS = {
    "ncclSystemError": (Category.NETWORK_TRANSPORT, "NW01"),
    "ncclRemoteError": (Category.NETWORK_TRANSPORT, "NW01"),
    "ncclInvalidUsage": (Category.CONFIG_VERSION, "CF03"),
    "ncclInvalidArgument": (Category.CONFIG_VERSION, "CF03"),
    "ncclInternalError": (Category.CONFIG_VERSION, "NC01"),
    "ncclUnhandledCudaError": (Category.UNKNOWN, "NC01"),
    "ncclInProgress": (Category.UNKNOWN, "NC01"),
    "ncclTimeout": (Category.UNKNOWN, "NC01"),
}
CASES = [(name, cls, make(cls, STRINGS[cls][0])) for name, classes, make in WRAPPERS for cls in classes]


@pytest.mark.parametrize(("wrapper", "cls", "line"), CASES, ids=[f"{w}-{c}" for w, c, _ in CASES])
def test_a_lone_class_line_reads_as_its_class(wrapper: str, cls: str, line: str) -> None:
    """The line alone, as users paste it: the class's reading, a lead (never conclusive, never `not_a_training_log`
    nor "nothing recognised")."""
    d = diagnose(stdin_bytes=(line + "\n").encode())
    category, rule = READS[cls]
    assert (d.category, d.primary.rule) == (category, rule), (d.summary, d.confidence)
    assert d.band != Band.CONCLUSIVE and d.confidence > 0.2
    if rule == "NC01":
        assert cls in d.summary and "NCCL_DEBUG=WARN" in d.summary


def _traceback(rank: int, last: list[str]) -> str:
    """A rank's traceback through a collective ending in `last`, and torchrun's line for the rank it lost."""
    frames = [
        "Traceback (most recent call last):",
        '  File "/app/train.py", line 42, in <module>',
        "    dist.all_reduce(t)",
        '  File "/usr/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 2501, in all_reduce',
        "    work = group.allreduce([tensor], opts)",
        *last,
    ]
    exit_line = (
        "E1122 10:00:01.000000 4321 torch/distributed/elastic/multiprocessing/api.py:900] failed (exitcode: 1) "
        f"local_rank: {rank} (pid: 4411) of binary: /usr/bin/python3"
    )
    return "\n".join([*(f"[rank{rank}]: {line}" for line in frames), exit_line]) + "\n"


@pytest.mark.parametrize("cls", ["ncclInternalError", "ncclUnhandledCudaError"])
def test_a_rank_traceback_ending_in_the_class_gets_the_class_not_a_crash(cls: str) -> None:
    """torch's full exception (its class line, the class spelled out, an empty `Last error:`) ending a rank's
    traceback: the class's meaning, not "a rank crashed" (CR01/CR02 only rivals), with the rank named."""
    last = [
        "torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/"
        f"ProcessGroupNCCL.cpp:2027, {STRINGS[cls][0]}, NCCL version 2.20.5",
        f"{cls}: {DETAIL[cls]}",
        "Last error:",
        "",
    ]
    d = diagnose(stdin_bytes=_traceback(1, last).encode())
    assert (d.category, d.primary.rule) == READS[cls], d.summary
    assert d.culprit_ranks == (1,) and d.band == Band.POSSIBLE


def test_the_same_class_on_several_hosts_says_how_many() -> None:
    """nccl-tests under mpirun: every host stops on the same class - counted, and read as what the hosts share."""
    hosts = ["gpu-a01", "gpu-a02", "gpu-b07"]
    lines = [f"{h}: Test NCCL failure common.cu:1204 '{STRINGS['ncclUnhandledCudaError'][0]} / '" for h in hosts]
    lines.insert(2, f"{hosts[1]}: Test NCCL failure common.cu:1204 '{STRINGS['ncclUnhandledCudaError'][0]} / '")
    d = diagnose(stdin_bytes=("\n".join(lines) + "\n").encode())
    assert d.primary.rule == "NC01" and d.category == Category.UNKNOWN
    assert "on 3 hosts" in d.summary and "gpu-b07" in d.summary
    one = diagnose(stdin_bytes=(lines[0] + "\n").encode())
    assert "hosts" not in one.summary and "gpu-a01" in one.summary


def test_the_system_class_keeps_its_reading() -> None:
    """ncclSystemError alone stays NW01's network lead at 0.40, in torch's words and spelled out."""
    for line in (
        "[rank1]: torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/"
        "ProcessGroupNCCL.cpp:3690, unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.27.7",
        f"[rank1]: ncclSystemError: {DETAIL['ncclSystemError']}",
    ):
        d = diagnose(stdin_bytes=(line + "\n").encode())
        assert (d.category, d.primary.rule, round(d.confidence, 2)) == (Category.NETWORK_TRANSPORT, "NW01", 0.4)


# --- the message wins ------------------------------------------------------------------------------------------------

INTERNAL = nvi.WRAPPED.replace(
    "unhandled system error (run with NCCL_DEBUG=INFO for details)", STRINGS["ncclInternalError"][0]
).replace(f"ncclSystemError: {DETAIL['ncclSystemError']}", f"ncclInternalError: {DETAIL['ncclInternalError']}")
CUDA = nvi.WRAPPED.replace(
    "unhandled system error (run with NCCL_DEBUG=INFO for details)", STRINGS["ncclUnhandledCudaError"][0]
).replace(
    f"ncclSystemError: {DETAIL['ncclSystemError']}", f"ncclUnhandledCudaError: {DETAIL['ncclUnhandledCudaError']}"
)


@pytest.mark.parametrize(("wrapper", "cls"), [(INTERNAL, "ncclInternalError"), (CUDA, "ncclUnhandledCudaError")])
def test_the_message_wins_over_the_class(wrapper: str, cls: str) -> None:
    """Every distinct reading of NCCL's messages (parsers/nccl/) inside torch's `... <class> ... Last error:
    <message>`: a message naming a cause gives its category; one that names none (an internal check, a benign
    notice, a line too weak alone) leaves the class's reading, a lead."""
    assert cls in wrapper and "ncclSystemError" not in wrapper
    fallback, _ = READS[cls]
    # NW01 reads any network line, however weak alone: the class is then that failure's consequence
    always = ("peer_closed", "network_error")
    assert message_wins_mismatches(lambda m: wrapper.format(message=m), fallback, always) == []


@pytest.mark.parametrize(
    ("lines", "category"),
    [
        # NCCL's CUDA error names the cause: out of memory, a driver too old for the runtime
        (["node1:1:1 [0] include/alloc.h:228 NCCL WARN Cuda failure 2 'out of memory'"], Category.CUDA_OOM),
        (
            [
                "node1:1:1 [0] init.cc:1 NCCL WARN Cuda failure 'CUDA driver version is insufficient for CUDA "
                "runtime version'"
            ],
            Category.CONFIG_VERSION,
        ),
        # a proxy connection that failed (the internal error a container's unreachable address gives)
        (["node1:1:1 [0] proxy.cc:1 NCCL WARN Proxy Call to rank 0 failed (Connect)"], Category.NETWORK_TRANSPORT),
    ],
)
def test_a_warn_line_before_the_class_wins(lines: list[str], category: Category) -> None:
    """NCCL_DEBUG=WARN output then the class (nccl-tests' words): the WARN line's reading, never NC01's."""
    for cls in ("ncclInternalError", "ncclUnhandledCudaError"):
        text = "\n".join([*lines, f"node1: Test NCCL failure common.cu:1204 '{STRINGS[cls][0]} / '"]) + "\n"
        d = diagnose(stdin_bytes=text.encode())
        assert d.category == category and d.primary.rule != "NC01", (cls, d.summary)


def test_a_warn_line_naming_no_cause_is_quoted_with_the_class() -> None:
    """An NCCL message that names no cause alone (an internal consistency check) leaves the class's reading, and
    the report quotes it."""
    text = (
        "node1:1:1 [0] enqueue.cc:2357 NCCL WARN Unknown pattern 9\n"
        f"node1: Test NCCL failure common.cu:1204 '{STRINGS['ncclInternalError'][0]} / '\n"
    )
    d = diagnose(stdin_bytes=text.encode())
    assert (d.category, d.primary.rule) == (Category.CONFIG_VERSION, "NC01")
    assert "Unknown pattern 9" in d.summary


@pytest.mark.parametrize(
    "text",
    [
        # torch's nccl2: `NCCL Last Error:` after the class
        "[rank1]: RuntimeError: NCCL AllReduce failed: internal error - please report this issue to the NCCL "
        "developers\n[rank1]: NCCL Last Error: Proxy Call to rank 0 failed (Connect)\n",
        # XLA/JAX: NCCL's last warning quoted after the class
        "jaxlib.xla_extension.XlaRuntimeError: INTERNAL: external/xla/xla/service/gpu/nccl_utils.cc:297: NCCL "
        "operation ncclGroupEnd() failed: internal error - please report this issue to the NCCL developers. Last "
        "NCCL warning(error) log entry (may be unrelated) 'Proxy Call to rank 0 failed (Connect)'.\n",
    ],
)
def test_other_wrappers_quote_of_the_message_wins(text: str) -> None:
    """nccl2's and XLA's quotes of NCCL's last WARN are read like torch's `Last error:`: the message, not the class."""
    d = diagnose(stdin_bytes=text.encode())
    assert d.category == Category.NETWORK_TRANSPORT and d.primary.rule == "NW01", d.summary


@pytest.mark.parametrize(
    ("text", "category", "rule"),
    [
        # nccl-tests (NCCL 2.13+) quotes ncclGetLastError after the class: the message, not the class
        (
            "node01: Test NCCL failure common.cu:1204 'unhandled system error (run with NCCL_DEBUG=INFO for details) "
            "/ socketStartConnect: Connect to 10.0.0.7<43311> failed : Connection refused'\n",
            Category.NETWORK_TRANSPORT,
            "NW01",
        ),
        (
            "node01: Test NCCL failure common.cu:1204 'internal error - please report this issue to the NCCL "
            "developers / Proxy Call to rank 0 failed (Connect)'\n",
            Category.NETWORK_TRANSPORT,
            "NW01",
        ),
        # nccl-tests' own CUDA call (its CUDACHECK): the CUDA error it quotes
        ("node01: Test CUDA failure common.cu:892 'out of memory'\n", Category.CUDA_OOM, "OM01"),
    ],
)
def test_nccl_tests_quotes_are_read(text: str, category: Category, rule: str) -> None:
    d = diagnose(stdin_bytes=text.encode())
    assert (d.category, d.primary.rule) == (category, rule), d.summary


NCCL_TESTS_HEAD = (
    "# nThread 1 nGpus 1 minBytes 1073741824 maxBytes 34359738368 step: 2(factor) warmup iters: 5 iters: 20 agg "
    "iters: 1 validation: 1 graph: 0\n#\n# Reducing maxBytes to 27951912277 due to memory limitation\n#\n"
    "  1073741824     268435456     float     sum      -1    19355   55.48  110.84      0    19189   55.96  111.80  0\n"
)


@pytest.mark.parametrize(
    ("cls", "category"), [("ncclUnhandledCudaError", Category.CUDA_OOM), ("ncclInternalError", Category.CONFIG_VERSION)]
)
def test_a_cuda_failure_after_the_sizes_were_shrunk_to_fit_memory_is_memory(cls: str, category: Category) -> None:
    """nccl-tests lowered its sizes to fit GPU memory, then a CUDA call inside NCCL failed: most likely out of memory
    (a lead, possible); the notice alone is no failure, and says nothing about another class."""
    text = NCCL_TESTS_HEAD + f"gpu-a01: Test NCCL failure common.cu:1204 '{STRINGS[cls][0]} / '\n"
    d = diagnose(stdin_bytes=text.encode())
    assert (d.category, d.primary.rule, d.band) == (category, "NC01", Band.POSSIBLE), d.summary
    assert diagnose(stdin_bytes=NCCL_TESTS_HEAD.encode()).category == Category.NO_FAILURE
