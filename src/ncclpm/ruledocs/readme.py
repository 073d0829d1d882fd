"""Generated documentation: the README's rule table comes from the rule registry (a test keeps it in sync)."""

from __future__ import annotations

from ncclpm.precedence import PRECEDENCE
from ncclpm.rules import by_id

BEGIN, END = "<!-- rules:begin -->", "<!-- rules:end -->"


def rules_table() -> str:
    """The rules in precedence order (`precedence.py`), each with why it stands there."""
    rows = ["| id | name | category | what it detects | precedence: why here |", "|---|---|---|---|---|"]
    for rule_id, why in PRECEDENCE:
        r = by_id(rule_id)
        title = " ".join(r.doc().split("\n\n")[0].split())  # the first paragraph, on one line
        rows.append(f"| {r.id} | `{r.name}` | `{r.category}` | {title} | {why} |")
    return "\n".join(rows)


def update_readme(text: str) -> str:
    """README text with the block between the markers replaced by the current table."""
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    return f"{head}{BEGIN}\n{rules_table()}\n{END}{tail}"
