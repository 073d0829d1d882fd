"""What ncclpm reads of torch's messages (scripts/vocab/data/torch_messages.jsonl), per component: each message is
read by a declared entry of the catalogs (a `[[pattern]]` with a declared reading: parsers/torch/*.toml and the
flat catalogs' torch patterns), declared benign or out of scope with a reason (parsers/torch/declared.toml), or
neither (a gap: tests/test_torch_messages.py fails on it for the components the gate counts).

    python scripts/vocab/torch_coverage.py [--all-versions] [--scope core|extended|all] [--unread] [--component C]

A message becomes a line by writing a value for each variable part (`{expr}` of a Python template: a rank, a port,
a host... chosen from the expression's name; `{}` between C++ pieces: `7`); an entry reads it when one of its
anchors is in a line of it and its regex (polars' dialect, as ncclpm runs it) matches there. Only entries with a
declared reading count: a generic pattern (a Python exception line, a world-size fact) does not say what the
message means.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tomllib
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
DATA = HERE / "data"
DECLARED = ROOT / "parsers" / "torch" / "declared.toml"
NEWEST = "2.15.0"
# The gate (issue 29): torch 2.15's c10d and elastic messages - what a distributed job's own failure is worded in.
# Other core components (CUDA and its allocator, DataLoader, multiprocessing, shared memory) are counted and shown,
# not gated: most of their strings are a CUDA program's or a data pipeline's, and the few a diagnosis needs are read.
GATED = (
    "c10d",
    "gloo",
    "flight_recorder",
    "debug_server",
    "torch.cuda.nccl",
    "torchelastic",
    "torchrun",
)
# Tools a person runs to debug a job, whose messages are the tool's own interface, not what a failing job's log holds:
# the debug HTTP server (torch.distributed.debug, c10d's control plane: HTTP status texts, its handlers' replies) and
# the flight-recorder analyser (`python -m torch.distributed.flight_recorder.fr_trace`: its report). Counted apart,
# outside the gate's denominator; still read or declared like the rest (the coverage test checks them too).
# The flight recorder itself (c10d.flight_recorder: the dump a job writes) stays in the gate.
TOOLS = ("debug_server", "c10d.control_plane", "flight_recorder")
STATUSES = ("structured", "part_of", "benign", "out_of_scope")
READ_STATUSES = ("read", "structured", "part_of")  # what counts as read in the doc
# a Python template's variable part, by what its expression names -> a value such a line holds
VALUES = (
    (r"^kind$", "stream"),
    (r"state", "FAILED"),
    (r"join\(", "[rank_3, rank_5]"),
    (r"restarts|max_|min_", "3"),
    (r"rank|idx|index|local|node_rank|group_rank", "3"),
    (r"world|size|count|num|len|total", "8"),
    (r"port", "29500"),
    (r"addr|host|endpoint|server|master", "node0"),
    (r"timeout|elapsed|time|interval|sec|duration", "600"),
    (r"pid", "4410"),
    (r"sig", "SIGTERM"),
    (r"exitcode|exit_code|code", "1"),
    (r"role|name|spec|run_id", "default"),
    (r"key|prefix|path|file|dir", "/default_pg/0"),
)


def gated(component: str, scope: str = "core") -> bool:
    """Whether the gate counts a message of this component (torch.distributed's core: DDP's reducer, symmetric
    memory... are `extended`, programming interfaces the job calls, and not gated)."""
    return scope == "core" and component.startswith(GATED) and not component.startswith(TOOLS)


def tool(component: str, scope: str = "core") -> bool:
    """Whether a message is a debugging tool's own (TOOLS): counted apart from the gate, declared all the same."""
    return scope == "core" and component.startswith(TOOLS)


def _value(expr: str) -> str:
    e = expr.lower()
    for rx, value in VALUES:
        if re.search(rx, e):
            return value
    return "7"


OPEN_END = re.compile(r"(?:[:=#(\[]|\b(?:of|on|to|from|for|with|rank|key|is|at|after|by)) ?$")


def _fill(template: str) -> str:
    """A Python template's `{expr}` parts (braces may nest: `{f"[{', '.join(x)}]"}`) replaced by values; `{{`/`}}`
    are literal braces."""
    out, i = [], 0
    while i < len(template):
        c = template[i]
        if template.startswith("{{", i) or template.startswith("}}", i):
            out.append(c)
            i += 2
        elif c == "{":
            depth, j = 1, i + 1
            while j < len(template) and depth:
                depth += {"{": 1, "}": -1}.get(template[j], 0)
                j += 1
            expr = template[i + 1 : j - 1]
            out.append("0:10:00" if expr == "timeout" and template[:i].endswith("timeout=") else _value(expr))
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


