"""NCCL's choices at init as facts (from NCCL_DEBUG=INFO lines, catalog `parsers/nccl_debug.toml`): the network
(IB or Socket), the interfaces and devices, the transport between each pair of ranks on channel 0, the number
of rings. A run without INFO logs has none of these, and then nothing is claimed about them."""

from __future__ import annotations

import polars as pl

from ncclpm.diff.facts import listed, quote
from ncclpm.diff_model import Fact
from ncclpm.tables import Tables
from ncclpm.tables.kinds import K


def transport_class(via: str) -> str:
    """`NET/IB/0/GDRDMA` -> `NET/IB`, `P2P/CUMEM/read` -> `P2P`, `SHM/direct/direct` -> `SHM`."""
    parts = via.split("/")
    return "/".join(parts[:2]) if parts[0] in ("NET", "COLLNET") and len(parts) > 1 else parts[0]


def _job_fact(t: Tables, kind: str, column: str, key: str, what: str, family: str, fmt=None) -> Fact | None:
    rows = t.events.filter((pl.col("kind") == kind) & pl.col(column).is_not_null())
    if rows.is_empty():
        return None
    values = [fmt(v) if fmt else str(v).strip() for v in rows[column].to_list()]
    return Fact(key, what, family, "nccl", listed(values), quote(rows.sort("source", "line").row(0, named=True)))


def _transport_facts(t: Tables) -> list[Fact]:
    rows = t.events.filter((pl.col("kind") == K.nccl_transport) & pl.col("value").is_not_null())
    if rows.is_empty():
        return []
    first = quote(rows.sort("source", "line").row(0, named=True))
    facts = [
        Fact(
            "nccl:transports",
            "NCCL transports",
            "transport",
            "nccl",
            listed(map(transport_class, rows["value"])),
            first,
        )
    ]
    pairs = rows.filter(pl.col("subject_rank").is_not_null() & pl.col("peer").is_not_null())
    for (src, dst), group in sorted(pairs.group_by("subject_rank", "peer"), key=lambda g: (g[0][0], str(g[0][1]))):
        ev = quote(group.sort("source", "line").row(0, named=True))
        what = f"NCCL transport {src} -> {dst}"
        facts.append(Fact(f"nccl:transport:{src}->{dst}", what, "transport", "nccl", listed(group["value"]), ev, True))
    return facts


def nccl_facts(t: Tables) -> list[Fact]:
    facts = [
        _job_fact(t, K.nccl_network, "value", "nccl:network", "NCCL network", "nccl_network"),
        _job_fact(t, K.nccl_interface, "value", "nccl:bootstrap_if", "NCCL bootstrap interface", "nccl_interface"),
        _job_fact(t, K.nccl_net_device, "value", "nccl:net_devices", "NCCL network devices", "nccl_interface"),
        _job_fact(t, K.nccl_ring, "count", "nccl:rings", "NCCL rings (channels)", "nccl_topology"),
    ]
    return [f for f in facts if f is not None] + _transport_facts(t)
