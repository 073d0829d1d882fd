"""NW01 nccl-network-error."""

from __future__ import annotations

from typing import ClassVar

import polars as pl

from ncclpm.analysis.crashes import NAMED_CAUSES, NAMES_A_CAUSE
from ncclpm.model import said
from ncclpm.rules._hosts import host_ranks, ranks_on, where
from ncclpm.rules._links import failing_pairs, implicated_hosts, link_ends
from ncclpm.rules.base import Finding, Fix, Rule, quotes, ranks_text, warn_message
from ncclpm.tables import Tables
from ncclpm.tables.kinds import K
from ncclpm.tables.schema import Category

# ibv_wc_status values NCCL prints after `status=` (verbs.h); the ones seen in failing jobs.
IB_STATUS = {
    "12": "IBV_WC_RETRY_EXC_ERR: the transport retry counter was exceeded - the peer's port did not answer "
    "(link down or flapping, congestion, or the peer's NIC/process gone)",
    "13": "IBV_WC_RNR_RETRY_EXC_ERR: the receiver was not ready too many times",
    "5": "IBV_WC_WR_FLUSH_ERR: work flushed after an earlier error on the same queue pair (a consequence)",
    "4": "IBV_WC_LOC_PROT_ERR: local protection error (memory registration)",
    "10": "IBV_WC_REM_ACCESS_ERR: remote access error",
    "11": "IBV_WC_REM_OP_ERR: remote operation error",
}
# Addresses a peer must never advertise to another host: the loopback its hostname resolves to in /etc/hosts
# (127.0.1.1), link-local, the default docker bridge. A connection to one is the wrong interface, not a fault.
WRONG_ADDRESS = r"^(?:127\.0\.1\.1\b|169\.254\.|172\.17\.|fe80:)"


CLASS_ONLY = "system"  # ncclSystemError with no NCCL message read (kinds.toml): the class's lead alone
STRONG = 0.85  # IB completion errors and missing interfaces blame the network even next to a dead process
NCCL_FIXES = ("check_ports", "nccl_tests", "interfaces")
# A disaggregated-serving KV-cache connector's handshake or transfer (parsers/kinds.toml): vLLM's NIXL / MoRI-IO /
# Mooncake connectors, SGLang's PD disaggregation - their own transport library and ports, not NCCL's
KV_TRANSFER = "kv_transfer"
KV_FIXES = ("kv_reach", "kv_transport", "kv_versions")


def _kv_only(ev: pl.DataFrame) -> bool:
    return set(ev["net_class"].to_list()) == {KV_TRANSFER}


def _transports(ev: pl.DataFrame) -> list[str]:
    """The connectors the KV-cache transfer lines name (`NIXL`, `Mooncake`...), in order of appearance."""
    kv = ev.filter(pl.col("net_class") == KV_TRANSFER)
    return kv["transport"].drop_nulls().unique(maintain_order=True).to_list()


def _gloo_device(ev: pl.DataFrame) -> bool:
    """gloo could not create its TCP device (parsers/gloo.toml `gloo.no_interface`): not NCCL's interfaces."""
    return bool((ev["event"] == "gloo.no_interface").any())


def _fix_keys(ev: pl.DataFrame, class_only: bool, one_host: bool | None) -> tuple[str, ...]:
    if _gloo_device(ev):
        return ("gloo_ifname",)
    if _kv_only(ev):
        return KV_FIXES
    if not class_only:
        # NCCL's own lines first; a KV-cache connector failing beside them has its own network to check
        return NCCL_FIXES + (("kv_transport",) if KV_TRANSFER in set(ev["net_class"].to_list()) else ())
    # the class alone: NCCL's own line first, then where the call most often fails
    return (
        ("shm_size", "debug_warn")  # on one host the likeliest cause's check is also the quickest
        if one_host
        else ("debug_warn", *NCCL_FIXES)
        if one_host is False
        else ("debug_warn", "shm_size", "check_ports", "interfaces")
    )