EXCEPTION_CLASS = re.compile(r"^[A-Z]\w*(?:Error|Exception)$")


def instance(row: dict) -> str:
    """One message as a log would hold it: each variable part written as a value of its kind (a C++ piece that ends
    where a value is printed gets one); a Python exception's message after its class, as a traceback's last line
    prints it (`ValueError: ...`; a C++ check's class is not known from its string: the text alone)."""
    if "template" in row:
        raised = [e for e in row.get("exception") or () if EXCEPTION_CLASS.match(e)]
        head = f"{raised[0]}: " if row.get("call") == "exception" and raised else ""
        return head + _fill(row["template"])
    text = row.get("shape", row["text"]).replace("{}", "7").replace("{line}", "7")  # INTERNAL ASSERT's line
    return text + "7" if OPEN_END.search(text) else text


@dataclass(frozen=True)
class Entry:
    id: str
    origin: str
    anchors: tuple[str, ...]
    regex: str


@dataclass
class Group:
    status: str
    reason: str
    ids: frozenset[str] = frozenset()
    match: tuple[re.Pattern[str], ...] = ()
    components: tuple[str, ...] = ()
    part_of: str = ""
    reader: str = ""  # `structured`: the module of src/ncclpm that reads such text (a multi-line block)
    exceptions: tuple[str, ...] = ()  # only Python messages raised as one of these
    levels: tuple[str, ...] = ()  # only messages logged at one of these levels (a framework's `severity`)

    def takes(self, row: dict) -> bool:
        if self.components and not row["component"].startswith(self.components):
            return False
        if self.exceptions and not set(row.get("exception") or ()) & set(self.exceptions):
            return False
        if self.levels and not set(row.get("severity") or ()) <= set(self.levels):
            return False
        if row["id"] in self.ids:
            return True
        if not self.ids and not self.match:  # a whole component's messages of these exceptions or levels
            return True
        text = row.get("template") or row.get("shape") or row["text"]
        return any(rx.search(text) for rx in self.match)


@dataclass
class Verdict:
    row: dict
    status: str  # read, benign, out_of_scope, part_of, undeclared
    by: str  # the entry id (read, part_of) or the group's reason


@dataclass
class Coverage:
    verdicts: list[Verdict] = field(default_factory=list)

    def by_component(self) -> dict[str, Counter[str]]:
        out: dict[str, Counter[str]] = defaultdict(Counter)
        for v in self.verdicts:
            out[v.row["component"]][v.status] += 1
        return dict(out)

    def gaps(self) -> list[Verdict]:
        return [
            v
            for v in self.verdicts
            if v.status == "undeclared" and (gated(v.row["component"], v.row["scope"]) or tool(v.row["component"]))
        ]


@cache
def rows() -> tuple[dict, ...]:
    lines = (DATA / "torch_messages.jsonl").read_text(encoding="utf-8").splitlines()
    return tuple(json.loads(line) for line in lines)


def entries() -> list[Entry]:
    """The declared entries of the shipped catalogs (ncclpm's own loader: the regexes as ncclpm runs them)."""
    from ncclpm.ingest.catalog import load_catalog

    return [Entry(p.id, p.origin, p.anchors, p.regex) for p in load_catalog().patterns if p.declared is not None]


