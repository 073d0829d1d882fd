#!/usr/bin/env python3
"""Turn each extracted NCCL format into log lines as NCCL prints them: the conversions filled with plausible typed
values (addresses, HCA names, errno texts, sizes), under the line prefix of every prefix era the message lived in.

    python scripts/vocab/nccl_instances.py                 # print one line per message and era
    python scripts/vocab/nccl_instances.py --collisions    # rewrite data/nccl_collisions.json

Feeds the tests: every format's instances must match its own regex (src/ncclpm/ingest/printf_regex.py), and the
formats another format's instance also matches are listed (data/nccl_collisions.json).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"
sys.path.insert(0, str(HERE.parent.parent / "src" / "ncclpm" / "ingest"))

import printf_regex as pr  # noqa: E402

# What a named field prints: (as a string for %s, as a number for the integer conversions).
VALUES: dict[str, tuple[str, int]] = {
    "peer": ("10.0.3.14<41524>", 5),
    "addr": ("10.0.3.12<43311>", 0),
    "errno_text": ("Connection refused", 111),
    "cuda_error": ("invalid argument", 1),
    "nccl_error": ("unhandled system error (run with NCCL_DEBUG=INFO for details)", 2),
    "nvml_error": ("Not Found", 6),
    "wc_status": ("IBV_WC_RETRY_EXC_ERR", 12),
    "wc_status_text": ("transport retry counter exceeded", 12),
    "status": ("IBV_WC_RETRY_EXC_ERR", 12),
    "ib_event": ("port error", 9),
    "opcode": ("IBV_WC_SEND", 0),
    "vendor_err": ("129", 129),
    "device": ("mlx5_0", 0),
    "port": ("1", 1),
    "qp": ("4711", 4711),
    "interface": ("eth0", 0),
    "nranks": ("16", 16),
    "local_rank": ("2", 2),
    "peer_rank": ("5", 5),
    "rank": ("3", 3),
    "cuda_dev": ("3", 3),
    "bus_id": ("0000:41:00.0", 0x41000),
    "size": ("1048576", 1048576),
    "host": ("node07", 0),
    "path": ("/dev/shm/nccl-Zq8dG1", 0),
    "errno": ("111", 111),
    "comm_id": ("0xb3609cbb6ba7a88a", 0x3609CBB6BA7A88A),
    "version": ("2.30.7", 23007),
    "timeout": ("1800", 1800),
}
EXAMPLE = {"host": "node03", "pid": 23440, "tid": 23664, "cuda_dev": 3, "date": "2026-03-04", "time": "10:11:12"}

_LITERAL = re.compile(r'"((?:[^"\\]|\\.)*)"')
_LAST_ID = re.compile(r"([A-Za-z_]\w*)\W*$")


def value_for(conv: pr.Conversion, name: str | None, arg: str | None, function: str | None) -> str:
    """The text one conversion prints."""
    c = conv.conv
    if c == "%":
        return "%"
    if c == "m":
        return str(VALUES["errno_text"])
    if c == "p":
        return "0x7f3a2c000b80"
    if c == "c":
        return "x"
    known = VALUES.get(name.rstrip("_0123456789")) if name else None
    if name == "function" and function:
        base: str | int | float = function
    elif known:
        base = known[0] if c == "s" else known[1]
    elif c == "s":
        lit = _LITERAL.search(arg or "")
        if lit:  # `x ? "Send" : "Recv"`, a literal argument: print the first
            base = lit[1].encode().decode("unicode_escape")
        else:
            m = _LAST_ID.search(arg or "")
            base = m[1] if m else "value"
    elif c in "eEfFgGaA":
        base = 1.5
    elif c in "xX":
        base = 0x7F3A2C
    else:
        base = 7
    spec = "%" + conv.flags.replace("'", "") + (conv.width if conv.width and conv.width != "*" else "")
    if conv.precision is not None and conv.precision != "*":
        spec += "." + conv.precision
    if c in "diouxX":
        if isinstance(base, str):
            base = 7
        if c in "uoxX":
            base = abs(int(base))
        return (spec + ("d" if c in "iu" else c)) % int(base)
    if c in "eEfFgGaA":
        return (spec + ("f" if c in "aA" else c)) % float(base if not isinstance(base, str) else 1.5)
    return (spec + "s") % str(base)


def fill(fmt: str, args: list[str], function: str | None) -> str:
    """`fmt` printed with plausible values (a trailing newline is the line's end and is left out)."""
    fmt = fmt.rstrip("\n")
    names = pr.field_names(fmt, args)
    out, pos = [], 0
    for conv, name in zip(pr.conversions(fmt), names, strict=True):
        out.append(fmt[pos : conv.start])
        arg = args[conv.arg_index] if conv.arg_index is not None and conv.arg_index < len(args) else None
        out.append(value_for(conv, name, arg, function))
        pos = conv.end
    out.append(fmt[pos:])
    return "".join(out)


def era_of(tag: str, eras: list[dict]) -> dict:
    return next(e for e in eras if tag in e["tags"])


def prefixed(level: str, message: str, era: dict, file: str, line: int, function: str | None) -> str:
    """The whole log line at `era` (RAS output and the VERSION line carry no prefix)."""
    if level in ("RAS", "VERSION"):
        return message
    template = era["line"]["WARN" if level == "WARN" else "CALL" if level == "CALL" else "INFO"]
    return template.format(**EXAMPLE, file=file, line=line, function=function or "operator()", message=message)


_SLOT = {
    "date": r"\d{4}-\d\d-\d\d",
    "time": r"\d\d:\d\d:\d\d",
    "host": r"[^\s:]+",
    "pid": r"\d+",
    "tid": r"\d+",
    "cuda_dev": r"-?\d+",
    "file": r"[\w./+-]+",
    "line": r"\d+",
    "function": r"[^\s()]+",
    "elapsed_ms": r"[\d.]+",
}


def line_regex(template: str) -> str:
    """A prefix template of data/nccl_prefixes.json as a regex; the message is the group `message`."""
    out, pos = [], 0
    for m in re.finditer(r"\{(\w+)\}", template):
        out.append(pr.escape(template[pos : m.start()]))
        out.append("(?P<message>.*)" if m[1] == "message" else f"(?P<{m[1]}>{_SLOT[m[1]]})")
        pos = m.end()
    out.append(pr.escape(template[pos:]))
    return "".join(out)


def instances(msg: dict, eras: list[dict]) -> Iterator[tuple[str, str, str]]:
    """(era's first tag, message text, whole line) for each prefix era the message lived in."""
    text = fill(msg["format"], msg["args"], msg["function"]) if not msg["dynamic"] else "dynamic text"
    seen = set()
    for tag in msg["tags"]:
        era = era_of(tag, eras)
        if era["first_tag"] in seen:
            continue
        seen.add(era["first_tag"])
        yield era["first_tag"], text, prefixed(msg["level"], text, era, msg["file"], msg["line"], msg["function"])


def load(data: Path = DATA) -> tuple[list[dict], dict]:
    messages = [json.loads(x) for x in (data / "nccl_messages.jsonl").read_text(encoding="utf-8").splitlines()]
    prefixes = json.loads((data / "nccl_prefixes.json").read_text(encoding="utf-8"))
    return messages, prefixes


def first_line(text: str) -> str:
    return text.split("\n", 1)[0]


def collisions(messages: list[dict], levels: tuple[str, ...] = ("WARN",)) -> dict:
    """For each message of `levels`, the other formats whose regex also matches its instance's whole text:
    `equivalent` groups print the same texts (they differ by a trailing newline or an integer's length modifier);
    `matched_by_other_formats` lists the rest (a more general format, e.g. `Failed to open %s`, reads the line
    too). Generic formats (too little literal text) are listed apart and not tried against the others."""
    msgs = sorted((m for m in messages if m["level"] in levels and not m["dynamic"]), key=lambda m: m["id"])
    compiled = []
    for m in msgs:
        rx = pr.printf_regex(m["format"], m["args"], named=False)
        lits = pr.literal_chunks(m["format"])
        compiled.append((m, rx, re.compile(rx, re.S), max(lits, key=len) if lits else "", pr.is_generic(m["format"])))
    generic = [m["id"] for m, _, _, _, g in compiled if g]
    by_regex: dict[str, list[str]] = {}
    for m, rx, _, _, g in compiled:
        if not g:
            by_regex.setdefault(rx, []).append(m["id"])
    equivalent = sorted(ids for ids in by_regex.values() if len(ids) > 1)
    same = {i: set(ids) for ids in equivalent for i in ids}
    pairs: dict[str, list[str]] = {}
    for m, _, _, _, g in compiled:
        if g:
            continue
        text = fill(m["format"], m["args"], m["function"])
        mine = same.get(m["id"], {m["id"]})
        hits = [
            o["id"]
            for o, _, rx, key, og in compiled
            if not og and key in text and o["id"] not in mine and rx.fullmatch(text)
        ]
        if hits:
            pairs[m["id"]] = hits
    return {"levels": list(levels), "generic": generic, "equivalent": equivalent, "matched_by_other_formats": pairs}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--collisions", action="store_true", help="write data/nccl_collisions.json")
    ns = ap.parse_args(argv)
    messages, prefixes = load(ns.data)
    if ns.collisions:
        text = json.dumps(collisions(messages), indent=1) + "\n"
        (ns.data / "nccl_collisions.json").write_text(text, encoding="utf-8")
        return 0
    for m in messages:
        for _, _, line in instances(m, prefixes["eras"]):
            print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
