#!/usr/bin/env python3
"""Write data/nccl_classified.toml: a DRAFT reading of every NCCL WARN format, for review before it becomes
catalog entries (issue 29, step 2).

    python scripts/vocab/nccl_classify.py

Each message gets an area (from its source file and wording) and, from the first rule below whose regex matches
its format (and area), a meaning, an ncclpm category, a strength, whom it incriminates, a fix, and the event kind
of parsers/kinds.toml it would be declared as. The rules were written after reading the code around the calls
(the `context` of data/nccl_messages.jsonl); a message no specific rule reads gets its area's default, marked
`basis = "area default"` and `confidence = "low"`: those are guesses, to be read before use.
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"

# --- areas ------------------------------------------------------------------------------------------------------

AREAS: list[tuple[str, str, str]] = [  # (area, regex on the file, regex on the format) - either may match
    ("ras", r"^ras/", r"^RAS\b|RAS thread"),
    ("nvls", r"transport/nvls|mnnvl", r"NVLS|NVLink SHARP|MNNVL|IMEX|[Mm]ulticast|[Mm]ultimem"),
    ("collnet", r"coll_net", r"CollNet|COLLNET|collnet|SHARP|sharp"),
    (
        "gin_rma",
        r"^gin/|^rma/|gdaki|devcomm|dev_runtime|plugin/gin|plugin/rma|net_ib/gin",
        r"\bGIN\b|\bRMA\b|Rma |Gin |GDAKI|DOCA|LSA|[Ss]ymmetric|window|Window",
    ),
    ("net_ib", r"net_ib|ibvwrap|ibvsymbols|mlx5dv", r"NET/IB|NET/MLX5|\bibv_|mlx5dv|QP\b|\bHCA"),
    ("gdr", r"gdrwrap", r"GDRCOPY|gdr_"),
    (
        "net_socket",
        r"net_socket|misc/socket\.cc|linux_socket_pair|os/linux\.cc:.*Socket",
        r"NET/Socket|^socket|^ncclSocket|^ncclOsSocket|^Net : |[Ss]ocket|connect",
    ),
    ("shm", r"shm", r"shared memory|/dev/shm|^SHM|\bshm\b"),
    ("p2p", r"transport/p2p|ipcsocket", r"cudaIpc|\bIPC\b|UDS:|peer with device|P2P"),
    ("proxy", r"^proxy\.cc", r"[Pp]roxy"),
    ("bootstrap", r"^bootstrap", r"Bootstrap|NCCL_COMM_ID|OOB"),
    ("nvml", r"nvmlwrap", r"^nvml|NVML"),
    (
        "cuda",
        r"cudawrap|strongstream",
        r"Cuda failure|CUDA (?:error|driver|library|runtime|context|missing)|"
        r"cuda[A-Z]\w+(?:\(\))? failed|\bcu[A-Z]\w+ failed|captured",
    ),
    ("topology", r"^graph/", r"TOPO|XML|[Tt]opo|NUMA|PCI|\bring\b|\btree\b"),
    ("alloc", r"alloc|mem_manager|register/", r"[Aa]lloc|malloc|calloc|MemManager|register"),
    ("plugin", r"^plugin/|tuner|^net\.cc", r"plugin|Plugin"),
    (
        "api_usage",
        r"argcheck|group\.cc|enqueue\.cc",
        r"Invalid config|NCCL_CONFIG_INITIALIZER|invalid (?:root|type|reduction)|ncclRedOp",
    ),
    ("os", r"^os/", r"pthread|rlimit|affinity|Thread"),
    ("init", r"^init\.cc|^transport\.cc|^collectives", r""),
]


def area_of(msg: dict) -> str:
    """The first area whose wording regex matches the format, else whose file regex matches the newest site
    (file:function), else one of the other sites' files."""
    key = msg["file"] + ":" + (msg["function"] or "")
    others = [s["file"] for s in msg.get("other_sites", [])]
    for area, _file_rx, fmt_rx in AREAS:
        if fmt_rx and re.search(fmt_rx, msg["format"]):
            return area
    for area, file_rx, _ in AREAS:
        if re.search(file_rx, key):
            return area
    for area, file_rx, _ in AREAS:
        if any(re.search(file_rx, f) for f in others):
            return area
    return "misc"


# --- rules ------------------------------------------------------------------------------------------------------

NET, SHMT, INIT, CFG, CRASH, OOM, NVML, MISMATCH = (
    "network_transport", "shm_p2p_topology", "init_rendezvous", "config_version", "rank_crash", "cuda_oom",
    "nvml_driver_failure", "mismatched_collectives",
)  # fmt: skip


@dataclass(frozen=True)
class Rule:
    name: str
    rx: str
    category: str
    strength: str  # decisive / supporting / benign / unknown
    incriminates: str  # this_rank / this_host / peer / nobody / unknown
    meaning: str
    fix: str
    kind: str  # the parsers/kinds.toml kind the entry would be declared as
    areas: tuple[str, ...] = ()
    note: str = ""


