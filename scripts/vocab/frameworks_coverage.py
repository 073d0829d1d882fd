"""What ncclpm reads of the frameworks' own messages (vLLM, SGLang, verl, OpenRLHF, Ray: scripts/vocab/data/
frameworks_messages.jsonl, frameworks_extract.py's list): each message is read by a declared entry of the catalogs
(parsers/frameworks.toml, the torch and NCCL entries a framework's line matches, the usage families), declared
benign / out of scope / part of a line an entry reads with a reason (parsers/frameworks/declared.toml), or neither.
The same test as torch's (torch_coverage.py: an anchor in a line of the message and the entry's regex there).

    python scripts/vocab/frameworks_coverage.py [--unread] [--errors] [--component C] [--status S]

The gate (tests/test_frameworks_messages.py): of the messages raised or logged at error level - what a failure is
worded in - at least GOAL are read or declared, and none of the components GATED leaves one undeclared.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from functools import cache
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import torch_coverage as tc  # noqa: E402  (scripts/vocab, next to this file)

ROOT = HERE.parent.parent
DATA = HERE / "data"
MESSAGES = DATA / "frameworks_messages.jsonl"
DECLARED = ROOT / "parsers" / "frameworks" / "declared.toml"
GOAL = 0.90  # of the raised / error-level messages, read or declared with a reason
# where a distributed job's failure is worded: every raised or error-level message of these is read or declared
GATED = (
    "vllm.distributed",
    "vllm.v1.engine",
    "vllm.v1.executor",
    "vllm.utils.nccl",
    "sglang.srt.distributed",
    "sglang.srt.managers",
    "sglang.srt.entrypoints",
    "sglang.srt.weight_sync",
    "ray.util.collective",
    "ray.exceptions",
    "ray.experimental.channel",
    "verl.checkpoint_engine",
    "verl.workers.rollout",
    "verl.single_controller",
    "openrlhf",
)
LEVELS = ("error", "critical")  # a message raised is `error` in the extraction

_VERSION_EXPR = re.compile(r"\{[^{}]*[Vv]ersion[^{}]*\}")  # `{self.nccl.ncclGetVersion()}`: a version, as logged
# pynccl's `NCCL error: {error_str}` (vLLM, SGLang): the text of ncclGetErrorString, as such a line holds it
_NCCL_RESULT_EXPR = re.compile(r"(?<=NCCL error: )\{error_str\}")
# a %-style argument of a logger's format kept as a constant (`... found in %d seconds`), not a strftime's `%m-%d`
_PERCENT = re.compile(r"(?<![\w%-])%[ds](?![\w-])")


def instance(row: dict) -> str:
    """A framework's message as its log holds it: torch_coverage's instance, a version written as one, NCCL's
    result string as one, a logger's `%d`/`%s` as a number."""
    template = _NCCL_RESULT_EXPR.sub("unhandled system error", _VERSION_EXPR.sub("2.21.5", row["template"]))
    return tc.instance(row | {"template": _PERCENT.sub("60", template)})


def raised(row: dict) -> bool:
    """Raised, or logged at error level: what a failure is worded in."""
    return bool(set(row["severity"]) & set(LEVELS))


def gated(row: dict) -> bool:
    return raised(row) and row["component"].startswith(GATED)


@cache
def rows() -> tuple[dict, ...]:
    return tuple(json.loads(x) for x in MESSAGES.read_text(encoding="utf-8").splitlines())


def groups() -> list[tc.Group]:
    return tc.groups(DECLARED)


def coverage(selected: list[dict] | None = None, declared: list[tc.Group] | None = None) -> tc.Coverage:
    selected = list(rows()) if selected is None else selected
    return tc.coverage(selected, declared=groups() if declared is None else declared, write=instance)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--unread", action="store_true", help="list the messages neither read nor declared")
    ap.add_argument("--errors", action="store_true", help="only the raised / error-level messages")
    ap.add_argument("--component", default="", help="only components starting with this")
    ap.add_argument("--status", default="", help="list the messages of this status (read, benign, out_of_scope...)")
    args = ap.parse_args(argv)
    selected = [r for r in rows() if r["component"].startswith(args.component) and (raised(r) or not args.errors)]
    cov = coverage(selected)
    for comp, counts in sorted(cov.by_component().items()):
        total = sum(counts.values())
        mark = "*" if comp.startswith(GATED) else " "
        shown = ("read", *tc.STATUSES[1:], "undeclared")
        print(f"{mark} {comp:44} {total:5}  " + "  ".join(f"{s} {counts[s]}" for s in shown))
    for v in cov.verdicts:
        if (args.unread and v.status == "undeclared") or (args.status and v.status == args.status):
            level, short = ",".join(v.row["severity"]), v.row["id"].rsplit(":", 1)[-1]
            print(f"    {short} {v.row['component']} {level} [{v.by[:40]}] {v.row['template'][:150]!r}")
    errors = [v for v in cov.verdicts if raised(v.row)]
    done = sum(v.status != "undeclared" for v in errors)
    print(f"raised / error-level: {done} of {len(errors)} read or declared", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
