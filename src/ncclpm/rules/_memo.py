"""Facts several rules derive from the same tables, computed once per job.

`victim_lines`, what each rank was busy with, which ranks crashed: asked by up to ten rules each, ~0.1-1 ms of
polars queries a time - a third of the rules' time on a small job. The result is kept on the tables
(`Tables.memo`, new with every `Tables`: the analysed tables get their own), keyed by the function and its
arguments. Only for functions of the tables and hashable arguments (a list is keyed as a tuple) whose result is
never modified by the caller: frames and frozensets.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from ncclpm.tables import Tables

R = TypeVar("R")


def per_job(fn: Callable[..., R]) -> Callable[..., R]:
    @functools.wraps(fn)
    def once(t: Tables, *args: Any, **kw: Any) -> R:
        key = (fn, *(tuple(a) if isinstance(a, list) else a for a in args), *sorted(kw.items()))
        if key not in t.memo:
            t.memo[key] = fn(t, *args, **kw)
        return t.memo[key]

    return once
