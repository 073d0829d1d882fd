"""SH01 shm-or-p2p-failure."""

from __future__ import annotations

from typing import ClassVar

import polars as pl

from ncclpm.rules.base import Finding, Fix, Rule, quotes, ranks_text
from ncclpm.tables import Tables
from ncclpm.tables.kinds import K
from ncclpm.tables.schema import Category
from ncclpm.util.frames import ordered

# `nvidia-smi topo -m` link types that route P2P through a CPU host bridge or across sockets (no NVLink, no
# PCIe switch): ACS / IOMMU redirection on these paths is a known cause of P2P hangs.
HOST_BRIDGE_LINKS = ("PHB", "NODE", "SYS", "SOC")


def sigbus_in_nccl(t: Tables) -> pl.DataFrame:
    """SIGBUS deaths in a job whose DataLoader says nothing but whose NCCL was active: NCCL's SHM transport and
    proxy map /dev/shm segments, and a full /dev/shm surfaces as SIGBUS on first touch."""
    if not t.kinds(K.dataloader_error).is_empty() or t.kinds(*NCCL_ACTIVITY).is_empty():
        return t.events.clear().with_columns(pl.lit(0.0).alias("strength"))
    bus = t.events.filter(
        ((pl.col("kind") == K.crash_signal) & (pl.col("exit_code") == 7))
        | ((pl.col("kind") == K.worker_exit) & ((pl.col("exit_code") == -7) | (pl.col("signal") == "SIGBUS")))
    )
    return bus.with_columns(pl.lit(0.7).alias("strength"))


def pcie_host_bridge_paths(t: Tables) -> pl.DataFrame:
    """`nvidia-smi topo -m` rows whose GPU reaches another only through a host bridge, in a job with no NVLink."""
    if not t.has_kinds(K.gpu_topology):  # (most jobs: no `nvidia-smi topo -m`, no query)
        return t.events.clear().with_columns(pl.lit(0.0).alias("strength"))
    topo = t.kinds(K.gpu_topology)
    links = topo["detail"].fill_null("").str.split(" ").explode().str.strip_chars()
    if topo.is_empty() or links.str.starts_with("NV").any():
        return t.events.clear().with_columns(pl.lit(0.0).alias("strength"))
    bridged = topo.filter(
        pl.col("detail").str.split(" ").list.eval(pl.element().is_in(list(HOST_BRIDGE_LINKS))).list.any()
    )
    return bridged.with_columns(pl.lit(0.45).alias("strength"))


NCCL_ACTIVITY = [K.nccl_version, K.nccl_comm_init, K.nccl_warn, K.nccl_retcode, K.nccl_error, K.nccl_setup]


