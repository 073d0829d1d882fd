"""Pick, out of a torch library's `.rodata` strings, the messages its distributed, CUDA and DataLoader code prints.

How the strings are filtered (a library holds ~10^5 strings; a few thousand are messages of these components):
1. Source neighbourhood. A translation unit's literals lie together, and among them is its `__FILE__` path
   (`.../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp`), used by TORCH_CHECK and LOG. A string is kept when
   the unit path before it or the one after it (each at most UNIT_SPAN bytes away) is one of FILES_OF_INTEREST:
   a unit's literals lie on both sides of its path. Its probable file is the path before it when that one is of
   interest, else the one after. Checked on messages whose unit their wording tells (`The server socket`:
   socket.cpp, `Watchdog caught`: ProcessGroupNCCL.cpp...), the path before is right for about 3 in 4, the
   nearest path (before or after) for 1 in 2; across releases the attribution most sightings agree on is kept.
   The file stays a guess. Only translation units' paths (.cpp/.cc/.cu) are anchors: a header's path sits in the
   block of every unit that includes it.
2. Keywords. Strings anywhere in the library naming the distributed stack (KEYWORDS) are kept too.
3. Message-likeness. Kept strings must read as text: identifiers (function names, env var names, store keys),
   mangled symbols, type names, pretty-function signatures and Python docstrings are dropped.
TORCH_CHECK/C10_THROW messages are concatenated from pieces (`"Timed out waiting ", timeout, "ms for recv"`), each
its own literal, laid out in order of use: consecutive kept strings that read as one sentence cut at a variable (one
ends open, `"... after "`, the next continues, `"ms, keys: "`; after a `key=` piece only a separator may
follow; assertion conditions are never joined) are joined into a reconstructed shape, `{}` standing
for each cut. Pieces the compiler placed in different alignment groups are not joined.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass

SOURCE_PATH = re.compile(r"^(?:[\w./+-]*/)?(?:torch|c10|aten|third_party|caffe2)/[\w./+-]+\.(?:cpp|cc|c|h|hpp|cu|cuh)$")
# A translation unit's own path (headers' paths also sit in the block of each unit that includes them).
UNIT_PATH = re.compile(r"\.(?:cpp|cc|c|cu)$")
# How far (bytes) after its unit's path a literal is still taken to be the unit's: ProcessGroupNCCL.cpp's messages lie
# within about 10 KB of its path; past this, a unit without a path of its own would be taken for its neighbour.
UNIT_SPAN = 24576

# (path regex, component, scope). The first match wins; scope "core" is what ncclpm reads, "extended" the rest.
FILES_OF_INTEREST: tuple[tuple[str, str, str], ...] = (
    (r"c10d/nccl2/", "c10d.nccl2", "core"),  # torch 2.15's new NCCL backend
    (r"c10d/ProcessGroupNCCL", "c10d.ProcessGroupNCCL", "core"),
    (r"c10d/NCCLUtils", "c10d.NCCLUtils", "core"),
    (r"c10d/(?:FlightRecorder|TraceUtils|hooks/FlightRecorder)", "c10d.flight_recorder", "core"),
    (r"c10d/ProcessGroupWrapper", "c10d.ProcessGroupWrapper", "core"),
    (r"c10d/(?:gloo/)?ProcessGroupGloo|c10d/gloo/|GlooDeviceFactory", "c10d.ProcessGroupGloo", "core"),
    (r"c10d/(?:store/)?TCPStore", "c10d.TCPStore", "core"),
    (r"c10d/socket", "c10d.socket", "core"),
    (r"c10d/(?:FileStore|HashStore|PrefixStore|Store)\.", "c10d.store", "core"),
    (r"c10d/(?:Work|ProcessGroup|Backend|Utils|debug|Backoff|sequence_num|Types|GroupRegistry)\.", "c10d", "core"),
    (r"c10d/(?:control_plane|hooks)/", "c10d.control_plane", "core"),
    (r"c10d/(?:NanCheck|cuda/)", "c10d.cuda", "core"),
    (r"c10d/(?:reducer|logger|comm|default_comm_hooks|quantization)", "c10d.ddp", "extended"),
    (r"c10d/(?:ProcessGroupMPI|ProcessGroupUCC|UCC)", "c10d.mpi_ucc", "extended"),
    (r"c10d/(?:symm_mem|intra_node|CUDASymmetric|SymmetricMemory|DMAConnectivity)", "c10d.symm_mem", "extended"),
    (r"c10d/", "c10d", "core"),
    (r"third_party/gloo/gloo/transport/", "gloo.transport", "core"),
    (r"third_party/gloo/", "gloo", "core"),
    (r"torch/csrc/cuda/nccl\.", "torch.cuda.nccl", "core"),
    (r"c10/cuda/CUDACachingAllocator|c10/cuda/CUDAAllocatorConfig", "c10.cuda.allocator", "core"),
    (r"c10/cuda/", "c10.cuda", "core"),
    (r"aten/src/ATen/cuda/detail/CUDAHooks", "c10.cuda", "core"),
    (r"torch/csrc/DataLoader", "dataloader", "core"),
    (r"aten/src/ATen/MapAllocator|libshm/", "shm", "core"),
)
_FILES = [(re.compile(p), c, s) for p, c, s in FILES_OF_INTEREST]

KEYWORDS = re.compile(
    r"NCCL|\bnccl|ProcessGroup|TCPStore|\bc10d\b|\b[Gg]loo\b|[Ww]atchdog|[Hh]eartbeat|[Rr]endezvous|"
    r"[Ff]light ?[Rr]ecorder|[Dd]esync|\bcollective|EADDRINUSE|CUDA error|CUDA out of memory|\bNVML\b|DataLoader"
)

# Strings that are not messages.
_MANGLED = re.compile(r"^\*?(?:_Z|N\d|St\d|NSt|P?F[A-Z]|PF|Z[A-Z]|[A-Z]?\d+[A-Z])|[a-z]\d+[A-Za-z]+\d|^\w{1,6}E$")
_IDENTIFIER = re.compile(r"^[A-Za-z_][\w:.<>~/$-]*$")
_SIGNATURE = re.compile(
    r"^[\w.:]+\([^()]*\)(?: -> .*)?$|std::|\(\) \[with |^constexpr |^static |"
    r"^(?:virtual |const )?[\w:]+<.*>$|operator\(\)"
)
_DOCSTRING = re.compile(  # Python docstrings and pybind11 signatures held by libtorch_python
    r"\(\{%|@collections|^\(.*\) -> |\n\s*(?:Returns?|Raises|Note|Warning):|This API is |>>> |Example::|"
    r"\n\s+Args?:|Arguments:\n|\.\. \w+ ?::|``|^\n {4,}\S|\n {4,}\w+ \(\w+|:(?:func|class|meth|attr):`|"
    r"^[\w.]+\(.*\) -> "
)
_LINE = re.compile(r'(":)\d+(, please report a bug)')
_PATH_PREFIX = re.compile(
    r"(?:/__w/pytorch/pytorch/|/pytorch/|\.\./|/var/lib/jenkins/workspace/|/opt/pytorch/)(?=torch/|c10/|aten/|third_party/)"
)
MAX_LEN = 2000


def normalise(text: str) -> str:
    """Drop what changes with the build, not the message: the checkout prefix of paths, INTERNAL ASSERT lines."""
    return _LINE.sub(r"\1{line}\2", _PATH_PREFIX.sub("", text))


def is_message(text: str) -> bool:
    if len(text) > MAX_LEN or _DOCSTRING.search(text) or SOURCE_PATH.match(text):
        return False
    stripped = text.strip()
    if len(stripped) < 3:
        return False
    if " " not in stripped:
        if _IDENTIFIER.match(stripped) or _MANGLED.search(stripped):
            return False
        if len(stripped) <= 5 and not stripped.endswith(("=", ":", "(")):
            return False
    if _SIGNATURE.search(text):
        return False
    return sum(c.isalpha() for c in text) >= 3


def file_info(path: str) -> tuple[str, str] | None:
    for pattern, component, scope in _FILES:
        if pattern.search(path):
            return component, scope
    return None


@dataclass(frozen=True)
class Piece:
    text: str  # normalised
    file: str  # probable source file (normalised path), "" when none is near
    component: str
    scope: str
    shape: tuple[str, ...]  # the reconstructed message this piece belongs to (itself alone when not joined)


_OPEN_END = (" ", "=", "(", "[", ":", "'", '"', "#", "/", "<", "{")
_CONTINUE_START = (" ", ",", ".", ")", "]", ":", ";", "'", '"', "(", "}", ">", "-", "!", "?", "\n")
_AFTER_VALUE = (" ", ",", ")", "]", "}", ";", ".", "\n")
_CODE = re.compile(r"[=!<>]=|&&|\|\||->")  # an assertion's condition (`error == cudaSuccess`): not joined


def _continues(prev: str, cur: str) -> bool:
    """Whether `cur` reads as the continuation of `prev` across one printed value."""
    if not cur or not prev.endswith(_OPEN_END) or _CODE.search(prev) or _CODE.search(cur):
        return False
    if prev.endswith("=") or prev.endswith(("(", "[", "{")):  # `key=` / `(`: the value, then a separator
        return cur.startswith(_AFTER_VALUE)
    if cur.startswith(_CONTINUE_START):
        return True
    first_word = cur.split(" ", 1)[0]
    if not prev.endswith(" ") or re.search(r"[A-Z_(]", first_word):  # `setSequenceNumber()...`: a new message
        return False
    return cur[0].islower() or cur[0].isdigit()


def scan(strings: list[tuple[int, str]]) -> list[Piece]:
    """The kept messages of one library's strings ([offset, text] in order), each with its probable file and shape."""
    anchors = [(off, normalise(text)) for off, text in strings if SOURCE_PATH.match(text) and UNIT_PATH.search(text)]
    offsets = [a[0] for a in anchors]

    def unit_files(offset: int) -> tuple[str, str]:
        """The unit paths before and after `offset` (each at most UNIT_SPAN away, "" when none)."""
        i = bisect.bisect_right(offsets, offset)
        before = anchors[i - 1][1] if i > 0 and offset - anchors[i - 1][0] <= UNIT_SPAN else ""
        after = anchors[i][1] if i < len(anchors) and anchors[i][0] - offset <= UNIT_SPAN else ""
        return before, after

    kept: list[tuple[int, str, str, str, str]] = []  # (index, text, file, component, scope)
    for index, (offset, raw) in enumerate(strings):
        if not is_message(raw):
            continue
        text = normalise(raw)
        before, after = unit_files(offset)
        file, info = before, file_info(before)
        if info is None and (after_info := file_info(after)) is not None:
            file, info = after, after_info
        if info is None:
            if not KEYWORDS.search(text):
                continue
            info = ("torch.other", "extended")
        kept.append((index, text, file, *info))

    # Runs of consecutive kept strings that continue one another (at most two dropped strings between them).
    pieces: list[Piece] = []
    run: list[tuple[int, str, str, str, str]] = []

    def flush() -> None:
        shape = tuple(r[1] for r in run)
        for _, text, file, component, scope in run:
            pieces.append(Piece(text, file, component, scope, shape))
        run.clear()

    for item in kept:
        if run and (item[0] - run[-1][0] > 3 or not _continues(run[-1][1], item[1]) or item[2] != run[-1][2]):
            flush()
        run.append(item)
    if run:
        flush()
    return pieces
