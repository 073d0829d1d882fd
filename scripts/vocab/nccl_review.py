"""The review of the draft classification (nccl_classify.py): what each NCCL WARN format means for a diagnosis,
decided after reading the code around its calls (data/nccl_messages.jsonl `context`, and the NCCL tree at the
tag). Used by nccl_catalog.py, which writes parsers/nccl/<area>.toml from the draft and these decisions.

Each decision is (regex on the format, changes). The first decision whose regex matches a format applies; its
keys replace the draft's: `category`, `strength` (decisive / supporting / benign), `alone` (how much the line alone
proves its cause: the event's `strength`, 0-1; conclusive needs >= 0.85), `kind`, `set` (more event attributes:
`net_class`), `area`, `meaning`, `fix`, `incriminates`, `cases` (readings keyed on a field's value or the file that
printed it: see parsers/nccl/README.md).

Principles: a message that is the consequence of another failure is supporting, not decisive; NCCL's own
recoverable fallbacks (no libibverbs, no GDRCopy, CollNet unavailable, a setting ignored) are benign and never drive
a verdict; an internal consistency check is `unknown` (no cause alone: the error before it is the cause).
"""

from __future__ import annotations

NET, SHMT, INIT, CFG, CRASH, OOM, NVML, MISMATCH, UNKNOWN, BENIGN = (
    "network_transport", "shm_p2p_topology", "init_rendezvous", "config_version", "rank_crash", "cuda_oom",
    "nvml_driver_failure", "mismatched_collectives", "unknown", "benign",
)  # fmt: skip

INTERNAL = {
    "category": UNKNOWN,
    "strength": "supporting",
    "kind": "nccl_internal",
    "incriminates": "this_rank",
    "fix": "Read the NCCL error printed before it on this rank: that one is the cause. Alone, it is an NCCL bug: "
    "rerun with NCCL_DEBUG=INFO and report it with the NCCL version.",
}


def internal(meaning: str, **more: object) -> dict:
    return {**INTERNAL, "meaning": meaning, **more}


def benign(meaning: str, fix: str = "Nothing to do: NCCL continues without it.", **more: object) -> dict:
    return {
        "category": BENIGN,
        "strength": "benign",
        "kind": "nccl_fallback",
        "incriminates": "nobody",
        "meaning": meaning,
        "fix": fix,
        **more,
    }


def cfg(meaning: str, fix: str, alone: float = 0.75, strength: str = "decisive", **more: object) -> dict:
    return {
        "category": CFG,
        "strength": strength,
        "alone": alone,
        "kind": "nccl_config",
        "incriminates": more.pop("incriminates", "this_rank"),
        "meaning": meaning,
        "fix": fix,
        **more,
    }


def net(meaning: str, fix: str, net_class: str, alone: float, strength: str = "decisive", **more: object) -> dict:
    return {
        "category": NET,
        "strength": strength,
        "alone": alone,
        "kind": "network_error",
        "set": {"net_class": net_class},
        "incriminates": more.pop("incriminates", "this_host"),
        "meaning": meaning,
        "fix": fix,
        **more,
    }


# Errno texts that decide what a failed socket or verbs call means.
# A connection refused or timed out while NCCL's bootstrap runs (its return-code trace goes through bootstrap.cc):
# the rank could not reach the root its unique id names - nobody listening there (the root not started, a stale id
# or init file, a wrong port) or the address unreachable.
BOOTSTRAP_CONNECT = {
    "when_file": r"bootstrap\.cc",
    "when": {"errno_text": r"refused|timed out|No route|unreachable|Connection reset"},
    "category": INIT,
    "strength": "decisive",
    "alone": 0.7,
    "kind": "bootstrap_error",
    "meaning": "NCCL's bootstrap could not connect to the address it was given (the root of the unique id, or a "
    "peer's bootstrap socket): nothing listens there - the root not started or gone, a stale unique id or init "
    "file, a wrong port - or the address is not reachable from this host.",
    "fix": "Check that the rank hosting the unique id (rank 0, MASTER_ADDR) is up and reachable on that address "
    "and port from every node (firewall, NCCL_SOCKET_IFNAME); never reuse a unique id or init file of an earlier "
    "run.",
}
EMFILE = {
    "when": {"errno_text": "Too many open files"},
    "category": CFG,
    "strength": "decisive",
    "alone": 0.8,
    "kind": "fd_exhaustion",
    "set": {"exhausted": "nccl_fds"},
    "meaning": "The process ran out of file descriptors (EMFILE): NCCL opens sockets and shared-memory files per "
    "peer and channel.",
    "fix": "Raise the open-files limit (`ulimit -n 1048576`, the container's or systemd's LimitNOFILE) for every rank.",
}
MEMLOCK = {
    "when": {"errno_text": "Cannot allocate memory|ENOMEM|\\b12\\b"},
    "category": CFG,
    "strength": "decisive",
    "alone": 0.8,
    "kind": "nccl_config",
    "set": {"exhausted": "memlock"},
    "meaning": "Registering memory or creating an InfiniBand resource failed with ENOMEM: the locked-memory limit "
    "(RLIMIT_MEMLOCK) of this process is too low for RDMA.",
    "fix": "Raise the locked-memory limit for the ranks: `ulimit -l unlimited`, Docker `--ulimit memlock=-1`, "
    "systemd/slurm `LimitMEMLOCK=infinity` (check it inside the job: `ulimit -l`).",
}

# --- the decisions, first match wins ----------------------------------------------------------------------------

