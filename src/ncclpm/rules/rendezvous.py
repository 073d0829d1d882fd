"""RZ01 process-group-never-formed."""

from __future__ import annotations

from typing import ClassVar

import polars as pl

from ncclpm.analysis.victims import in_context, progress_before
from ncclpm.model import said
from ncclpm.rules.base import Finding, Fix, Rule, quotes, ranks_text
from ncclpm.tables import Tables
from ncclpm.tables.kinds import K
from ncclpm.tables.schema import Category
from ncclpm.util.clamp import MAX_LISTED_RANKS

INIT_KINDS = [K.store_timeout, K.store_connect, K.store_bind, K.rendezvous_timeout, K.comm_init_timeout]
COMM_INIT_ONLY = 0.6  # an NCCL communicator that never formed: a rank that never joined, or NCCL's own connect
RETRY_ONLY = 0.45  # a client's failed attempts alone: the store was not there yet, nothing says it never came
# torch <= 2.1's bare `Socket Timeout` with no frame saying which wait gave up: the rendezvous, or a rank waiting
# for another's NCCL id while that one was busy (a slow rank, not a rendezvous failure)
BARE_STORE_TIMEOUT = 0.55
BARE_TIMEOUT_DETAIL = "Socket Timeout"
# What a process raises when the store it is joining drops or refuses it (`DistNetworkError: Connection reset by
# peer` out of `init_process_group`): read as the group never forming only inside those frames.
# Why the store's server could not listen, by errno.
_BIND_ERRNO = {
    98: "already in use",
    13: "permission denied: a port below 1024 needs privileges, or the address may not be bound",
    99: "MASTER_ADDR is not an address of this host",
}
# A Ray driver that could not reach its cluster's head (parsers/kinds.toml store_connect's `transport`): Ray's GCS,
# not torch's store - its own checks, not MASTER_ADDR's
RAY_GCS = "Ray GCS"
# below this, a group's failure quotes an error that is neither a timeout joining it nor an address (kinds.toml)
GROUP_MET = 0.7
CONNECTION_WORDS = r"Connection reset by peer|Connection refused|Connection timed out|Broken pipe|Socket Timeout"
CONNECTION_ERRORS = (
    "DistNetworkError",
    "DistStoreError",
    "ConnectionError",
    "ConnectionResetError",
    "ConnectionRefusedError",
    "ConnectionAbortedError",
    "TimeoutError",
)


