"""CF03 nccl-invalid-usage."""

from __future__ import annotations

from typing import ClassVar

import polars as pl

from ncclpm.analysis.crashes import MESSAGE_CAUSES, NAMES_A_CAUSE
from ncclpm.ingest.text.nccl_messages import reading
from ncclpm.rules.base import Finding, Fix, Rule, quotes, ranks_text
from ncclpm.tables import Tables
from ncclpm.tables.kinds import K
from ncclpm.tables.schema import Category

# NCCL's results for a call it rejects (ncclInvalidUsage 5, ncclInvalidArgument 4), in any wrapper's words (the
# kinds' reading `nccl_result`, parsers/kinds.toml)
REFUSALS = ["ncclInvalidUsage", "ncclInvalidArgument"]


class NcclInvalidUsage(Rule):
    """NCCL refused how it was called (`invalid usage`), or its own message names a set-up mistake.

    ## What it detects
    NCCL's own WARN (or torch's `Last error:`) naming a set-up mistake (parsers/nccl/, kind `nccl_config`): an
    NCCL_* setting or communicator option it rejects, an address it cannot use, two processes with one rank, a
    locked-memory limit too low for RDMA, a topology file that does not fit, a NIC selection that differs between
    hosts. Else `NCCL error in: ...: invalid usage` / `ncclInvalidUsage` (torch's `DistBackendError`, NCCL error 5)
    or `invalid argument` / `ncclInvalidArgument` (error 4) with no more specific reading of the same job (two
    ranks on one GPU, ranks disagreeing on the job's size), which CF01/CF02 name outright.

    ## Why it matters
    NCCL returns `invalid usage` when the call itself is wrong, not when hardware or the network fails: most
    often two ranks mapped to one GPU (no `torch.cuda.set_device(local_rank)`), a communicator set up differently
    on different ranks, or a buffer on the wrong device. NCCL's own WARN line names which, so the lead is to
    rerun with `NCCL_DEBUG=WARN` rather than to look at nodes or links.

    ## Example
    `torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:317, invalid
    usage (run with NCCL_DEBUG=WARN for details), NCCL version 2.20.5`.
    """

    id = "CF03"
    name = "nccl-invalid-usage"
    fires_on = frozenset({K.nccl_config, K.nccl_error})
    category = Category.CONFIG_VERSION
    base_confidence = 0.6  # NCCL's own word for a wrong call: which mistake is not said
    explains = ("CT01", "CR01", "CR02", "IN01")
    FIXES: ClassVar[dict[str, Fix]] = {
        "message": Fix(
            "{fix|What NCCL's message's declared entry says to change (parsers/nccl/)}",
            when="NCCL's own message names the mistake",
        ),
        "warn": Fix(
            "Rerun with `NCCL_DEBUG=WARN`: NCCL's WARN line before the error says what it refused (`Duplicate GPU "
            "detected`, a device mismatch, a bad argument)."
        ),
        "set_device": Fix(
            "Check that every rank calls `torch.cuda.set_device(int(os.environ['LOCAL_RANK']))` before "
            "`init_process_group` (or passes `device_id=`), and that `--nproc_per_node` matches the node's GPUs."
        ),
    }

    def evidence(self, t: Tables) -> pl.DataFrame:
        named = t.kinds(K.nccl_config).sort("strength", descending=True, nulls_last=True)
        refused = t.kinds(K.nccl_error).filter(pl.col("nccl_result").is_in(REFUSALS))
        if named.is_empty() and not refused.is_empty():
            # the message wins over the class: an NCCL message naming another cause (a collective of another size,
            # a network or shared-memory failure) is what the refusal reports - its own rule reads it
            other = t.kinds(*[k for k in MESSAGE_CAUSES if k != K.nccl_config], K.mismatch_detected)
            if not other.filter(pl.col("strength").fill_null(1.0) >= NAMES_A_CAUSE).is_empty():
                return refused.clear()
        return pl.concat([named, refused.sort("ts", "source", "line", nulls_last=True)])

    def assess(self, t: Tables, ev: pl.DataFrame) -> Finding | None:
        ranks = tuple(sorted(set(ev["rank"].drop_nulls().to_list())))
        who = ranks_text(ranks) if ranks else "a rank"
        if ev["kind"][0] == K.nccl_config:
            return self._named(t, ev, who, ranks)
        said = ev["error_type"][0]
        return self.finding(
            culprit_ranks=ranks,
            summary=f"NCCL refused how {who} called it (`{said}`): a setup mistake - most often two ranks on "
            "one GPU, or a torch and NCCL that do not fit - not a hardware or network fault; NCCL's own WARN line "
            "says which.",
            explanation="`invalid usage` is NCCL's answer to a wrong call: two ranks on one device, a communicator "
            "created differently on different ranks, a buffer on another GPU. It fails the same way on every run.",
            evidence=quotes(ev, 3),
            fixes=self.fixes("warn", "set_device"),
            dont=("Do not drain nodes or change network settings: NCCL rejected the call before any transfer.",),
            verify=("With `NCCL_DEBUG=WARN`, the failing run prints the reason on the line before the error.",),
        )

    def _named(self, t: Tables, ev: pl.DataFrame, who: str, ranks: tuple[int, ...]) -> Finding:
        """NCCL's own message names the mistake: its meaning and fix (parsers/nccl/) are the finding's."""
        row = ev.row(0, named=True)
        msg = reading(row["event"])
        what = msg["meaning"] if msg is not None else "NCCL rejected its set-up"
        refused = ev.filter(pl.col("kind") == K.nccl_error)["error_type"]
        result = f" (NCCL's result: `{refused[0]}`)" if not refused.is_empty() else ""
        return self.finding(
            confidence=float(row["strength"] if row["strength"] is not None else self.base_confidence),
            culprit_ranks=ranks,
            summary=f"NCCL names a set-up mistake on {who}: `{row['detail']}`{result} - {what[:1].lower()}{what[1:]}",
            explanation="NCCL's own message says what it could not use or refused; it fails the same way on "
            "every run until the setting, limit or call is fixed.",
            evidence=quotes(ev, 3),
            fixes=self.fixes("message", fix=msg["fix"]) if msg is not None else self.fixes("warn"),
            dont=("Do not drain nodes for it: the set-up is wrong, not the hardware.",),
            verify=("The next run prints no NCCL WARN at communicator creation (`NCCL_DEBUG=WARN`).",),
        )
