"""SH02 wrong-values."""

from __future__ import annotations

from typing import ClassVar

import polars as pl

from ncclpm.rules.base import Finding, Fix, Rule, quotes
from ncclpm.tables import Tables
from ncclpm.tables.kinds import K
from ncclpm.tables.schema import Category


class CollectivesDeliveredWrongValues(Rule):
    """A communication benchmark's collectives completed but delivered wrong values: data corrupted between GPUs.

    ## What it detects
    nccl-tests' `# Out of bounds values : N FAILED` after its table: it checked every result (`-c 1`, the default)
    and found N wrong values (its `#wrong` columns, summed over sizes and ranks).

    ## Why it matters
    Nothing crashed and nothing timed out, so no error names a cause: the data itself arrived corrupted. On a
    healthy system NCCL's results are exact. In the issue threads the usual cause is peer-to-peer traffic through
    PCIe with ACS or the IOMMU redirecting it (bare-metal servers with ACS on, VMs without ATS), then a protocol on
    a platform that does not order its writes (LL128), then a faulty GPU, NVLink or NIC. A lead, not a proof: the
    reruns below tell them apart.

    ## Example
    `# Out of bounds values : 18432 FAILED` after rows with a non-zero `#wrong` from 128 MB up.
    """

    id = "SH02"
    name = "wrong-values"
    category = Category.SHM_P2P_TOPOLOGY
    base_confidence = 0.5
    fires_on = frozenset({K.test_wrong_values})
    FIXES: ClassVar[dict[str, Fix]] = {
        "p2p": Fix(
            "Rerun with `NCCL_P2P_DISABLE=1`: if the values are right then, peer-to-peer over PCIe corrupts data - "
            "disable ACS on the PCIe switches (or `iommu=pt` / the IOMMU off on bare metal; ATS for VMs), see NCCL's "
            "troubleshooting guide on PCI ACS."
        ),
        "protocol": Fix(
            "Else rerun with `NCCL_PROTO=^LL128` (then `NCCL_PROTO=Simple`): a protocol this platform does not order "
            "correctly corrupts data; keep the setting and report the platform to NCCL."
        ),
        "hardware": Fix(
            "Else run the test on each node and GPU pair alone to find the faulty one (`nvidia-smi -q -d ECC`, the "
            "kernel log's Xid lines), and drain it."
        ),
    }

    def evidence(self, t: Tables) -> pl.DataFrame:
        return t.kinds(K.test_wrong_values).sort("ts", "source", "line", nulls_last=True)

    def assess(self, t: Tables, ev: pl.DataFrame) -> Finding | None:
        wrong = int(ev["count"].fill_null(0).max() or 0)
        if wrong == 0:
            return None
        return self.finding(
            culprit_ranks=(),  # the test sums its ranks' wrong values: it does not say whose
            summary=f"The benchmark's collectives completed but {wrong:,} values arrived wrong (`Out of bounds "
            "values : FAILED`): data was corrupted between the GPUs - most often peer-to-peer through PCIe with ACS "
            "or the IOMMU on, else a protocol (LL128) or a faulty GPU or link.",
            explanation="nccl-tests checks every value a collective delivers; on a healthy system they are exact. "
            "Nothing failed or timed out, so no error names the cause: reruns with P2P or a protocol disabled tell "
            "the transports apart.",
            evidence=quotes(ev, 2),
            fixes=self.fixes(),
            dont=("Do not raise timeouts or retry the job: the values were wrong, not late.",),
            verify=("The same nccl-tests run ends with `# Out of bounds values : 0 OK`.",),
        )
