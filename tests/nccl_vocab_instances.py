"""Log lines made from every declared NCCL message (parsers/nccl/): each format filled with typed values
(scripts/vocab/nccl_instances.py), under the line prefix of every era NCCL printed it in, alone or inside torch's
exception (`Last error:`). Shared by tests/test_nccl_messages.py and docs/VOCABULARY.md's generator."""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from ncclpm.ingest import printf_regex as pr
from ncclpm.ingest.catalog import load_catalog
from ncclpm.ingest.text.nccl_messages import Message

ROOT = Path(__file__).resolve().parents[1]
VOCAB = ROOT / "scripts" / "vocab"
sys.path.insert(0, str(VOCAB))

import nccl_instances  # noqa: E402

HOST = "node03:23440:23664 [3]"
# torch's exception around NCCL's last error (torch >= 2.0 puts the message on its own line)
WRAPPED = (
    "[rank3]:Traceback (most recent call last):\n"
    '[rank3]:  File "/workspace/train.py", line 88, in <module>\n'
    "[rank3]:    dist.all_reduce(grad)\n"
    "[rank3]:torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/"
    "ProcessGroupNCCL.cpp:3690, unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.27.7\n"
    "[rank3]:ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error. \n"
    "[rank3]:Last error:\n"
    "[rank3]:{message}\n"
)


@dataclass(frozen=True)
class Instance:
    entry: Message
    era: str  # the NCCL release (or prefix style) the line is written as
    message: str  # what NCCL's WARN says (the text after `NCCL WARN`)
    line: str  # the whole log line
    where: str | None  # NCCL's `file:line` of the call


@cache
def catalog():  # type: ignore[no-untyped-def]
    return load_catalog()


@cache
def extraction() -> tuple[dict[str, dict], list[dict]]:
    messages, prefixes = nccl_instances.load()
    return {m["id"]: m for m in messages if m["level"] == "WARN"}, prefixes["eras"]


def _first_minor(entry: Message) -> tuple[int, int]:
    m = re.match(r"(\d+)\.(\d+)", entry.nccl)
    return (int(m[1]), int(m[2])) if m else (0, 0)


def _filled(entry: Message) -> str:
    """The entry's format filled with the values its fields print (an extracted format: with its arguments)."""
    assert entry.format is not None
    first = entry.format.rstrip("\n").split("\n", 1)[0]
    out, pos = [], 0
    for conv, name in zip(pr.conversions(first), entry.fields, strict=True):
        out.append(first[pos : conv.start])
        out.append(nccl_instances.value_for(conv, name or None, None, None))
        pos = conv.end
    return "".join(out) + first[pos:]


def instances(entry: Message) -> list[Instance]:
    """Every log line the entry is tested on: its extracted format under each prefix era it lived in (2.18+),
    the `file:line NCCL WARN` head before 2.18, and the untagged `file:line WARN` head of NCCL <= 2.2 for the
    formats of the oldest releases; a hand entry's examples under a WARN head."""
    msgs, eras = extraction()
    msg = msgs.get(entry.id)
    out: list[Instance] = []
    if msg is not None and not msg["dynamic"]:
        where = f"{msg['file']}:{msg['line']}"
        for era, text, line in nccl_instances.instances(msg, eras):
            text, line = text.split("\n", 1)[0], line.split("\n", 1)[0]
            out.append(Instance(entry, era, text, line, where))
    texts = [_filled(entry)] if entry.format is not None else list(entry.examples)
    old = _first_minor(entry)
    for text in texts if msg is None else []:
        out.append(Instance(entry, "<2.18", text, f"{HOST} misc/socket.cc:311 NCCL WARN {text}", "misc/socket.cc:311"))
    if old <= (2, 3) and texts:
        text = texts[0]
        out.append(Instance(entry, "<=2.2", text, f"{HOST} include/socket.h:311 WARN {text}", "include/socket.h:311"))
    return out


def wrapped(message: str) -> str:
    return WRAPPED.format(message=message)


@cache
def vocabulary_doc():  # type: ignore[no-untyped-def]
    """scripts/vocab/vocabulary_doc.py as a module (it is a script, not part of the package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("vocabulary_doc", VOCAB / "vocabulary_doc.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
