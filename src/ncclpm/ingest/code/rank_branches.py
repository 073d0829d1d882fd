"""Collectives a Python file issues on some ranks only: a code fact, never log evidence.

A collective (`dist.broadcast`, `torch.distributed.barrier`, `accelerator.wait_for_everyone`...) called inside an
`if` whose test depends on the rank (`dist.get_rank() == 0`, `local_rank in [-1, 0]`, `is_main_process`), with no
call of the same collective anywhere else in the file, is issued by the ranks of that branch alone: the others
never join it, and the job hangs there by construction. Point-to-point calls (`send`, `recv`) are rank-dependent
by nature and not read; a test that only tells a distributed run from a single process (`local_rank != -1`,
`rank >= 0`) is not a rank branch. Rows are `code_settings` rows (setting `rank_collective`): `name` the call,
`value` the branch's test as written, `number` the one rank it selects (`== N`), else null.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from typing import Any

SETTING = "rank_collective"
READING = "derived.rank_conditional_collective"
COLLECTIVES = frozenset(
    {
        "all_reduce",
        "all_gather",
        "all_gather_into_tensor",
        "all_gather_object",
        "all_to_all",
        "all_to_all_single",
        "barrier",
        "broadcast",
        "broadcast_object_list",
        "gather",
        "gather_object",
        "reduce",
        "reduce_scatter",
        "reduce_scatter_tensor",
        "scatter",
        "scatter_object_list",
        "monitored_barrier",
    }
)
# the receivers a collective is called on: torch.distributed under its usual names, and Accelerate's barrier
_DIST_NAMES = frozenset({"dist", "distributed", "torch_dist", "tdist", "c10d"})
_ACCELERATE = frozenset({"wait_for_everyone"})
# a name that holds one process's rank (not a count of ranks: `nranks`, `num_ranks`)
_RANK_NAME = re.compile(r"^(?:[a-z0-9]+_)*rank(?:_?(?:id|idx|index|no|num))?$")
# booleans that are true on one process only
_MAIN_FLAG = re.compile(
    r"^(?:is_)?(?:main_process|local_main_process|global_zero|local_zero|world_process_zero|local_master|"
    r"master_process|rank_zero|rank0)$|^is_master$"
)
_GLOBAL_ZERO = re.compile(r"^(?:is_)?(?:main_process|global_zero|world_process_zero|rank_zero|rank0)$")
# the launchers' environment variables holding a rank (`int(os.environ["LOCAL_RANK"]) == 0`)
_RANK_VAR = re.compile(
    r"^(?:(?:LOCAL|GLOBAL|NODE|GROUP)_)?RANK$|^OMPI_COMM_WORLD_(?:LOCAL_)?RANK$|^SLURM_(?:PROCID|LOCALID)$"
)
MAX_SOURCE = 2 * 1024**2  # characters; a larger file is not read for this


def _ident(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id.lower()
    if isinstance(node, ast.Attribute):
        return node.attr.lower()
    if isinstance(node, ast.Call):
        return _ident(node.func)
    return None


def _mentions_rank(node: ast.AST) -> bool:
    return any(
        ((i := _ident(n)) is not None and _RANK_NAME.match(i))
        or (isinstance(n, ast.Constant) and isinstance(n.value, str) and _RANK_VAR.match(n.value))
        for n in ast.walk(node)
    )


def _is_global(node: ast.AST) -> bool:
    """A rank that is the job's (not a node's local rank)."""
    words = [
        _ident(n) or (n.value if isinstance(n, ast.Constant) and isinstance(n.value, str) else "")
        for n in ast.walk(node)
    ]
    return not any(w and ("local" in w.lower() or "node" in w.lower()) for w in words)


def _number(node: ast.AST) -> int | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and (n := _number(node.operand)) is not None:
        return -n
    return None


def _selects_some(op: ast.cmpop, value: ast.AST) -> bool:
    """`rank <op> value` is true on some ranks and false on others (not a distributed-or-not test against -1)."""
    if isinstance(op, ast.In | ast.NotIn) and isinstance(value, ast.List | ast.Tuple | ast.Set):
        return any((n := _number(e)) is not None and n >= 0 for e in value.elts)
    n = _number(value)
    if n is None:
        return False
    return {ast.Eq: n >= 0, ast.NotEq: n >= 0, ast.Gt: n >= 0, ast.GtE: n >= 1, ast.Lt: n >= 1, ast.LtE: n >= 0}.get(
        type(op), False
    )


def rank_test(test: ast.AST) -> tuple[bool, int | None]:
    """Whether an `if` test depends on the rank, and the one rank it selects when it is `rank == N`."""
    for node in ast.walk(test):
        if isinstance(node, ast.Compare) and len(node.ops) == 1:
            left, right = node.left, node.comparators[0]
            for mine, other in ((left, right), (right, left)):
                if _mentions_rank(mine) and _selects_some(node.ops[0], other):
                    alone = isinstance(node.ops[0], ast.Eq) and test is node and _is_global(mine)
                    return True, _number(other) if alone else None
        if isinstance(node, ast.Name | ast.Attribute | ast.Call) and (i := _ident(node)) and _MAIN_FLAG.match(i):
            return True, 0 if test is node and _GLOBAL_ZERO.match(i) else None
    return False, None


def _collective(call: ast.Call) -> str | None:
    """`dist.broadcast` for a collective called on torch.distributed (or Accelerate's barrier), else None."""
    func = call.func
    if not isinstance(func, ast.Attribute):
        return None
    receiver = func.value
    if func.attr in COLLECTIVES:
        if isinstance(receiver, ast.Name) and receiver.id in _DIST_NAMES:
            return f"{receiver.id}.{func.attr}"
        if isinstance(receiver, ast.Attribute) and receiver.attr == "distributed":
            return f"torch.distributed.{func.attr}"
    if func.attr in _ACCELERATE:
        return f"{ast.unparse(receiver)}.{func.attr}"[-80:]
    return None


def _calls(nodes: list[ast.stmt]) -> Iterator[tuple[str, ast.Call]]:
    for stmt in nodes:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Call) and (name := _collective(node)) is not None:
                yield name.rpartition(".")[2], node


def rank_branch_facts(text: str) -> list[dict[str, Any]]:
    """One fact per collective only the ranks of one branch issue (setting, name, value, number, line)."""
    if len(text) > MAX_SOURCE:
        return []
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    everywhere: dict[str, list[int]] = {}
    for op, call in _calls(tree.body):
        everywhere.setdefault(op, []).append(id(call))
    facts: list[dict[str, Any]] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.If):
            continue
        is_rank, one = rank_test(node.test)
        if not is_rank:
            continue
        for branch, selects in ((node.body, one), (node.orelse, None)):
            inside = list(_calls(branch))
            for op, call in inside:
                mine = {id(c) for o, c in inside if o == op}
                if any(c not in mine for c in everywhere.get(op, [])):
                    continue  # the same collective is issued elsewhere too (the other ranks' branch, a helper)
                test = ast.unparse(node.test)
                facts.append(
                    {
                        "setting": SETTING,
                        "name": _collective(call),
                        "value": (test if branch is node.body else f"not ({test})")[:200],
                        "number": None if selects is None else float(selects),
                        "line": call.lineno,
                        "reading": READING,
                    }
                )
    seen: set[tuple[str, int]] = set()  # nested rank branches: one fact per call
    return [f for f in facts if (f["name"], f["line"]) not in seen and not seen.add((f["name"], f["line"]))]