REVIEW: list[tuple[str, dict]] = [
    # -- InfiniBand / RoCE data path ------------------------------------------------------------------------------
    (
        r"Got completion from peer|Got completion with error",
        net(
            "A work request on the InfiniBand/RoCE queue pair to the named peer completed with an error status: the "
            "IB path to that peer failed (status 12 = transport retry counter exceeded: link down or flapping, "
            "congestion, the peer's NIC or process gone).",
            "Check the ports on both hosts (`ibstat`, `ibv_devinfo`, error counters with `perfquery`); drain a host "
            "whose port flaps; on a healthy but congested fabric raise NCCL_IB_TIMEOUT (e.g. 22). If the peer's "
            "process died first, that death is the cause.",
            "ib",
            0.88,
            incriminates="peer",
            cases=[
                {
                    "when": {"wc_status": r"^(?:5|IBV_WC_WR_FLUSH_ERR)\b|^5$", "status": r"^5$"},
                    "strength": "supporting",
                    "alone": 0.5,
                    "meaning": "A work request was flushed (status 5, WR_FLUSH_ERR): the queue pair had already "
                    "failed on an earlier error - read that one.",
                },
            ],
        ),
    ),
    (
        r"Got CQE with error",
        net(
            "NCCL's IB transport (2.29+) polled a completion with an error status on this queue pair: the IB path "
            "failed (the status follows on the next `Got completion` line).",
            "Check the IB ports and links of this host and its peers (`ibstat`, error counters); drain a host whose "
            "port flaps.",
            "ib",
            0.8,
        ),
    ),
    (
        r"async fatal event|Got async error event|unknown event type",
        net(
            "The HCA reported a fatal asynchronous event on this host (QP/CQ catastrophic error, port error, device "
            "fatal): the InfiniBand device or its port failed.",
            "Check this host's HCA and port (`dmesg` for mlx5 errors, firmware, cable, `ibstat`); drain the node if "
            "it repeats.",
            "ib",
            0.88,
        ),
    ),
    (
        r"GID table changed|Got non-fatal async event",
        benign(
            "The HCA reported a non-fatal asynchronous event (GID table change, port state change); NCCL continues."
        ),
    ),
    (
        r"Got async event",
        net(
            "The HCA reported an asynchronous event: a fatal one (port error, catastrophic error, access "
            "violation) breaks the IB path of this host.",
            "Check this host's IB port and HCA (`ibstat`, `dmesg`); drain the node if it repeats.",
            "ib",
            0.88,
            cases=[
                {
                    "when": {
                        "ib_event": r"GID|[Pp]ort active|LID change|[Cc]lient reregister|SM change|PKey|"
                        r"[Pp]ath migrated|[Cc]omm(?:unication)? established|[Ll]ast WQE"
                    },
                    **benign(
                        "The HCA reported a harmless asynchronous event (GID table change, port active, LID "
                        "or SM change); NCCL continues."
                    ),
                },
            ],
        ),
    ),
    (
        r"Unsupported completion status",
        net(
            "An IB work request completed with an error status NCCL's resiliency (2.29+) cannot recover from: the "
            "completion error is printed before it.",
            "Read the completion error before it; check the IB port and link of this host and the peer.",
            "ib",
            0.55,
            strength="supporting",
        ),
    ),
    (
        r"communicator encountered a fatal error \(detected in",
        net(
            "NCCL counted a fatal error on one of this communicator's IB devices (an async fatal event) and fails "
            "the communicator.",
            "Read the async fatal event before it; check this host's HCA and port.",
            "ib",
            0.8,
        ),
    ),
    (
        r"collective mismatch error|posted incorrect receive info",
        {
            "category": MISMATCH,
            "strength": "supporting",
            "alone": 0.8,
            "kind": "mismatch_detected",
            "incriminates": "peer",
            "meaning": "Over IB, the peer's receive buffer for this operation has another size than this rank "
            "sends: the ranks called different collectives or sizes (or run different NCCL_PROTO/NCCL_ALGO).",
            "fix": "Make every rank issue the same collectives with the same sizes; compare NCCL_* settings across "
            "ranks.",
        },
    ),
    (
        r"ibv_post_send\(\) failed|ibv_post_recv\(\) failed|ibv_poll_cq\(\) returned",
        net(
            "Posting or polling an IB work request failed on this host: the queue pair is in an error state (after "
            "an earlier IB error or a dead peer) or the device failed.",
            "Look for an earlier completion error or async event and for a peer that died; check the HCA (`dmesg`).",
            "ib",
            0.55,
            strength="supporting",
        ),
    ),
    (
        r"Device %d marked as failed|The error is fatal|Fatal error\. Detected %d failed devices",
        net(
            "NCCL's IB resiliency (2.29+) found an IB device of this host failed and could not continue on the others.",
            "Check the failed HCA and its port on this host (`ibstat`, `dmesg`); drain the node if it repeats.",
            "ib",
            0.85,
        ),
    ),
    (
        r"Resiliency is enabled on a %s communicator .* single device|Resiliency context is NULL|"
        r"Resiliency requires pre-posted receive",
        benign(
            "NCCL's IB resiliency notes a harmless configuration (a single device, nothing to tear down, "
            "pre-posting enabled by itself)."
        ),
    ),
    (
        r"resiliency|[Rr]eplay|probe|failed request|stale CQE|Unrecognized request|wr_id|Invalid request index|"
        r"replacement QP|outstanding recovery|AliveMessages|alive message|repost|failure queue node",
        net(
            "A state check of NCCL's IB resiliency/recovery path (2.29+) failed while it handled an IB error: the IB "
            "failure before it is the cause.",
            "Read the IB error before it; check the HCA and links of this host.",
            "ib",
            0.45,
            strength="supporting",
        ),
    ),
    (
        r"Call to ibv_modify_qp failed",
        net(
            "Bringing a queue pair to the peer up (RTR/RTS) failed: the classic symptom of a wrong RoCE GID index or "
            "subnet, an MTU mismatch, or a peer that is not reachable over IB.",
            "Check NCCL_IB_GID_INDEX (RoCE v2: the index of the IPv4 GID, `show_gids`), the MTU and the subnet of "
            "both hosts' ports, and that the peer is alive.",
            "ib",
            0.7,
            cases=[MEMLOCK],
        ),
    ),
    (
        r"Call to (?:ibv_reg_mr|ibv_reg_mr_iova2|ibv_reg_dmabuf_mr|mlx5dv_reg_dmabuf_mr|ibv_create_qp|ibv_create_cq|"
        r"ibv_alloc_pd) failed|NET/MLX5: Call to mlx5dv_reg_dmabuf_mr|mlx5dv_create_qp failed",
        net(
            "Registering memory with the HCA or creating an IB resource (QP, CQ, PD) failed on this host: the "
            "locked-memory limit, GPU memory not registrable (nvidia-peermem / dma-buf missing), or an HCA in a "
            "bad state.",
            "ENOMEM: raise the locked-memory limit (`ulimit -l unlimited`); EFAULT/EINVAL on GPU memory: load "
            "nvidia-peermem or use a kernel with dma-buf; else check the HCA (`ibstat`, `dmesg`).",
            "ib",
            0.55,
            strength="supporting",
            cases=[MEMLOCK],
        ),
    ),
    (
        r"Call to ibv_(?:destroy|dealloc|dereg|close)",
        net(
            "Tearing down an IB resource failed on this host: after an earlier IB failure, or an HCA in a bad state.",
            "Read the IB error before it.",
            "ib",
            0.4,
            strength="supporting",
        ),
    ),
    (
        r"Call to ibv_fork_init failed",
        benign(
            "libibverbs' fork support could not be enabled; NCCL continues (a child process touching "
            "registered memory would misbehave, which torch jobs do not do)."
        ),
    ),
    (
        r"Call to (?:ibv_\w+|mlx5dv_\w+) failed|NET/MLX5: Call to mlx5dv_query_device",
        net(
            "A libibverbs query or set-up call failed on this host (device, port, GID, QP attributes): the HCA or "
            "its driver is in a bad state, or the port is down.",
            "Check the HCA and its ports on this host (`ibstat`, `ibv_devinfo`, `dmesg`).",
            "ib",
            0.55,
            strength="supporting",
        ),
    ),
    (
        r"lib wrapper not initialized|dlvsym failed on|Failed to open libibverbs",
        benign(
            "libibverbs (or one of its symbols) is not available on this host: NCCL does not use InfiniBand here "
            "and falls back to TCP sockets by itself.",
            "Nothing, if the job is meant to run over TCP (inter-node traffic is then much slower). If IB/RoCE was "
            "intended: install rdma-core and mount /dev/infiniband into the container.",
        ),
    ),
    (
        r"NET/IB : No IP interface found",
        net(
            "NCCL's IB transport found no IP interface for its out-of-band connection (none matching "
            "NCCL_SOCKET_IFNAME / NCCL_IB_IFNAME), and fails.",
            "Set NCCL_SOCKET_IFNAME to an interface that exists and routes between the hosts (`ip -br addr`).",
            "interface",
            0.8,
        ),
    ),
    (
        r"Unable to open device|Unable to query (?:device|port)",
        net(
            "NCCL could not open or query an InfiniBand HCA or port of this host: the device is in a bad state or "
            "not accessible in the container.",
            "Check the HCA (`ibstat`, `ibv_devinfo`), that /dev/infiniband is mounted, and NCCL_IB_HCA.",
            "ib",
            0.6,
        ),
    ),
    (
        r"incompatible devices|different link_layer|merge multiple devices|NCCL_IB_MERGE_NICS|mergedDev|"
        r"merge net devices|is incompatible with the local",
        cfg(
            "NICs of different link layers (InfiniBand and RoCE/Ethernet) or different NIC counts were selected or "
            "merged on the two sides: the hosts' NIC selection does not match.",
            "Select NICs of one link type with NCCL_IB_HCA, the same on every host; align the NIC configuration.",
            incriminates="this_host",
        ),
    ),
    (
        r"called when comm->(?:base\.)?ready == 0|connect already connected",
        internal("An IB send/receive was issued on a connection that is not ready (internal state error)."),
    ),
    (
        r"Ip address '%s' is invalid|Ip address mask '%d' is invalid",
        benign("A value of NCCL_IB_ADDR_RANGE is invalid; NCCL ignores it.", "Fix or unset NCCL_IB_ADDR_RANGE."),
    ),
    (
        r"NCCL_IB_\w+=%d is out of range|OOO RQ",
        cfg(
            "An NCCL_IB_* setting is out of range or forces a feature the NICs (or the peer's) lack.",
            "Fix or unset the NCCL_IB_* variable the message names.",
            incriminates="this_host",
        ),
    ),
    (
        r"plane ID|virtual device|vNic|virtual NIC|physical device|non-existant virtual",
        cfg(
            "The NIC fusion/plane configuration refers to devices that do not exist or exceeds NCCL's limits.",
            "Check NCCL_IB_HCA / NCCL_NET_FORCE_MERGE / NCCL_IB_MERGE_NICS and that every host has the same NICs.",
            alone=0.6,
            strength="supporting",
            incriminates="this_host",
        ),
    ),
    (
        r"RoceGetVersionNum|FLID",
        benign("NCCL could not read the RoCE version from sysfs, or uses another addressing mode; it continues."),
    ),
    (
        r"Error in mlx5dv_get_data_direct_sysfs_path|Could not find real path of",
        benign(
            "NCCL could not read a device's sysfs path (data-direct / PCI path); it continues without that "
            "topology detail."
        ),
    ),
    (
        r"NET/IB ?: ?unable to allocate requests|Cannot store sizes of %d requests|Listencomm in unknown state|"
        r"could not find mr %p|No format specified for opcode|sendReq\(%p\)->events|IBV_WC_RECV_RDMA_WITH_IMM and",
        internal(
            "An internal consistency check of NCCL's IB transport failed (request pool, memory-registration "
            "cache, completion bookkeeping): most often after another failure."
        ),
    ),
    # -- sockets --------------------------------------------------------------------------------------------------
    (
        r"^Message truncated : received %d",
        cfg(
            "A bootstrap message had another size than expected: the ranks run different NCCL versions, or a "
            "process of another job connected to this job's bootstrap port.",
            "Run one NCCL version on every rank (`python -c 'import torch; print(torch.cuda.nccl.version())'`); "
            "give concurrent jobs on the same hosts different MASTER_PORTs.",
            alone=0.5,
            strength="supporting",
        ),
    ),
    (
        r"message truncated",
        {
            "category": MISMATCH,
            "strength": "supporting",
            "alone": 0.8,
            "kind": "mismatch_detected",
            "incriminates": "peer",
            "meaning": "Over TCP, the peer sent more bytes than this rank posted for the same operation: the ranks "
            "called collectives of different sizes (or run different NCCL_PROTO/NCCL_ALGO).",
            "fix": "Make every rank issue the same collectives with the same sizes; compare NCCL_* settings across "
            "ranks.",
        },
    ),
    (
        r"[Cc]onnect to %s (?:failed|returned)|PollConnect to %s failed|socketPollConnect poll|Call to connect",
        net(
            "A TCP connection to the named address failed (refused, timed out, unreachable): nothing listens "
            "there, or this host cannot reach it (firewall, wrong interface, a container-bridge or loopback "
            "address advertised by the peer).",
            "Make NCCL_SOCKET_IFNAME pick an interface every host can reach (`ip -br addr`); open the ports "
            "between the hosts; if the peer's process died, its own error is the cause.",
            "connect",
            0.7,
            incriminates="peer",
            cases=[EMFILE, BOOTSTRAP_CONNECT],
        ),
    ),
    (
        r"Connection closed by remote peer",
        net(
            "The peer closed its TCP connection: most often the peer process exited or aborted (its own error is "
            "the cause), rarely the network.",
            "Find why the peer exited (its own log); a crash there is the cause.",
            "closed",
            0.5,
            strength="supporting",
            incriminates="peer",
        ),
    ),
    (
        r"Call to (?:recv from )?%s(?: %s)? failed : %s|Call to recv from %s failed|Call to (?:recv|write|read) "
        r"failed : %s$|Call to %s %s failed",
        net(
            "A send or receive on a socket to the peer failed (reset by peer, broken pipe, timed out): the peer's "
            "process died, or the network path between the hosts broke.",
            "Check whether the peer died first (its log); otherwise the network path between the hosts.",
            "connect",
            0.6,
            strength="supporting",
            incriminates="peer",
            cases=[
                {
                    "when": {"errno_text": "reset by peer|Broken pipe|closed"},
                    "set": {"net_class": "closed"},
                    "alone": 0.5,
                },
            ],
        ),
    ),
    (
        r"exceeded (?:error )?retr|exceeded timeouts|exceeded error retry",
        net(
            "NCCL gave up connecting or accepting after its retries: the other side never answered.",
            "Check that the peer is alive and reachable on the address it advertised (NCCL_SOCKET_IFNAME, firewalls).",
            "connect",
            0.7,
            incriminates="peer",
        ),
    ),
    (
        r"no device found matching NCCL_OOB_NET_IFNAME=%s, ignoring",
        benign(
            "No interface matches NCCL_OOB_NET_IFNAME; NCCL ignores the setting and picks one itself.",
            "Fix or unset NCCL_OOB_NET_IFNAME.",
        ),
    ),
    (
        r"[Nn]o (?:socket )?interface found|No usable listening interface|No interface found in the same subnet|"
        r"no device found (?:matching|after excluding)",
        net(
            "NCCL found no usable network interface (none matching NCCL_SOCKET_IFNAME / NCCL_OOB_NET_IFNAME, or "
            "none in the remote address's subnet).",
            "Set NCCL_SOCKET_IFNAME to an interface that exists on every host and routes between them (`ip -br addr`).",
            "interface",
            0.87,
        ),
    ),
    (
        r"Socket creation failed",
        net(
            "NCCL could not create a socket (`socket()` failed): with `Address family not supported` the chosen "
            "address family (IPv6) is disabled or absent in this host or container.",
            "Pin NCCL_SOCKET_IFNAME to an interface with an IPv4 address (or set NCCL_SOCKET_FAMILY=AF_INET); "
            "check the container's network.",
            "interface",
            0.8,
            cases=[EMFILE],
        ),
    ),
    (
        r"Call to bind failed",
        net(
            "NCCL could not bind a socket: with `Cannot assign requested address` the address it picked is not "
            "usable on this host (an IPv6 link-local address, an interface of another namespace).",
            "Pin NCCL_SOCKET_IFNAME to an interface with a routable address (`ip -br addr`).",
            "interface",
            0.8,
            cases=[
                {
                    "when_file": r"^ras/",
                    **benign(
                        "NCCL's RAS client port (NCCL_RAS_ADDR, 28028) is taken - another job on this host; "
                        "only the `ncclras` status client is unavailable, the job is not affected.",
                        "Nothing for the job; set NCCL_RAS_ADDR to a free port per job if `ncclras` is wanted.",
                    ),
                },
                {
                    "when": {"errno_text": "Address already in use"},
                    "category": CFG,
                    "alone": 0.7,
                    "kind": "nccl_config",
                    "set": {},
                    "meaning": "NCCL could not bind its port: it is in use (NCCL_COMM_ID or NCCL_PORT_RANGE "
                    "fixed to a port another process holds).",
                    "fix": "Free the port or pick another (NCCL_COMM_ID, MASTER_PORT); run concurrent jobs on "
                    "different ports.",
                },
                EMFILE,
            ],
        ),
    ),
    (
        r"^Call to (?:accept|clock_gettime) failed: %s$",
        benign(
            "A socket or clock call of NCCL's RAS monitoring thread failed (ras/); only the `ncclras` status "
            "client is affected, not the job."
        ),
    ),
    (
        r"Call to (?:socket|setsockopt|getsockname|listen|getsockopt|fcntl|dup2|shutdown|poll|accept|getifaddrs) "
        r"failed|Accept failed",
        net(
            "A socket system call of NCCL failed on this host (the errno says which resource).",
            "Read the errno text: `Too many open files` needs a higher `ulimit -n`; otherwise check the host's "
            "network configuration.",
            "connect",
            0.45,
            strength="supporting",
            cases=[
                {
                    "when_file": r"^ras/",
                    **benign("A socket call of NCCL's RAS monitoring thread failed; the job is not affected."),
                },
                EMFILE,
            ],
        ),
    ),
    (
        r"error encountered when getting address info",
        cfg(
            "NCCL could not resolve the host name it was given (NCCL_COMM_ID or an address string): DNS or "
            "/etc/hosts does not know it.",
            "Use an address or a host name every node resolves (`getent hosts NAME`).",
            alone=0.7,
        ),
    ),
    (
        r"wrong type %d != %d",
        net(
            "The two ends of a connection opened different kinds of NCCL connection (ncclSocketType: 3 TCP "
            "sockets, 4 InfiniBand, 1 bootstrap, 2 proxy): the hosts chose different network transports - "
            "InfiniBand usable on one host and not on the other - or run different NCCL versions.",
            "Make the hosts' network set-up alike: IB working on every host (`ibstat`, the same NCCL_IB_HCA / "
            "NCCL_NET), or NCCL_IB_DISABLE=1 on all of them; one NCCL version everywhere.",
            "connect",
            0.7,
            incriminates="peer",
        ),
    ),
    (
        r"socketFinalizeAccept|wrong magic",
        net(
            "A connection NCCL accepted did not speak NCCL's bootstrap protocol (wrong magic or type): a process "
            "of another job, another NCCL version, or a port scanner connected to this job's port.",
            "Give concurrent jobs on the same hosts different ports (MASTER_PORT, NCCL_COMM_ID); run one NCCL "
            "version on every rank.",
            "connect",
            0.45,
            strength="supporting",
        ),
    ),
    (
        r"Invalid NCCL_COMM_ID|NCCL_COMM_ID is set|No valid <IPv4_or_hostname>|No valid \[IPv6\]|Unsupported "
        r"address family type|string is null|unsupported IP family|is neither AF_INET",
        cfg(
            "An address NCCL was given (NCCL_COMM_ID, NCCL_SOCKET_IFNAME's address, a peer's address) is malformed "
            "or of an address family it cannot use.",
            "Fix NCCL_COMM_ID (`<ipv4>:<port>`, `[<ipv6>]:<port>` or `<hostname>:<port>`) or the interface settings.",
        ),
    ),
    (
        r"NCCL_SOCKET_NTHREADS is greater|total number of sockets is greater",
        benign("NCCL_SOCKET_NTHREADS / NCCL_NSOCKS_PERTHREAD exceed NCCL's maximum; NCCL caps them."),
    ),
    (
        r"socket progress error",
        net(
            "A socket of NCCL's TCP transport failed while moving data (its thread saw an error): the peer died or "
            "the connection broke.",
            "Check whether the peer died first; otherwise the network between the hosts.",
            "closed",
            0.5,
            strength="supporting",
            incriminates="peer",
        ),
    ),
    (
        r"^ncclSocket\w+: |^ncclOsSocket\w+: (?:invalid|pass)|^ncclIpcSocketGetFd: pass|socket state|"
        r"file descriptor is -1|socket is invalid|invalid socket|invalid arguments ops",
        internal(
            "NCCL's socket layer was handed a socket in the wrong state (internal check): most often after "
            "another failure closed it."
        ),
    ),
    (
        r"NET/Socket ?: ?(?:unable to allocate|test called with NULL|ncclNetSocketListen dev)|Socket : unable to "
        r"allocate|Unexpected connections are not empty|Call to (?:pipe|close) failed|close failed: %s|"
        r"Call to (?:read|write) failed: %s",
        internal(
            "An internal check of NCCL's socket transport or bootstrap failed (request pool exhausted, a pipe "
            "call): most often after another failure."
        ),
    ),
    (
        r"^UDS: ",
        {
            "category": SHMT,
            "strength": "supporting",
            "alone": 0.55,
            "kind": "p2p_error",
            "incriminates": "this_host",
            "meaning": "NCCL could not exchange a GPU memory handle with a local process over its Unix-domain "
            "socket (cuMem/IPC handles): the processes of this node do not share a network/PID namespace or "
            "/tmp, or one of them died.",
            "fix": "Run the ranks of a node in one container or share the IPC/PID namespace (`--ipc=host`, "
            "`--pid=host`); NCCL_CUMEM_ENABLE=0 avoids the handle exchange.",
        },
    ),
    # -- bootstrap ------------------------------------------------------------------------------------------------
    (
        r"Bootstrap Root : rank %d of %d ranks has already checked in|localId %d is out of range",
        cfg(
            "Two processes joined NCCL's bootstrap with the same rank: the launcher's environment and the script "
            "disagree on ranks (a RANK set by hand, two launchers, a restarted process joining an old unique id).",
            "Give every process its own rank: let torchrun set RANK/LOCAL_RANK (do not override them), one "
            "launcher per node, and a fresh MASTER_PORT per run.",
            alone=0.8,
        ),
    ),
    (
        r"Bootstrap Root : mismatch in",
        {
            "category": CFG,
            "strength": "decisive",
            "alone": 0.85,
            "kind": "world_size_mismatch",
            "incriminates": "nobody",
            "meaning": "Ranks joining NCCL's bootstrap disagree on the communicator's size: the nodes were "
            "launched with different world sizes or process counts.",
            "fix": "Launch every node with the same --nnodes / --nproc_per_node / WORLD_SIZE.",
        },
    ),
    (
        r"bcastGrowHandle|bootstrapInit: handles and parent",
        cfg(
            "NCCL's bootstrap was called without the handles it needs (an API misuse by the caller).",
            "Fix the calling code (communicator grow/split arguments).",
            alone=0.55,
            strength="supporting",
        ),
    ),
    (
        r"Bootstrap thread : failed to allocate memory",
        {
            "category": CRASH,
            "strength": "decisive",
            "alone": 0.7,
            "kind": "nccl_fatal",
            "incriminates": "this_host",
            "meaning": "A host memory allocation failed in NCCL: the host (or the container's memory limit) is "
            "out of memory.",
            "fix": "Check the host's memory and the container's limit; the kernel OOM killer may follow.",
        },
    ),
    # -- proxy ----------------------------------------------------------------------------------------------------
    (
        r"Proxy Call to rank %d failed",
        net(
            "The call to a local peer's proxy thread failed while setting up or running a connection (`Connect`, "
            "`Setup`, `SharedInit`, `Init`): the proxy's network connection failed, or that process died.",
            "Read the error before it on this rank and the named rank's own log (a dead process first); then "
            "the network settings of the named rank's host (NCCL_SOCKET_IFNAME, NCCL_IB_HCA).",
            "connect",
            0.6,
            strength="supporting",
            incriminates="peer",
        ),
    ),
    (
        r"Failed to execute operation %s from rank %d",
        net(
            "A local process's proxy thread failed the operation another rank asked of it (connection set-up or "
            "data movement); its own error is printed before it.",
            "Read the error before it on this process; check the named rank's process and the network settings.",
            "connect",
            0.5,
            strength="supporting",
            incriminates="peer",
        ),
    ),
    (
        r"Socket recv failed while polling|Error encountered progressing operation=%s, res=%d, closing",
        net(
            "The connection to a local proxy thread failed: the other process died or closed it.",
            "Check whether a process of this node died first (its own error is the cause).",
            "closed",
            0.45,
            strength="supporting",
            incriminates="peer",
        ),
    ),
    (
        r"Could not receive type from localRank",
        {
            "category": CRASH,
            "strength": "supporting",
            "kind": "peer_closed",
            "incriminates": "peer",
            "meaning": "A process of this node closed its connection to this proxy: it exited (crashed or was killed).",
            "fix": "Find why that local rank exited (its own log).",
        },
    ),
    (
        r"Comm %p is in abort state|communicator was revoked|Saw abortFlag",
        {
            "category": UNKNOWN,
            "strength": "supporting",
            "kind": "comm_aborted",
            "incriminates": "nobody",
            "meaning": "The communicator was aborted (torch's watchdog or the user aborted it after another "
            "failure): a consequence.",
            "fix": "Find the failure that made the communicator abort (an error or a timeout on some rank).",
        },
    ),
    (
        r"ncclProxyCallBlockingUDS|ncclProxyClientGetFd|ncclProxyClientQueryFd|ncclProxyClientConvertFd",
        {
            "category": SHMT,
            "strength": "supporting",
            "alone": 0.5,
            "kind": "p2p_error",
            "incriminates": "peer",
            "meaning": "Fetching a GPU memory handle (cuMem file descriptor) from a local process's proxy "
            "failed: the processes of this node cannot exchange handles, or that process died.",
            "fix": "Run a node's ranks in one container or share its IPC/PID namespace; NCCL_CUMEM_ENABLE=0 "
            "avoids the exchange.",
        },
    ),
    (
        r"no transport for %s peer|Error no transport for|No transport found for rank|Could not find transport",
        {
            "category": SHMT,
            "strength": "decisive",
            "alone": 0.7,
            "kind": "topology_error",
            "incriminates": "this_host",
            "meaning": "NCCL found no transport that can connect two ranks (P2P, SHM and the network all "
            "unusable between them): transports disabled by settings, or ranks that cannot see each other's "
            "GPUs or network.",
            "fix": "Check NCCL_P2P_DISABLE / NCCL_SHM_DISABLE / NCCL_NET settings, that the container sees the "
            "GPUs, and `nvidia-smi topo -m`.",
        },
    ),
    (
        r"\[Proxy Service(?: UDS)?\] Poll failed|Too many connections|listenSock fd fails|peers\[%d\]\.sock|"
        r"proxyDestroy failed",
        internal(
            "NCCL's proxy service thread failed on its own sockets or state (poll, listen socket, too many "
            "local connections): most often after another failure."
        ),
    ),
    (
        r"Failed to set CUDA (?:device|context)|Failed to create CUDA context",
        {
            "category": NVML,
            "strength": "supporting",
            "alone": 0.5,
            "kind": "nvml_error",
            "incriminates": "this_host",
            "meaning": "A thread of NCCL could not set its CUDA device or context: the GPU is unavailable (lost, "
            "in exclusive-process mode with another process on it) or the driver is in a bad state.",
            "fix": "Check the GPU on this host (`nvidia-smi`, `dmesg | grep -i xid`) and its compute mode.",
        },
    ),
    (
        r"Unable to create thread context due to old driver",
        benign("The driver is too old for per-thread CUDA contexts; NCCL disables them and continues."),
    ),
    (
        r"Thread creation failed|Call to pthread_create failed",
        cfg(
            "NCCL could not create a thread: the process hit its thread/PID limit (a container's pids-limit, "
            "`ulimit -u`) or the host is out of memory.",
            "Raise the container's pids limit (`--pids-limit`, Kubernetes podPidsLimit) or `ulimit -u`; fewer "
            "DataLoader workers per rank.",
            alone=0.6,
            strength="supporting",
            incriminates="this_host",
        ),
    ),
    (
        r"Call to [sg]etrlimit failed",
        cfg(
            "NCCL could not read or raise its open-files limit (setrlimit refused: a container's seccomp profile "
            "or a limits policy).",
            "Raise the open-files limit before the job starts (`ulimit -n`, the container's nofile ulimit).",
            alone=0.55,
            strength="supporting",
            incriminates="this_host",
        ),
    ),
    (
        r"^Call to stat failed",
        {
            "category": SHMT,
            "strength": "decisive",
            "alone": 0.8,
            "kind": "shm_error",
            "incriminates": "this_host",
            "meaning": "NCCL could not stat /dev/shm: the container has no /dev/shm mounted.",
            "fix": "Mount a real /dev/shm in the container (`--shm-size=16g` or `--ipc=host`; Kubernetes: an "
            "emptyDir with medium Memory at /dev/shm).",
        },
    ),
    (
        r"Intrusive address map resize failed: malloc",
        {
            "category": CRASH,
            "strength": "decisive",
            "alone": 0.7,
            "kind": "nccl_fatal",
            "incriminates": "this_host",
            "meaning": "A host memory allocation failed in NCCL: the host (or the container's memory limit) is out "
            "of memory.",
            "fix": "Check the host's memory and the container's limit (`free -g`, the cgroup's memory.max); the "
            "kernel OOM killer may follow.",
        },
    ),
    # -- shared memory --------------------------------------------------------------------------------------------
    (
        r"Error while %s shared memory segment|failed to extend|Could not map|failed to create shared memory file|"
        r"posix_fallocate|Unable to allocate shared memory|shm_open failed|Call to shm_open|failure in mmap of|"
        r"Call to mmap failed",
        {
            "category": SHMT,
            "strength": "decisive",
            "alone": 0.85,
            "kind": "shm_error",
            "incriminates": "this_host",
            "meaning": "NCCL could not create, size or map a shared-memory segment in /dev/shm: /dev/shm is too "
            "small (a container's 64 MB default) or full.",
            "fix": "Give the container a real /dev/shm (`docker run --shm-size=16g` or `--ipc=host`; Kubernetes: "
            "an emptyDir with medium Memory at /dev/shm); check with `df -h /dev/shm`.",
        },
    ),
    (
        r"shm unlink failed|shm close failed|munmap of shared memory|unlink shared memory|Call to (?:shm_)?unlink",
        benign("Removing or unmapping a shared-memory segment failed at clean-up; harmless for the job."),
    ),
    (
        r"^Call to open failed: %s",
        {
            "category": SHMT,
            "strength": "supporting",
            "alone": 0.6,
            "kind": "shm_error",
            "incriminates": "this_host",
            "meaning": "NCCL could not open a shared-memory file under /dev/shm.",
            "fix": "Check that /dev/shm is mounted, writable and large enough in the container (`df -h /dev/shm`).",
            "cases": [EMFILE],
        },
    ),
    (
        r"SHM locality|Invalid argument (?:comm|desc)|failed to register host buffer|failed to get device pointer "
        r"for local shmem|attaching memory should only|Multiple (?:starts|ends) found",
        internal("An internal check of NCCL's shared-memory transport failed."),
    ),
    # -- P2P ------------------------------------------------------------------------------------------------------
    (
        r"P2P is disabled between NVLINK connected GPUs",
        {
            "category": NVML,
            "strength": "decisive",
            "alone": 0.75,
            "kind": "gpu_hw_error",
            "incriminates": "this_host",
            "meaning": "GPUs NVML reports as NVLink-connected cannot use P2P: an NVLink or GPU fault on this host "
            "(or P2P disabled in a VM).",
            "fix": "Check the NVLinks (`nvidia-smi nvlink -s`, `nvidia-smi topo -m`, `dmesg | grep -i xid`); drain "
            "the node; NCCL_IGNORE_DISABLED_P2P=1 only proceeds without P2P.",
        },
    ),
    (
        r"cudaIpcGetMemHandle failed|failed to peer with device|failed to IPC register|cudaIpcOpenMemHandle|"
        r"failed to (?:open|get) CUDA IPC handle",
        {
            "category": SHMT,
            "strength": "decisive",
            "alone": 0.8,
            "kind": "p2p_error",
            "incriminates": "this_host",
            "meaning": "NCCL could not map another GPU's memory (CUDA IPC / peer access): P2P is not possible "
            "between these GPUs here (a VM or container without P2P, PCIe ACS/IOMMU, GPUs in different "
            "containers).",
            "fix": "Enable peer access on the host (disable PCIe ACS, `iommu=pt`), run the node's ranks in one "
            "container; NCCL_P2P_DISABLE=1 as a stop-gap.",
        },
    ),
    (
        r"Max rings reached, limiting to",
        benign("NCCL limits the number of rings it builds by itself (NCCL 2.3-2.4)."),
    ),
    (
        r"Recursive P2P computation cannot work",
        internal("NCCL's ring search over NVLink could not handle this many GPUs (NCCL 2.3-2.4)."),
    ),
    (
        r"VA represented by \{userPtr",
        cfg(
            "A buffer registered for symmetric memory / NVLS is backed by host (CPU) memory, which this "
            "communicator cannot use across processes.",
            "Register GPU memory (cuMem / torch's symmetric memory allocator), not host memory, or set "
            "NCCL_ELASTIC_BUFFER_REGISTER as the message says.",
            alone=0.6,
            strength="supporting",
        ),
    ),
    (
        r"^Error: network %s not found",
        cfg(
            "NCCL_NET names a network NCCL does not have here (`IB` forced on a host without usable InfiniBand, a "
            "plugin's name that was not loaded).",
            "Unset NCCL_NET, or make the network it names usable on every host (IB devices, the plugin on "
            "LD_LIBRARY_PATH / NCCL_NET_PLUGIN).",
            incriminates="this_host",
        ),
    ),
    (
        r"invalid IPC peer(?:Index|Rank)|deregister IPC buffer",
        internal("An internal check of NCCL's P2P buffer registration failed."),
    ),
    (
        r"Connecting rings? |NVswitch links mismatch",
        internal("NCCL's ring set-up found inconsistent rings (old NCCL versions): an internal check."),
    ),
    # -- NVLS / MNNVL / fabric ------------------------------------------------------------------------------------
    (
        r"Failed to bind NVLink SHARP",
        {
            "category": NVML,
            "strength": "decisive",
            "alone": 0.75,
            "kind": "gpu_fabric_error",
            "incriminates": "this_host",
            "meaning": "Binding NVLink SHARP (NVLS) multicast memory through the NVSwitch fabric failed: the "
            "fabric manager / NVSwitch state is broken, or the driver is too old for this NCCL's NVLS path.",
            "fix": "Check the fabric manager (`systemctl status nvidia-fabricmanager`, same version as the driver) "
            "and reset the GPUs; NCCL_NVLS_ENABLE=0 works around it.",
        },
    ),
    (
        r"MNNVL \(cliqueSize %d\) is available but not",
        {
            "category": NVML,
            "strength": "decisive",
            "alone": 0.75,
            "kind": "gpu_fabric_error",
            "incriminates": "this_host",
            "meaning": "Multi-node NVLink is present but not usable: the IMEX service or its channels are not set "
            "up on this node.",
            "fix": "Start and configure nvidia-imex (`nvidia-imex-ctl -N`, /dev/nvidia-caps-imex-channels mounted "
            "in the container); NCCL_MNNVL_ENABLE=0 to run without it.",
        },
    ),
    (
        r"MNNVL is not supported on this system|Multicast support requested|Multimem pointer requested",
        cfg(
            "A feature was requested (NCCL_MNNVL_ENABLE=1, multicast/multimem for a device-API team) that this "
            "system does not support.",
            "Unset the setting that forces it, or run on a system with NVLS/MNNVL.",
            alone=0.6,
            strength="supporting",
            incriminates="this_host",
        ),
    ),
    (
        r"NCCL_NVLS_ENABLE has been set to \"1\"",
        cfg(
            "NCCL_NVLS_ENABLE=1 is forced while several ranks share one GPU: NVLS cannot work so.",
            "Unset NCCL_NVLS_ENABLE, or give each rank its own GPU.",
        ),
    ),
    (
        r"deregister NVLS buffer|failed to NVLS register|deregister (?:NET|COLLNET) buffer",
        internal(
            "De-registering or registering a user buffer for NVLS/NET failed at tear-down or registration: "
            "after another failure.",
            alone=None,
        ),
    ),
    (
        r"Could not find NIC for rank %d in NVLS graph",
        {
            "category": SHMT,
            "strength": "supporting",
            "alone": 0.5,
            "kind": "topology_error",
            "incriminates": "this_host",
            "meaning": "NCCL's NVLS graph search found no NIC for a rank: the NIC/GPU topology of this node does "
            "not fit NVLS-tree.",
            "fix": "Check NCCL_IB_HCA and the topology (`nvidia-smi topo -m`); NCCL_NVLSTREE_ENABLE=0.",
        },
    ),
    # -- NVML -----------------------------------------------------------------------------------------------------
    (
        r"No NVML device handle\. Skipping|nvmlDeviceGetCount\(\) reported more devices",
        benign(
            "NCCL could not use NVML for one detail (NVLink detection, device count); it continues with less "
            "topology information."
        ),
    ),
    (
        r"nvmlDeviceGetHandleByPciBusId\(\) failed",
        {
            "category": NVML,
            "strength": "decisive",
            "alone": 0.9,
            "kind": "nvml_error",
            "incriminates": "this_host",
            "meaning": "NVML could not find a GPU by its PCI bus id.",
            "fix": "Check the driver on this host (`nvidia-smi`).",
            "cases": [
                {
                    "when": {"nvml_error": "Not Found"},
                    "category": SHMT,
                    "kind": "gpu_not_visible",
                    "alone": 0.8,
                    "meaning": "NCCL asked NVML for a GPU by PCI bus id and this container or cgroup cannot see it: "
                    "ranks with the same host identity are treated as one node while their GPUs are split between "
                    "containers (or CUDA_VISIBLE_DEVICES hides a peer's GPU).",
                    "fix": "Run a node's ranks in one container seeing all its GPUs, or give each container its own "
                    "host identity (hostname); do not hide GPUs from NCCL with cgroups.",
                },
            ],
        },
    ),
    (
        r"^nvml\w+(?:%s)?\(.*\) failed|Failed to open libnvidia-ml",
        {
            "category": NVML,
            "strength": "decisive",
            "alone": 0.9,
            "kind": "nvml_error",
            "incriminates": "this_host",
            "meaning": "An NVML call failed on this host: the driver and the NVML library do not match (a driver "
            "updated under a running container), a GPU fell off the bus, or NVML is not mounted.",
            "fix": "Check `nvidia-smi` on the host; reboot or reload the driver after an update; drain the node if "
            "a GPU is lost.",
        },
    ),
    # -- CUDA -----------------------------------------------------------------------------------------------------
    (
        r"^Cuda failure(?: %d)? '%s'$",
        {
            "category": UNKNOWN,
            "strength": "supporting",
            "kind": "nccl_internal",
            "incriminates": "this_rank",
            "meaning": "A CUDA call inside NCCL failed; what it means is the quoted CUDA error and where NCCL was "
            "(this one names no cause by itself).",
            "fix": "Read the quoted CUDA error and the errors before it; rerun with CUDA_LAUNCH_BLOCKING=1 and "
            "NCCL_DEBUG=INFO to see the call.",
            "cuda_cases": True,
            "cases": [
                {
                    "when_file": r"transport/p2p\.cc",
                    "category": SHMT,
                    "kind": "p2p_error",
                    "alone": 0.8,
                    "strength": "decisive",
                    "meaning": "A CUDA call of NCCL's peer-to-peer transport failed: the GPUs cannot map each "
                    "other's memory here (no P2P in the VM or container, PCIe ACS/IOMMU, IPC not shared).",
                    "fix": "Enable peer access on the host (disable PCIe ACS, `iommu=pt`), run the node's ranks in "
                    "one container; NCCL_P2P_DISABLE=1 as a stop-gap.",
                },
                {
                    "when_file": r"transport/nvls\.cc",
                    "category": NVML,
                    "kind": "gpu_fabric_error",
                    "alone": 0.75,
                    "strength": "decisive",
                    "incriminates": "this_host",
                    "meaning": "A CUDA call setting up NVLink SHARP (NVLS) buffers through the NVSwitch fabric "
                    "failed: the fabric manager / NVSwitch state is broken, or the driver is too old for this "
                    "NCCL's NVLS path.",
                    "fix": "Check the fabric manager and the driver; NCCL_NVLS_ENABLE=0 works around it.",
                },
            ],
        },
    ),
    (
        r"CUDA some PFN functions|Failed to find CUDA library|Failed to load CUDA missing symbol|Retrieve %s|"
        r"cuDriverGetVersion failed|cannot be captured in a graph|CUMEM (?:Host is )?not supported prior|"
        r"compiled with too old",
        {
            "category": CFG,
            "strength": "decisive",
            "alone": 0.85,
            "kind": "cuda_build_mismatch",
            "incriminates": "this_host",
            "meaning": "The CUDA driver library is missing, too old for this NCCL build, or lacks a symbol it needs.",
            "fix": "Install a driver at least as new as the CUDA the NCCL/torch build needs (`nvidia-smi`'s "
            "CUDA Version); in containers check LD_LIBRARY_PATH and NCCL_CUDA_PATH.",
        },
    ),
    (
        r"cudaArch %d .*exceeds device",
        {
            "category": CFG,
            "strength": "decisive",
            "alone": 0.85,
            "kind": "cuda_build_mismatch",
            "incriminates": "this_host",
            "meaning": "This NCCL build's kernels do not fit the GPU (shared memory of its architecture): an NCCL "
            "built for other GPU architectures.",
            "fix": "Use an NCCL (torch wheel) built for this GPU's architecture.",
        },
    ),
    (
        r"host threads racing to launch NCCL",
        {
            "category": CRASH,
            "strength": "decisive",
            "alone": 0.75,
            "kind": "nccl_fatal",
            "incriminates": "this_rank",
            "meaning": "Two host threads launched NCCL work on the same device at once: a threading bug in the "
            "program (NCCL is not thread-safe per device).",
            "fix": "Issue collectives of one device from one thread (or serialise them).",
        },
    ),
    (
        r"CUDA graph captured|captured by the same graph|being captured by the expected graph",
        cfg(
            "Communicators or streams of one NCCL group mix CUDA-graph-captured and uncaptured work: a usage "
            "error of the calling code.",
            "Capture all or none of the group's communicators/streams in the same graph.",
            alone=0.6,
            strength="supporting",
        ),
    ),
    (
        r"Expected graph id=|cuMemImportFromShareableHandle failed",
        internal("An internal check of NCCL's stream/graph or memory bookkeeping failed."),
    ),
    # -- allocation -----------------------------------------------------------------------------------------------
    (
        r"Failed to CUDA (?:calloc|malloc|host alloc)|Call to cudaMalloc failed",
        {
            "category": OOM,
            "strength": "decisive",
            "alone": 0.9,
            "kind": "cuda_oom",
            "incriminates": "this_rank",
            "meaning": "NCCL's own GPU allocation failed: the GPU is full (held by PyTorch's caching allocator or "
            "another process).",
            "fix": "Leave GPU memory for NCCL: smaller batch or model shards, `torch.cuda.empty_cache()` before "
            "creating communicators, fewer channels (NCCL_MAX_NCHANNELS), or NCCL_NVLS_ENABLE=0.",
        },
    ),
    (
        r"Failed to malloc %ld bytes|Allocation failed(?: at %s:%d)?$|malloc\(size=%llu\) returned null|"
        r"calloc\(%\w+ entries\) returned null|Failed to allocate (?:CPU backup|allCounts|memory entry|failure queue)|"
        r"\[Rem Allocator\] Allocation failed",
        {
            "category": CRASH,
            "strength": "decisive",
            "alone": 0.7,
            "kind": "nccl_fatal",
            "incriminates": "this_host",
            "meaning": "A host memory allocation failed in NCCL: the host (or the container's memory limit) is out "
            "of memory.",
            "fix": "Check the host's memory and the container's limit (`free -g`, the cgroup's memory.max); the "
            "kernel OOM killer may follow.",
        },
    ),
    # -- init / API -----------------------------------------------------------------------------------------------
    (
        r"Duplicate GPU detected|Multiple Ranks are using the same GPU",
        {
            "category": CFG,
            "strength": "decisive",
            "alone": 0.9,
            "kind": "duplicate_gpu",
            "incriminates": "this_rank",
            "meaning": "Two ranks of one communicator use the same GPU: torch.cuda.set_device(local_rank) missing, "
            "CUDA_VISIBLE_DEVICES wrong, or more processes than GPUs on a node.",
            "fix": "Call `torch.cuda.set_device(int(os.environ['LOCAL_RANK']))` before init_process_group (or pass "
            "`device_id=`) and match --nproc_per_node to the node's GPUs.",
        },
    ),
    (
        r"Mismatched NCCL version detected|NCCL version mismatch with remote peer|XML (?:Graph|Topology) has wrong "
        r"version",
        {
            "category": CFG,
            "strength": "decisive",
            "alone": 0.85,
            "kind": "version_mismatch",
            "incriminates": "nobody",
            "meaning": "Ranks of one job run different NCCL versions (their wire formats differ).",
            "fix": "Install the same torch/NCCL build on every node (one container image).",
            "cases": [
                {
                    "when": {},
                    "when_format": "XML",
                    "kind": "nccl_config",
                    "meaning": "The topology XML file NCCL was given is of another version than this NCCL reads.",
                    "fix": "Regenerate the topology file for this NCCL version (or unset NCCL_TOPO_FILE / "
                    "NCCL_GRAPH_FILE).",
                },
            ],
        },
    ),
    (
        r"Mismatched collective detected|collective mismatch around rank",
        {
            "category": MISMATCH,
            "strength": "decisive",
            "alone": 0.85,
            "kind": "mismatch_detected",
            "incriminates": "nobody",
            "meaning": "NCCL's collective check (2.4-2.6) saw ranks issue different collectives (count, size, op "
            "or order); the rank it names is a hint where to look, not the culprit.",
            "fix": "Make every rank call the same collectives in the same order with the same sizes "
            "(TORCH_DISTRIBUTED_DEBUG=DETAIL names the first difference).",
        },
    ),
    (
        r"Detected mixed local (?:Net|CollNet) device counts",
        cfg(
            "Ranks of the job see different numbers of network devices (NICs): hosts configured differently.",
            "Give every host the same NICs (NCCL_IB_HCA), or set the NCCL_IGNORE_*_MISMATCH variable the message "
            "names.",
            incriminates="this_host",
        ),
    ),
    (
        r"Failed to determine (?:intra proc|local) ranks",
        cfg(
            "NCCL could not work out which ranks share this host/process (host hashes collide or disagree): "
            "containers with the same hostname, or ranks launched inconsistently.",
            "Give each container its own hostname (or NCCL_HOSTID), and launch ranks consistently.",
            alone=0.6,
            strength="supporting",
            incriminates="this_host",
        ),
    ),
    (
        r"netName \(%s\) does not match|parent comm netName",
        cfg(
            "A split communicator asks for another network than its parent's while sharing its resources.",
            "Use the parent's netName for split communicators that share resources.",
            alone=0.6,
            strength="supporting",
        ),
    ),
    (
        r"Invali[dg] config \w+ attribute|Invalid config min/max|not initialized via NCCL_(?:CONFIG|SIM_INFO)_"
        r"INITIALIZER",
        cfg(
            "A communicator configuration value (ncclConfig_t / torch's pg_options / an NCCL_* override) is invalid.",
            "Fix the communicator option the message names (torch `ProcessGroupNCCL.Options`, NCCL_* variables).",
        ),
    ),
    (
        r"Attempt to use communicator before the previous operation",
        internal(
            "The communicator was used while its previous (non-blocking) operation had not succeeded: "
            "usually its initialisation failed or is still in progress (the error before it).",
            alone=None,
        ),
    ),
    (
        r"corrupted comm object|operator is garbage|has already been destroyed",
        cfg(
            "The caller passed NCCL a destroyed or corrupted communicator / reduction operator (use after free).",
            "Fix the calling code's communicator lifetime (destroy_process_group order, a communicator used "
            "after abort).",
            alone=0.55,
            strength="supporting",
        ),
    ),
    (
        r"^ncclCommGrow: |^improper usage of ncclCommInitRank|^Invalid (?:rank|device|device count) requested|"
        r"^invalid device count|^Invalid (?:arguments comm|handle %p)|^Invalid device %d \(totalnDev",
        cfg(
            "NCCL was called with invalid arguments (rank, device, count, handle): the calling code's set-up "
            "is wrong (rank or world size out of range, a device index beyond the visible GPUs).",
            "Check the ranks, world size and device the calling code passes (RANK, WORLD_SIZE, LOCAL_RANK and "
            "CUDA_VISIBLE_DEVICES).",
            alone=0.6,
            strength="supporting",
        ),
    ),
    (
        r"^%s : |Blocking and nonblocking communicators|Data type supplied to user-created|ncclRedOpDestroy|"
        r"ncclGroupEnd: not in a group|Trying to (?:send|recv) to self|FP8 reduction|No algorithm/protocol|no "
        r"algorithm/protocol|^ncclPutSignal|^ncclSignal|^ncclWaitSignal|^Context %d is invalid|^Flags %u is "
        r"invalid|^Signal index %d",
        cfg(
            "NCCL rejected a call of the calling code (a null or foreign pointer, an invalid type, root, "
            "operation or combination for this communicator or GPU).",
            "Fix the call the message names: buffers on this rank's GPU, valid root/type/op, matching send/recv.",
            alone=0.6,
            strength="supporting",
            cases=[
                {
                    "when_format": r"allocated on device %d mismatchs with NCCL device",
                    "alone": 0.75,
                    "strength": "decisive",
                    "meaning": "A tensor given to NCCL lives on another GPU than the communicator's: the rank's "
                    "current device is not the one it uses (torch.cuda.set_device missing or wrong).",
                    "fix": "Call `torch.cuda.set_device(local_rank)` before creating tensors and the process "
                    "group, and keep each rank's tensors on its own GPU.",
                },
            ],
        ),
    ),
    (
        r"commDestroySync|commReclaim|ncclProxyStop: comm|Legacy IPC cleanup callback failed",
        {
            "category": UNKNOWN,
            "strength": "supporting",
            "kind": "comm_aborted",
            "incriminates": "nobody",
            "meaning": "Tearing down a communicator (destroy or abort) met an error: a consequence of the failure "
            "that made it abort.",
            "fix": "Find the failure before the tear-down.",
        },
    ),
    # -- topology -------------------------------------------------------------------------------------------------
    (
        r"XML Parse|XML Mismatch|XML parser is limited|too many XML|Could not open XML|system node not found in XML|"
        r"XML (?:Export|Import) Channel",
        cfg(
            "The topology or graph XML NCCL read (NCCL_TOPO_FILE, NCCL_GRAPH_FILE, or the cloud image's topology "
            "file) is malformed or does not match this machine.",
            "Fix or remove the XML file (NCCL_TOPO_FILE / NCCL_GRAPH_FILE; cloud images: the provider's "
            "topology file for this instance type); dump the detected one with NCCL_TOPO_DUMP_FILE.",
            incriminates="this_host",
        ),
    ),
    (
        r"All entries except the first must have a prefix|Unrecognized (?:element|prefix) token|^Invalid %s %d",
        cfg(
            "An NCCL tuning variable (NCCL_ALGO, NCCL_PROTO, NCCL_NTHREADS...) has a value NCCL cannot parse.",
            "Fix the NCCL_* variable the message names (its syntax is in NCCL's environment documentation).",
            alone=0.6,
            strength="supporting",
        ),
    ),
    (
        r"Could not find a path for pattern|NCCL_NET_MERGE_POLICY: unknown|User asked for a (?:maximum|minimum)|"
        r"Unable to open %s, not dumping",
        benign(
            "NCCL adjusts a setting or a search by itself (a default used, a value capped, the topology not "
            "dumped); it continues."
        ),
    ),
    (
        r"TOPO/NET : Could not force merge|Tried merging multiple devices|Specified fused NIC|Only matched %d "
        r"devices|Tried to merge too many NICs|Fusing NET devices from different NUMA",
        cfg(
            "The NIC fusion requested (NCCL_NET_FORCE_MERGE, NCCL_NET_MERGE_LEVEL) cannot be applied on this host.",
            "Fix NCCL_NET_FORCE_MERGE / NCCL_NET_MERGE_LEVEL, or unset them.",
            alone=0.6,
            strength="supporting",
            incriminates="this_host",
        ),
    ),
    (
        r".",
        {},  # the draft's reading stands (the rules of nccl_classify.py, remapped by nccl_catalog.py)
    ),
]

