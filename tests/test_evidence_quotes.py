"""Evidence is the files' own text, always: every quoted line of every finding of every test case is found in its file
at its line (a line a terminal had hard-wrapped may be quoted re-joined, a long one cut, several lines of one entry
quoted together); a reading of the logs is said as prose, never dressed as a quote. Flight-recorder dumps and error
files are no lines of text: their quotes are the dump's or the file's own fields."""

from __future__ import annotations

import gzip
import json
import re
from functools import cache
from pathlib import Path

import pytest

from ncclpm.api import diagnose
from ncclpm.model import MAX_QUOTE, Evidence
from ncclpm.sources.container_logs import container_format, decode_container_log, needs_decoding

ROOT = Path(__file__).resolve().parents[1]
CASES = sorted(p.parent for p in (ROOT / "tests" / "cases").glob("*/input"))
SAMPLES = sorted(p for p in (ROOT / "sample_logs").iterdir() if p.is_dir())


@cache
def _lines(path: Path) -> list[str]:
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    # a container runtime's log file is quoted as the lines the container wrote, numbered as `docker logs` /
    # `kubectl logs` print them (the report says the file was read so): its records decoded, pieces joined
    fmt = container_format(data[:65536])
    if fmt is not None and needs_decoding(fmt, data):
        data = decode_container_log(fmt, data)
    text = data.decode("utf-8", errors="replace")
    return [line.rstrip("\r") for line in text.split("\n")]


def _file(job: Path, name: str) -> Path | None:
    for candidate in (job / name, job.parent / name):
        if candidate.is_file():
            return candidate
    found = [p for p in job.rglob("*") if p.is_file() and p.as_posix().endswith("/" + name)]
    return found[0] if found else None


def _squash(text: str) -> str:
    return "".join(text.split())


def _quoted(job: Path, e: Evidence) -> str | None:
    """Why `e` is not a quote of its file (None when it is)."""
    path = _file(job, e.file)
    if path is None:
        return None  # an archive member or a pasted source: not checked here
    if path.suffix == ".json":  # an error file or a JSON stack dump: its fields, as the JSON holds them
        values = _strings(json.loads(path.read_bytes()))
        if any(_squash(e.text)[:60] in _squash(v) for v in values):
            return None  # a field (an error file's message)
        words = set(re.findall(r"[\w.]+", " ".join(values)))
        if set(re.findall(r"[\w.]+", e.text)) <= words:
            return None  # a frame: its own name, file and line fields (`main (train.py:101)`)
        return f"{e.text[:80]!r} is not a field of {e.file}"
    if e.line is None:
        if e.text.startswith("entry "):  # a flight-recorder dump: the entry's own fields
            return None
        return f"{e.file}: a whole-file quote that is neither an error file's message nor a dump entry: {e.text[:80]!r}"
    lines = _lines(path)
    if not 0 < e.line <= len(lines):
        return f"{e.ref}: no such line"
    wanted = e.text[: MAX_QUOTE - 1].rstrip("… ")
    near = "".join(lines[e.line - 1 : e.line + 12])  # re-joined hard wraps and several lines of one entry
    for part in wanted.split("\n"):
        if _squash(part) and _squash(part) not in _squash(near):
            return f"{e.ref}: {part[:100]!r} is not the file's text ({lines[e.line - 1][:100]!r})"
    return None


def _strings(doc: object) -> list[str]:
    if isinstance(doc, dict):
        return [s for v in doc.values() for s in _strings(v)]
    if isinstance(doc, list):
        return [s for v in doc for s in _strings(v)]
    return [str(doc)]


def _evidence(d) -> list[Evidence]:
    return [*d.decisive, *(e for f in d.findings for e in f.evidence)]


@pytest.mark.parametrize("job", [*CASES, *SAMPLES], ids=lambda p: p.parent.name if p.name == "input" else p.name)
def test_every_quote_is_the_files_own_text(job: Path) -> None:
    d = diagnose([job])
    problems = [why for e in _evidence(d) if (why := _quoted(job, e))]
    assert not problems, "\n".join(problems[:10])
