"""List the messages PyTorch's distributed stack prints, from its released wheels (torch 2.0 to 2.15).

    python scripts/vocab/torch_extract.py [--cache DIR] [--out DIR]

Stage 1 (torch_fetch.py) downloads each pinned wheel from PyPI once and keeps what is read (Python sources, the
libraries' `.rodata` strings) in the cache, deleting the wheel. Stage 2 (here) reads the cache and writes
data/torch_messages.jsonl, one message per line, sorted; data/torch_wheels.json names the wheels read (sha256).
Rerunning with the same pins writes the same files byte for byte. See README.md (torch section).
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import re
import sys
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import cppscan
import pyscan
from torch_fetch import TORCH_VERSIONS, fetch

HERE = Path(__file__).resolve().parent
DEFAULT_CACHE = Path.home() / ".cache" / "ncclpm-vocab"
# Libraries built from torch's own sources (the wheel also bundles libgomp, libgfortran...).
TORCH_LIBRARIES = re.compile(r"^(?:libtorch|libc10|libshm|_C)")

# (path prefix or file inside the wheel, component, scope); the first match wins.
PY_COMPONENTS: tuple[tuple[str, str, str], ...] = (
    ("torch/distributed/elastic/agent/", "torchelastic.agent", "core"),
    ("torch/distributed/elastic/rendezvous/", "torchelastic.rendezvous", "core"),
    ("torch/distributed/elastic/multiprocessing/", "torchelastic.multiprocessing", "core"),
    ("torch/distributed/elastic/timer/", "torchelastic.timer", "core"),
    ("torch/distributed/elastic/", "torchelastic", "core"),
    ("torch/distributed/run.py", "torchrun", "core"),
    ("torch/distributed/launch.py", "torchrun", "core"),
    ("torch/distributed/launcher/", "torchrun", "core"),
    ("torch/distributed/distributed_c10d.py", "c10d.python", "core"),
    ("torch/distributed/rendezvous.py", "c10d.rendezvous", "core"),
    ("torch/distributed/c10d_logger.py", "c10d.python", "core"),
    ("torch/distributed/constants.py", "c10d.python", "core"),
    ("torch/distributed/utils.py", "c10d.python", "core"),
    ("torch/distributed/__init__.py", "c10d.python", "core"),
    ("torch/distributed/_store", "c10d.python", "core"),
    ("torch/distributed/device_mesh.py", "c10d.device_mesh", "core"),
    ("torch/distributed/flight_recorder/", "flight_recorder", "core"),
    ("torch/distributed/_tools/fr_", "flight_recorder", "core"),
    ("torch/distributed/debug/", "debug_server", "core"),
    ("torch/distributed/elastic_", "torchelastic", "core"),
    ("torch/distributed/_watchdog.py", "c10d.watchdog", "core"),  # torch 2.15's Python watchdog
    ("torch/distributed/nn/", "distributed.nn", "extended"),
    ("torch/distributed/", "distributed.", "extended"),  # + the sub-package: distributed.fsdp, .tensor, ...
    ("torch/utils/data/", "dataloader", "core"),
    ("torch/multiprocessing/", "multiprocessing", "core"),
    ("torch/cuda/", "cuda.python", "core"),
    ("torch/_utils.py", "torch_utils", "core"),  # ExceptionWrapper: "Caught X in DataLoader worker process N."
)
_UNVERSIONED = re.compile(r"^\d+\.\d+")

# Strings of the libraries that are not messages, by rule (issue 29: the list is what torch can print, its coverage
# is counted against it). cppscan.is_message drops most at the source; these rules run on each collected row (and
# `--refilter` applies them to the committed list: the wheels need not be fetched again). A piece of a longer message
# (a row with `pieces`) is never dropped: `WorkNCCL(` opens the watchdog's timeout line.
_NAME_CHARS = re.compile(r"^[\w.:/~?<>()|$-]+$")
_OPENS = ("(", ":", "=", "[")
# a pybind docstring: a raw-string block (`R"(\n...\n)"`), an indented continuation, or a sentence that opens like
# API documentation (`Gets the ...`, `Creates a new ...`); a message that opens with a newline (`\nCUDA kernel
# errors might be asynchronously reported...`, appended to a CUDA error) is none of these
_DOCSTRING_HEAD = re.compile(
    r"^\n[A-Z]\S*(?: +\S+){3}[\s\S]*\n *$|\n {6,}\S|"
    r"^\n?(?:Gets?|Sets?|Returns?|Creates?|Clones?|Replaces?|Retrieves?|Attach) (?:the|a|an|new)\b"
)
_SIGNATURE = re.compile(r"^[\w.]+\([^()]*\)\s*->")
_MODULE_DOC = re.compile(r"^[\w.+ ]+ bindings$")
# the error texts of libraries linked into torch: libstdc++'s range checks, fmt's format errors, nlohmann json's, and
# libnop's ErrorStatus texts (the serialiser of tensorpipe, the RPC transport: `Invalid Container Length`...)
_LINKED_LIBRARY = re.compile(
    r"__\w+ \(which is %zu\)|^\[json\.exception\.|"
    r"^(?:invalid format|chrono value is out of range|precision not allowed for this argument type|"
    r"failed to format time|\{\} error)$|"
    r"^(?:No Error|Unexpected (?:Encoding|Handle|Variant) Type|Invalid (?:Container Length|Member Count|String Length|"
    r"Table Hash|Interface Method|Handle Reference|Handle Value)|Duplicate Table Hash|(?:Read|Write) Limit Reached|"
    r"(?:Stream|Debug|IO|System|Protocol|Unknown) Error)$"
)


def not_a_message(row: dict) -> str:
    """Why a collected C++ string is not a message ("" when it may be one): `identifier` (no space: a name, a key, a
    path, a flag, a destructor's `__func__`), `docstring` (pybind API documentation), `signature` (a pybind
    schema), `module_doc` (`distributed c10d bindings`), `linked_library` (libstdc++/fmt/json's own texts)."""
    if row.get("kind") != "cpp" or "pieces" in row:
        return ""
    text = row["text"]
    bare = text.strip()
    name = not any(c.isspace() for c in bare) and "->" not in bare and not bare.endswith(_OPENS)
    if name and _NAME_CHARS.match(bare.replace("{}", "")):
        return "identifier"
    if "{}" not in text and _DOCSTRING_HEAD.search(text):
        return "docstring"
    if _SIGNATURE.match(bare):
        return "signature"
    if _MODULE_DOC.match(bare):
        return "module_doc"
    if _LINKED_LIBRARY.search(text):
        return "linked_library"
    return ""


def py_component(path: str) -> tuple[str, str] | None:
    for prefix, component, scope in PY_COMPONENTS:
        if path.startswith(prefix):
            if component == "distributed.":
                sub = path[len(prefix) :].split("/", 1)[0].removesuffix(".py").lstrip("_") or "misc"
                return component + sub, scope
            return component, scope
    return None


def _id(kind: str, component: str, text: str) -> str:
    return ":".join(p for p in (kind, component) if p) + ":" + hashlib.sha1(text.encode()).hexdigest()[:10]


def _range(seen: set[str]) -> dict:
    order = [v for v in TORCH_VERSIONS if v in seen]
    first, last = order[0], order[-1]
    inside = TORCH_VERSIONS[TORCH_VERSIONS.index(first) : TORCH_VERSIONS.index(last) + 1]
    out: dict = {"first": first, "last": last}
    missing = [v for v in inside if v not in seen]
    if missing:
        out["missing"] = missing
    return out


_SCANNED: dict[str, list[pyscan.Message]] = {}


def python_messages(version_dir: Path, version: str, into: dict) -> int:
    """Add one version's Python messages to `into` (key -> record); the count read."""
    root = version_dir / "py"
    count = 0
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        info = py_component(rel)
        if info is None:
            continue
        keep_function = "ExceptionWrapper" if rel == "torch/_utils.py" else ""
        source = path.read_text(encoding="utf-8")
        digest = hashlib.sha1(source.encode()).hexdigest()
        if digest not in _SCANNED:  # most files are the same from one version to the next
            try:
                _SCANNED[digest] = pyscan.scan(source)
            except SyntaxError as e:  # a newer torch using syntax this Python does not parse
                print(f"torch {version}: {rel}: not parsed ({e.msg})", file=sys.stderr)
                _SCANNED[digest] = []
        found = _SCANNED[digest]
        for m in found:
            if keep_function and not m.function.startswith(keep_function):
                continue
            count += 1
            key = ("python", info[0], m.call, m.template)
            rec = into.setdefault(key, {"seen": {}, "scope": info[1]})
            rec["seen"].setdefault(version, set()).add((rel, m.function, m.line, m.severity, m.exception))
    return count


def cpp_messages(version_dir: Path, version: str, into: dict) -> int:
    count = 0
    for lib in sorted((version_dir / "rodata").glob("*.json.gz")):
        name = lib.name.removesuffix(".json.gz")
        if not TORCH_LIBRARIES.match(name):
            continue
        with gzip.open(lib, "rt", encoding="ascii") as f:
            strings = [(o, t) for o, t in json.load(f)]
        for piece in cppscan.scan(strings):
            count += 1
            # Keyed by the text alone: the file (so the component) is a guess that a neighbour can sway from one
            # release to the next; the newest release's guess is kept.
            key = ("cpp", "", "", piece.text)
            rec = into.setdefault(key, {"seen": {}})
            rec["seen"].setdefault(version, set()).add((name, piece.file, piece.shape, piece.component, piece.scope))
    return count


def records(collected: dict) -> list[dict]:
    out = []
    for (kind, component, call, text), rec in collected.items():
        seen = rec["seen"]
        newest = [v for v in TORCH_VERSIONS if v in seen][-1]
        if kind == "cpp":  # the attribution most sightings agree on (core first, then by name, on a tie)
            votes = Counter((s[3], s[4]) for sites in seen.values() for s in sites)
            component, scope = min(votes, key=lambda cs: (-votes[cs], cs[1] != "core", cs[0]))
        else:
            scope = rec["scope"]
        # A C++ literal's id hangs on its text only: its component is a guess that may move.
        ident = _id(kind, component, f"{call}\0{text}") if kind == "python" else _id(kind, "", text)
        row: dict = {"id": ident, "kind": kind, "component": component}
        row["scope"] = scope
        row |= _range(set(seen))
        if kind == "python":
            sites = sorted(seen[newest])
            row["template"] = text
            row["call"] = call
            row["severity"] = sorted({s[3] for s in sites})
            exceptions = sorted({s[4] for s in sites if s[4]})
            if exceptions:
                row["exception"] = exceptions
            row["sites"] = [f"{rel}:{line} ({function})" for rel, function, line, _, _ in sites]
        else:
            sites = sorted(seen[newest], key=lambda s: (len(s[2]), s))
            row["text"] = text
            row["libraries"] = sorted({s[0] for s in seen[newest]})
            row["file"] = sorted({s[1] for s in seen[newest] if s[1]})
            shape = sites[-1][2]  # the longest reconstruction in the newest version
            if len(shape) > 1:
                row["pieces"] = list(shape)
                row["shape"] = "{}".join(shape)
        if not not_a_message(row):
            out.append(row)
    out.sort(key=lambda r: (r["kind"], r["component"], r.get("template", r.get("text")), r["id"]))
    return out


def refilter(path: Path) -> int:
    """Drop from a written list the rows `not_a_message` rejects (what a full rerun would not write)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    kept, dropped = [], Counter()
    for line in lines:
        why = not_a_message(json.loads(line))
        if why:
            dropped[why] += 1
        else:
            kept.append(line)
    path.write_text("".join(line + "\n" for line in kept), encoding="utf-8")
    for why, n in sorted(dropped.items()):
        print(f"dropped {n:4} {why}", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help="where stage 1 keeps what it read")
    ap.add_argument("--out", type=Path, default=HERE / "data")
    ap.add_argument("--downloads", type=Path, help="where wheels are downloaded (default: CACHE/downloads)")
    ap.add_argument(
        "--refilter", action="store_true", help="apply not_a_message to the committed list only (no download)"
    )
    args = ap.parse_args(argv)
    if args.refilter:
        return refilter(args.out / "torch_messages.jsonl")
    args.cache.mkdir(parents=True, exist_ok=True)
    downloads = args.downloads or args.cache / "downloads"
    collected: dict = {}
    wheels = []
    for version in TORCH_VERSIONS:
        version_dir = fetch(version, args.cache, downloads)
        meta = json.loads((version_dir / "meta.json").read_text())
        wheels.append({k: meta[k] for k in ("version", "wheel", "size", "sha256")})
        n_py = python_messages(version_dir, version, collected)
        n_cpp = cpp_messages(version_dir, version, collected)
        print(f"torch {version}: {n_py} Python messages, {n_cpp} C++ strings", file=sys.stderr)
    rows = records(collected)
    args.out.mkdir(parents=True, exist_ok=True)
    with open(args.out / "torch_messages.jsonl", "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, sort_keys=True, ensure_ascii=False) + "\n")
    (args.out / "torch_wheels.json").write_text(json.dumps(wheels, indent=1, sort_keys=True) + "\n")
    counts: dict = defaultdict(int)
    for row in rows:
        counts[(row["kind"], row["component"])] += 1
    for (kind, component), n in sorted(counts.items()):
        print(f"{kind:7} {component:32} {n}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