def groups(path: Path = DECLARED) -> list[Group]:
    """The groups of a declared file (parsers/torch/declared.toml, parsers/frameworks/declared.toml), checked."""
    doc = tomllib.loads(path.read_text(encoding="utf-8"))
    out = []
    for i, g in enumerate(doc.get("group", [])):
        where = f"{path.name} group {i + 1}"
        if g.get("status") not in STATUSES or not str(g.get("reason", "")).strip():
            raise ValueError(f"{where}: a group has a status ({STATUSES}) and a reason")
        if g["status"] == "part_of" and not g.get("part_of"):
            raise ValueError(f"{where}: a part_of group names the entry that reads the whole line")
        if g["status"] == "structured" and not (ROOT / "src" / "ncclpm" / g.get("reader", "-")).is_file():
            raise ValueError(f"{where}: a structured group names its reader, a module of src/ncclpm/")
        narrowed = g.get("components") and (g.get("exceptions") or g.get("levels"))
        if not g.get("ids") and not g.get("match") and not narrowed:
            raise ValueError(f"{where}: a group takes messages by `ids`, `match`, or components with exceptions/levels")
        out.append(
            Group(
                g["status"],
                g["reason"].strip(),
                frozenset(g.get("ids", [])),
                tuple(re.compile(rx) for rx in g.get("match", [])),
                tuple(g.get("components", [])),
                g.get("part_of", ""),
                g.get("reader", ""),
                tuple(g.get("exceptions", [])),
                tuple(g.get("levels", [])),
            )
        )
    return out


def readers(texts: list[str], catalog: Iterable[Entry]) -> list[str]:
    """For each text, the first declared entry that reads one of its lines ("" when none)."""
    import polars as pl

    lines = pl.DataFrame({"i": range(len(texts)), "text": texts}).with_columns(pl.col("text").str.split("\n"))
    lines = lines.explode("text").with_row_index("row")
    found: dict[int, str] = {}
    for e in catalog:
        hit = lines.filter(pl.col("text").str.contains_any(list(e.anchors)))
        if hit.is_empty():
            continue
        hit = hit.filter(pl.col("text").str.contains(e.regex))
        for i in hit["i"].unique().to_list():
            found.setdefault(i, e.id)
    return [found.get(i, "") for i in range(len(texts))]


def coverage(
    selected: list[dict],
    catalog: list[Entry] | None = None,
    declared: list[Group] | None = None,
    write: Callable[[dict], str] = instance,
) -> Coverage:
    """Each message's verdict: read by the first declared entry that reads `write(row)` (the message as a log holds
    it), else the first group of `declared` that takes it, else undeclared."""
    catalog = entries() if catalog is None else catalog
    declared = groups() if declared is None else declared
    ids = {e.id for e in catalog}
    for g in declared:
        if g.part_of and g.part_of not in ids:
            raise ValueError(f"declared.toml: part_of names {g.part_of!r}, not a declared entry")
    read = readers([write(r) for r in selected], catalog)
    out = Coverage()
    for row, by in zip(selected, read, strict=True):
        if by:
            out.verdicts.append(Verdict(row, "read", by))
            continue
        g = next((g for g in declared if g.takes(row)), None)
        if g is None:
            out.verdicts.append(Verdict(row, "undeclared", ""))
        else:
            by = {"part_of": g.part_of, "structured": g.reader}.get(g.status, g.reason)
            out.verdicts.append(Verdict(row, g.status, by))
    return out


def newest(scope: str = "core") -> list[dict]:
    return [r for r in rows() if r["last"] == NEWEST and (scope == "all" or r["scope"] == scope)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scope", default="core", help="core | extended | all")
    ap.add_argument("--all-versions", action="store_true", help="every release's messages, not only the newest's")
    ap.add_argument("--unread", action="store_true", help="list the messages neither read nor declared")
    ap.add_argument("--component", default="", help="only components starting with this")
    ap.add_argument("--status", default="", help="list the messages of this status (read, benign, out_of_scope...)")
    args = ap.parse_args(argv)
    selected = [r for r in rows() if args.scope == "all" or r["scope"] == args.scope]
    if not args.all_versions:
        selected = [r for r in selected if r["last"] == NEWEST]
    selected = [r for r in selected if r["component"].startswith(args.component)]
    cov = coverage(selected)
    for comp, counts in sorted(cov.by_component().items()):
        total = sum(counts.values())
        scope = args.scope if args.scope != "all" else "core"
        mark = "*" if gated(comp, scope) else "t" if tool(comp, scope) else " "
        print(
            f"{mark} {comp:36} {total:5}  " + "  ".join(f"{s} {counts[s]}" for s in ("read", *STATUSES, "undeclared"))
        )
    for v in cov.verdicts:
        if (args.unread and v.status == "undeclared") or (args.status and v.status == args.status):
            text = v.row.get("template") or v.row.get("shape") or v.row["text"]
            print(f"    {v.row['id']} {v.row['component']} [{v.by[:40]}] {text[:150]!r}")
    gaps = cov.gaps()
    print(f"gated components: {len(gaps)} message(s) neither read nor declared", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
