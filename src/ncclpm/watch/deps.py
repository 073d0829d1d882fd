"""What `ncclpm watch` needs besides ncclpm: psutil (to find and follow the job's processes) and py-spy (to dump
their stacks), both from the `watch` extra. Checked at start: psutil missing stops the command with the install
line; py-spy missing is said at start and in every manifest, and the other collectors still run."""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

INSTALL = "pip install 'nccl-postmortem[watch]'"


@dataclass(frozen=True)
class Tools:
    psutil: ModuleType
    pyspy: str | None  # the py-spy executable, None when it is not installed

    def pyspy_missing(self) -> str:
        return f"py-spy is not installed (no `py-spy` on PATH nor beside {sys.executable}): {INSTALL}"


class MissingDependency(RuntimeError):
    """A dependency the command cannot run without; the message says how to install it."""


def find_pyspy() -> str | None:
    """`py-spy` on PATH, else beside this Python (a venv's bin/ that is not on PATH)."""
    found = shutil.which("py-spy")
    if found:
        return found
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.is_file() and os.access(beside, os.X_OK) else None


def check() -> Tools:
    try:
        import psutil
    except ImportError:
        raise MissingDependency(f"ncclpm watch needs psutil to follow the job's processes: {INSTALL}") from None
    return Tools(psutil=psutil, pyspy=find_pyspy())
