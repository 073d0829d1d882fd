"""NV01 nvml-driver-failure."""

from __future__ import annotations

from typing import ClassVar

import polars as pl

from ncclpm.model import said
from ncclpm.rules.base import Finding, Fix, Rule, quotes, ranks_text
from ncclpm.tables import Tables
from ncclpm.tables.kinds import K
from ncclpm.tables.schema import Category
from ncclpm.util.frames import ordered
from ncclpm.util.resources import data_dir, read_toml

XID: dict[str, dict] = read_toml(data_dir("parsers") / "xid_codes.toml")["xid"]
# The kinds this rule reads; how much each line proves on its own is their `strength` reading (kinds.toml).
GPU_KINDS = [K.nvml_error, K.xid, K.gpu_lost, K.gpu_hw_error, K.gpu_fabric_error, K.worker_dstate]


def nccl_bus_id(pci: str) -> str | None:
    """Kernel PCI address (`0000:3b:00` or `0000:3b:00.0`) -> NCCL's `busId` hex (`3b000`): bus<<12|dev<<4|fn."""
    parts = pci.lower().split(":")
    if len(parts) < 3:
        return None
    dev, _, fn = parts[2].partition(".")
    try:
        value = int(parts[1], 16) << 12 | int(dev, 16) << 4 | int(fn or "0", 16)
    except ValueError:
        return None
    return format(value, "x")


