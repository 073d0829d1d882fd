"""The manifest of one collection (`manifest.json` in its folder): why it was collected, the job's ranks, and
each step - what was run, its exit code and time, the file it wrote, or what was missing and why.

It is written when the collection starts and again after every step (to a temporary file renamed over it), so a
collection cut short - the job killed in the middle, the watcher itself stopped - leaves a manifest that says
how far it got (`state`). Its keys avoid `message`: a JSON file with one is read by ncclpm as a torchelastic
error file.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ncclpm import __version__


@dataclass
class Step:
    name: str  # pyspy | debug_server | signal | nvidia-smi | dmesg | diagnosis | post
    target: str  # what it was about: "rank 3, pid 812", "host"
    status: str  # ok | failed | missing | skipped | gone (the process had exited)
    why: str = ""  # for anything but ok: what was missing or went wrong, in words
    command: list[str] | None = None
    exit_code: int | None = None
    seconds: float | None = None
    output: str | None = None  # the file it wrote, relative to the collection folder


@dataclass
class Manifest:
    folder: Path
    data: dict[str, Any] = field(default_factory=dict)
    _lock: threading.RLock = field(default_factory=threading.RLock, repr=False)  # steps run in two threads

    @classmethod
    def start(cls, folder: Path, jobdir: Path, trigger: dict[str, Any], ranks: list[dict[str, Any]]) -> Manifest:
        m = cls(folder)
        m.data = {
            "tool": f"ncclpm {__version__} watch",
            "state": "collecting",
            "job_folder": str(jobdir),
            "host": socket.gethostname(),
            "started_utc": datetime.now(UTC).isoformat(timespec="milliseconds"),
            "trigger": trigger,
            "ranks": ranks,
            "steps": [],
            "notes": [],
        }
        m.write()
        return m

    def add(self, step: Step) -> None:
        with self._lock:
            self.data["steps"].append({k: v for k, v in asdict(step).items() if v is not None and v != ""})
            self.write()

    def note(self, text: str) -> None:
        with self._lock:
            self.data["notes"].append(text)
            self.write()

    def finish(self, state: str = "complete", **extra: Any) -> None:
        with self._lock:
            self.data["state"] = state
            self.data["finished_utc"] = datetime.now(UTC).isoformat(timespec="milliseconds")
            self.data.update(extra)
            self.write()

    def write(self) -> None:
        with self._lock:
            path = self.folder / "manifest.json"
            tmp = self.folder / f".manifest.json.{os.getpid()}.tmp"
            tmp.write_text(json.dumps(self.data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
            os.replace(tmp, path)

    def steps(self, name: str | None = None) -> list[dict[str, Any]]:
        return [s for s in self.data["steps"] if name is None or s["name"] == name]


def collection_folder(root: Path) -> Path:
    """`root/<UTC time>/`, created (a second collection in the same second gets a suffix)."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    for n in range(100):
        folder = root / (stamp if n == 0 else f"{stamp}-{n}")
        try:
            folder.mkdir(parents=True)
            return folder
        except FileExistsError:
            continue
    raise FileExistsError(f"{root}: cannot make a collection folder for {stamp}")
