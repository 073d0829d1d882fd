"""SH01 shm-or-p2p-failure."""

from __future__ import annotations

import polars as pl

from ncclpm.ingest.tables import Tables
from ncclpm.kinds import K
from ncclpm.rules.base import Finding, Rule, quotes, ranks_text
from ncclpm.schema import Category


class ShmOrP2pFailure(Rule):
    """NCCL could not set up intra-node transport: /dev/shm too small or missing, GPU peer-to-peer refused.

    ## What it detects
    `Error while creating/attaching to shared memory segment /dev/shm/nccl-...`, `No space left on device` on
    /dev/shm, `Cuda failure 'peer access is not supported between these two devices'`, CUDA IPC handle failures.

    ## Why it matters
    Containers get a 64 MB /dev/shm by default; NCCL's SHM transport (and DataLoader workers) need far more.
    P2P failures come from PCIe ACS / IOMMU settings or virtualisation that blocks peer access. Either way the
    communicator cannot connect and the job fails at its first collective.

    ## Example
    `NCCL WARN Error while creating shared memory segment /dev/shm/nccl-ZDKj3b (size 9637888)`

    ## How to fix
    Give the container a real /dev/shm (`docker run --shm-size=16g` or `--ipc=host`; Kubernetes: an
    `emptyDir: {medium: Memory}` volume on /dev/shm). For P2P: disable PCIe ACS / set the IOMMU to passthrough
    (`iommu=pt`) on the host; `NCCL_P2P_DISABLE=1` is a slow workaround, not a fix.
    """

    id = "SH01"
    name = "shm-or-p2p-failure"
    category = Category.SHM_P2P_TOPOLOGY
    base_confidence = 0.85
    priority = 84
    explains = ("CT01", "CR01")

    def evidence(self, t: Tables) -> pl.DataFrame:
        return t.kinds(K.shm_error, K.p2p_error).sort("ts", "source", "line", nulls_last=True)

    def assess(self, t: Tables, ev: pl.DataFrame) -> Finding | None:
        culprits = tuple(sorted(set(ev["rank"].drop_nulls().to_list())))
        hosts = sorted(set(ev["host"].drop_nulls().to_list()))
        shm = (ev["kind"] == K.shm_error).any()
        what = "shared memory (/dev/shm) could not be used" if shm else "GPU peer-to-peer access failed"
        size = t.kinds(K.shm_size)  # `df -h /dev/shm` output found next to the logs
        if shm and not size.is_empty():
            what += f" (/dev/shm is {size['detail'][0]}, {size['value'][0]} used)"
        where = (ranks_text(culprits) if culprits else "") + (f" on {', '.join(hosts)}" if hosts else "")
        fixes = (
            (
                "Give the container a real /dev/shm: `docker run --shm-size=16g` (or `--ipc=host`); Kubernetes: "
                "mount an `emptyDir: {medium: Memory}` volume at /dev/shm. Check with `df -h /dev/shm`.",
            )
            if shm
            else (
                "Enable peer access on the host: disable PCIe ACS in the BIOS / set `iommu=pt`; check "
                "`nvidia-smi topo -m` and `nvidia-smi topo -p2p r`.",
            )
        )
        return self.finding(
            culprit_ranks=culprits,
            summary=f"Intra-node transport setup failed{' (' + where.strip() + ')' if where.strip() else ''}: {what}.",
            explanation="NCCL connects GPUs of one node through shared memory or CUDA peer-to-peer; when that "
            "fails the communicator cannot be built and every rank fails or waits.",
            evidence=quotes(ev) + (quotes(size, 1) if shm else ()),
            fixes=fixes,
            dont=(
                "`NCCL_SHM_DISABLE=1` / `NCCL_P2P_DISABLE=1` route intra-node traffic through slower paths; use "
                "them only as a stop-gap while the host is fixed.",
            ),
            verify=("`nccl-tests` `all_reduce_perf -g <gpus per node>` on one node passes at NVLink/PCIe bandwidth.",),
            facts={"hosts": hosts},
        )
