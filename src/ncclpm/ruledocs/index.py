"""What `ncclpm rules` and `ncclpm explain` print, without importing the rules (they import polars: most of a
short command's time). `rules_index.json` holds each registered rule's id, name, category and documentation;
it is generated from the registry (`python scripts/regenerate.py` rewrites it, with everything else generated)
and tests/test_startup.py fails
when it no longer matches the rules."""

from __future__ import annotations

import json
import os
from functools import lru_cache
from typing import NamedTuple

# (a name, not a `pathlib.Path`, and a named tuple, not a dataclass: `rules` and `explain` load neither module)
INDEX = os.path.join(os.path.dirname(os.path.abspath(__file__)), "rules_index.json")


class RuleDoc(NamedTuple):
    """A rule's id, name, category and documentation, as the generated index records them."""

    id: str
    name: str
    category: str
    doc: str


@lru_cache(maxsize=1)
def load() -> dict[str, RuleDoc]:
    """The rules by id (read once: `ncclpm rules` looks every rule up, ~1 ms a reading)."""
    with open(INDEX, encoding="utf-8") as f:
        return {r["id"]: RuleDoc(**r) for r in json.load(f)}


def by_id(rule_id: str, *, registered: bool = False) -> RuleDoc:
    """Look a rule up by id (`CR01`) or name (`rank-died-first`), case-insensitively (as `rules.by_id`), KeyError
    if absent. `registered`: the id is known to be registered (it is in `PRECEDENCE`); if the index lags behind,
    the rule is read from the registry itself."""
    key = rule_id.strip().lower()
    for rule in load().values():
        if key in (rule.id.lower(), rule.name):
            return rule
    if not registered:
        raise KeyError(rule_id)
    from ncclpm.rules import by_id as registry

    r = registry(rule_id)
    return RuleDoc(r.id, r.name, str(r.category), r.doc())


def generate() -> str:
    """The index as the registry has it now (imports every rule)."""
    from ncclpm.rules import ALL_RULES

    rules = [{"id": r.id, "name": r.name, "category": str(r.category), "doc": r.doc()} for r in ALL_RULES]
    return json.dumps(rules, indent=1, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    with open(INDEX, "w", encoding="utf-8") as out:
        out.write(generate())
    print(f"wrote {INDEX}")
