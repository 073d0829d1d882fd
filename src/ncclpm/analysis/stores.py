"""Waits in the c10d store after the process group had formed: a rank waiting for another's NCCL unique id (or, in
gloo's init, for the address of a rank that had started but not reached it), a DataLoader waiting for rank 0's shared
seed, torchrun's agent at its exit barrier, or any store wait after training
had made progress - the waiting side of a rank still busy elsewhere (WT01), never a rendezvous that failed (RZ01)."""

from __future__ import annotations

import polars as pl

from ncclpm.analysis.crashes import TORN_DOWN
from ncclpm.analysis.victims import in_context, progress_before
from ncclpm.tables import Tables
from ncclpm.tables.kinds import K
from ncclpm.tables.schema import empty

# The DataLoader's shared-seed exchange: rank 0 draws the seed and publishes it in the store; the others wait.
SEED_PUBLISHER = 0


def store_waits(t: Tables) -> pl.DataFrame:
    """Store timeouts that happened after the process group had formed, or while it formed for a rank that had
    started (gloo's address exchange), with the rank waited for (`awaited`, if known) and `how` (nccl_id,
    peer_address, dataloader_seed, after_start, exit_barrier)."""
    if not t.has_kinds(K.store_error, K.store_timeout):  # (most jobs: no store wait, no query)
        return empty({**t.events.schema, "awaited": pl.Int64(), "how": pl.String()})
    # a wait the store's dropped connection ended is a process gone (CR03 reads it), not one still busy
    gone = t.kinds(K.peer_closed).select("source", "line")
    nccl_id = (
        t.kinds(K.store_error)
        .join(gone, on=["source", "line"], how="anti")
        .with_columns(pl.col("subject_rank").alias("awaited"), pl.lit("nccl_id").alias("how"))
    )
    timeouts = t.kinds(K.store_timeout)
    # gloo's full mesh in init_process_group: the key names the rank whose address never came; when that rank was
    # running (its own events, or the launcher tore it down: SIGTERM) it was elsewhere - busy before its init - and
    # not a launch that failed
    running = _running_ranks(t) if timeouts["subject_rank"].is_not_null().any() else []
    address = timeouts.filter(pl.col("subject_rank").is_in(running) & (pl.col("subject_rank") != pl.col("rank")))
    address = address.with_columns(pl.col("subject_rank").alias("awaited"), pl.lit("peer_address").alias("how"))
    timeouts = timeouts.join(address.select("source", "line"), on=["source", "line"], how="anti")
    # torchrun's agent at its exit barrier: its own workers had finished, another node's had not
    exit_wait = in_context(t, timeouts, [K.exit_barrier]).with_columns(
        pl.lit(None, pl.Int64).alias("awaited"), pl.lit("exit_barrier").alias("how")
    )
    timeouts = timeouts.join(exit_wait.select("source", "line"), on=["source", "line"], how="anti")
    seed = in_context(t, timeouts, [K.frame_dataloader]).with_columns(
        pl.lit(SEED_PUBLISHER, pl.Int64).alias("awaited"), pl.lit("dataloader_seed").alias("how")
    )
    later = progress_before(t, timeouts.join(seed.select("source", "line"), on=["source", "line"], how="anti"))
    later = later.with_columns(pl.lit(None, pl.Int64).alias("awaited"), pl.lit("after_start").alias("how"))
    frames = [f.select(*t.events.columns, "awaited", "how") for f in (nccl_id, address, seed, later, exit_wait)]
    return pl.concat(frames).sort("ts", "source", "line", nulls_last=True)


def _running_ranks(t: Tables) -> list[int]:
    """Ranks seen running elsewhere: with events of their own, or torn down by the launcher (it had started them) -
    not those stuck in the rendezvous themselves (a store that waited for clients that never came)."""
    own = t.events.filter(pl.col("rank").is_not_null())["rank"].unique().to_list()
    torn = t.elastic.filter(pl.col("exit_code") == TORN_DOWN)["rank"].drop_nulls().to_list()
    stuck = t.kinds(K.store_timeout, K.store_connect, K.store_bind, K.rendezvous_timeout)["rank"].drop_nulls()
    return sorted((set(own) | set(torn)) - set(stuck.to_list()))
