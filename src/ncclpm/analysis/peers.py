"""A peer that went away: survivors that lost a peer's connection before anyone waited on anyone (CR03), and a
monitored barrier's non-root ranks whose error is that lost connection."""

from __future__ import annotations

import polars as pl

from ncclpm.analysis.crashes import EXPLAINED_KINDS
from ncclpm.tables import Tables
from ncclpm.tables.kinds import K
from ncclpm.util.frames import filtered

# A collective that timed out first makes a closed connection its consequence (the aborting ranks close theirs).
WAITED_FIRST = [K.collective_timeout, K.watchdog_status, K.heartbeat_stuck, K.monitored_barrier]
ROOT_STRENGTH = 0.9  # the monitored barrier's root naming who never arrived (parsers/kinds.toml)


def barrier_lost_peer(t: Tables) -> pl.DataFrame:
    """A non-root rank's monitored-barrier failure (`received errors while waiting for send/recv from rank N`)
    whose original exception, below it, is the peer's closed connection: rank N went away, it did not keep the
    others waiting (a late root gives `Timed out waiting ... for recv` instead)."""
    weak = filtered(t.kinds(K.monitored_barrier), pl.col("strength").fill_null(0.0) < ROOT_STRENGTH)
    closed = t.kinds(K.peer_closed).group_by("source", "rank").agg(pl.col("line").max().alias("_closed"))
    if weak.is_empty() or closed.is_empty():
        return weak.clear()
    return (
        weak.join(closed, on=["source", "rank"], nulls_equal=True)
        .filter(pl.col("_closed") > pl.col("line"))
        .drop("_closed")
    )


def peer_left(t: Tables, lost_peer: pl.DataFrame) -> bool:
    """Ranks lost a peer's connection, nobody had waited on anyone before, and no line of a kind another rule
    explains is in the files but the loss itself (a rank's own crash is the engine's to weigh: CR01 silences CR03,
    `precedence.EXPLAINS`)."""
    closed = t.kinds(K.peer_closed)
    waited = t.kinds(*WAITED_FIRST).join(lost_peer, on=["source", "line"], how="anti")
    if closed.is_empty() or not waited.is_empty():
        return False
    # a store wait for the NCCL id that the store's dropped connection ended is this very loss, not another cause
    explained = t.kinds(*EXPLAINED_KINDS)
    lost = explained.filter(pl.col("kind") == K.store_error).join(closed, on=["source", "line"], how="semi")
    # so is torchrun's agent failing its rendezvous, or reaching its store, after the store's host went away (same
    # file, later)
    store_gone = (
        closed.filter(pl.col("net_class") == "store").group_by("source").agg(pl.col("line").min().alias("_gone"))
    )
    agent = (
        explained.filter(pl.col("kind").is_in([K.rendezvous_timeout, K.store_connect]))
        .join(store_gone, on="source")
        .filter(pl.col("line") > pl.col("_gone"))
    )
    return explained.height == lost.height + agent.height
