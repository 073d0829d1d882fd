"""Which extracted torch/framework messages ncclpm's catalogs read today (a line made from the message is matched by
some pattern of parsers/*.toml), grouped by component.

    python scripts/vocab/torch_coverage.py [--scope core] [--newest] [--unread] [--frameworks]

A message is turned into a line by writing `7` for each variable part (`{expr}` of a Python template, `{}` between
C++ pieces); a pattern reads it when one of its anchors is in the line and its regex matches. A rough measure: a
pattern tuned to real values (an address, a signal name) can miss the `7`, and a short C++ piece can be read by a
pattern meant for a longer message.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tomllib
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
PARSERS = HERE.parent.parent / "parsers"
PLACEHOLDER = re.compile(r"\{[^{}]*\}")
NOT_MESSAGES = {"envelopes.toml", "code_settings.toml", "settings.toml", "env_vars.toml", "kinds.toml"}


def _python_regex(pattern: str) -> re.Pattern | None:
    converted = re.sub(r"\(\?<(?=[A-Za-z_])", "(?P<", pattern)
    try:
        return re.compile(converted)
    except re.error:
        return None


def patterns() -> list[tuple[str, list[str], re.Pattern | None]]:
    """(file:id, anchors, regex) of every line pattern of the message catalogs."""
    out = []
    for path in sorted(PARSERS.glob("*.toml")):
        if path.name in NOT_MESSAGES:
            continue
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
        for entry in doc.get("pattern", []):
            if "regex" not in entry:
                continue
            anchors = entry.get("anchor", [])
            anchors = [anchors] if isinstance(anchors, str) else list(anchors)
            out.append((f"{path.name}:{entry.get('id', '?')}", anchors, _python_regex(entry["regex"])))
    return out


def sample(row: dict) -> str:
    if "template" in row:
        text = PLACEHOLDER.sub("7", row["template"]).replace("{{", "{").replace("}}", "}")
    else:
        text = row.get("shape", row["text"]).replace("{}", "7")
    return text


def reader(line: str, catalog: list) -> str:
    for name, anchors, regex in catalog:
        if anchors and not any(a in line for a in anchors):
            continue
        if regex is None:
            if anchors:
                return name
            continue
        if regex.search(line):
            return name
    return ""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scope", default="core", help="core | extended | all")
    ap.add_argument("--newest", action="store_true", help="only messages of the newest torch release read")
    ap.add_argument("--unread", action="store_true", help="list the messages no pattern reads")
    ap.add_argument("--frameworks", action="store_true", help="frameworks_messages.jsonl instead of torch's")
    args = ap.parse_args(argv)
    catalog = patterns()
    name = "frameworks_messages.jsonl" if args.frameworks else "torch_messages.jsonl"
    rows = [json.loads(line) for line in (HERE / "data" / name).read_text(encoding="utf-8").splitlines()]
    if not args.frameworks:
        if args.scope != "all":
            rows = [r for r in rows if r["scope"] == args.scope]
        if args.newest:
            newest = max((r["last"] for r in rows), key=lambda v: tuple(int(x) for x in v.split(".")))
            rows = [r for r in rows if r["last"] == newest]
    by_component: dict[str, list[tuple[dict, str]]] = defaultdict(list)
    for row in rows:
        key = f"{row['package']}:{row['component']}" if args.frameworks else f"{row['kind']}:{row['component']}"
        by_component[key].append((row, reader(sample(row), catalog)))
    total_read = 0
    for key in sorted(by_component):
        items = by_component[key]
        read = sum(1 for _, r in items if r)
        total_read += read
        print(f"{key:48} {read:5} / {len(items):5} read")
        if args.unread:
            for row, r in items:
                if not r:
                    text = row.get("template") or row.get("shape") or row["text"]
                    print(f"    {row['id']}  {text[:150]!r}")
    print(f"{'total':48} {total_read:5} / {len(rows):5} read", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