KV_EXPLANATION = (
    "In disaggregated serving the decode engine fetches each request's KV cache from the prefill engine through a "
    "KV-cache connector (vLLM's NIXL, MoRI-IO or Mooncake connector, SGLang's PD disaggregation), over its own "
    "transport library (UCX, RDMA or TCP) and its own handshake ports - NCCL is not involved. A handshake or "
    "transfer that fails is the network between the two engines (devices, routes, firewall, the addresses they "
    "advertise) or the peer engine gone; the engines then drop or recompute the request, and failures that repeat "
    "are what stop serving."
)
KV_DONT = (
    "NCCL's settings (`NCCL_SOCKET_IFNAME`, `NCCL_IB_*`) and nccl-tests do not reach the KV-cache connector: it "
    "moves the cache over its own transport.",
    "Raising a timeout does not make an unreachable peer engine answer.",
)


def _kv_summary(t: Tables, ev: pl.DataFrame, hosts: list[str], detail: str) -> str:
    """A KV-cache connector's failure in words: which connector, between which hosts where the lines say."""
    names = _transports(ev)
    via = f" ({'/'.join(names)} connector)" if names else ""
    between = f" between {' and '.join(hosts)}" if len(hosts) == 2 else f" on {where(t, hosts)}" if hosts else ""
    return f"The KV-cache transfer between the prefill and decode engines failed{via}{between}: {detail}"


