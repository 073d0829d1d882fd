"""Generated documentation: the README's rule table comes from the rule registry (a test keeps it in sync)."""

from __future__ import annotations

from ncclpm.rules import ALL_RULES

BEGIN, END = "<!-- rules:begin -->", "<!-- rules:end -->"


def rules_table() -> str:
    rows = ["| id | name | category | what it detects |", "|---|---|---|---|"]
    for r in ALL_RULES:
        title = " ".join(r.doc().split("\n\n")[0].split())  # the first paragraph, on one line
        rows.append(f"| {r.id} | `{r.name}` | `{r.category}` | {title} |")
    return "\n".join(rows)


def update_readme(text: str) -> str:
    """README text with the block between the markers replaced by the current table."""
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    return f"{head}{BEGIN}\n{rules_table()}\n{END}{tail}"
