"""NCCL's vocabulary extracted from its source (scripts/vocab): the committed output is well-formed, every format's
generated instance is read by the regex printf_regex makes of it (and which other formats also read it is as
recorded), the extractor does what the README says on a small repository built here."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import tomllib
from functools import cache
from pathlib import Path

import polars as pl
import pytest

from ncclpm.ingest import printf_regex as pr

ROOT = Path(__file__).resolve().parents[1]
VOCAB = ROOT / "scripts" / "vocab"
DATA = VOCAB / "data"
sys.path.insert(0, str(VOCAB))

import nccl_extract  # noqa: E402
import nccl_instances  # noqa: E402

LEVELS = {"WARN", "INFO", "CALL", "VERSION", "RAS"}
CATEGORIES = {
    "slow_rank_work", "dataloader_hang", "nvml_driver_failure", "mismatched_collectives", "rank_crash", "cuda_oom",
    "network_transport", "init_rendezvous", "shm_p2p_topology", "timeout_too_short", "config_version", "benign",
    "unknown",
}  # fmt: skip


@cache
def data() -> tuple[list[dict], dict]:
    return nccl_instances.load(DATA)


def test_messages_are_well_formed() -> None:
    messages, prefixes = data()
    tags = prefixes["scanned_tags"]
    order = {t: i for i, t in enumerate(tags)}
    assert prefixes["pinned"] == tags[-1] == nccl_extract.PINNED
    ids = [m["id"] for m in messages]
    assert len(ids) == len(set(ids))
    for m in messages:
        assert m["level"] in LEVELS, m["id"]
        assert m["id"] == nccl_extract.message_id(m["level"], m["format"], m["dynamic"]), m["id"]
        assert m["tags"] and all(t in order for t in m["tags"]), m["id"]
        assert m["tags"] == sorted(m["tags"], key=order.__getitem__)
        assert (m["first_tag"], m["last_tag"]) == (m["tags"][0], m["tags"][-1])
        assert m["line"] > 0 and not m["file"].startswith("src/") and not re.search(r"windows|_win_", m["file"])
        assert 1 <= len(m["context"]) <= 6, m["id"]
        assert m["subsys"] == ["ALL"] if m["level"] == "WARN" else isinstance(m["subsys"], list)
        assert bool(m["format"]) != bool(m["dynamic"]), m["id"]
        if not m["dynamic"]:  # one argument per conversion (a macro's `"Call to " name` is resolved)
            needed = sum(c.nargs for c in pr.conversions(m["format"]))
            assert needed <= len(m["args"]), (m["id"], m["format"], m["args"])
    warn = [m for m in messages if m["level"] == "WARN"]
    assert len(warn) > 500  # NCCL 2.18-2.30 print several hundred distinct WARN formats


def test_macro_formats_are_resolved() -> None:
    formats = {m["format"] for m in data()[0] if m["level"] == "WARN"}
    assert "Cuda failure '%s'" in formats  # CUDACHECK
    assert "Call to ibv_modify_qp failed with error %s errno %d" in formats  # the ibv wrappers' `"Call to " name`
    assert "nvmlDeviceGetHandleByPciBusId() failed: %s" in formats  # NVMLCHECK's `#name "() failed"`
    assert "Call to bind failed : %s" in formats and "Call to bind failed: %s" in formats  # SYSCHECK, 2.18 and now


def test_prefix_history() -> None:
    prefixes = data()[1]
    eras = prefixes["eras"]
    covered = [t for e in eras for t in e["tags"]]
    assert covered == sorted(set(covered), key=covered.index) and set(prefixes["scanned_tags"]) <= set(covered)

    def warn(tag: str) -> str:
        return next(e for e in eras if tag in e["tags"])["line"]["WARN"]

    assert warn("v2.18.6-1") == "{host}:{pid}:{tid} [{cuda_dev}] {file}:{line} NCCL WARN {message}"
    assert warn("v2.26.6-1").startswith("[{date} {time}] {host}")
    assert "({function}) NCCL WARN" in warn("v2.30.7-1") and "(" not in warn("v2.30.4-1")


def test_result_codes() -> None:
    for era in data()[1]["result_codes"]:
        by_name = {c["name"]: c for c in era["codes"]}
        assert by_name["ncclRemoteError"]["code"] == 6
        assert by_name["ncclRemoteError"]["text"] == "remote process exited or there was a network error"
        assert all(c["text"] for c in era["codes"])


@cache
def compiled() -> dict[str, re.Pattern[str]]:
    return {m["id"]: re.compile(pr.printf_regex(m["format"], m["args"]), re.S) for m in data()[0] if not m["dynamic"]}


def test_every_instance_matches_its_own_regex_under_every_prefix() -> None:
    messages, prefixes = data()
    line_rx = {
        (e["first_tag"], level): re.compile(nccl_instances.line_regex(tpl), re.S)
        for e in prefixes["eras"]
        for level, tpl in e["line"].items()
    }
    failures = []
    for m in messages:
        if m["dynamic"]:
            continue
        rx = compiled()[m["id"]]
        for era, text, line in nccl_instances.instances(m, prefixes["eras"]):
            if not rx.fullmatch(text):
                failures.append((m["id"], text))
            if m["level"] in ("WARN", "INFO", "CALL"):
                lm = line_rx[(era, m["level"])].fullmatch(line)
                if not lm or lm["message"] != text:
                    failures.append((m["id"], line))
    assert failures == []


def test_collisions_are_as_recorded() -> None:
    """Which WARN instance other formats also read; a change (new formats, a converter change) must be looked at
    and the file regenerated: `python scripts/vocab/nccl_instances.py --collisions`."""
    recorded = json.loads((DATA / "nccl_collisions.json").read_text())
    assert nccl_instances.collisions(data()[0]) == recorded


def test_regexes_compile_in_polars() -> None:
    """Rust's regex dialect (polars) accepts what the converter writes: chunks of alternations, one compile each."""
    rxs = [pr.printf_regex(m["format"], m["args"], named=False) for m in data()[0] if not m["dynamic"]]
    for i in range(0, len(rxs), 150):
        pl.Series(["x"]).str.contains("|".join(f"(?:{r})" for r in rxs[i : i + 150]))
    named = [pr.printf_regex(m["format"], m["args"]) for m in data()[0] if m["level"] == "WARN"][:40]
    for r in named:
        pl.Series(["x"]).str.extract_groups(r)