# CUDA errors NCCL quotes (`Cuda failure 'X'`, `CUDA error %d '%s'`): what the error string says, whatever the call.
# Applied to entries with `cuda_cases` after their own cases (and OOM before them).
CUDA_ERRORS: list[dict] = [
    {
        "when": {"cuda_error": r"out of memory"},
        "category": OOM,
        "strength": "decisive",
        "alone": 0.9,
        "kind": "cuda_oom",
        "meaning": "A CUDA allocation inside NCCL failed: the GPU is out of memory (held by PyTorch's caching "
        "allocator or another process).",
        "fix": "Leave GPU memory for NCCL: smaller batch or shards, `torch.cuda.empty_cache()` before creating "
        "communicators, fewer channels (NCCL_MAX_NCHANNELS), NCCL_NVLS_ENABLE=0.",
        "first": True,
    },
    {
        "when": {"cuda_error": r"system not yet initialized|cudaErrorSystemNotReady"},
        "category": NVML,
        "strength": "decisive",
        "alone": 0.85,
        "kind": "gpu_fabric_error",
        "meaning": "CUDA error 802, `system not yet initialized`: the NVSwitch fabric manager has not initialised "
        "this node's fabric.",
        "fix": "Start (or restart) nvidia-fabricmanager at the driver's version, then reset the GPUs; drain the "
        "node until `nvidia-smi -q | grep -i fabric` says Completed.",
        "first": True,
    },
    {
        "when": {"cuda_error": r"uncorrectable ECC|ECC error"},
        "category": NVML,
        "strength": "decisive",
        "alone": 0.9,
        "kind": "gpu_hw_error",
        "meaning": "A GPU of this host reported an uncorrectable ECC error: a hardware fault.",
        "fix": "Drain the node; check `nvidia-smi -q -d ECC` and the kernel log for Xid 48/63/64/94/95.",
        "first": True,
    },
    {
        "when": {
            "cuda_error": r"driver version is insufficient|forward compatibility was attempted|"
            r"no kernel image is available|PTX was compiled with an unsupported toolchain|unsupported PTX version"
        },
        "category": CFG,
        "strength": "decisive",
        "alone": 0.85,
        "kind": "cuda_build_mismatch",
        "meaning": "The CUDA build does not fit this machine: a runtime newer than the driver supports, or kernels "
        "built for other GPU architectures.",
        "fix": "Install a driver that supports the CUDA of the torch/NCCL build (`nvidia-smi` shows the highest), "
        "or use a build for this CUDA and GPU architecture.",
        "first": True,
    },
    {
        "when": {
            "cuda_error": r"unknown error|GPU is lost|fallen off the bus|device not ready|"
            r"CUDA-capable device\(s\) is/are busy or unavailable|initialization error"
        },
        "category": NVML,
        "strength": "decisive",
        "alone": 0.65,
        "kind": "nvml_error",
        "meaning": "CUDA reported a driver-level failure (`unknown error` 999, an initialisation error, a busy or "
        "lost device): the GPU or its driver is in a bad state on this host.",
        "fix": "Check the GPU and driver on this host (`nvidia-smi`, `dmesg | grep -i xid`); reset the GPU or drain "
        "the node.",
    },
    {
        "when": {"cuda_error": r"invalid device ordinal|no CUDA-capable device is detected"},
        "category": CFG,
        "strength": "decisive",
        "alone": 0.8,
        "kind": "gpu_unavailable",
        "meaning": "The process asked for a GPU it does not see: more processes per node than visible GPUs, or "
        "CUDA_VISIBLE_DEVICES hiding them.",
        "fix": "Match --nproc_per_node to the GPUs the process sees, and check CUDA_VISIBLE_DEVICES.",
    },
    {
        "when": {
            "cuda_error": r"illegal memory access|unspecified launch failure|misaligned address|"
            r"device-side assert|illegal instruction|an illegal address"
        },
        "category": CRASH,
        "strength": "decisive",
        "alone": 0.8,
        "kind": "cuda_error",
        "meaning": "A GPU kernel on this rank faulted (illegal memory access, launch failure, device assert) and "
        "NCCL's next CUDA call returned it: CUDA errors are sticky, the faulting kernel may be the program's.",
        "fix": "Rerun with CUDA_LAUNCH_BLOCKING=1 to find the kernel; check the node for Xid errors (a failing "
        "GPU raises these too).",
    },
    {
        "when": {
            "cuda_error": r"peer access is not supported|peer access has not been enabled|peer mapping "
            r"resources exhausted"
        },
        "category": SHMT,
        "strength": "decisive",
        "alone": 0.8,
        "kind": "p2p_error",
        "meaning": "CUDA peer access between two GPUs of this host is not possible (P2P not supported in the VM or "
        "container, PCIe ACS/IOMMU).",
        "fix": "Enable peer access on the host (disable PCIe ACS, `iommu=pt`); NCCL_P2P_DISABLE=1 as a stop-gap.",
    },
    {
        "when": {"cuda_error": r"operation not permitted when stream is capturing|capture"},
        "category": CFG,
        "strength": "supporting",
        "alone": 0.6,
        "kind": "nccl_config",
        "meaning": "A CUDA call of NCCL was made while the stream was being captured into a CUDA graph in a way "
        "NCCL does not support.",
        "fix": "Capture NCCL calls as NCCL's documentation describes (all communicators of a group captured alike).",
    },
]