R = Rule
RULES: list[Rule] = [
    # -- InfiniBand / RoCE data path
    R(
        "ib_completion_error",
        r"Got completion from peer|Got CQE with error",
        NET,
        "decisive",
        "peer",
        "A work request on the InfiniBand/RoCE queue pair to the named peer completed with an error status (retry "
        "counter exceeded, remote access/operation error, flush): the IB path to that peer failed.",
        "Check the link and switch ports between this host and the peer (ibstat, counters, cables); status 12 / "
        "RETRY_EXC_ERR often means a flapping link or a dead peer NIC; NCCL_IB_TIMEOUT/NCCL_IB_RETRY_CNT only hide it.",
        "network_error",
        note="status 5 (WR_FLUSH_ERR) follows the first error on the same QP: read the first one",
    ),
    R(
        "ib_async_fatal",
        r"async fatal event|Got async error event|unknown event type",
        NET,
        "decisive",
        "this_host",
        "The HCA reported a fatal asynchronous event (QP/CQ catastrophic error, port error, device fatal) on this "
        "host.",
        "Check this host's HCA and port (dmesg, mlx5 firmware, cable); drain the node if it repeats.",
        "network_error",
    ),
    R(
        "ib_async_event",
        r"Got async event",
        NET,
        "supporting",
        "this_host",
        "The HCA reported an asynchronous event; fatal ones (port error, catastrophic error) break the IB path, "
        "others (GID change, port active) are harmless.",
        "Read the event name: a port error / catastrophic error needs the host's IB port checked.",
        "network_error",
        note="strength depends on the %s event text: declare fatal event names decisive, the rest benign",
    ),
    R(
        "ib_async_benign",
        r"GID table changed|Got non-fatal async event",
        "benign",
        "benign",
        "nobody",
        "The HCA reported a non-fatal asynchronous event (GID table change, port state change); NCCL continues.",
        "None by itself; a port going down shows up as completion errors next.",
        "nccl_warn",
    ),
    R(
        "ib_unsupported_status",
        r"Unsupported completion status",
        NET,
        "supporting",
        "this_host",
        "An IB work request completed with an error status NCCL's resiliency path (2.29+) cannot handle.",
        "Read the completion error before it; check the HCA and link.",
        "network_error",
    ),
    R(
        "ib_fatal_detected",
        r"communicator encountered a fatal error \(detected in",
        NET,
        "decisive",
        "this_host",
        "NCCL's IB stats saw a fatal error on one of this communicator's devices (an async fatal event was counted) "
        "and fails the communicator.",
        "See the async fatal event printed before it; check this host's HCA.",
        "network_error",
    ),
    R(
        "ib_size_mismatch",
        r"collective mismatch error, local size",
        MISMATCH,
        "supporting",
        "peer",
        "Over IB, the peer posted a receive of another size than this rank sends for the same operation: the ranks "
        "called different collectives or sizes (or run different NCCL_PROTO/NCCL_ALGO).",
        "Make every rank issue the same collectives with the same sizes; compare NCCL_* settings across ranks.",
        "mismatch_detected",
    ),
    R(
        "ib_incorrect_receive",
        r"posted incorrect receive info",
        MISMATCH,
        "supporting",
        "peer",
        "The peer's receive information for this send does not fit (size/address): a collective mismatch or "
        "memory corruption.",
        "Check that ranks issue the same operations; compare NCCL versions and settings.",
        "mismatch_detected",
    ),
    R(
        "ib_post_failed",
        r"ibv_post_send\(\) failed|ibv_post_recv\(\) failed|ibv_poll_cq\(\) returned",
        NET,
        "decisive",
        "this_host",
        "Posting or polling an IB work request failed on this host (queue full, QP in "
        "error state after an earlier failure, or a device error).",
        "Look for an earlier completion error / async event; check the HCA (dmesg).",
        "network_error",
        note="after a peer's death the QP goes to error and posts fail too: a consequence then",
    ),
    R(
        "ib_resiliency_fatal",
        r"The error is fatal|Fatal error\. Detected %d failed devices|marked as failed",
        NET,
        "decisive",
        "this_host",
        "NCCL's IB resiliency (2.29+) found an IB device failed and could not recover on another one.",
        "Check the failed HCA/port on this host.",
        "network_error",
    ),
    R(
        "ib_resiliency_internal",
        r"resiliency|[Rr]eplay|probe|failed request|stale CQE|Unrecognized request|"
        r"wr_id|Invalid request index|replacement QP|outstanding recovery|AliveMessages|alive message",
        CRASH,
        "supporting",
        "this_rank",
        "An internal state check of NCCL's IB resiliency/recovery path "
        "(2.29+) failed while handling an earlier IB error.",
        "Read the IB error before it; report to NCCL if it appears alone.",
        "network_error",
        ("net_ib",),
    ),
    R(
        "ib_verbs_setup",
        r"Call to ibv_\w+ failed|Call to mlx5dv_\w+ failed|mlx5dv_create_qp failed",
        NET,
        "supporting",
        "this_host",
        "A libibverbs call NCCL makes to set up or tear down IB resources (QP, CQ, MR, "
        "PD, port/GID query) failed on this host.",
        "modify_qp/create_qp: check GID/RoCE config (NCCL_IB_GID_INDEX), MTU, the peer being alive; reg_mr: "
        "peer memory (nvidia-peermem) or locked-memory limit (ulimit -l); query: the HCA state.",
        "network_error",
        note="ibv_modify_qp failing to RTR/RTS is the classic wrong-GID / unreachable-peer RoCE symptom",
    ),
    R(
        "ib_modify_qp_retry",
        r"Call to ibv_modify_qp failed with %d %s, %s",
        NET,
        "supporting",
        "peer",
        "ibv_modify_qp failed while bringing a QP to the peer up (possibly retried).",
        "Check RoCE GID/subnet settings and that the peer is reachable over IB.",
        "network_error",
    ),
    R(
        "ib_lib_missing",
        r"lib wrapper not initialized|dlvsym failed on|Failed to open libibverbs",
        "benign",
        "benign",
        "nobody",
        "libibverbs (or one of its symbols) is not available: NCCL does not use IB on this host and "
        "falls back to sockets.",
        "None if the job is meant to run over TCP; else install rdma-core / mount the IB devices into the container.",
        "nccl_warn",
    ),
    R(
        "ib_no_device",
        r"NET/IB : No IP interface found|Unable to open device|Unable to query (?:device|port)",
        NET,
        "supporting",
        "this_host",
        "NCCL's IB transport could not open or query an HCA/port, or found no IP "
        "interface for its out-of-band channel.",
        "Check the HCA (ibstat) and NCCL_IB_HCA / NCCL_SOCKET_IFNAME.",
        "network_error",
    ),
    R(
        "ib_link_layer",
        r"incompatible devices|different link_layer|merge multiple devices|NCCL_IB_MERGE_NICS|"
        r"mergedDev|merge net devices|is incompatible with the local",
        CFG,
        "decisive",
        "this_host",
        "NICs of different link layers (IB vs RoCE) or "
        "counts were selected or merged, or merging is disabled while requested.",
        "Select NICs of one link type with NCCL_IB_HCA; align NIC configuration across hosts.",
        "network_error",
    ),
    R(
        "ib_not_ready",
        r"called when comm->(?:base\.)?ready == 0|connect already connected",
        CRASH,
        "supporting",
        "this_rank",
        "An IB send/receive was issued on a connection that is not ready (internal state error).",
        "Read the errors before it; report to NCCL if alone.",
        "nccl_warn",
    ),
    R(
        "ib_env",
        r"NCCL_IB_\w+=%d is out of range|Ip address '%s' is invalid|Ip address mask|OOO RQ",
        CFG,
        "supporting",
        "this_host",
        "An NCCL_IB_* setting is invalid or asks for a feature the NICs lack.",
        "Fix the NCCL_IB_* variable named in the message.",
        "setting",
    ),
    R(
        "ib_plane",
        r"plane ID",
        CFG,
        "supporting",
        "this_host",
        "The NIC plane configuration exceeds what NCCL supports.",
        "Check the NIC plane configuration / NCCL_IB_* settings.",
        "nccl_warn",
    ),
    R(
        "ib_vdev",
        r"virtual device|vNic|virtual NIC|physical device",
        CFG,
        "supporting",
        "this_host",
        "A virtual (merged) NIC refers to devices that do not exist or exceeds the limit.",
        "Check NCCL_IB_HCA / NCCL_NET_FORCE_MERGE and that every host has the same NICs.",
        "nccl_warn",
    ),
    R(
        "ib_roce_version",
        r"RoceGetVersionNum|FLID",
        "benign",
        "benign",
        "nobody",
        "NCCL could not read the RoCE version from sysfs, or falls back to another addressing mode; it continues.",
        "None unless connections fail next.",
        "nccl_warn",
    ),
    # -- sockets
    R(
        "socket_connect_failed",
        r"[Cc]onnect to %s (?:failed|returned)|PollConnect to %s failed|socketPollConnect poll",
        NET,
        "decisive",
        "peer",
        "A TCP connection to the named address failed (refused, timed out, unreachable): nothing listens "
        "there, or this host cannot reach it (firewall, wrong interface, a container-bridge address advertised).",
        "Make NCCL_SOCKET_IFNAME pick an interface every host can reach; check firewalls; if the peer died, "
        "look at it first.",
        "network_error",
        note="'Connection refused' from a peer that crashed is a consequence: a crashed rank wins",
    ),
    R(
        "socket_closed",
        r"Connection closed by remote peer",
        NET,
        "supporting",
        "peer",
        "The peer closed its TCP connection: usually the peer process exited or aborted (a consequence), rarely "
        "the network.",
        "Find why the peer exited (its own log); a crash there is the cause.",
        "network_error",
        note="victim-style: the named peer is the one to look at",
    ),
    R(
        "socket_recv_failed",
        r"Call to (?:recv from )?%s(?: %s)? failed : %s|Call to recv from %s failed",
        NET,
        "supporting",
        "peer",
        "A send/recv on a socket to the named peer failed (reset by peer, broken pipe, timed out).",
        "Check whether the peer died first; otherwise the network path between the hosts.",
        "network_error",
    ),
    R(
        "socket_retries",
        r"exceeded (?:error )?retr|exceeded timeouts|exceeded error retry",
        NET,
        "decisive",
        "peer",
        "NCCL gave up connecting/accepting after its retries: the other side never answered.",
        "Check that the peer is alive and reachable on the address it advertised (NCCL_SOCKET_IFNAME).",
        "network_error",
    ),
    R(
        "socket_no_interface",
        r"[Nn]o (?:socket )?interface found|No usable listening interface|"
        r"No interface found in the same subnet|no device found (?:matching|after excluding)",
        NET,
        "decisive",
        "this_host",
        "NCCL found no usable network interface (none matching NCCL_SOCKET_IFNAME / "
        "NCCL_OOB_NET_IFNAME, or none in the remote address's subnet).",
        "Set NCCL_SOCKET_IFNAME to an interface that exists on every host (ip addr).",
        "network_error",
    ),
    R(
        "socket_truncated",
        r"message truncated|Message truncated",
        MISMATCH,
        "supporting",
        "peer",
        "A peer sent more bytes than this rank expected for the same operation: mismatched collectives "
        "(or different NCCL_PROTO/NCCL_ALGO between ranks), or a stray connection.",
        "Make ranks issue the same collectives with the same sizes; align NCCL_* settings.",
        "mismatch_detected",
    ),
    R(
        "socket_accept",
        r"wrong magic|wrong type %d != %d|Accept failed|\[Service thread\] Accept failed",
        NET,
        "supporting",
        "nobody",
        "A connection accepted by NCCL's listening socket was not from an NCCL peer of "
        "this job (wrong magic/type) or accept() failed: a port scanner, another job on the same port, or a reset.",
        "Check for other jobs or scanners on the node; isolate ports (NCCL_COMM_ID / MASTER_PORT).",
        "network_error",
    ),
    R(
        "socket_syscalls",
        r"Call to (?:bind|listen|setsockopt|getsockname|getsockopt|socket|shutdown|fcntl|dup2|"
        r"accept|getifaddrs)\b|setsockopt (?:TCP|SO_)|Socket creation failed|getting address info",
        NET,
        "supporting",
        "this_host",
        "A socket system call failed on this host (address in use, no fds, permission).",
        "Read the errno text: 'Address already in use' -> port clash; 'Too many open files' -> raise ulimit -n.",
        "network_error",
        note="'Too many open files' here belongs to fd_exhaustion",
    ),
    R(
        "socket_address",
        r"NCCL_COMM_ID|Invalid NCCL_COMM_ID|No valid .*pair found|unsupported IP family|"
        r"Unsupported address family|string is null|neither AF_INET",
        CFG,
        "decisive",
        "this_host",
        "An address NCCL was given (NCCL_COMM_ID, NCCL_SOCKET_IFNAME...) cannot be parsed or used.",
        "Fix NCCL_COMM_ID to <ip>:<port> or [<ipv6>]:<port>.",
        "setting",
    ),
    R(
        "socket_state",
        r"pass NULL socket|socket is invalid|file descriptor is -1|socket state|wrong socket state|"
        r"unexpected socket state|invalid socket|invalid arguments ops",
        CRASH,
        "supporting",
        "this_rank",
        "A socket call was made on a socket in the wrong state: an internal error, usually after an earlier "
        "failure tore the connection down.",
        "Read the errors before it.",
        "nccl_warn",
    ),
    R(
        "socket_thread_error",
        r"socket progress error",
        NET,
        "supporting",
        "peer",
        "A socket transport helper thread failed sending/receiving data.",
        "Read the socket error before it.",
        "network_error",
    ),
    R(
        "socket_limits",
        r"NCCL_SOCKET_NTHREADS is greater|NCCL_NSOCKS_PERTHREAD",
        "benign",
        "benign",
        "nobody",
        "NCCL capped NCCL_SOCKET_NTHREADS/NCCL_NSOCKS_PERTHREAD to its maximum and continues.",
        "Lower the setting to silence it.",
        "setting",
    ),
    # -- shm
    R(
        "shm_space",
        r"failed to extend %s to %ld bytes|Could not map %s size|Error while %s shared memory segment|"
        r"failed to create shared memory file",
        SHMT,
        "decisive",
        "this_host",
        "NCCL could not create/extend/map its shared-memory segment under /dev/shm: /dev/shm is too small or full "
        "(containers default to 64 MB).",
        "Give the container more /dev/shm (docker --shm-size=16g / "
        "--ipc=host; k8s emptyDir medium Memory), or NCCL_SHM_DISABLE=1.",
        "shm_error",
    ),
    R(
        "shm_cleanup",
        r"unlink shared memory|munmap of shared memory|shm close failed|shm unlink failed",
        "benign",
        "benign",
        "nobody",
        "Removing or unmapping a shared-memory segment failed at teardown (already removed).",
        "None by itself.",
        "nccl_warn",
    ),
    R(
        "shm_args",
        r"Invalid argument desc|Invalid argument comm|SHM locality",
        CRASH,
        "supporting",
        "this_rank",
        "An internal argument check of the SHM transport failed (or NCCL_SHM_LOCALITY is invalid, then ignored).",
        "Read the errors before it.",
        "nccl_warn",
        ("shm",),
    ),
    # -- p2p / IPC
    R(
        "p2p_ipc",
        r"cudaIpcGetMemHandle failed|failed to peer with device|IPC register|invalid IPC",
        SHMT,
        "decisive",
        "this_host",
        "CUDA peer-to-peer / IPC between this host's GPUs failed (P2P not supported in "
        "this VM/container, ACS/IOMMU, IPC not shared between containers).",
        "Run with NCCL_P2P_DISABLE=1 to confirm; enable P2P (disable ACS, --ipc=host), or keep P2P off.",
        "p2p_error",
    ),
    R(
        "uds",
        r"^UDS: ",
        SHMT,
        "supporting",
        "this_host",
        "The Unix-domain socket NCCL uses to pass file descriptors between local processes (cuMem IPC) failed.",
        "Check that local ranks share a filesystem namespace/abstract sockets (same container or --ipc=host); "
        "NCCL_CUMEM_ENABLE=0 avoids it.",
        "p2p_error",
    ),
    R(
        "p2p_disabled_nvlink",
        r"P2P is disabled between NVLINK connected GPUs",
        SHMT,
        "decisive",
        "this_host",
        "GPUs linked by NVLink report P2P as unavailable: a driver/fabric problem on this host.",
        "Check nvidia-smi topo -p2p r, the fabric manager, and the driver.",
        "p2p_error",
    ),
    # -- NVLS / MNNVL
    R(
        "nvls_bind",
        r"Failed to bind NVLink SHARP|NVLS register|NVLS buffer",
        NVML,
        "decisive",
        "this_host",
        "NCCL could not bind NVLink SHARP multicast memory: the NVSwitch fabric (fabric manager) or the driver is "
        "in a bad state, or multicast is not supported here.",
        "Check nvidia-fabricmanager and the driver on this host; NCCL_NVLS_ENABLE=0 works around it.",
        "gpu_fabric_error",
    ),
    R(
        "mnnvl",
        r"MNNVL .* is available but not",
        CFG,
        "decisive",
        "this_host",
        "Multi-node NVLink is detected but IMEX (channels/daemon) is not configured, so MNNVL does not work.",
        "Configure IMEX (nvidia-imex, /dev/nvidia-caps-imex-channels) or set NCCL_MNNVL_ENABLE=0.",
        "gpu_fabric_error",
    ),
    R(
        "nvls_same_device",
        r"NCCL_NVLS_ENABLE has been set",
        CFG,
        "decisive",
        "this_host",
        "NCCL_NVLS_ENABLE=1 is forced while several ranks share one GPU.",
        "Unset NCCL_NVLS_ENABLE or give each rank its own GPU.",
        "setting",
    ),
    R(
        "multicast",
        r"Multicast support requested|Multimem pointer requested|MNNVL is not supported",
        CFG,
        "supporting",
        "this_host",
        "A multicast/multimem/MNNVL feature was requested but the system does not provide it.",
        "Disable the feature (NCCL_NVLS_ENABLE=0 / NCCL_MNNVL_ENABLE=0) or fix the fabric setup.",
        "nccl_warn",
    ),
    # -- CUDA and memory
    R(
        "cuda_oom_alloc",
        r"Failed to CUDA (?:calloc|malloc|host alloc)|Failed to CUDA calloc async",
        OOM,
        "decisive",
        "this_rank",
        "NCCL could not allocate device (or pinned host) memory for its buffers: the GPU "
        "is full, usually held by the framework's caching allocator.",
        "Leave memory for NCCL (smaller batch, PYTORCH_CUDA_ALLOC_CONF, fewer channels via NCCL_MAX_NCHANNELS, "
        "NCCL_BUFFSIZE).",
        "cuda_oom",
    ),
    R(
        "host_oom",
        r"Failed to malloc %ld bytes|malloc\(size=%llu\) returned null|calloc\(.*\) returned null|"
        r"Allocation failed(?: at %s:%d)?$|Failed to allocate",
        CRASH,
        "decisive",
        "this_host",
        "A host memory allocation failed in NCCL: the host (or the container's memory limit) is out of memory.",
        "Check the host's memory and the container limit; the kernel OOM killer may follow.",
        "nccl_warn",
    ),
    R(
        "cuda_failure",
        r"^Cuda failure|CUDA error %d|^Cuda failure %d",
        "unknown",
        "supporting",
        "this_rank",
        "A CUDA runtime/driver call inside NCCL failed; the quoted CUDA error says why (out of memory -> cuda_oom; "
        "'peer access is not supported' / IPC errors in p2p.cc -> P2P; in nvls.cc -> fabric; 'an illegal memory "
        "access' -> a kernel fault; 'system not yet initialized' -> fabric manager).",
        "Read the CUDA error text and the file: it decides the category.",
        "cuda_error",
        note="classify by the quoted error and the site's file: one format, many causes",
    ),
    R(
        "cuda_driver_load",
        r"Failed to find CUDA library|Failed to load CUDA missing symbol|cuDriverGetVersion "
        r"failed|Retrieve %s|CUDA some PFN|prior to CUDA|requires CUDA driver|CUDA runtime >= |CUDA driver <",
        CFG,
        "decisive",
        "this_host",
        "The CUDA driver library is missing, too old, or lacks a symbol this NCCL needs.",
        "Install a driver at least as new as the CUDA the NCCL build needs; check LD_LIBRARY_PATH / "
        "NCCL_CUDA_PATH in containers.",
        "cuda_build_mismatch",
    ),
    R(
        "cuda_context",
        r"Failed to (?:create|set) CUDA context|Failed to set CUDA device",
        CRASH,
        "supporting",
        "this_rank",
        "A NCCL helper thread could not create/set a CUDA context on its device (device lost, "
        "driver failure, or the process is being torn down).",
        "Check the GPU (nvidia-smi, Xid in dmesg).",
        "cuda_error",
    ),
    R(
        "gdr",
        r"GDRCOPY|gdr_\w+\(.*failed|gdr_pin_buffer_v2 not available|libgdrapi|dlsym failed on gdr",
        "benign",
        "benign",
        "this_host",
        "GDRCopy failed or is missing: NCCL uses it only when enabled (NCCL_GDRCOPY_ENABLE) and falls back without it.",
        "Install/upgrade GDRCopy or disable NCCL_GDRCOPY_ENABLE.",
        "nccl_warn",
        note="benign when merely missing; a failure after it was enabled is supporting",
    ),
    # -- NVML / driver
    R(
        "nvml_not_found",
        r"nvmlDeviceGetHandleByPciBusId\(\) failed",
        SHMT,
        "decisive",
        "this_host",
        "NVML cannot see a GPU by the bus id NCCL asked for: GPUs split between containers sharing a host "
        "identity, or hidden by CUDA_VISIBLE_DEVICES/cgroups ('Not Found'), or the driver failing (other texts).",
        "Give each container all GPUs it must see or distinct host ids; 'Unknown Error' -> driver/GPU problem.",
        "gpu_not_visible",
        note="the %s decides: 'Not Found' is visibility, 'Unknown Error'/'GPU is lost' is NVML",
    ),
    R(
        "nvml_failed",
        r"^nvml\w*(?:%s)?\(.*\) failed|Failed to open libnvidia-ml",
        NVML,
        "decisive",
        "this_host",
        "An NVML call failed: the driver library is missing or mismatched with the kernel module, or a GPU is lost.",
        "Check nvidia-smi on this host (driver/library version mismatch, GPU fallen off the bus).",
        "nvml_error",
    ),
    R(
        "nvml_skip",
        r"No NVML device handle|Skipping nvlink",
        "benign",
        "benign",
        "nobody",
        "NCCL has no NVML handle for a GPU and skips NVLink detection (falls back to slower paths).",
        "Check NVML if performance matters.",
        "nccl_warn",
    ),
    # -- bootstrap / init / config
    R(
        "bootstrap_mismatch",
        r"Bootstrap Root : mismatch|mismatch in rank count",
        CFG,
        "decisive",
        "nobody",
        "Ranks joining the same NCCL unique id disagree on the communicator size: nodes were launched with "
        "different world sizes, or two jobs share one rendezvous.",
        "Launch every node with the same --nnodes/--nproc_per_node/WORLD_SIZE; use distinct MASTER_PORT per job.",
        "world_size_mismatch",
    ),
    R(
        "bootstrap_dup_rank",
        r"has already checked in|localId %d is out of range",
        INIT,
        "decisive",
        "nobody",
        "Two processes registered with the same rank at NCCL's bootstrap root, or an out-of-range one: a "
        "relaunched/duplicate process or two jobs on one rendezvous.",
        "Make sure each rank is launched once; distinct MASTER_PORT per job.",
        "world_size_mismatch",
    ),
    R(
        "duplicate_gpu",
        r"Duplicate GPU detected|Multiple Ranks are using the same GPU",
        CFG,
        "decisive",
        "this_host",
        "Two ranks of the communicator use the same GPU: torch.cuda.set_device(local_rank) missing, "
        "CUDA_VISIBLE_DEVICES wrong, or more processes per node than GPUs.",
        "Set the device from LOCAL_RANK before init; check --nproc_per_node against the GPUs.",
        "duplicate_gpu",
    ),
    R(
        "version_mismatch",
        r"version mismatch with remote peer|Mismatched NCCL version|compiled with (?:too old )?"
        r"(?:NCCL )?version|NCCL library (?:version )?is (?:too old|not backwards)|wrong version",
        CFG,
        "decisive",
        "nobody",
        "Processes run different NCCL versions (or an application was built against another NCCL).",
        "Use one NCCL (one torch/nccl wheel) on every node.",
        "version_mismatch",
    ),
    R(
        "net_count_mismatch",
        r"mixed local (?:Net|CollNet) device counts",
        CFG,
        "decisive",
        "nobody",
        "Hosts have different numbers of usable NICs, which NCCL refuses.",
        "Give every host the same NICs (NCCL_IB_HCA), or set the NCCL_IGNORE_*_MISMATCH variable named.",
        "nccl_warn",
    ),
    R(
        "net_not_found",
        r"Error: network %s not found|Failed to initialize any NET plugin",
        NET,
        "decisive",
        "this_host",
        "The network NCCL_NET asks for does not exist or no network plugin/transport initialised.",
        "Unset NCCL_NET or install the plugin it names; check the IB/socket setup.",
        "network_error",
    ),
    R(
        "no_transport",
        r"No transport found for rank",
        SHMT,
        "decisive",
        "this_host",
        "NCCL found no transport able to connect two ranks (P2P, SHM and NET all unavailable or disabled).",
        "Do not disable every transport (NCCL_P2P_DISABLE+NCCL_SHM_DISABLE+no network); check the network.",
        "nccl_warn",
    ),
    R(
        "api_config",
        r"Invalid config|Invalig config|NCCL_CONFIG_INITIALIZER|_INITIALIZER|not initialized via",
        CFG,
        "decisive",
        "this_rank",
        "The application passed an invalid ncclConfig_t / struct to an NCCL API.",
        "Fix the calling code (framework version / its NCCL config).",
        "nccl_warn",
    ),
    R(
        "api_usage",
        r"invalid (?:root|type|reduction|device count|rank|device)|Invalid (?:rank|device|arguments|"
        r"handle)|is not a valid pointer|argument is NULL|allocated on device %d mismatch|corrupted comm|"
        r"improper usage|not in a group call|Blocking and nonblocking|same group|captured|operator|ncclRedOp|"
        r"before the previous operation returned|already been destroyed|communicator was revoked|Data type "
        r"supplied|send to self|recv to self|ncclCommGrow|ncclPutSignal|ncclWaitSignal|ncclSignal|must be 0",
        "unknown",
        "supporting",
        "this_rank",
        "The application called NCCL wrongly (invalid argument, pointer on "
        "another device, unmatched self send/recv, group misuse, use after abort).",
        "Fix the calling code; 'before the previous operation returned' / 'revoked' follow an earlier failure.",
        "nccl_warn",
        note="a code bug: ncclpm has no category for it; rank_crash of this rank at most",
    ),
    R(
        "env_ignored",
        r"is being ignored|is too small|is too big|Limiting value|cap it to|set it to|set both to|"
        r"Unsetting|defaulting to|ignoring NCCL_ALGO|User asked for|Ignoring|disabling|falling back|using "
        r"point-to-point|Continue without|not using it|Enabling pre-posting|using dlid as fallback|ignoring\.?$",
        "benign",
        "benign",
        "nobody",
        "NCCL adjusted or ignored a setting/feature and continues (a fallback).",
        "None needed; change the setting to silence it.",
        "setting",
    ),
    R(
        "topo_dump",
        r"not dumping topology",
        "benign",
        "benign",
        "nobody",
        "NCCL could not write the topology dump NCCL_TOPO_DUMP_FILE asked for; it continues.",
        "Fix the path.",
        "nccl_warn",
    ),
    R(
        "env_invalid",
        r"^Invalid %s %d|Unrecognized (?:element|prefix) token|All entries except the first",
        CFG,
        "supporting",
        "this_host",
        "An NCCL_* setting (NCCL_NTHREADS, NCCL_ALGO/NCCL_PROTO lists...) has an invalid value.",
        "Fix the NCCL_* variable (see the NCCL environment documentation).",
        "setting",
    ),
    R(
        "teardown",
        r"^commDestroySync|^commReclaim|destroys proxy resource error|cleanup callback failed",
        CRASH,
        "supporting",
        "this_rank",
        "Destroying or aborting the communicator hit an error: a consequence of an "
        "earlier failure (the error the abort follows is the cause).",
        "Read the first failure before it.",
        "comm_aborted",
    ),
    R(
        "local_ranks",
        r"Failed to determine (?:intra proc |local )ranks",
        CFG,
        "supporting",
        "this_host",
        "NCCL could not work out which ranks share this host/process (host or pid hashes disagree): containers "
        "with the same hostname but separate namespaces, or NCCL_HOSTID set inconsistently.",
        "Give containers distinct hostnames or set NCCL_HOSTID consistently.",
        "nccl_warn",
    ),
    R(
        "split_net",
        r"parent comm netName|netName \(%s\) does not match",
        CFG,
        "decisive",
        "this_rank",
        "A split/child communicator asks for another network than its parent while sharing its resources.",
        "Use the same NCCL_NET/netName for parent and child communicators.",
        "nccl_warn",
    ),
    R(
        "arch_mismatch",
        r"exceeds device/fn maxSharedMem",
        CFG,
        "decisive",
        "this_host",
        "NCCL's kernels need more shared memory than this GPU offers: the NCCL build does not fit the GPU "
        "architecture.",
        "Use an NCCL/torch build made for this GPU generation.",
        "cuda_build_mismatch",
    ),
    R(
        "launch_race",
        r"host threads racing to launch NCCL",
        CRASH,
        "decisive",
        "this_rank",
        "Several host threads launched NCCL work on the same device at once, which NCCL treats as fatal.",
        "Serialise NCCL calls per device (one thread per communicator/device) or set NCCL_LAUNCH_RACE_FATAL=0.",
        "nccl_warn",
    ),
    R(
        "files_limit",
        r"Call to (?:getrlimit|setrlimit) failed",
        CRASH,
        "supporting",
        "this_host",
        "NCCL could not read or raise the open-files / stack limit.",
        "Raise ulimit -n / -s for the job.",
        "fd_exhaustion",
    ),
    R(
        "threads",
        r"pthread_create failed|Thread creation failed|pthread_(?:attr|setattr)|Call to pthread_join|"
        r"pthread_join|Thread join failed|failed to join thread|pthread_detach",
        CRASH,
        "supporting",
        "this_host",
        "Creating or joining one of NCCL's threads failed (thread/process limits, memory).",
        "Check ulimit -u, the container's pids limit and memory.",
        "nccl_warn",
    ),
    R(
        "affinity",
        r"sched_[gs]etaffinity|CPU affinity|affinity",
        "benign",
        "benign",
        "nobody",
        "NCCL could not read or set the CPU affinity; it continues without pinning.",
        "None needed.",
        "nccl_warn",
    ),
    # -- proxy
    R(
        "proxy_closed",
        r"Could not receive type from localRank|closing connection|Socket recv failed while polling",
        CRASH,
        "supporting",
        "peer",
        "NCCL's proxy service lost its connection to a local rank: that process "
        "exited or aborted (a consequence of its failure).",
        "Find why the local rank named exited.",
        "peer_closed",
        note="consequence: points at the local rank that died",
    ),
    R(
        "proxy_failed_op",
        r"Failed to execute operation|Error encountered progressing|proxyDestroy failed|"
        r"call to .* failed : %d|in abort state",
        CRASH,
        "supporting",
        "this_rank",
        "An operation of NCCL's proxy thread (connection setup, registration, progress) failed; the retcode says "
        "which class.",
        "Read the WARN before it (network, memory) that made the proxy fail.",
        "nccl_warn",
    ),
    R(
        "proxy_poll",
        r"Poll failed|Too many connections|Get listenSock|Initialize peers|Get peers",
        CRASH,
        "supporting",
        "this_host",
        "The proxy service thread's sockets failed (poll error, too many local ranks).",
        "Read the errno text; check local process count and fd limits.",
        "nccl_warn",
    ),
    R(
        "proxy_no_transport",
        r"has no transport for",
        CRASH,
        "supporting",
        "this_rank",
        "A proxy operation targets a peer with no connected transport (internal state).",
        "Read the errors before it.",
        "nccl_warn",
    ),
    # -- RAS
    R(
        "ras",
        r"RAS thread terminating|RAS received unknown|Invalid client status",
        "benign",
        "benign",
        "nobody",
        "NCCL's RAS subsystem (its monitoring thread/client) hit an error; the job itself may be fine.",
        "None for the job; RAS can be disabled with NCCL_RAS_ENABLE=0.",
        "nccl_warn",
    ),
    # -- topology
    R(
        "topo_xml",
        r"XML|NCCL_TOPO_FILE|topology file|graph file",
        CFG,
        "supporting",
        "this_host",
        "NCCL could not read/parse a topology or graph XML file it was given (NCCL_TOPO_FILE, NCCL_GRAPH_FILE) or "
        "its own detection produced one it cannot use.",
        "Check the file the NCCL_TOPO_FILE/NCCL_GRAPH_FILE variable names, or unset it.",
        "nccl_warn",
    ),
    R(
        "topo_search",
        r"Could not find|not found|no algorithm/protocol|ring %d does not|Could not find a path|"
        r"requires NIC|No path computed|too many|Error : |out of range|unique busId|busId|Tried merging|force merge|"
        r"Fusing NET devices|netDevs policy|network devices",
        SHMT,
        "supporting",
        "this_host",
        "NCCL's topology detection/search failed to find a node, path or algorithm it needs (unusual PCI/NIC "
        "layout, GPUs or NICs hidden from the container, a virtualised topology).",
        "Check that the container sees the GPUs/NICs of the host (nvidia-smi topo -m); try NCCL_TOPO_DUMP_FILE; "
        "report with the dump.",
        "nccl_warn",
        ("topology",),
    ),
]