class ProcessGroupNeverFormed(Rule):
    """The ranks never met: the store / rendezvous timed out, could not connect, or could not bind.

    ## What it detects
    `DistStoreError: Timed out after N seconds waiting for clients. 2/3 clients joined`, `wait timeout after
    ...ms, keys: /default_pg/...`, `The client socket has timed out ... while trying to connect to (host,
    port)`, `The server socket has failed to listen ... EADDRINUSE`, `RendezvousTimeoutError`, the elastic
    agent's own store timeouts (`Socket Timeout` under `_assign_worker_ranks`), and a connection error raised
    inside `init_process_group`'s frames (`DistNetworkError: Connection reset by peer`: likely only, it does not
    say why); NCCL's bootstrap refused or timed out connecting to the root of its unique id (`Connect to <addr>
    failed : Connection refused` with bootstrap.cc in its return-code trace). Store waits after the group formed
    (a rank waiting for another's NCCL id or DataLoader seed, torchrun's exit barrier) are WT01's: a busy rank,
    not a rendezvous; store and rendezvous errors after the job made progress are not the group never forming
    either. A Ray driver that could not reach its cluster's head (`Failed to connect to Ray cluster at <addr>`) is
    said as Ray's GCS, with Ray's checks; an RL weight-sync group that did not form (`Failed to initialize custom
    process group: <error>`) is as sure as the error it quotes says (a timeout joining it, an address or port, other).

    ## Why it matters
    Nothing ran yet: no NCCL or model problem is involved. The cause is in the launch - a rank that never
    started, a wrong MASTER_ADDR/MASTER_PORT, a port already in use, WORLD_SIZE larger than the processes
    started, a firewall between nodes.

    ## Example
    Rank 0: `Timed out after 11 seconds waiting for clients. 1/2 clients joined.`; rank 1: `The client
    socket has timed out after 10000ms while trying to connect to (127.0.0.1, 39652).`
    """

    id = "RZ01"
    name = "process-group-never-formed"
    fires_on = frozenset(
        {*INIT_KINDS, K.exception, K.bootstrap_error, K.store_retry, K.store_bind_retry, K.traceback_frame}
    )
    category = Category.INIT_RENDEZVOUS
    base_confidence = 0.85
    explains = ("CT01", "CR01")
    FIXES: ClassVar[dict[str, Fix]] = {
        "same_address": Fix(
            "Give every node the same `MASTER_ADDR`/`MASTER_PORT` (or `--rdzv-endpoint`) and check it is "
            "reachable from each node: `nc -zv $MASTER_ADDR $MASTER_PORT`."
        ),
        "all_started": Fix(
            "Make the number of processes started equal WORLD_SIZE (`--nnodes` × `--nproc_per_node`); "
            "make sure every node's launcher actually started."
        ),
        "port": Fix(
            "If the port is in use, pick a free one or let torchrun choose (`--rdzv-backend=c10d "
            "--rdzv-endpoint=host:0` / `--master-port` unset)."
        ),
        "port_taken": Fix(
            "Find what holds the store's port on its host (`ss -ltnp | grep :PORT`): end it if it is a stale process "
            "of an earlier run, else give this job a port of its own (`--master-port`, `--rdzv-endpoint=host:port`) "
            "or let torchrun choose one (`--rdzv-endpoint=host:0`).",
            when="the store's own port was taken",
        ),
        "ray_head": Fix(
            "On the head node check that the cluster is up (`ray status`; `ray start --head` if it is not) and "
            "which address its GCS listens on (6379 by default, `--port`; `--node-ip-address`).",
            when="a Ray driver could not reach its cluster",
        ),
        "ray_address": Fix(
            'Pass the driver that address: `ray.init(address="<head>:<port>")` or `RAY_ADDRESS` (`auto` only on a '
            "node that joined the cluster); a stale RAY_ADDRESS of an earlier cluster points at nothing.",
            when="a Ray driver could not reach its cluster",
        ),
        "ray_ports": Fix(
            "Open the GCS port and Ray's other ports between the driver's host and the head (`nc -zv <head> 6379`; "
            "firewall, security groups, the interface Ray bound to).",
            when="a Ray driver could not reach its cluster",
        ),
        "named_group": Fix(
            "Create the group with the same master address, port, world size and group name on every member - an RL "
            "trainer's ranks and each rollout engine's tensor-parallel ranks for its weight-sync group - and check "
            "that each member reaches that address and port (`nc -zv <addr> <port>`: a firewall, the interface the "
            "address resolves to); if a member died before joining, its own error is the cause.",
            when="a group the program creates with its own master address did not form (an RL weight-sync group)",
        ),
        "quoted_error": Fix(
            "Fix the error the line quotes first (an NCCL or CUDA failure: its own reading in this report; "
            "`NCCL_DEBUG=WARN` for NCCL's line): the group could not be created because of it, not because a member "
            "stayed away.",
            when="the group's failure quotes an error that is neither a timeout joining it nor an address or port",
        ),
        "place_all": Fix(
            "Get every process scheduled first: the cluster's scheduler had not placed them all (its message is "
            "quoted); ask for what the nodes offer or free them, then start the job.",
            when="the scheduler had not placed every process",
        ),
    }

    def evidence(self, t: Tables) -> pl.DataFrame:
        init = t.kinds(*INIT_KINDS)
        name = pl.col("error_type").str.split(".").list.last()  # `torch.distributed.DistNetworkError`
        # by its type, or - torch <= 1.12 raised a plain RuntimeError - by the errno's words in its message
        said_errno = pl.col("detail").fill_null("").str.contains(CONNECTION_WORDS)
        raised = t.kinds(K.exception).filter(name.is_in(CONNECTION_ERRORS) | said_errno)
        # NCCL's bootstrap failing to reach its root (parsers/nccl/: a refused connect in bootstrap.cc's trace)
        boot = t.kinds(K.bootstrap_error)
        if init.is_empty() and raised.is_empty():  # (most jobs: no store line, no connection error to place)
            found = boot
        else:
            # Store waits after the group formed are the waiting side of a busy rank (WT01), not a rendezvous.
            later = self.facts.store_waits.select("source", "line")
            # after the job had made progress the group had formed: an agent losing its store then (the store's
            # host gone) or a re-rendezvous after a failure is not the group never forming
            ran = progress_before(t, t.kinds(K.rendezvous_timeout, K.store_connect)).select("source", "line")
            ev = init.join(pl.concat([later, ran]), on=["source", "line"], how="anti")
            later = pl.concat([later, progress_before(t, raised).select("source", "line")])
            in_init = in_context(t, raised, [K.frame_init, K.frame_rendezvous]).join(
                pl.concat([ev.select("source", "line"), later]), on=["source", "line"], how="anti"
            )
            found = pl.concat([ev, in_init, boot])
        if found.is_empty():
            found = _stuck_retrying(t)
        if found.is_empty():
            # torchrun's agent failing in its start-up with no worker's output anywhere: the job never formed. Its
            # innermost frame kept stands for it (the traceback is often cut before its exception line).
            agent = self.facts.agent_failed_early.select("source", pl.col("end_line").alias("line"))
            return t.kinds(K.traceback_frame).join(agent, on=["source", "line"])
        return found.sort("ts", "source", "line", nulls_last=True)

    def _culprits(self, t: Tables, ev: pl.DataFrame) -> tuple[tuple[int, ...], str]:
        # The server that cannot listen explains its clients' connect errors: check it first.
        bind = ev.filter(pl.col("kind") == K.store_bind)["rank"].drop_nulls().unique().to_list()
        if not ev.filter(pl.col("kind") == K.store_bind).is_empty():
            errno = ev.filter(pl.col("kind") == K.store_bind)["count"].drop_nulls()
            why = _BIND_ERRNO.get(int(errno[0]), "") if errno.len() else "already in use"
            return tuple(sorted(bind)), f"the store could not listen on its port{f' ({why})' if why else ''}"
        rebind = ev.filter(pl.col("kind") == K.store_bind_retry)
        if not rebind.is_empty():  # the server's own port taken, not a store the clients cannot reach
            port = rebind["detail"].drop_nulls()
            on = f" {port[-1]}" if port.len() else ""
            ranks = tuple(sorted(rebind["rank"].drop_nulls().unique().to_list()))
            return ranks, f"the store's own port{on} was taken (another job, or a stale process of an earlier run)"
        connecting = ev.filter(pl.col("kind").is_in([K.store_connect, K.store_retry]))
        if _ray_cluster(ev):
            at = connecting["value"].drop_nulls()
            where = f" at {at[0]}" if at.len() else ""
            return (), (
                f"the Ray driver could not reach its cluster's head node{where} (Ray's GCS, the address passed to "
                "ray.init / RAY_ADDRESS): the job's actors were never created"
            )
        if not connecting.is_empty():
            addr = pl.coalesce("peer", "detail", "value").drop_nulls()
            at = connecting.select(addr)
            where = f" at {at.item(0, 0).replace(', ', ':')}" if not at.is_empty() else ""  # `(host, port)`
            ranks = tuple(sorted(connecting["rank"].drop_nulls().unique().to_list()))
            return ranks, f"could not reach the store{where} (MASTER_ADDR/MASTER_PORT)"
        joined = ev.filter((pl.col("kind") == K.store_timeout) & pl.col("expected").is_not_null())
        expected, arrived = joined["expected"].max(), joined["nranks"].min()
        if not joined.is_empty() and expected is not None:
            more = joined.filter(pl.col("nranks") > pl.col("expected"))["nranks"].max()
            if more is not None:  # the key counted more processes than the group has: others share the store
                return (), (
                    f"{int(more)} processes joined a group of {int(expected)} - more than its world size: another "
                    "job (or a second launch of this one) uses the same MASTER_ADDR:MASTER_PORT, or more processes "
                    "were started than WORLD_SIZE"
                )
            seen = set(t.ranks["rank"].to_list())
            # a count from a log: the missing ranks are listed only when there are few enough to list
            missing = tuple(r for r in range(int(expected)) if r not in seen) if expected <= MAX_LISTED_RANKS else ()
            if arrived is not None and len(missing) != expected - arrived:
                missing = ()  # the logs do not show enough ranks to tell which ones stayed away
            got = "some" if arrived is None else str(int(arrived))
            return missing, f"only {got} of {int(expected)} processes joined"
        if (ev["kind"] == K.traceback_frame).all():  # torchrun's agent alone failed, before any worker ran
            return (), "torchrun's agent failed in its start-up (its own traceback, no worker's output)"
        boot = ev.filter(pl.col("kind") == K.bootstrap_error)
        if boot.height == ev.height:  # only NCCL's bootstrap: the communicator's root was not there
            peer, said_it = boot["peer"][0], boot["error_type"][0]
            at = f" at {peer}" if peer else ""
            why = f" ({said_it})" if said_it else ""
            return (), f"NCCL's bootstrap could not reach its root{at}{why}: not started, gone, or unreachable"
        raised = ev.filter(pl.col("kind") == K.exception)
        if raised.height == ev.height:  # only an error out of init_process_group's frames
            said_it = said(raised["text"][-1], t.line_prefix, 100)
            return (), f"`{said_it}` was raised while joining it (in `init_process_group`)"
        return (), "the rendezvous never completed"

    def assess(self, t: Tables, ev: pl.DataFrame) -> Finding | None:
        culprits, how = self._culprits(t, ev)
        # an error out of init_process_group says the group did not form, not why (no store message): a lead; the
        # agent's own traceback alone says less still (where it stopped, not why)
        agent_only = (ev["kind"] == K.traceback_frame).all()
        conf = self.base_confidence if (~ev["kind"].is_in([K.exception, K.bootstrap_error])).any() else 0.6
        if agent_only:
            conf = 0.45
        elif (ev["kind"] == K.bootstrap_error).all():  # how much NCCL's line proves alone (parsers/nccl/)
            conf = float(ev["strength"].max() or 0.6)
        elif ev["kind"].is_in([K.store_retry, K.store_bind_retry]).all():
            who = "torchelastic" if (ev["kind"] == K.store_bind_retry).any() else "the client"
            conf, how = RETRY_ONLY, f"{how} - {who} was still retrying when the log ends"
        elif (ev["kind"] == K.rendezvous_timeout).all() and ev["strength"].is_not_null().all():
            # every line read with how surely it is the rendezvous (parsers/kinds.toml: an RL weight-sync group's
            # failure, by the error it quotes - a timeout joining, an address or port, a bare failure)
            conf = float(ev["strength"].max())  # type: ignore[arg-type]
            said_it = said(ev["text"][-1], t.line_prefix, 160)
            how = f"`{said_it}`"
        elif (ev["kind"] == K.comm_init_timeout).all():
            conf, how = COMM_INIT_ONLY, "an NCCL communicator did not finish initialising in time"
        elif _bare_store_timeout(t, ev):
            conf, how = (
                BARE_STORE_TIMEOUT,
                (
                    "a store request timed out (`Socket Timeout`) and nothing says which wait it was: the "
                    "rendezvous, or a rank waiting for another's NCCL id"
                ),
            )
        who = f" ({ranks_text(culprits)})" if culprits else ""
        # the processes that never came: the scheduler could not place them (a pod Pending for want of GPUs)
        unplaced = t.kinds(K.scheduler_refused)
        why = (
            f"; the scheduler had not placed every process (`{unplaced['detail'][0]}`)"
            if not unplaced.is_empty()
            else ""
        )
        if _ray_cluster(ev):
            return self.finding(
                confidence=conf,
                culprit_ranks=culprits,
                summary=f"{how[:1].upper()}{how[1:]}{why}.",
                explanation="The driver's `ray.init` could not connect to the head node's GCS, so no actor (no "
                "trainer, rollout or worker process) was started: a launch or network-setup problem of the Ray "
                "cluster, before torch's process groups or NCCL were involved.",
                evidence=quotes(ev) + quotes(unplaced, 1),
                fixes=self.fixes("ray_head", "ray_address", "ray_ports"),
                dont=(
                    "MASTER_ADDR / MASTER_PORT and NCCL's variables do not affect the connection to Ray's GCS that "
                    "failed here.",
                ),
                verify=("`ray status` run on the driver's host lists the cluster's nodes; `ray.init` returns.",),
                facts={"ray_cluster": True},
            )
        if _named_group(ev):
            # (its members' ranks in the group are not the ranks the lines carry - an engine's tensor-parallel rank
            # is offset by the trainer's ranks: the ranks that stayed away cannot be named from them)
            return self.finding(
                confidence=conf,
                culprit_ranks=(),
                summary=f"The process group never formed: {how}{why}.",
                explanation="The program created this group with its own master address and port (an RL trainer's "
                "weight-sync group with its rollout engines), apart from the job's own process group, and it did not "
                "form: the error its line quotes says why - a member that never joined, an address or port not "
                "reached, or another failure while creating it.",
                evidence=quotes(ev) + quotes(unplaced, 1),
                fixes=self.fixes("named_group", *(["quoted_error"] if conf < GROUP_MET else [])),
                dont=(
                    "The job's MASTER_ADDR / MASTER_PORT do not set this group's address: the code that creates it "
                    "passes its own (the trainer's master address and port).",
                ),
                verify=("Every member of the group gets past its creation and the first weight sync completes.",),
            )
        return self.finding(
            confidence=conf,
            culprit_ranks=culprits,
            summary=f"The process group never formed: {how}{who}{why}.",
            explanation="The failure happened before any collective: the processes did not all reach the "
            "rendezvous/TCPStore. This is a launch or network-setup problem, not a training or NCCL bug.",
            evidence=quotes(ev) + quotes(unplaced, 1),
            fixes=self.fixes(*(["place_all"] if why else []), *_fix_order(ev)),
            dont=(
                "No NCCL variable (NCCL_P2P_DISABLE, NCCL_IB_DISABLE, NCCL_SOCKET_IFNAME) affects the "
                "TCPStore rendezvous that failed here.",
            ),
            verify=(
                "All ranks print past `init_process_group`; `torch.distributed.barrier()` right after init "
                "returns on every rank.",
            ),
        )