# Entries written by hand: wordings outside NCCL's own tree (net plugins print through NCCL's logger) or older than
# the extraction's tags, with a regex where a format would be too loose or unknown.
HAND: list[dict] = [
    {
        "area": "net_ib",
        "id": "nccl.hand.net_plugin_completion_error",
        "regex": r"NET/\w+ ?: ?Got completion (?:from peer (?P<peer>\S+) )?with (?:error |status=)(?P<status>[\w()]+)",
        "key": "Got completion",
        "nccl": "any (net plugins: NET/IBext, NET/IBext_v8, vendor plugins)",
        "example": [
            "NET/IBext : Got completion from peer 10.0.0.2<41524> with error 12, opcode 0, len 0, vendor err 129",
            "NET/IBP:Got completion from peer 10.0.0.1<36315> with status=12 opcode=32698 len=32696 vendor err 129",
        ],
        **{k: v for k, v in REVIEW[0][1].items() if k != "cases"},
    },
    {
        "area": "net_socket",
        "id": "nccl.hand.socket_creation_failed",
        "regex": r"(?:Net : |ncclSocketInit: )?Socket creation failed : (?P<errno_text>.*)",
        "key": "Socket creation failed",
        "nccl": "2.2-2.30 (`Socket creation failed`, `Net : ...` 2.3-2.15, `ncclSocketInit: ...` 2.16+)",
        "example": ["Socket creation failed : Address family not supported by protocol"],
        **next(d for rx, d in REVIEW if rx == r"Socket creation failed"),
    },
    {
        "area": "plugin",
        "id": "nccl.hand.ofi_error",
        "regex": r"NET/OFI .*(?:completed with error|[Ff]ailed|[Ee]rror)",
        "key": "NET/OFI",
        "nccl": "aws-ofi-nccl (EFA, Libfabric) plugin, any",
        "example": [
            "NET/OFI Request 0x7f2e5c0b8d80 completed with error. RC: 5. Error: Input/output error. Completed "
            "length: 0, Request: { dev: 0, size: 0, state: CREATED, type: SEND }",
        ],
        **net(
            "The aws-ofi-nccl plugin (EFA / Libfabric) reported a failed request or call: the EFA path failed, or "
            "the peer died.",
            "Check the EFA devices and security groups (`fi_info -p efa`, EFA counters) between the hosts; check "
            "whether the peer died first.",
            "ib",
            0.55,
            strength="supporting",
        ),
    },
]