def classify(msg: dict, area: str) -> dict:
    for r in RULES:
        if (not r.areas or area in r.areas) and re.search(r.rx, msg["format"]):
            return {"rule": r, "basis": f"rule {r.name}", "confidence": "medium"}
    return {"rule": DEFAULTS.get(area, DEFAULTS["misc"]), "basis": "area default", "confidence": "low"}


_INTERNAL = (
    "an internal consistency check of NCCL failed ({function}); most often after an earlier failure, else an NCCL bug"
)
DEFAULTS: dict[str, Rule] = {
    a: R(f"default_{a}", "", cat, strength, who, meaning, fix, kind)
    for a, cat, strength, who, meaning, fix, kind in [
        (
            "net_ib",
            NET,
            "supporting",
            "this_host",
            "An error in NCCL's IB transport ({function}).",
            "Read the IB errors around it; check the HCA.",
            "network_error",
        ),
        (
            "net_socket",
            NET,
            "supporting",
            "unknown",
            "An error in NCCL's socket layer ({function}).",
            "Read the socket errors around it.",
            "network_error",
        ),
        (
            "shm",
            SHMT,
            "supporting",
            "this_host",
            "An error in NCCL's shared-memory transport ({function}).",
            "Check /dev/shm size.",
            "shm_error",
        ),
        (
            "p2p",
            SHMT,
            "supporting",
            "this_host",
            "An error in NCCL's P2P/IPC transport ({function}).",
            "Try NCCL_P2P_DISABLE=1 to confirm.",
            "p2p_error",
        ),
        (
            "nvls",
            NVML,
            "supporting",
            "this_host",
            "An error in NCCL's NVLS/MNNVL setup ({function}).",
            "Check the fabric manager; NCCL_NVLS_ENABLE=0.",
            "gpu_fabric_error",
        ),
        (
            "collnet",
            NET,
            "supporting",
            "this_host",
            "An error in NCCL's CollNet (SHARP) path ({function}).",
            "Check the SHARP plugin; NCCL_COLLNET_ENABLE=0.",
            "network_error",
        ),
        (
            "gin_rma",
            "unknown",
            "unknown",
            "unknown",
            "An error in NCCL's device-initiated / one-sided "
            "communication (GIN/RMA/symmetric memory, 2.28+) ({function}).",
            "Applies only to applications using NCCL's device API; check the requirements the message states.",
            "nccl_warn",
        ),
        ("gdr", "benign", "benign", "this_host", "A GDRCopy error ({function}).", "Check GDRCopy.", "nccl_warn"),
        ("proxy", CRASH, "supporting", "this_rank", _INTERNAL, "Read the errors before it.", "nccl_warn"),
        (
            "bootstrap",
            INIT,
            "supporting",
            "unknown",
            "An error in NCCL's bootstrap (rendezvous of the ranks) ({function}).",
            "Check that every rank reached init with the same unique id.",
            "nccl_warn",
        ),
        ("nvml", NVML, "supporting", "this_host", "An NVML error ({function}).", "Check nvidia-smi.", "nvml_error"),
        (
            "cuda",
            "unknown",
            "supporting",
            "this_rank",
            "A CUDA error inside NCCL ({function}).",
            "Read the CUDA error text.",
            "cuda_error",
        ),
        (
            "topology",
            SHMT,
            "supporting",
            "this_host",
            "An error in NCCL's topology detection ({function}).",
            "Check what the container sees (nvidia-smi topo -m).",
            "nccl_warn",
        ),
        ("alloc", CRASH, "supporting", "this_rank", _INTERNAL, "Read the errors before it.", "nccl_warn"),
        (
            "plugin",
            CFG,
            "supporting",
            "this_host",
            "A network/tuner/profiler plugin problem ({function}).",
            "Check the plugin NCCL_NET_PLUGIN/NCCL_TUNER_PLUGIN loads and its version.",
            "nccl_warn",
        ),
        (
            "api_usage",
            "unknown",
            "supporting",
            "this_rank",
            "The application called NCCL wrongly ({function}).",
            "Fix the calling code.",
            "nccl_warn",
        ),
        (
            "os",
            CRASH,
            "supporting",
            "this_host",
            "An operating-system call failed ({function}).",
            "Read the errno text.",
            "nccl_warn",
        ),
        ("init", CRASH, "supporting", "this_rank", _INTERNAL, "Read the errors before it.", "nccl_warn"),
        (
            "ras",
            "benign",
            "benign",
            "nobody",
            "An error in NCCL's RAS monitoring ({function}).",
            "None for the job.",
            "nccl_warn",
        ),
        ("misc", CRASH, "supporting", "this_rank", _INTERNAL, "Read the errors before it.", "nccl_warn"),
    ]
}