@pytest.mark.parametrize(
    ("fmt", "args", "line", "expect"),
    [
        (
            "socketStartConnect: Connect to %s failed : %s",
            ["ncclSocketToString(&sock->addr, line)", "strerror(errno)"],
            "socketStartConnect: Connect to 10.0.0.7<43311> failed : Software caused connection abort",
            {"peer": "10.0.0.7<43311>", "errno_text": "Software caused connection abort"},
        ),
        (
            "NET/IB : %s:%d Got async event : %s",
            ["dev->devName", "dev->portNum", "str"],
            "NET/IB : mlx5_0:1 Got async event : port error",
            {"device": "mlx5_0", "port": "1"},
        ),
        ("Cuda failure %d '%s'", ["err", "errStr"], "Cuda failure 2 'out of memory'", {"cuda_error": "out of memory"}),
        ("%5.1f%% of %-8s done: %*d", ["pct", "what", "w", "n"], "  3.5% of trees    done:    12", {}),
        (
            "shm open %s: %m",
            ["shmPath"],
            "shm open /dev/shm/nccl-x1: No space left on device",
            {"path": "/dev/shm/nccl-x1"},
        ),
        ("ptr %p size %zu\n", ["p", "size"], "ptr (nil) size 4096", {"size": "4096"}),
    ],
)
def test_converter(fmt: str, args: list[str], line: str, expect: dict) -> None:
    m = re.fullmatch(pr.printf_regex(fmt, args), line)
    assert m, pr.printf_regex(fmt, args)
    assert {k: v for k, v in m.groupdict().items() if k in expect} == expect


def test_converter_refuses_what_the_format_does_not_print() -> None:
    rx = re.compile(pr.printf_regex("Duplicate GPU detected : rank %d and rank %d both on CUDA device %lx", []))
    assert rx.fullmatch("Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 1000")
    assert not rx.fullmatch("Duplicate GPU detected : rank one and rank 0 both on CUDA device 1000")
    assert pr.is_generic("%s") and pr.is_generic("%s: %s") and not pr.is_generic("Cuda failure '%s'")
    assert pr.conversions("%*d %s")[1].arg_index == 2


def test_classification_covers_every_warn_format() -> None:
    doc = tomllib.loads((DATA / "nccl_classified.toml").read_text())
    warn = {m["id"]: m for m in data()[0] if m["level"] == "WARN"}
    assert set(doc["message"]) == set(warn)
    for mid, entry in doc["message"].items():
        assert entry["format"] == warn[mid]["format"], mid
        assert entry["category"] in CATEGORIES, mid
        assert entry["strength"] in {"decisive", "supporting", "benign", "unknown"}, mid
        assert entry["incriminates"] in {"this_rank", "this_host", "peer", "nobody", "unknown"}, mid
        assert entry["meaning"] and entry["area"], mid
        assert (entry["category"] == "benign") == (entry["strength"] == "benign"), mid


# --- the extractor, on a repository made here -----------------------------------------------------------------

