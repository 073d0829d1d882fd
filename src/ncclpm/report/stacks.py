"""What the report shows about the stack dumps: the merged tree (nested, with counts and the odd branch marked,
plus the same as compact text lines) and whether the stacks agree with what the logs and dumps concluded."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ncclpm.analysis import Analysis
from ncclpm.rules.base import Finding, ranks_text

if TYPE_CHECKING:  # (the stack tree's module is loaded for a job with stacks)
    from ncclpm.analysis.stack_tree import StackTree, TreeNode

STACK_RULE = "SK01"
MAX_MEMBERS_SHOWN = 8


def _members(members: tuple[str, ...]) -> str:
    ranks = [int(m[5:]) for m in members if m.startswith("rank ") and m[5:].isdigit()]
    others = [m for m in members if not (m.startswith("rank ") and m[5:].isdigit())]
    parts = []
    if ranks:
        shown = sorted(ranks)
        parts.append(", ".join(map(str, shown[:MAX_MEMBERS_SHOWN])) + (" …" if len(shown) > MAX_MEMBERS_SHOWN else ""))
    parts += others[:4]
    return "; ".join(parts)


def _nest(nodes: tuple[TreeNode, ...]) -> list[dict[str, Any]]:
    root: list[dict[str, Any]] = []
    stack: list[list[dict[str, Any]]] = [root]
    for n in nodes:
        item = {
            "frames": list(n.frames),
            "count": n.count,
            "members": _members(n.members),
            "suspect": n.suspect,
            "majority": n.majority,
            "children": [],
        }
        del stack[n.depth + 1 :]
        stack[n.depth].append(item)
        stack.append(item["children"])
    return root


def _text_lines(items: list[dict[str, Any]], prefix: str = "", out: list[str] | None = None) -> list[str]:
    """`├─ 3 ranks [0, 1, 3]  main (train.py:110) → train_step (train.py:76) → all_reduce`"""
    out = [] if out is None else out
    for i, item in enumerate(items):
        last = i == len(items) - 1
        branch = "" if not prefix and len(items) == 1 else ("└─ " if last else "├─ ")
        who = f"{item['count']} {'rank' if item['count'] == 1 else 'ranks'} [{item['members']}]"
        mark = "  ◀ odd one out" if item["suspect"] else ""
        frames = " → ".join(item["frames"]).replace("`", "'")
        out.append(f"{prefix}{branch}{who}{mark}  {frames}")
        child_prefix = prefix + ("" if not branch else ("   " if last else "│  "))
        _text_lines(item["children"], child_prefix, out)
    return out


def stack_tree_facts(tree: StackTree | None) -> dict[str, Any] | None:
    if tree is None:
        return None
    nested = _nest(tree.nodes)
    return {
        "source": tree.source,
        "processes": tree.n_processes,
        "formats": list(tree.formats),
        "summary": tree.summary(),
        "classes": [
            {
                "members": list(c.members),
                "ranks": list(c.ranks),
                "where": c.where,
                "activity": c.activity,
                "suspect": c in tree.suspects,
            }
            for c in tree.classes
        ],
        "tree": nested,
        "lines": _text_lines(nested),
    }


def _root_findings(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.category != "symptom" and f.rule != STACK_RULE]


def stack_check(tree: StackTree | None, primary: Finding, findings: list[Finding]) -> str | None:
    """Do the stacks agree with the logs and dumps? Say so either way."""
    if tree is None or tree.source != "live":
        return None
    stacks = next((f for f in findings if f.rule == STACK_RULE), None)
    others = sorted(_root_findings(findings), key=lambda f: f.confidence, reverse=True)
    logs = others[0] if others else None
    if stacks is None:
        if logs is None:
            return f"The stacks show no rank elsewhere than its peers: {tree.summary()}."
        return f"The stacks name no odd rank ({tree.summary()}); the verdict rests on {logs.rule}."
    if logs is None:
        return f"Only the stacks name a cause: {stacks.summary}"
    same = logs.category == stacks.category and (
        not logs.culprit_ranks or set(logs.culprit_ranks) & set(stacks.culprit_ranks)
    )
    if same:
        who = ranks_text(stacks.culprit_ranks) if stacks.culprit_ranks else "the same process"
        return f"Logs and stacks agree: {logs.rule} and the stacks both point at {who} ({stacks.category})."
    if primary is stacks:
        return (
            f"Stacks overrule the logs: the logs suggested {logs.category} ({logs.rule}, {logs.confidence:.2f}: "
            f"{logs.summary}); the stacks show {tree.summary()}."
        )
    return (
        f"Logs and stacks disagree: the verdict follows {primary.rule}; the stacks show {tree.summary()} "
        f"({stacks.category}, {stacks.confidence:.2f})."
    )


def stack_report(
    facts: Analysis, primary: Finding, findings: list[Finding]
) -> tuple[dict[str, Any] | None, str | None]:
    tree = facts.stack_tree
    return stack_tree_facts(tree), stack_check(tree, primary, findings)