# --- TOML -------------------------------------------------------------------------------------------------------


def _q(s: str) -> str:
    return json.dumps(s, ensure_ascii=False)  # a JSON string is a valid TOML basic string


HEADER = """\
# DRAFT - NCCL WARN formats read for a diagnosis: NOT reviewed catalog entries. Generated by
# scripts/vocab/nccl_classify.py from data/nccl_messages.jsonl (rerun it after the extraction; edit the rules there,
# not this file).
#
# One table per message id (see nccl_messages.jsonl for the source context). Fields:
#   format        the printf format (as in the source)      area      grouping for readers (net_ib, shm, ...)
#   meaning       what it says, one sentence                category  the ncclpm category it points to, or
#                 "benign" (NCCL recovers / falls back), or "unknown" (no category fits: API misuse, GIN/RMA)
#   strength      decisive (alone it names the cause) / supporting (needs other evidence; often a consequence of
#                 another failure) / benign / unknown
#   incriminates  this_rank / this_host / peer (the address or rank it names) / nobody / unknown
#   fix           what to do                                 kind      the parsers/kinds.toml kind to declare it as
#   basis         "rule <name>" (a rule written after reading the code of the messages it covers) or
#                 "area default" (nothing specific read: a guess, confidence low)
#   first_tag / last_tag  where the format exists (of the 13 tags read)
#   note          a caveat the catalog entry must handle (e.g. a %s that decides the category)
"""


def render(messages: list[dict]) -> str:
    out = [HEADER]
    warn = sorted((m for m in messages if m["level"] == "WARN"), key=lambda m: (area_of(m), m["id"]))
    for m in warn:
        area = area_of(m)
        c = classify(m, area)
        r: Rule = c["rule"]
        meaning = r.meaning.format(function=m["function"] or "a macro-generated function")
        out.append(f"\n[message.{_q(m['id'])}]")
        rows = [
            ("format", m["format"]),
            ("area", area),
            ("meaning", meaning),
            ("category", r.category),
            ("strength", r.strength),
            ("incriminates", r.incriminates),
            ("fix", r.fix),
            ("kind", r.kind),
            ("basis", c["basis"]),
            ("confidence", c["confidence"]),
            ("first_tag", m["first_tag"]),
            ("last_tag", m["last_tag"]),
        ]
        if r.note:
            rows.append(("note", r.note))
        out.extend(f"{k} = {_q(v)}" for k, v in rows)
    return "\n".join(out) + "\n"


def main() -> int:
    messages = [json.loads(x) for x in (DATA / "nccl_messages.jsonl").read_text(encoding="utf-8").splitlines()]
    (DATA / "nccl_classified.toml").write_text(render(messages), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