class NcclTransportError(Rule):
    """NCCL's network transport failed: InfiniBand completion errors, socket connect/reset errors, no usable
    interface.

    ## What it detects
    `NCCL WARN NET/IB : Got completion from peer 10.0.3.14<41524> with error 12, ...` (NCCL ≤ 2.2x) and
    `NET/IB: Got completion from peer ... with status=IBV_WC_RETRY_EXC_ERR(12) ...` (2.29+), IB async fatal
    events, `socketStartConnect: Connect to ... failed : Connection refused`, `socketPollConnect ... exceeded
    retries`, `Net : No interface found in the same subnet as remote address ...`, `Connection closed by remote
    peer`, and torch's `NCCL error: remote process exited or there was a network error`. The host that
    printed the line and the peer it names (resolved to a host through NCCL's `OOB`/`Bootstrap`/`NET/Socket`
    interface lines) are both named; the host common to all failing pairs is the culprit. A disaggregated-serving
    KV-cache connector's handshake or transfer failing (vLLM's NIXL, MoRI-IO or Mooncake connector, SGLang's PD
    disaggregation: `NIXL transfer failed for request ...`, `Failed to connect to bootstrap server ...`) is said as
    that transfer between the prefill and decode engines, with the connector's own network to check - not NCCL's.

    ## Why it matters
    A bad link, a flapping port or a wrong interface stalls every collective that crosses it, and every rank
    then times out. But "connection closed / reset by peer" and IB status 12 are also exactly what the
    survivors see when a peer *process* died: when another rule finds a rank that crashed first, this finding
    is demoted to a symptom of that crash.

    ## Example
    `node12:4411:4502 [5] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got completion from peer
    10.0.3.14<41524> with error 12, opcode 0, len 0, vendor err 129 (Recv)` on node12 while node14 (10.0.3.14)
    is the only peer named.
    """

    id = "NW01"
    name = "nccl-network-error"
    fires_on = frozenset({K.network_error, K.nccl_error})
    category = Category.NETWORK_TRANSPORT
    base_confidence = 0.85
    # Before CR01 in precedence.py: a rank that raised an NCCL network error "crashed" because of the network.
    # When another rank really died first, this rule demotes itself to a symptom instead (see `_crashed_first`).
    explains = ("CT01", "CR01")
    FIXES: ClassVar[dict[str, Fix]] = {
        "check_ports": Fix(
            "Check the ports of {hosts|the named hosts}: `ibstat` / `ibv_devinfo` "
            "(state, rate), link-down and symbol-error counters (`perfquery`, `ibdiagnet`); drain a host whose "
            "port flaps and reseat/replace the cable or switch port."
        ),
        "nccl_tests": Fix(
            "Reproduce outside the job with nccl-tests (`all_reduce_perf -b 8 -e 1G`) across the named hosts."
        ),
        "interfaces": Fix(
            "For interface errors pin `NCCL_SOCKET_IFNAME` (and `NCCL_IB_HCA`) to the interfaces that route "
            "between the hosts; for IB status 12 on a congested but healthy fabric raise `NCCL_IB_TIMEOUT` "
            "(e.g. 22)."
        ),
        "debug_warn": Fix(
            "Rerun with `NCCL_DEBUG=WARN` (`NCCL_DEBUG_FILE=/path/nccl.%h.%p` to keep it): the WARN line NCCL prints "
            "before this error names the system call that failed.",
            when="no NCCL message says which call failed",
        ),
        "shm_size": Fix(
            "In a container, check `df -h /dev/shm`: Docker's default is 64 MB, too small for NCCL's shared-memory "
            "buffers - start it with `--shm-size=16g` or `--ipc=host` (Kubernetes: an `emptyDir` with `medium: "
            "Memory` mounted on /dev/shm).",
            when="the ranks may share a host",
        ),
        "kv_reach": Fix(
            "Check that the prefill and decode engines reach each other{peers| (the hosts named)} on the addresses and "
            "ports their KV-cache connector advertises - vLLM's NIXL side channel (`VLLM_NIXL_SIDE_CHANNEL_HOST` / "
            "`VLLM_NIXL_SIDE_CHANNEL_PORT`), the Mooncake or SGLang bootstrap server's port (`--disaggregation-"
            "bootstrap-port`, 8998 by default): `nc -zv <host> <port>` from each side, no firewall between them - "
            "and that the peer engine is still running (its own log: a peer that died fails every transfer).",
            when="a KV-cache connector's handshake or transfer failed",
        ),
        "kv_transport": Fix(
            "Check the KV-cache transport's own network, which NCCL's settings do not reach: the RDMA devices it "
            "uses are up on both hosts (`ibv_devinfo`), UCX's for NIXL (`ucx_info -d`; `UCX_NET_DEVICES`, "
            "`UCX_TLS`), the device the connector is given (SGLang's `--disaggregation-ib-device`, Mooncake's "
            "`device_name`), and the two hosts route to each other over it (`ucx_perftest`, `ib_write_bw` between "
            "them).",
            when="a KV-cache connector's handshake or transfer failed",
        ),
        "kv_versions": Fix(
            "Run both engines with the same vLLM / SGLang release, model and KV-cache layout (block size, dtype, "
            "tensor-parallel sizes): a handshake that reaches the peer can still be refused by an incompatible one.",
            when="a KV-cache connector's handshake or transfer failed",
        ),
        "gloo_ifname": Fix(
            "Set `GLOO_SOCKET_IFNAME` to an interface every host has and that routes between them (`ip -br addr`), "
            "or unset it; with no setting gloo uses the address the host name resolves to (`hostname -i`).",
            when="gloo found no usable interface",
        ),
    }

    def evidence(self, t: Tables) -> pl.DataFrame:
        # net_class / strength are the kinds' readings (parsers/kinds.toml); strongest kind of line first (an IB
        # completion error says more than torch's summary of it)
        ev = t.kinds(K.network_error, K.nccl_error).filter(pl.col("net_class").is_not_null())
        # the bare class is a lead only where nothing says what failed: a network line, or an NCCL message another
        # rule reads (/dev/shm, a set-up mistake...), makes it add nothing
        named = t.kinds(*NAMED_CAUSES).filter(pl.col("strength").fill_null(1.0) >= NAMES_A_CAUSE)
        if (ev["net_class"] != CLASS_ONLY).any() or not named.is_empty():
            ev = ev.filter(pl.col("net_class") != CLASS_ONLY)
        wrong = (pl.col("net_class") == "connect") & pl.col("peer").fill_null("").str.contains(WRONG_ADDRESS)
        ev = ev.with_columns(
            pl.when(wrong).then(pl.lit("interface")).otherwise("net_class").alias("net_class"),
            pl.when(wrong).then(pl.lit(0.8)).otherwise("strength").alias("strength"),
        )
        return ev.sort(["strength", "ts", "source", "line"], descending=[True, False, False, False], nulls_last=True)

    def _summary(
        self,
        t: Tables,
        ev: pl.DataFrame,
        culprit_hosts: list[str],
        reporters: list[str],
        pairs: list,
        one_host: bool | None,
    ) -> str:
        detail = self._detail(ev.row(0, named=True), t.line_prefix)
        advertised = ev.filter(pl.col("peer").fill_null("").str.contains(WRONG_ADDRESS))["peer"].unique().to_list()
        if advertised:
            return (
                f"A peer advertised {', '.join(sorted(advertised))} for cross-host connections - a loopback, "
                "link-local or docker-bridge address no other host can reach: the wrong network interface was "
                f"picked (GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME unset or wrong). {detail}"
            )
        if _kv_only(ev):
            return _kv_summary(t, ev, culprit_hosts or reporters, detail)
        if set(ev["net_class"].to_list()) <= {CLASS_ONLY}:
            likely = (
                "most often the network"
                if one_host is False
                else "with every rank on one host, most often /dev/shm (too small in a container) or a CUDA IPC or "
                "memory call, not the network"
                if one_host
                else "most often the network across hosts, /dev/shm within one (too small in a container)"
            )
            return (
                f"NCCL failed with a system error{f' on {where(t, reporters)}' if reporters else ''} (ncclSystemError: "
                f"a socket, InfiniBand verbs, /dev/shm or memory call) and no NCCL message says which: {likely}. "
                "Rerun with NCCL_DEBUG=WARN to see NCCL's own line."
            )
        if set(ev["net_class"].to_list()) <= {"interface"}:
            ifname = (
                t.kinds(K.setting)
                .filter((pl.col("var") == "NCCL_SOCKET_IFNAME") & pl.col("host").is_in(culprit_hosts))["value"]
                .unique()
                .to_list()
            )
            how = f" with NCCL_SOCKET_IFNAME={'/'.join(ifname)}" if ifname else ""
            if _gloo_device(ev):
                found = ev.filter(pl.col("event") == "gloo.no_interface")["detail"][0]
                return f"gloo found no usable network interface (GLOO_SOCKET_IFNAME, or the host's address): `{found}`"
            return f"NCCL on {where(t, culprit_hosts)} found no usable network interface{how}: {detail}"
        if len(culprit_hosts) == 1 and len(pairs) > 1:
            return (
                f"Every failing NCCL connection goes through {where(t, culprit_hosts)} ({len(pairs)} host pairs, "
                f"reported by {', '.join(reporters)}): {detail}"
            )
        if len(culprit_hosts) == 2:
            ends = [f"{ranks_text(r)} on {h}" if r else h for h, r in link_ends(t, ev, culprit_hosts).items()]
            hca = ev["hca"].drop_nulls().unique().to_list()
            via = f" (HCA {', '.join(hca)})" if hca else ""
            return f"NCCL's connection between {' and '.join(ends)} failed{via}: {detail}"
        place = where(t, culprit_hosts or reporters)
        return f"NCCL's network transport failed{f' on {place}' if place else ''}: {detail}"

    def assess(self, t: Tables, ev: pl.DataFrame) -> Finding | None:
        reporters, pairs = failing_pairs(t, ev)
        culprit_hosts = implicated_hosts(set(ev["net_class"].to_list()) <= {"interface"}, reporters, pairs)
        if not culprit_hosts:  # no failing pair: an IB error of the host's own HCA (an async `port error`) names it
            local = ev.filter((pl.col("net_class") == "ib") & pl.col("peer").is_null() & pl.col("host").is_not_null())
            comms = t.extra.get("nccl_comms")  # NCCL's own name for each host (a collector may tag lines with another)
            if comms is not None and not comms.is_empty():
                named = local.filter(pl.col("host").is_in(comms["host"].drop_nulls().unique().implode()))
                local = named if not named.is_empty() else local
            if local["host"].n_unique() == 1:
                culprit_hosts = [str(local["host"][0])]
        culprits = tuple(ranks_on(t, culprit_hosts))
        if len(culprit_hosts) == 2 and len(pairs) == 1:  # one link: the processes at its ends, where known
            culprits = tuple(sorted({r for ranks in link_ends(t, ev, culprit_hosts).values() for r in ranks}))
        if _gloo_device(ev):  # a launch setting (GLOO_SOCKET_IFNAME) every process got: no rank or host to blame
            culprits = ()
        strongest = float(ev["strength"].max())  # type: ignore[arg-type]
        crashed = self._crashed_first(t, ev, culprit_hosts)
        # weak lines (closed sockets, a remote exit) next to a process seen going away: that is the dead peer
        gone = strongest < STRONG and not t.kinds(K.peer_closed).is_empty()
        symptom = bool(crashed) or gone
        detail = self._detail(ev.row(0, named=True), t.line_prefix)
        # the class alone (no NCCL line says which call failed) is read by where the ranks ran: asked once
        class_only = set(ev["net_class"].to_list()) <= {CLASS_ONLY}
        one_host = self._one_host(t) if class_only else None
        summary = self._summary(t, ev, culprit_hosts, reporters, pairs, one_host)
        kv = _kv_only(ev)
        failed = "KV-cache transfer failures" if kv else "NCCL network errors"
        if crashed:
            summary = (
                f"{failed} on {where(t, reporters)} ({detail}) are what a dead peer looks like: "
                f"{ranks_text(sorted(crashed))} died first (crashed, or lost with their node)."
            )
        elif gone:
            what = "The KV-cache transfer failures" if kv else "NCCL's closed connections"
            summary = f"{what} ({detail}) are what a dead peer looks like: a process went away."
        return self.finding(
            category=Category.SYMPTOM
            if symptom
            else Category.SHM_P2P_TOPOLOGY  # the class alone, every rank on one host: /dev/shm or CUDA IPC
            if class_only and one_host
            else self.category,
            confidence=0.4 if symptom else strongest,
            culprit_ranks=() if symptom else culprits,
            summary=summary,
            explanation=KV_EXPLANATION
            if kv
            else "NCCL prints these WARN lines when a connection to another process fails. Unless a peer "
            "process died first, the host common to every failing pair is where the link, port or "
            "interface configuration is bad; every other rank then waits on the collective that crosses it.",
            evidence=quotes(ev),
            fixes=self.fixes(
                *_fix_keys(ev, class_only, one_host),
                hosts=", ".join(culprit_hosts) or "the named hosts",
                peers=f" ({' and '.join(culprit_hosts or reporters)})" if culprit_hosts or reporters else "",
            ),
            dont=KV_DONT
            if kv
            else (
                "`NCCL_IB_DISABLE=1` only moves the traffic to TCP sockets - an order of magnitude slower - "
                "and hides the bad link.",
                "Raising the process-group timeout or setting `NCCL_TIMEOUT` (read by nothing) does not make a "
                "broken link deliver.",
            ),
            verify=(
                "Requests served by the prefill and decode engines together log no failed handshake or transfer on "
                "either engine.",
            )
            if kv
            else ("nccl-tests across the named hosts reach the expected bus bandwidth with no NCCL WARN.",),
            facts={
                "hosts": culprit_hosts,
                "reporting_hosts": reporters,
                "host_pairs": sorted(sorted(p) for p in pairs),
                "classes": sorted(set(ev["net_class"].to_list())),
            }
            | ({"transports": _transports(ev)} if KV_TRANSFER in set(ev["net_class"].to_list()) else {}),
        )

    def _one_host(self, t: Tables) -> bool | None:
        """Whether every rank of the job ran on one host: None where the logs do not say (ranks without a host, or
        known ranks whose host is not known)."""
        hr = host_ranks(t)
        if hr.is_empty():
            return None
        if hr["host"].n_unique() > 1:
            return False
        return True if self.facts.known_ranks <= set(hr["rank"].to_list()) else None

    def _crashed_first(self, t: Tables, ev: pl.DataFrame, culprit_hosts: list[str]) -> set[int]:
        """Ranks that died on their own and explain these lines (a dead peer closes its connections and stops
        answering IB): any crash for weak lines; for IB errors a crash on an implicated host or earlier than
        the first error. Interface errors are configuration, never a dead peer."""
        if "interface" in set(ev["net_class"].to_list()):
            return set()
        lost = set(ranks_on(t, t.kinds(K.node_failure)["value"].drop_nulls().to_list()))  # nodes Slurm saw fail
        if lost:
            return lost
        crashes = self.facts.crashes.filter(~pl.col("rank").is_in(ev["rank"].drop_nulls().to_list()))
        if crashes.is_empty():
            return set()
        if float(ev["strength"].max()) < STRONG:  # type: ignore[arg-type]
            return set(crashes["rank"].to_list())
        on_hosts = set(ranks_on(t, culprit_hosts))
        first_net, first_crash = ev["ts"].drop_nulls().min(), crashes["ts"].drop_nulls().min()
        earlier = first_net is not None and first_crash is not None and first_crash <= first_net  # type: ignore[operator]
        hit = crashes.filter(pl.col("rank").is_in(list(on_hosts))) if not earlier else crashes
        return set(hit["rank"].to_list())

    @staticmethod
    def _detail(row: dict, envelopes: str) -> str:
        status = (row.get("error_type") or "").split("(")[-1].rstrip(")")
        if row["net_class"] == "ib" and status in IB_STATUS:
            return f"InfiniBand completion status {status} ({IB_STATUS[status]})"
        message = warn_message(row["text"])
        return message.strip()[:160] if message is not None else said(row["text"] or "", envelopes, 160)
