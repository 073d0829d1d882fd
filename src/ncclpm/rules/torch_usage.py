"""CF04 torch-usage-error."""

from __future__ import annotations

from typing import ClassVar

import polars as pl

from ncclpm.model import said
from ncclpm.rules.base import Finding, Fix, Rule, quotes, ranks_text
from ncclpm.tables import Tables
from ncclpm.tables.kinds import K
from ncclpm.tables.schema import Category
from ncclpm.util.frames import ordered

# Which fix each reading of the kind calls for (its `event`, parsers/torch_usage.toml).
_FIX_OF = {
    "ddp.unused_parameters": "unused",
    "ddp.graph_changed": "static_graph",
    "ddp.marked_ready_twice": "ready_twice",
    "c10d.tensors_not_for_backend": "backend",
    # parsers/torch/usage.toml's families of torch.distributed's argument checks
    "usage.tensor_arguments": "tensors",
    "usage.backend_refuses": "backend_op",
    "usage.group_state": "group",
    "usage.process_group_setup": "group",
    "usage.device_mesh": "mesh",
    "usage.arguments": "argument",
    "usage.python_arguments": "argument",
    "usage.call_order": "call_order",
    "usage.window_mempool": "window",
}


class TorchUsageError(Rule):
    """torch refused how the program uses torch.distributed: a DDP configuration or a tensor/backend mismatch.

    ## What it detects
    DDP's reducer checks - `Expected to have finished reduction in the prior iteration before starting a new one`
    (parameters that took no part in the loss), `Expected to mark a variable ready only once` (reentrant
    checkpointing, a module run twice), `Your training graph has changed in this iteration` (static_graph) - and a
    process group refusing the tensors it is handed: `Tensors must be CUDA and dense` (CPU or sparse tensors to
    NCCL), `No backend type associated with device type cpu`, `Tensors must be contiguous`.

    And every argument check torch.distributed raises at the call, read by family (parsers/torch/usage.toml): the
    tensors a collective refuses (device, dtype, size, layout, list lengths), an operation, reduce op or dtype the
    backend does not implement (or an NCCL too old for it), a group used before init_process_group or with ranks it
    does not hold, a device mesh that does not fit the world, an argument out of its range, calls out of order
    (coalescing, futures), NCCL windows and memory pools used wrongly.

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
        "tensors": Fix(
            "Hand the collective what its message asks for: tensors on this rank's GPU (CPU tensors need a gloo "
            "group), contiguous and dense, of one dtype, sized for the group (world_size x the input for all_gather, "
            "split sizes that sum to dim 0), lists as long as the group.",
            when="a collective refused the tensors it was handed",
        ),
        "backend_op": Fix(
            "Use an operation, reduce op and dtype the backend implements (the message names which), another backend "
            "for it (gloo for CPU tensors and monitored_barrier), or a torch whose NCCL is new enough for the feature.",
            when="the backend does not implement what was asked",
        ),
        "group": Fix(
            "Call init_process_group once (with `device_id` for NCCL) before any collective and destroy it only at "
            "the end; create subgroups on every rank with the same ranks, all < world_size.",
            when="a process group was used in a state or with ranks it does not allow",
        ),
        "mesh": Fix(
            "Give the device mesh a shape whose product is the world size and unique dimension names, slice it only "
            "by those names, and set the device (`torch.cuda.set_device(local_rank)`) before building it.",
            when="a device mesh does not fit the world or its names",
        ),
        "argument": Fix(
            "Correct the argument the message names (timeouts as `datetime.timedelta` and positive, "
            "`--rdzv-conf key=value,...`, scatter/gather lists only on their source/destination rank).",
            when="an argument or launch option was refused",
        ),
        "call_order": Fix(
            "Pair start and end of coalescing, call wait() before result(), give each process one GPU and one "
            "tensor per collective.",
            when="calls came in an order torch.distributed cannot run",
        ),
        "window": Fix(
            "Allocate window tensors from the backend's memory pool, register them collectively once before use, "
            "keep puts within the window, and use an NCCL with symmetric memory enabled.",
            when="NCCL windows or the NCCL memory pool were used wrongly",
        ),
    }

    def evidence(self, t: Tables) -> pl.DataFrame:
        return ordered(t.kinds(K.usage_error), "ts", "source", "line", nulls_last=True)

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
            fixes=self.fixes(*(keys or ["argument"])),  # an event no family maps: the argument it names
            dont=("Do not chase the node or NCCL: nothing failed below torch.",),
            verify=("After the change the job passes the step where it raised, on every rank.",),
        )