def _named_group(ev: pl.DataFrame) -> bool:
    """A group the program creates with its own master address (an RL weight-sync group) failed: its line is read
    with how surely it is the rendezvous, by the error it quotes (parsers/kinds.toml rendezvous_timeout)."""
    return bool(((ev["kind"] == K.rendezvous_timeout) & ev["strength"].is_not_null()).any())


def _ray_cluster(ev: pl.DataFrame) -> bool:
    """Every line is a Ray driver failing to reach its cluster's GCS (no torch store or rendezvous line beside)."""
    return bool((ev["transport"] == RAY_GCS).fill_null(False).all()) and not ev.is_empty()


def _stuck_retrying(t: Tables) -> pl.DataFrame:
    """A store client's failed attempts (or the store server's, its own port taken), when they are all the job says
    went wrong: nothing else erred or failed and no line after them shows the rank got past its rendezvous (healthy
    jobs print a few while the store's server starts; a server's retry that then bound caused nothing)."""
    retries = t.kinds(K.store_retry, K.store_bind_retry)
    if retries.is_empty():
        return retries
    others = t.events.filter(
        (pl.col("severity") == "error") & ~pl.col("kind").is_in([K.store_retry, K.store_bind_retry])
    )
    if not others.is_empty() or not t.tracebacks.is_empty():
        return retries.clear()
    went_on = t.kinds(K.progress, K.nccl_comm_init).group_by("source").agg(pl.col("line").max().alias("_last"))
    gone_past = retries.join(went_on, on="source").filter(pl.col("_last") > pl.col("line"))
    return retries.join(gone_past.select("source"), on="source", how="anti")


def _bare_store_timeout(t: Tables, ev: pl.DataFrame) -> bool:
    """Only bare store timeouts (`Socket Timeout`), with no init or rendezvous frame around them."""
    # (a timeout with no detail is not a bare one: `.all()` would skip its null and count it as bare)
    bare = ((ev["kind"] == K.store_timeout) & (ev["detail"] == BARE_TIMEOUT_DETAIL)).fill_null(False)
    return bool(bare.all()) and t.kinds(K.frame_init, K.frame_rendezvous).is_empty()


def _fix_order(ev: pl.DataFrame) -> tuple[str, ...]:
    """The port's own fix first when the store's server could not bind (its port taken), else the usual ones."""
    if ev["kind"].is_in([K.store_bind, K.store_bind_retry]).any():
        return ("port_taken", "same_address", "all_started")
    return ("same_address", "all_started", "port")
