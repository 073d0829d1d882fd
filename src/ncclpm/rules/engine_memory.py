"""OM02 engine-memory-short."""

from __future__ import annotations

from typing import ClassVar

import polars as pl

from ncclpm.rules.base import Finding, Fix, Rule, quotes, ranks_text
from ncclpm.tables import Tables
from ncclpm.tables.kinds import K
from ncclpm.tables.schema import Category


class EngineMemoryShort(Rule):
    """A serving engine refused to start: the GPU memory it was given cannot hold its KV cache.

    ## What it detects
    vLLM's `No available memory for the cache blocks`, `... GiB KV cache is needed, which is larger than the
    available KV cache memory`, `The model's max seq len (N) is larger than the maximum number of tokens that can be
    stored in KV cache`, `Free memory on device ... on startup is less than desired GPU memory utilization`; SGLang's
    `Not enough memory. Please try to increase --mem-fraction-static`.

    ## Why it matters
    The engine checks its memory budget after loading the weights and stops with this error; its front process then
    reports only that a child failed (`Engine core initialization failed. See root cause above`, SGLang's
    `Received sigquit from a child process` and `Killed`), which is what a reader sees last. Nothing crashed and no
    collective failed: the model, its context length and the memory share the engine was given do not fit the GPU.

    ## Example
    `ValueError: To serve at least one request with the models's max seq len (131072), (16.00 GiB KV cache is
    needed, which is larger than the available KV cache memory (2.13 GiB)` then `RuntimeError: Engine core
    initialization failed. See root cause above.`
    """

    id = "OM02"
    name = "engine-memory-short"
    category = Category.CUDA_OOM
    base_confidence = 0.85
    explains = ("CR01", "CR02")
    fires_on = frozenset({K.engine_memory_short})
    FIXES: ClassVar[dict[str, Fix]] = {
        "fit": Fix(
            "Make the engine fit the GPU: lower the context length (vLLM `--max-model-len`, whose error estimates the "
            "longest that fits; SGLang `--context-length`) or the concurrent sequences (`--max-num-seqs`, "
            "`--max-running-requests`), or shard the model over more GPUs (`--tensor-parallel-size` / `--tp-size`) "
            "or load a smaller (quantized) checkpoint."
        ),
        "share": Fix(
            "Give the engine a larger share of the GPU when nothing else uses it: vLLM `--gpu-memory-utilization`, "
            "SGLang `--mem-fraction-static`; when the free memory at start-up is already short, another process "
            "holds the GPU (`nvidia-smi`)."
        ),
    }

    def evidence(self, t: Tables) -> pl.DataFrame:
        return t.kinds(K.engine_memory_short).sort("ts", "source", "line", nulls_last=True)

    def assess(self, t: Tables, ev: pl.DataFrame) -> Finding | None:
        ranks = tuple(sorted(set(ev["rank"].drop_nulls().to_list())))
        who = ranks_text(ranks).capitalize() if ranks else "The serving engine"
        first = ev.row(0, named=True)
        longest = f" for one request of {first['count']:,} tokens" if first["count"] is not None else ""
        # vLLM checks the device's free memory against its share before loading anything
        what = (
            "the GPU had less free memory than the share it was told to take (another process holds GPU memory, "
            "or the share is set too high)"
            if first["detail"].startswith("Free memory on device")
            else f"the GPU memory left after loading the model cannot hold the KV cache{longest}"
        )
        return self.finding(
            confidence=self.base_confidence,
            culprit_ranks=ranks,
            summary=f"{who} stopped at start-up: {what} (`{first['detail']}`).",
            explanation="The engine sizes its KV cache from the GPU memory it may use once the weights are loaded, "
            "and refuses to start when that is too little; the front process's `See root cause above` or `Killed` "
            "that follows is its consequence. Nothing crashed and no collective failed.",
            evidence=quotes(ev),
            fixes=self.fixes(),
            dont=("Do not look for a crashed or hung rank: the engine stopped itself on its memory check.",),
            verify=("The engine logs its KV cache size (`GPU KV cache size: N tokens`) and serves its first request.",),
        )