# Field names the converter could not tell from the arguments, or told wrongly (one per conversion; "" for none).
FIELDS: list[tuple[str, list[str]]] = [
    (r"^Proxy Call to rank %d failed \(%s\)$", ["peer_rank", ""]),
    (r"^\[Proxy Service %d\] Failed to execute operation %s from rank %d, retcode %d$", ["", "", "peer_rank", ""]),
    (r"^Duplicate GPU detected : rank %d and rank %d both on CUDA device %l?x$", ["rank", "peer_rank", "bus_id"]),
    (r"^Bootstrap Root : mismatch in info from procs, nranks %d vs %d", ["expected", "count"]),
    (r"^Bootstrap Root : mismatch in rank count from procs %d : %d$", ["expected", "count"]),
    (r"^Mismatched collective detected", [""]),  # `at and around rank N`: NCCL's hint, not a culprit
    (r"Got async event : %s$", ["ib_event"]),
    (r"async (?:fatal|error) event.*: %s$", ["ib_event"]),
    (r"message truncated : receiving %d bytes instead of %d", ["numel_in", "numel_out"]),
    (r"collective mismatch error,? local size %l?d remote(?: size)? %l?d", ["numel_out", "numel_in"]),
    (r"shared memory segment %s \(size %l?d\)", ["path", "size"]),
    (r"^Net : No interface found in the same subnet as remote address %s$", ["peer"]),
    (r"^\[Service thread\] Could not receive type from localRank %d", ["local_rank"]),
]
