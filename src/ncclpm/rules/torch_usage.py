"""CF04 torch-usage-error."""

from __future__ import annotations

from typing import ClassVar

import polars as pl

from ncclpm.model import said
from ncclpm.rules.base import Finding, Fix, Rule, quotes, ranks_text
from ncclpm.tables import Tables
from ncclpm.tables.kinds import K
from ncclpm.tables.schema import Category

# Which fix each reading of the kind calls for (its `event`, parsers/torch_usage.toml).
_FIX_OF = {
    "ddp.unused_parameters": "unused",
    "ddp.graph_changed": "static_graph",
    "ddp.marked_ready_twice": "ready_twice",
    "c10d.tensors_not_for_backend": "backend",
}


class TorchUsageError(Rule):
    """torch refused how the program uses torch.distributed: a DDP configuration or a tensor/backend mismatch.

    ## What it detects
    DDP's reducer checks - `Expected to have finished reduction in the prior iteration before starting a new one`
    (parameters that took no part in the loss), `Expected to mark a variable ready only once` (reentrant
    checkpointing, a module run twice), `Your training graph has changed in this iteration` (static_graph) - and a
    process group refusing the tensors it is handed: `Tensors must be CUDA and dense` (CPU or sparse tensors to
    NCCL), `No backend type associated with device type cpu`, `Tensors must be contiguous`.

    ## Why it matters
    These are the program's own configuration, raised the same way on every run and every rank: a "rank crashed"
    reading sends the reader to logs and nodes, while the message itself names the flag or the tensor to change.

    ## Example
    `RuntimeError: Expected to have finished reduction in the prior iteration before starting a new one. This error
    indicates that your module has parameters that were not used in producing loss.` with the launcher passing
    `--ddp_find_unused_parameters False`.
    """

    id = "CF04"
    name = "torch-usage-error"
    category = Category.CONFIG_VERSION
    base_confidence = 0.8  # torch names the fault; which parameter or tensor it is, the code says
    explains = ("CT01", "CR01", "CR02", "IN01")
    FIXES: ClassVar[dict[str, Fix]] = {
        "unused": Fix(
            "Let DDP find the parameters that take no part in the loss: `DistributedDataParallel(model, "
            "find_unused_parameters=True)` (HF Trainer: `--ddp_find_unused_parameters true`; Lightning: "
            "`strategy='ddp_find_unused_parameters_true'`), or freeze them (`requires_grad=False`) before wrapping.",
            when="DDP found gradients of parameters that were not used",
        ),
        "static_graph": Fix(
            "With `static_graph=True` every iteration must use the same parameters: drop static_graph, or make "
            "the forward path the same at every step.",
            when="the graph changed under static_graph",
        ),
        "ready_twice": Fix(
            "Use non-reentrant activation checkpointing (`checkpoint(..., use_reentrant=False)`; HF: "
            "`gradient_checkpointing_kwargs={'use_reentrant': False}`) or `static_graph=True`, and run each "
            "module's forward once per step under DDP.",
            when="a parameter was marked ready twice",
        ),
        "backend": Fix(
            "Hand each collective tensors its backend takes: `.cuda()` for NCCL, `.contiguous()`; for CPU tensors "
            "create the group with both backends (`init_process_group('cpu:gloo,cuda:nccl')`) or a gloo subgroup "
            "(`dist.new_group(backend='gloo')`).",
            when="a collective was handed tensors its process group cannot take",
        ),
    }

    def evidence(self, t: Tables) -> pl.DataFrame:
        return t.kinds(K.usage_error).sort("ts", "source", "line", nulls_last=True)

    def assess(self, t: Tables, ev: pl.DataFrame) -> Finding | None:
        ranks = tuple(sorted(set(ev["rank"].drop_nulls().to_list())))
        first = ev.row(0, named=True)
        keys = list(dict.fromkeys(_FIX_OF[e] for e in ev["event"].to_list() if e in _FIX_OF))
        # the launch command's own setting of the flag the message names (HF's --ddp_find_unused_parameters False)
        settings = t.extra.get("code_settings")
        flag = (
            settings.filter(pl.col("name").str.contains("find_unused_parameters"))
            if settings is not None and not settings.is_empty()
            else pl.DataFrame()
        )
        set_by = (
            f" The launch sets `{flag['name'][0].split()[-1]} {flag['value'][0]}` ({flag['source'][0]})."
            if not flag.is_empty() and "unused" in keys
            else ""
        )
        who = ranks_text(ranks) if ranks else "the process"
        return self.finding(
            culprit_ranks=(),  # the same code on every rank: no rank is the odd one
            summary=f"torch refused how the program uses torch.distributed on {who}: "
            f"`{said(first['text'], t.line_prefix, 140)}` - a configuration of the job, not a rank that failed "
            "on its own." + set_by,
            explanation="DDP's reducer and the process groups check how they are used and raise on a misuse; the "
            "message names what to change, and every rank of the same code runs into it.",
            evidence=quotes(ev, 3) + (quotes(flag.select("source", "line", "text"), 1) if set_by else ()),
            fixes=self.fixes(*keys),
            dont=("Do not chase the node or NCCL: nothing failed below torch.",),
            verify=("After the change the job passes the step where it raised, on every rank.",),
        )