DEBUG_CC = {
    "old": 'void f() { snprintf(b, 9, "\\n%s:%d:%d [%d] %s:%d NCCL WARN ", h, p, t, d, f, l); }\n'
    'char ncclLastError[1024] = "";\n',
    "new": 'void f() { std::strftime(b, 9, "[%F %T] ", &tm); if (m & (1u << NCCL_LOG_WARN)) {}\n'
    '  snprintf(b, 9, "%s:%d:%d ", h, p, t);\n  snprintf(b, 9, "[%d] %s:%d (%s) NCCL WARN %s\\n", d, f, l, fn, fmt);\n'
    '  snprintf(b, 9, "[%d] %s:%d NCCL WARN %s\\n", d, f, l, fmt); getHostNameForLog(h); }\n',
}
NCCL_H = "typedef enum { ncclSuccess = 0, ncclSystemError = 2, ncclNumResults = 3 } ncclResult_t;\n"
INIT_CC = (
    "const char* ncclGetErrorString(ncclResult_t code) {\n  switch (code) {\n"
    '    case ncclSuccess: return "no error";\n    case ncclSystemError: return "unhandled system error";\n'
    '    default: return "unknown result code";\n  }\n}\n'
)
CHECKS_H = (
    "#define SYSCHECK(call, name) do { int r = call; if (r == -1) { \\\n"
    '    WARN("Call to " name " failed : %s", strerror(errno)); return ncclSystemError; } } while (0)\n'
)
SOCKET_CC = (
    '#include "checks.h"\nncclResult_t ncclSocketConnect(struct ncclSocket* sock) {\n'
    '  SYSCHECK(connect(sock->fd, &sock->addr, len), "connect");\n'
    "  if (sock->state != 3) {\n"
    '    WARN("Net : Connect to %s failed : %s", ncclSocketToString(&sock->addr, line),\n'
    "         strerror(errno));\n    return ncclRemoteError;\n  }\n"
    '#if 0\n  WARN("never compiled");\n#endif\n'
    '  INFO(NCCL_INIT|NCCL_NET, "Connected to %s", ncclSocketToString(&sock->addr, line));\n  return ncclSuccess;\n}\n'
)


def _repo(tmp: Path) -> Path:
    repo = tmp / "nccl"
    (repo / "src" / "misc").mkdir(parents=True)
    (repo / "src" / "include").mkdir()

    def git(*a: str) -> None:
        subprocess.run(["git", "-C", str(repo), *a], check=True, capture_output=True)

    git("init", "-q")
    git("config", "user.email", "t@example.com")
    git("config", "user.name", "t")
    (repo / "src" / "nccl.h.in").write_text(NCCL_H)
    (repo / "src" / "init.cc").write_text(INIT_CC)
    (repo / "src" / "include" / "checks.h").write_text(CHECKS_H)
    for tag, debug, socket in [
        ("v2.18.1-1", "old", SOCKET_CC),
        ("v2.18.3-1", "old", SOCKET_CC.replace("Net : Connect", "socketStartConnect: Connect")),
        ("v2.30.7-1", "new", SOCKET_CC.replace("Net : Connect", "socketStartConnect: Connect")),
    ]:
        (repo / "src" / "debug.cc").write_text(DEBUG_CC[debug])
        (repo / "src" / "misc" / "socket.cc").write_text(socket)
        git("add", "-A")
        git("commit", "-qm", tag)
        git("tag", tag)
    return repo


def _readme_command() -> list[str]:
    readme = (VOCAB / "README.md").read_text()
    assert "git clone https://github.com/NVIDIA/nccl" in readme
    line = next(x.strip() for x in readme.splitlines() if x.strip().startswith("python scripts/vocab/nccl_extract.py"))
    return shlex.split(line.split("#")[0])


def test_readme_command_extracts_a_repository(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cmd = _readme_command()
    assert cmd[:2] == ["python", "scripts/vocab/nccl_extract.py"] and len(cmd) == 3
    repo = _repo(tmp_path)
    out = tmp_path / "out"
    monkeypatch.setattr(nccl_extract, "PINNED", "v2.30.7-1")
    assert nccl_extract.main([str(repo), "--out", str(out)]) == 0
    assert nccl_extract.main([str(repo), "--out", str(out), "--check"]) == 0  # a rerun reproduces it
    messages = [json.loads(x) for x in (out / "nccl_messages.jsonl").read_text().splitlines()]
    by_format = {m["format"]: m for m in messages}
    assert "Net : Connect to %s failed : %s" not in by_format  # only in v2.18.1-1, not the last patch of 2.18
    new = by_format["socketStartConnect: Connect to %s failed : %s"]
    assert (new["first_tag"], new["last_tag"], new["file"], new["line"]) == (
        "v2.18.3-1",
        "v2.30.7-1",
        "misc/socket.cc",
        5,
    )
    assert new["function"] == "ncclSocketConnect" and new["args"][1] == "strerror(errno)"
    assert new["context"][0].startswith("ncclResult_t ncclSocketConnect")
    sys_check = by_format["Call to connect failed : %s"]
    assert sys_check["via"] == ["SYSCHECK"] and sys_check["line"] == 3
    assert "never compiled" not in by_format
    info = by_format["Connected to %s"]
    assert info["subsys"] == ["INIT", "NET"] and info["level"] == "INFO"
    prefixes = json.loads((out / "nccl_prefixes.json").read_text())
    assert [e["tags"] for e in prefixes["eras"]] == [["v2.18.1-1", "v2.18.3-1"], ["v2.30.7-1"]]
    assert prefixes["eras"][1]["line"]["WARN"].startswith("[{date} {time}] {host}:{pid}:{tid} [{cuda_dev}] {file}")
    assert prefixes["eras"][1]["warn_no_function_fallback"] is True
    assert prefixes["result_codes"][0]["codes"][1] == {
        "code": 2,
        "name": "ncclSystemError",
        "text": "unhandled system error",
    }