class NvmlDriverFailure(Rule):
    """The GPU driver or NVML failed on a node (NVML errors, driver/library mismatch, GPU lost, Xid).

    ## What it detects
    `nvmlDeviceGetHandleByIndex(0) failed: Unknown Error`, `Failed to initialize NVML: Driver/library version
    mismatch`, `NVML_SUCCESS == r INTERNAL ASSERT FAILED`, `CUDA driver initialization failed`, nvidia-smi's
    `Unable to determine the device handle`, kernel `NVRM: Xid` lines, GPU hardware faults (`uncorrectable ECC
    error encountered`), and NVSwitch fabric failures: CUDA error 802 `system not yet initialized`, a failed
    `nvidia-fabricmanager` service, NCCL's `transport/nvls.cc ... Cuda failure 'invalid argument'` (NVLS buffer
    setup through the fabric; likely rather than conclusive: a driver too old for the wheel's NCCL does it too), and
    torchrun's agent finding a worker stuck in uninterruptible sleep (D state; possible: a hung network filesystem
    does it too, the host's kernel log decides).

    ## Why it matters
    NCCL queries NVML for topology; when the driver is broken (updated under a running container, GPU fallen
    off the bus, device not visible in the container) communicator init or a collective fails on that node,
    and the other ranks time out. No NCCL setting fixes a broken driver.

    ## Example
    `[rank1]: torch.distributed.DistBackendError: NCCL error ...` followed by
    `nvmlDeviceGetHandleByIndex(0) failed: Unknown Error`.
    """

    id = "NV01"
    name = "nvml-driver-failure"
    category = Category.NVML_DRIVER_FAILURE
    base_confidence = 0.9
    explains = ("CT01", "CR01")
    FIXES: ClassVar[dict[str, Fix]] = {
        "fabric": Fix(
            "NVSwitch systems: `systemctl status nvidia-fabricmanager` must show it active, at exactly the driver's "
            "version (`nvidia-smi` vs `nv-fabricmanager --version`); after a fabric-manager restart reset the GPUs "
            "(`nvidia-smi -r`) or reboot the node. `NCCL_NVLS_ENABLE=0` avoids NVLS until then.",
            when="the NVSwitch fabric failed",
        ),
        "ecc": Fix(
            "An uncorrectable ECC error is a GPU memory fault: drain the node, reset the GPU (`nvidia-smi -r`), check "
            "`nvidia-smi -q -d ECC` and retired pages, and have the GPU replaced if it recurs.",
            when="a GPU hardware fault",
        ),
        "check_driver": Fix(
            "Run `nvidia-smi` on that node; if it errors, drain the node and reboot or reload the "
            "driver (driver and user-space library versions must match)."
        ),
        "check_container": Fix(
            "Check the container sees the GPUs (`--gpus all`, `NVIDIA_VISIBLE_DEVICES`, device cgroup)."
        ),
        "check_xid": Fix("Check `dmesg | grep -i xid` for GPU faults on that node."),
        "check_busy": Fix(
            "Check what holds the GPU: `nvidia-smi` lists its processes (a leftover run, another job); a compute "
            "mode of `Exclusive_Process` (`nvidia-smi -q | grep -i 'compute mode'`) lets one process per GPU - two "
            "ranks on one GPU, or a second job, are refused (`nvidia-smi -c DEFAULT` where that is allowed).",
            when="CUDA said the device is busy or unavailable",
        ),
    }

    def evidence(self, t: Tables) -> pl.DataFrame:
        ev = t.kinds(*GPU_KINDS)
        return ordered(ev, "strength", "ts", "source", "line", descending=[True, False, False, False], nulls_last=True)

    def assess(self, t: Tables, ev: pl.DataFrame) -> Finding | None:
        culprits = tuple(sorted(set(ev["rank"].drop_nulls().to_list()) | self._ranks_on_gpus(t, ev)))
        hosts = sorted(set(ev["host"].drop_nulls().to_list()))
        xids = [
            f"Xid {x}: {XID[str(x)]['meaning']}" for x in sorted(set(ev["xid"].drop_nulls().to_list())) if str(x) in XID
        ]
        where = ranks_text(culprits) if culprits else (f"host {', '.join(hosts)}" if hosts else "a node")
        kinds = set(ev["kind"].to_list())
        extra = [*(["fabric"] if K.gpu_fabric_error in kinds else []), *(["ecc"] if K.gpu_hw_error in kinds else [])]
        blocked = kinds == {K.worker_dstate}  # only torchrun's word that a worker hangs in the kernel
        busy = ev["detail"].fill_null("").str.contains("busy or unavailable")  # CUDA 46: taken, or in a bad state
        return self.finding(
            confidence=float(ev["strength"].max()),  # type: ignore[arg-type]
            culprit_ranks=culprits,
            summary=(
                f"A worker hung in the kernel (D state) on {where}: the GPU driver or a network filesystem"
                if blocked
                else f"CUDA refused {where} its GPU, busy or unavailable: another process holds it (or an exclusive "
                "compute mode allows no second one), or the GPU is in a bad state"
                if busy.all()
                else f"The GPU driver / NVML failed on {where}"
            )
            + f": `{said(ev['text'][0], t.line_prefix, 160)}`",
            explanation="NCCL and PyTorch query NVML for the device; a broken driver makes communicator "
            "init or a collective fail on that node and the other ranks then time out."
            + ("".join(f" {x}." for x in xids)),
            evidence=quotes(ev),
            fixes=self.fixes(
                *extra, *(["check_busy"] if busy.any() else []), "check_driver", "check_container", "check_xid"
            ),
            dont=(
                "NCCL_P2P_DISABLE=1 / NCCL_IB_DISABLE=1 do not repair a driver; they only slow every job.",
                "NCCL_TIMEOUT is read by nothing (neither NCCL nor PyTorch).",
            ),
            verify=(
                "`nvidia-smi` and `python -c 'import torch; print(torch.cuda.device_count())'` succeed "
                "on every node before the job is resubmitted.",
            ),
            facts={"hosts": hosts, "xid": sorted(set(ev["xid"].drop_nulls().to_list()))},
        )

    @staticmethod
    def _ranks_on_gpus(t: Tables, ev: pl.DataFrame) -> set[int]:
        """Ranks a kernel Xid line points at: by the process it names (pid), else by the GPU's PCI address
        (NCCL busId) on the host the kernel log comes from (syslog host field or a folder named like the host)."""
        xid = ev.filter(pl.col("pci").is_not_null())
        if xid.is_empty():
            return set()
        by_pid = t.ranks.filter(pl.col("pid").is_in(xid["pid"].drop_nulls().to_list()))["rank"].to_list()
        if by_pid:
            return set(by_pid)
        comms = t.extra.get("nccl_comms")
        if comms is None or comms.is_empty():
            return set()
        known_hosts = set(comms["host"].drop_nulls().to_list())
        found: set[int] = set()
        for r in xid.iter_rows(named=True):
            bus = nccl_bus_id(r["pci"])
            hosts = {h for h in known_hosts if h == r["node"] or h in r["source"].split("/")}
            hit = comms.filter(pl.col("bus_id").str.to_lowercase().str.strip_chars_start("0") == bus)
            if hosts:
                hit = hit.filter(pl.col("host").is_in(list(hosts)))
            elif hit["host"].n_unique() > 1:
                continue  # the same bus id on several hosts and no way to tell which: name nobody
            found |= set(hit["rank"].drop_nulls().to_list())
        return found
