"""Reading single frames: is a frame the user's code or a library's, and what was a rank doing in it.

Data in `parsers/stack_frames.toml` (library path markers and package names; `[[activity]]` entries with
function/file regexes, examples and counter-examples). Library = under site-packages/dist-packages or the
Python installation, or a file whose first path component is a standard-library module or a listed package
(py-spy prints files under site-packages relative to it: `torch/distributed/distributed_c10d.py`).
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from functools import lru_cache

from ncclpm.util.resources import data_dir, read_toml

FRAMES_FILE = "stack_frames.toml"


@dataclass(frozen=True)
class Activity:
    """What a frame says its thread is doing (`parsers/stack_frames.toml`): the function, file and caller it matches."""

    id: str
    activity: str
    func: re.Pattern[str]
    file: re.Pattern[str] | None
    caller: re.Pattern[str] | None
    user_only: bool
    show: str
    examples: tuple[str, ...]
    counterexamples: tuple[str, ...]


@dataclass(frozen=True)
class FrameRules:
    """How frames are read: which files are libraries (not the user's code) and the activities frames show."""

    path_markers: tuple[str, ...]
    packages: frozenset[str]
    activities: tuple[Activity, ...]

    def is_library(self, file: str | None, native: bool = False) -> bool:
        """True for frames that are not the user's own code (native frames included)."""
        if native or not file:
            return True
        path = file.replace("\\", "/")
        if any(m in path for m in self.path_markers):
            return True
        if path.startswith("/") or re.match(r"^[A-Za-z]:/", path):
            return False  # an absolute path outside the Python installation: the user's tree
        rel = path.removeprefix("./")
        first = rel.split("/", 1)[0]
        if "/" not in rel and not first.endswith(".py"):
            return True  # a bare library name (`libc.so.6`) from a native frame
        stem = first.removesuffix(".py")
        return stem in self.packages or (stem in sys.stdlib_module_names and stem != "__main__")

    def match(self, func: str, file: str | None, caller: str | None, user: bool) -> Activity | None:
        for act in self.activities:
            if act.user_only and not user:
                continue
            if not act.func.search(func):
                continue
            if act.file is not None and not (file and act.file.search(file.replace("\\", "/"))):
                continue
            if act.caller is not None and not (caller and act.caller.search(caller)):
                continue
            return act
        return None


def _compile(raw: dict, key: str) -> re.Pattern[str] | None:
    value = raw.get(key)
    return re.compile(value) if value else None


@lru_cache(maxsize=1)
def frame_rules() -> FrameRules:
    doc = read_toml(data_dir("parsers") / FRAMES_FILE)
    lib = doc.get("library", {})
    acts = tuple(
        Activity(
            id=a["id"],
            activity=a["activity"],
            func=re.compile(a["func"]),
            file=_compile(a, "file"),
            caller=_compile(a, "caller"),
            user_only=bool(a.get("user_only", False)),
            show=a.get("show", "{func}"),
            examples=tuple(a.get("examples", ())),
            counterexamples=tuple(a.get("counterexamples", ())),
        )
        for a in doc.get("activity", [])
    )
    return FrameRules(tuple(lib.get("path_markers", ())), frozenset(lib.get("packages", ())), acts)


_PYTHON_LIB = re.compile(r"/lib(?:64)?/python3(?:\.\d+)?/(.+)$")
_DRIVE = re.compile(r"^[A-Za-z]:/")


@lru_cache(maxsize=4096)
def short_file(file: str | None) -> str:
    """`/opt/venv/lib/python3.11/site-packages/torch/x.py` -> `torch/x.py`; a user's path -> its file name."""
    if not file:
        return "?"
    path = file.replace("\\", "/")
    for marker in ("site-packages/", "dist-packages/"):
        if marker in path:
            return path.rsplit(marker, 1)[1]
    if m := _PYTHON_LIB.search(path):
        return m.group(1)
    if not path.startswith("/") and not _DRIVE.match(path):
        return path.removeprefix("./")  # already short (py-spy prints paths relative to site-packages)
    return path.rsplit("/", 1)[-1]