class ShmOrP2pFailure(Rule):
    """NCCL could not set up intra-node transport: /dev/shm too small or missing, GPU peer-to-peer refused.

    ## What it detects
    `Error while creating/attaching to shared memory segment /dev/shm/nccl-...`, `No space left on device` on
    /dev/shm, `Cuda failure 'peer access is not supported between these two devices'`, CUDA IPC handle failures,
    and NCCL's topology messages (`No transport found for rank ...`, a path or GPU its search cannot find).

    ## Why it matters
    Containers get a 64 MB /dev/shm by default; NCCL's SHM transport (and DataLoader workers) need far more.
    P2P failures come from PCIe ACS / IOMMU settings or virtualisation that blocks peer access. Either way the
    communicator cannot connect and the job fails at its first collective.

    ## Example
    `NCCL WARN Error while creating shared memory segment /dev/shm/nccl-ZDKj3b (size 9637888)`
    """

    id = "SH01"
    name = "shm-or-p2p-failure"
    fires_on = frozenset(
        {K.shm_error, K.p2p_error, K.topology_error, K.gpu_not_visible, K.crash_signal, K.worker_exit, K.gpu_topology}
    )
    category = Category.SHM_P2P_TOPOLOGY
    base_confidence = 0.85
    explains = ("CT01", "CR01")
    FIXES: ClassVar[dict[str, Fix]] = {
        "shm": Fix(
            "Give the container a real /dev/shm: `docker run --shm-size=16g` (or `--ipc=host`); Kubernetes: "
            "mount an `emptyDir: {medium: Memory}` volume at /dev/shm. Check with `df -h /dev/shm`.",
            when="shared memory",
        ),
        "cumem": Fix(
            "NCCL 2.19+ shares GPU buffers between processes through CUDA's cuMem handles (`NCCL_CUMEM_ENABLE`, on by "
            "default): where the driver or the container does not support them (`operation not supported`), set "
            "`NCCL_CUMEM_ENABLE=0`, or run the container with `--ipc=host` / `--cap-add SYS_PTRACE` and a driver "
            "that supports them.",
            when="a CUDA call of peer-to-peer set-up was not supported",
        ),
        "p2p": Fix(
            "Enable peer access on the host: disable PCIe ACS in the BIOS / set `iommu=pt`; check "
            "`nvidia-smi topo -m` and `nvidia-smi topo -p2p r`.",
            when="peer-to-peer",
        ),
    }

    def evidence(self, t: Tables) -> pl.DataFrame:
        # NCCL's declared messages carry how much they prove alone (parsers/nccl/); the older patterns do not
        direct = t.kinds(K.shm_error, K.p2p_error, K.topology_error).with_columns(
            pl.col("strength").fill_null(self.base_confidence)
        )
        hidden = t.kinds(K.gpu_not_visible).with_columns(pl.col("strength").fill_null(0.8))
        found = pl.concat([direct, hidden, sigbus_in_nccl(t)])
        if found.is_empty():
            found = pcie_host_bridge_paths(t)
        return ordered(
            found, "strength", "ts", "source", "line", descending=[True, False, False, False], nulls_last=True
        )

    def assess(self, t: Tables, ev: pl.DataFrame) -> Finding | None:
        culprits = tuple(sorted(set(ev["rank"].drop_nulls().to_list())))
        hosts = sorted(set(ev["host"].drop_nulls().to_list()))
        kinds = set(ev["kind"].to_list())
        shm = bool(kinds & {K.shm_error, K.crash_signal, K.worker_exit})
        what = (
            "shared memory (/dev/shm) could not be used"
            if K.shm_error in kinds
            else "processes died of SIGBUS (bus error) while NCCL set up its shared-memory transport - /dev/shm ran out"
            if shm
            else "a GPU of this node is not visible to NCCL (NVML cannot find it by PCI bus id): GPUs split "
            "between containers that share a host identity, or hidden by CUDA_VISIBLE_DEVICES"
            if K.gpu_not_visible in kinds
            else "GPU peer-to-peer access failed"
            if K.p2p_error in kinds
            else "NCCL's topology detection found no usable path or transport between GPUs"
            if K.topology_error in kinds
            else "the job hung and its GPUs reach each other only through a PCIe host bridge (no NVLink), where "
            "PCIe ACS / IOMMU redirection makes NCCL's P2P transport hang"
        )
        size = t.kinds(K.shm_size)  # `df -h /dev/shm` output found next to the logs
        if shm and not size.is_empty():
            what += f" (/dev/shm is {size['detail'][0]}, {size['value'][0]} used)"
        where = (ranks_text(culprits) if culprits else "") + (f" on {', '.join(hosts)}" if hosts else "")
        return self.finding(
            confidence=float(ev["strength"].max()),  # type: ignore[arg-type]
            culprit_ranks=culprits,
            summary=f"Intra-node transport setup failed{' (' + where.strip() + ')' if where.strip() else ''}: {what}.",
            explanation="NCCL connects GPUs of one node through shared memory or CUDA peer-to-peer; when that "
            "fails the communicator cannot be built and every rank fails or waits.",
            evidence=quotes(ev) + (quotes(size, 1) if shm else ()),
            fixes=self.fixes(*(["shm"] if shm else [*(["cumem"] if _not_supported(ev) else []), "p2p"])),
            dont=(
                "`NCCL_SHM_DISABLE=1` / `NCCL_P2P_DISABLE=1` route intra-node traffic through slower paths; use "
                "them only as a stop-gap while the host is fixed.",
            ),
            verify=("`nccl-tests` `all_reduce_perf -g <gpus per node>` on one node passes at NVLink/PCIe bandwidth.",),
            facts={"hosts": hosts},
        )


def _not_supported(ev: pl.DataFrame) -> bool:
    """A peer-to-peer set-up whose CUDA call was not supported (`Cuda failure 801 'operation not supported'`)."""
    p2p = ev.filter(pl.col("kind") == K.p2p_error)
    return bool((p2p["error_type"] == "operation not supported").any())
