#!/usr/bin/env python3
"""Extract NCCL's log vocabulary from its git repository: every WARN format (and the INFO lines that matter for a
diagnosis) at each release tag from 2.18 on, how NCCL prefixes a log line at each tag, and its result codes.

    git clone https://github.com/NVIDIA/nccl /tmp/nccl
    python scripts/vocab/nccl_extract.py /tmp/nccl            # writes scripts/vocab/data/nccl_*.json[l]
    python scripts/vocab/nccl_extract.py /tmp/nccl --check    # exit 1 if the committed output differs

Rerunning on the same tags reproduces the committed files byte for byte (everything is sorted; nothing depends on
the time, the machine or the order git lists things). Stdlib only. See scripts/vocab/README.md.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from nccl_calls import Site, Tree  # noqa: E402
from nccl_cpp import Lexed, lex  # noqa: E402
from nccl_prefix import prefixes_for, result_codes  # noqa: E402

FIRST_MINOR = 18  # NCCL 2.18 (torch 2.1's wheels) is the oldest release people still run
PINNED = "v2.30.7-1"  # the snapshot the coverage test reads (the newest release tag when this was written)
DATA = HERE / "data"
SOURCE_SUFFIXES = (".cc", ".h", ".cu", ".cpp", ".c", ".cuh", ".hpp")
# Windows-only sources (2.29+): not compiled into the Linux library people run.
_WINDOWS = re.compile(r"windows|_win_|_win\.")
_TAG = re.compile(r"^v2\.(\d+)\.(\d+)-(\d+)$")

# Topics of INFO formats (what a diagnosis reads them for), recorded with each INFO message. Checked in order.
INFO_TOPICS: list[tuple[str, re.Pattern[str]]] = [
    ("retcode", re.compile(r"^%s:%d(?: \(%s\))? -> ")),
    (
        "transport",
        re.compile(r"\bvia\b|P2P/|NET/|SHM/|CollNet|NVLS|MNNVL|IMEX|GDR|DMA-?BUF|\bPXN\b|CUMEM|nvlink", re.I),
    ),
    (
        "network",
        re.compile(
            r"[Nn]etwork|\bIB\b|RoCE|ibv_|\bGID\b|\bHCA\b|Socket|[Ii]nterface|IfName|\bport\b|Bootstrap|"
            r"\bQP",
            re.I,
        ),
    ),
    ("env_echo", re.compile(r"NCCL_[A-Z_]+|set by environment|\benv(?:ironment)?\b", re.I)),
    (
        "comm_summary",
        re.compile(
            r"Init (?:START|COMPLETE)|nranks|commId|comm 0x|cudaDev|busId|NCCL version|cudaDriverVersion|[Dd]river|"
            r"localRank|nNodes|[Cc]hannel",
            re.I,
        ),
    ),
    (
        "failure",
        re.compile(
            r"fail|error|abort|timeout|timed out|closed|refused|reset|unreachable|not supported|unsupported|invalid|"
            r"cannot|could not|couldn't|unable|mismatch|lost|dead|retry|retrying|exceed|no (?:space|memory)|"
            r"out of memory|denied",
            re.I,
        ),
    ),
    (
        "fallback",
        re.compile(
            r"fall(?:ing)? ?back|disabl|not (?:enabled|available|found|using)|skip|ignor|instead|forc|"
            r"default",
            re.I,
        ),
    ),
    ("ras", re.compile(r"\bRAS\b|ncclras|keepalive|peer", re.I)),
    (
        "resource",
        re.compile(
            r"[Aa]lloc|[Mm]emory|\bshm\b|/dev/shm|cuMem|register|\bmmap\b|[Pp]lugin|[Tt]uner|[Pp]rofiler|"
            r"[Ll]oad(?:ed|ing)?\b|dlopen|\.so\b",
            re.I,
        ),
    ),
    ("topology", re.compile(r"[Tt]opo|NUMA|CPU|PCI|[Aa]ffinity|[Gg]raph|[Pp]ath|[Rr]ing|[Tt]ree|[Pp]attern", re.I)),
]


# --- git ------------------------------------------------------------------------------------------------------


class Git:
    def __init__(self, repo: Path):
        self.repo = repo
        self._proc: subprocess.Popen[bytes] | None = None

    def run(self, *args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(self.repo), *args], check=True, capture_output=True, text=True, encoding="utf-8"
        ).stdout

    def blob(self, sha: str) -> bytes:
        if self._proc is None:
            self._proc = subprocess.Popen(
                ["git", "-C", str(self.repo), "cat-file", "--batch"], stdin=subprocess.PIPE, stdout=subprocess.PIPE
            )
        assert self._proc.stdin and self._proc.stdout
        self._proc.stdin.write(sha.encode() + b"\n")
        self._proc.stdin.flush()
        header = self._proc.stdout.readline().split()
        size = int(header[2])
        data = self._proc.stdout.read(size)
        self._proc.stdout.read(1)
        return data

    def tree(self, tag: str, prefix: str = "src") -> dict[str, str]:
        """path -> blob sha, for the source files under `prefix`."""
        out = {}
        for row in self.run("ls-tree", "-r", tag, "--", prefix).splitlines():
            meta, path = row.split("\t", 1)
            _, kind, sha = meta.split()
            if kind == "blob" and path.endswith(SOURCE_SUFFIXES) and not _WINDOWS.search(path):
                out[path] = sha
        return out

    def text(self, tag: str, path: str) -> str | None:
        try:
            return self.run("show", f"{tag}:{path}")
        except subprocess.CalledProcessError:
            return None


def release_tags(git: Git, first_minor: int = FIRST_MINOR) -> list[str]:
    """Every v2.X.Y-Z tag from 2.`first_minor` on (2.18 by default), oldest first."""
    tags = []
    for t in git.run("tag", "--list", "v2.*").split():
        m = _TAG.match(t)
        if m and int(m[1]) >= first_minor:
            tags.append(((int(m[1]), int(m[2]), int(m[3])), t))
    return [t for _, t in sorted(tags)]


def scanned_tags(all_tags: list[str]) -> list[str]:
    """The last patch tag of each minor version (the newest tag is the last of its minor): a format that lived only
    between two patch releases of one minor is not seen (the prefix history reads every tag)."""
    last: dict[str, str] = {}
    for t in all_tags:
        last[_TAG.match(t)[1]] = t  # type: ignore[index]
    return sorted(last.values(), key=all_tags.index)


# --- extraction -----------------------------------------------------------------------------------------------


def tag_sites(git: Git, tag: str, cache: dict[str, Lexed]) -> list[Site]:
    files: dict[str, str | Lexed] = {}
    for path, sha in git.tree(tag).items():
        if sha not in cache:
            cache[sha] = lex(git.blob(sha).decode("utf-8", "replace"))
        files[path.removeprefix("src/")] = cache[sha]
    sites = Tree(files).sites()
    seen: dict[tuple, int] = defaultdict(int)
    for s in sites:
        base = (s.level, s.format, s.dynamic, s.file, s.function, tuple(s.via))
        s.ordinal = seen[base]
        seen[base] += 1
        s.key = (*base, s.ordinal)
    return sites


def info_reason(fmt: str, flags: list[str]) -> str | None:
    """The first INFO_TOPICS topic an INFO format falls under (every INFO format is kept; the topic tells a reader
    which ones a diagnosis reads)."""
    for name, rx in INFO_TOPICS:
        if rx.search(fmt):
            return name
    return None


_SLUG = re.compile(r"%[-+ #0]*(?:\*|\d+)?(?:\.(?:\*|\d+))?(?:hh|h|ll|l|z|j|t|L)?[a-zA-Z%]|[^A-Za-z0-9]+")


def message_id(level: str, fmt: str, dynamic: str | None) -> str:
    text = fmt if dynamic is None else "dynamic " + dynamic
    words = [w for w in _SLUG.sub(" ", text).lower().split() if w][:7]
    digest = hashlib.sha1(f"{level}\0{text}".encode()).hexdigest()[:6]
    return f"nccl.{level.lower()}.{'_'.join(words) or 'fmt'}.{digest}"


def build(git: Git, tags: list[str]) -> list[dict]:
    cache: dict[str, Lexed] = {}
    by_site: dict[tuple, dict] = {}
    order = {t: i for i, t in enumerate(tags)}
    for tag in tags:
        print(f"  {tag}", file=sys.stderr)
        for s in tag_sites(git, tag, cache):
            rec = by_site.setdefault(s.key, {"site": s, "tags": []})
            rec["tags"].append(tag)
            rec["site"] = s  # the newest tag's file, line, context
    messages: dict[tuple, dict] = {}
    for rec in by_site.values():
        s: Site = rec["site"]
        mkey = (s.level, s.format, s.dynamic)
        msg = messages.setdefault(mkey, {"level": s.level, "format": s.format, "dynamic": s.dynamic, "sites": []})
        msg["sites"].append(
            {
                "file": s.file,
                "line": s.line,
                "function": s.function,
                "via": s.via,
                "first_tag": rec["tags"][0],
                "last_tag": rec["tags"][-1],
                "tags": rec["tags"],
                "args": s.args,
                "flags": s.flags,
                "unresolved": s.unresolved,
                "context": s.context,
            }
        )
    out = []
    for msg in messages.values():
        sites = sorted(
            msg["sites"], key=lambda x: (-order[x["last_tag"]], x["file"], x["line"], x["via"], x["function"] or "")
        )
        present = sorted({t for x in sites for t in x["tags"]}, key=order.__getitem__)
        top = sites[0]
        rec = {
            "id": message_id(msg["level"], msg["format"], msg["dynamic"]),
            "level": msg["level"],
            "format": msg["format"],
            "dynamic": msg["dynamic"],
            "first_tag": present[0],
            "last_tag": present[-1],
            "tags": present,
            "file": top["file"],
            "line": top["line"],
            "function": top["function"],
            "via": top["via"],
            "args": top["args"],
            "subsys": sorted({f for x in sites for f in x["flags"]}) if msg["level"] == "INFO" else ["ALL"],
            "unresolved": top["unresolved"],
            "context": top["context"],
            "site_count": len(sites),
        }
        if msg["level"] == "INFO":
            rec["topic"] = info_reason(msg["format"], []) or "other"
        if len(sites) > 1:
            if len(sites) > 200:  # NCCLCHECK's `-> %d` traces: thousands of sites, none telling more than the file
                files: dict[str, int] = defaultdict(int)
                for x in sites:
                    files[x["file"]] += 1
                rec["files"] = dict(sorted(files.items()))
            else:
                rec["other_sites"] = [
                    {k: x[k] for k in ("file", "line", "function", "via", "first_tag", "last_tag", "args", "context")}
                    for x in sites[1:]
                ]
        out.append(rec)
    ids = [r["id"] for r in out]
    assert len(ids) == len(set(ids)), "message ids collide"
    level_rank = {"WARN": 0, "INFO": 1, "CALL": 2, "VERSION": 3, "RAS": 4}
    out.sort(key=lambda r: (level_rank[r["level"]], r["file"], r["line"], r["id"]))
    return out


def dump_jsonl(records: list[dict]) -> str:
    return "".join(json.dumps(r, ensure_ascii=False, sort_keys=False) + "\n" for r in records)


def dump_json(obj: object) -> str:
    return json.dumps(obj, ensure_ascii=False, indent=1) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("repo", type=Path, help="an NVIDIA/nccl clone (or bare git dir) with its tags")
    ap.add_argument("--out", type=Path, default=DATA, help="output directory (default: scripts/vocab/data)")
    ap.add_argument("--check", action="store_true", help="compare with the files in --out instead of writing")
    ap.add_argument(
        "--first-minor",
        type=int,
        default=None,
        help="oldest 2.X to read (3: the formats only NCCL 2.3-2.17 printed, for nccl_catalog.py --legacy; write "
        "them with --out elsewhere, the committed data starts at 2.18)",
    )
    ns = ap.parse_args(argv)
    git = Git(ns.repo)
    all_tags = release_tags(git, ns.first_minor or FIRST_MINOR)
    tags = scanned_tags(all_tags)
    if PINNED not in all_tags:
        print(f"the pinned tag {PINNED} is not in {ns.repo}", file=sys.stderr)
        return 2
    print(f"scanning {len(tags)} tags: {' '.join(tags)}", file=sys.stderr)
    messages = build(git, tags)
    prefixes = prefixes_for(git, all_tags)
    prefixes["scanned_tags"] = tags
    prefixes["pinned"] = PINNED
    prefixes["result_codes"] = result_codes(git, all_tags)
    outputs = {"nccl_messages.jsonl": dump_jsonl(messages), "nccl_prefixes.json": dump_json(prefixes)}
    if ns.check:
        bad = [n for n, text in outputs.items() if not (ns.out / n).exists() or (ns.out / n).read_text() != text]
        for n in bad:
            print(f"differs: {ns.out / n}", file=sys.stderr)
        return 1 if bad else 0
    ns.out.mkdir(parents=True, exist_ok=True)
    for n, text in outputs.items():
        (ns.out / n).write_text(text, encoding="utf-8")
    counts: dict[str, int] = defaultdict(int)
    for m in messages:
        counts[m["level"]] += 1
    print(f"wrote {len(messages)} messages ({dict(counts)}) to {ns.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
