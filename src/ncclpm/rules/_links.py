"""Which hosts a set of failing NCCL connections implicates.

Each failing connection is a pair (host that printed the error, host behind the peer address it names). A bad
port or cable fails every connection through one host, so the host in the most distinct pairs is the culprit;
with a single pair both ends are; for "no interface" errors it is the host that printed them. Used by NW01.
"""

from __future__ import annotations

import polars as pl

from ncclpm.rules._hosts import address_book, host_ranks, peer_host, ranks_on
from ncclpm.tables import Tables


def failing_pairs(t: Tables, ev: pl.DataFrame) -> tuple[list[str], list[frozenset[str]]]:
    """Hosts that printed the errors (in order), and the distinct failing host pairs."""
    book = address_book(t)
    placed = host_ranks(t)
    hosts = set(placed["host"].to_list()) | set(ev["host"].drop_nulls().to_list())
    host_of_rank = {rank: host for host, rank in placed.iter_rows()}
    reporters: list[str] = []
    pairs: list[frozenset[str]] = []
    for host, peer in ev.select("host", "peer").unique(maintain_order=True).iter_rows():
        if peer and peer.isdigit():  # a peer named by its rank (`Proxy Call to rank 2 failed`): its host, if known
            other = host_of_rank.get(int(peer))
        else:
            other = peer_host(peer, book, hosts) or (peer.split("<")[0] if peer else None)
        if host and host not in reporters:
            reporters.append(host)
        pair = frozenset(h for h in (host, other) if h)
        if len(pair) == 2 and pair not in pairs:
            pairs.append(pair)
    return reporters, pairs


def implicated_hosts(interface_only: bool, reporters: list[str], pairs: list[frozenset[str]]) -> list[str]:
    if interface_only:
        return reporters
    count: dict[str, int] = {}
    for pair in pairs:
        for h in pair:
            count[h] = count.get(h, 0) + 1
    top = max(count.values(), default=0)
    return sorted(h for h, n in count.items() if n == top)


def link_ends(t: Tables, ev: pl.DataFrame, hosts: list[str]) -> dict[str, list[int]]:
    """Per host, the ranks that printed the errors there - or every rank of that host when none did."""
    ends = {}
    for h in hosts:
        mine = sorted(set(ev.filter(pl.col("host") == h)["rank"].drop_nulls().to_list()))
        ends[h] = mine or ranks_on(t, [h])
    return ends
