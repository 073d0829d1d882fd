"""How NCCL prints a log line at each release tag (read from src/debug.cc), and its result codes and their texts
(src/nccl.h.in's enum, ncclGetErrorString in src/init.cc)."""

from __future__ import annotations

import re
from typing import Protocol

from nccl_cpp import lex


class _Git(Protocol):
    def text(self, tag: str, path: str) -> str | None: ...


_LEVEL_WORDS = ("NCCL WARN", "NCCL INFO", "NCCL TRACE", "NCCL CALL", "%s:%d:%d")


def _literals(text: str) -> list[str]:
    return [t.value for t in lex(text).code if t.kind == "str"]


def debug_features(text: str) -> dict:
    """What a tag's debug.cc does to a line, read from its code: the printf literals that build the prefix and the
    switches around them."""
    lits = _literals(text)
    prefix_lits = sorted({s for s in lits if any(w in s for w in _LEVEL_WORDS)})
    ts_default = next((s for s in lits if s.startswith("[%F") or s == "[%F %T] "), None)
    timestamps = "strftime" in text
    warn_ts_default = bool(re.search(r"\(\s*1u?\s*<<\s*NCCL_LOG_WARN\s*\)", text)) and timestamps
    function = any("(%s) NCCL WARN" in s for s in prefix_lits)
    return {
        "literals": prefix_lits,
        "timestamp": timestamps,
        "timestamp_default_format": ts_default if timestamps else None,
        "timestamp_default_levels": (["WARN"] if warn_ts_default else []) if timestamps else None,
        "warn_function": function,
        "warn_no_function_fallback": function and any(re.search(r"%s:%d NCCL WARN", s) for s in prefix_lits),
        "hostname_sanitized": "getHostNameForLog" in text,
        "last_error_buffer": int(m[1]) if (m := re.search(r"char ncclLastError\[(\d+)\]", text)) else None,
    }


def templates(f: dict) -> dict[str, str]:
    """The line shapes, with {named} slots: what a reader sees with the default NCCL_DEBUG_TIMESTAMP_* settings."""
    ts = "[{date} {time}] " if f["timestamp"] and "WARN" in (f["timestamp_default_levels"] or []) else ""
    host = "{host}:{pid}:{tid} "
    fn = "({function}) " if f["warn_function"] else ""
    out = {
        "WARN": f"{ts}{host}[{{cuda_dev}}] {{file}}:{{line}} {fn}NCCL WARN {{message}}",
        "INFO": f"{host}[{{cuda_dev}}] NCCL INFO {{message}}",
        "CALL": f"{host}NCCL CALL {{message}}",
        "TRACE": f"{host}[{{cuda_dev}}] {{elapsed_ms}} {{function}}:{{line}} NCCL TRACE {{message}}",
    }
    if f["warn_no_function_fallback"]:
        out["WARN_plugin"] = f"{ts}{host}[{{cuda_dev}}] {{file}}:{{line}} NCCL WARN {{message}}"
    return out


def prefixes_for(git: _Git, tags: list[str]) -> dict:
    """Consecutive tags whose debug.cc prints alike, as eras (oldest first)."""
    eras: list[dict] = []
    for tag in tags:
        text = git.text(tag, "src/debug.cc") or ""
        f = debug_features(text)
        if eras and eras[-1]["features"] == f:
            eras[-1]["tags"].append(tag)
            continue
        eras.append({"features": f, "tags": [tag]})
    out_eras = []
    for e in eras:
        f = e["features"]
        out_eras.append(
            {
                "first_tag": e["tags"][0],
                "last_tag": e["tags"][-1],
                "tags": e["tags"],
                "line": templates(f),
                **{k: v for k, v in f.items() if k != "literals"},
                "debug_cc_literals": f["literals"],
            }
        )
    return {
        "eras": out_eras,
        "notes": [
            "{host} is gethostname() cut at the first '.'; since the era with hostname_sanitized, '%' and '/' in it "
            "become '-'.",
            "A WARN line starts with an extra newline (an empty line before it in the log).",
            "With timestamps, NCCL_DEBUG_TIMESTAMP_LEVELS chooses the levels that get one (default WARN only) and "
            "NCCL_DEBUG_TIMESTAMP_FORMAT its strftime format (default '[%F %T] ', '%Nf' adds N subsecond digits, "
            "'_' prints a space).",
            "{file} is __FILE__ as NCCL's makefiles compile it: relative to src/ (transport/net_ib.cc, "
            "include/alloc.h). {function} is __func__: a bare name (a lambda's is 'operator()').",
            "WARN_plugin: a net/tuner/profiler plugin logging through the exported ncclDebugLog gives no function.",
            "INFO/CALL/TRACE lines get a timestamp only when NCCL_DEBUG_TIMESTAMP_LEVELS asks for it.",
            "ncclGetLastError() (torch: 'Last error:') returns the last WARN's message as formatted, without any "
            "prefix, cut to last_error_buffer-1 bytes; it is set whatever NCCL_DEBUG is, except for a WARN that "
            "NOWARN() downgraded to INFO.",
        ],
    }


_ENUM = re.compile(r"\b(nccl[A-Z]\w*)\s*=\s*(\d+)")
_CASE = re.compile(r'case\s+(nccl\w+)\s*:\s*return\s+"((?:[^"\\]|\\.)*)"')
_DEFAULT = re.compile(r'default\s*:\s*return\s+"((?:[^"\\]|\\.)*)"')


def result_codes(git: _Git, tags: list[str]) -> list[dict]:
    """ncclResult_t values and ncclGetErrorString's text for each, as eras of identical tables."""
    eras: list[dict] = []
    for tag in tags:
        header = git.text(tag, "src/nccl.h.in") or ""
        enum_m = re.search(r"typedef\s+enum\s*\{([^}]*)\}\s*ncclResult_t", header)
        values = dict(_ENUM.findall(enum_m[1])) if enum_m else {}
        init = git.text(tag, "src/init.cc") or ""
        body_m = re.search(r"const char\*\s*ncclGetErrorString\(ncclResult_t code\)\s*\{(.*?)\n\}", init, re.S)
        body = body_m[1] if body_m else ""
        texts = dict(_CASE.findall(body))
        default = _DEFAULT.search(body)
        table = [
            {"code": int(v), "name": k, "text": texts.get(k)}
            for k, v in sorted(values.items(), key=lambda kv: int(kv[1]))
            if k != "ncclNumResults"
        ]
        entry = {"codes": table, "default_text": default[1] if default else None}
        if eras and eras[-1]["table"] == entry:
            eras[-1]["tags"].append(tag)
        else:
            eras.append({"table": entry, "tags": [tag]})
    return [{"first_tag": e["tags"][0], "last_tag": e["tags"][-1], "tags": e["tags"], **e["table"]} for e in eras]
