"""Which host a rank ran on, which IP a host uses, and who a `peer` address in an NCCL line is.

NCCL names peers by address (`10.0.3.14<41524>`, or `node03.cluster<45882>` in recent versions), while ranks
are known by host (`host:pid` prefix + the `Init COMPLETE` line). The address book is the `nccl_addresses` table
(ingest/text/nccl.py, from NCCL's own interface lines printed by every process at init). Known limit: an address that
no host's interface line shows stays an address (the report quotes it as is).
"""

from __future__ import annotations

import re

import polars as pl

from ncclpm.rules.base import ranks_text
from ncclpm.tables import Tables
from ncclpm.tables.schema import empty

_PEER = re.compile(r"^\s*(?P<addr>[^<\s]+?)(?:<\d+>)?\s*$")


def host_ranks(t: Tables) -> pl.DataFrame:
    """(host, rank) pairs. NCCL's `Init COMPLETE` lines (host:pid → rank in the world communicator) are
    authoritative for the hosts they cover; other hosts fall back to the per-rank table and ranked lines."""
    comms = t.extra.get("nccl_comms")
    known = empty({"host": pl.String(), "rank": pl.Int32()})
    if comms is not None and not comms.is_empty():
        world = comms.filter(pl.col("nranks") == pl.col("nranks").max())
        known = world.select(pl.col("host").cast(pl.String), pl.col("rank").cast(pl.Int32)).drop_nulls()
    rest = pl.concat(
        [f.select(pl.col("host").cast(pl.String), pl.col("rank").cast(pl.Int32)) for f in (t.ranks, t.events)]
    ).drop_nulls()
    rest = rest.filter(~pl.col("host").is_in(known["host"].to_list()) & ~pl.col("rank").is_in(known["rank"].to_list()))
    return pl.concat([known, rest]).unique().sort("host", "rank")


def ranks_on(t: Tables, hosts: list[str]) -> list[int]:
    hr = host_ranks(t)
    return sorted(set(hr.filter(pl.col("host").is_in(hosts))["rank"].to_list()))


def address_book(t: Tables) -> dict[str, str]:
    """IP address → short host name, from NCCL's interface lines (the `nccl_addresses` table)."""
    book = t.extra.get("nccl_addresses")
    return {} if book is None else {ip: host for host, ip in book.iter_rows()}


def peer_host(peer: str | None, book: dict[str, str], hosts: set[str]) -> str | None:
    """Host behind an NCCL peer string (`10.0.3.14<41524>`, `node03.cluster<45882>`), if known."""
    if not peer:
        return None
    m = _PEER.match(peer)
    addr = m["addr"] if m else peer
    if addr in book:
        return book[addr]
    short = addr.split(".")[0]
    if short in hosts and not addr.replace(".", "").isdigit():
        return short
    return None


def where(t: Tables, hosts: list[str], sep: str = ", ") -> str:
    """`node12 (ranks 8, 9)` style text for hosts, with the ranks they ran when known."""
    parts = []
    for h in hosts:
        ranks = ranks_on(t, [h])
        parts.append(f"{h} ({ranks_text(ranks)})" if ranks else h)
    return sep.join(parts)
