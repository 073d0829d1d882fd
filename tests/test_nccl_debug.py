"""NCCL_DEBUG output: line shapes of several NCCL releases (FORMATS.md §1.5, §8, §8.1), the host:pid → global rank
map, the `nccl_comms` / `nccl_warnings` tables, and the prefilter staying selective on INFO noise."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from ncclpm.api import build, catalog, diagnose
from ncclpm.ingest.selftest import parse_one
from ncclpm.render import render

CASES = Path(__file__).resolve().parent / "cases"


def _event(line: str, kind: str) -> dict:
    parsed, events = parse_one(catalog(), line)
    rows = events.filter(pl.col("kind") == kind)
    assert rows.height == 1, f"{kind} from {line!r}: {events.select('event', 'kind').rows()}"
    return {**rows.row(0, named=True), "pid": parsed["pid"][0]}


@pytest.mark.parametrize(
    ("line", "where"),
    [
        (
            "node02:6801:6839 [1] misc/socket.cc:50 NCCL WARN socketProgress: Connection closed by remote peer node03<45882>",
            "misc/socket.cc:50",
        ),  # NCCL <= 2.25: no timestamp
        (
            "[2025-08-22 17:44:36] node02:6801:6839 [1] ras/client_support.cc:159 NCCL WARN Call to bind failed: Address "
            "already in use",
            "ras/client_support.cc:159",
        ),  # 2.26 - 2.30.4
        (
            "[2026-10-07 04:16:41] h100-r4-n02:90414:90480 [4] transport/net_ib/p2p.cc:712 (ncclIbTest) NCCL WARN NET/IB: Got "
            "completion from peer 172.30.3.17<40012> with status=IBV_WC_RETRY_EXC_ERR(12) opcode=IBV_WC_SEND(0) vendor_err=129 "
            "hca mlx5_6",
            "transport/net_ib/p2p.cc:712",
        ),  # >= 2.30.7: (function)
        (
            "node00:31965:31975 [1] /usr/src/debug/rccl/build/hipify/src/proxy.cc:1573 NCCL WARN [Proxy Service 0] Failed to "
            "execute operation Setup from rank 0, retcode 3",
            "/usr/src/debug/rccl/build/hipify/src/proxy.cc:1573",
        ),  # RCCL
    ],
)
def test_warn_lines_of_every_release_give_host_pid_and_source_location(line: str, where: str) -> None:
    ev = _event(line, "nccl_warn")
    assert ev["host"] and ev["pid"] and ev["detail"] == where and ev["value"]


@pytest.mark.parametrize(
    ("line", "rank", "nranks", "dev", "bus"),
    [
        (
            "gpu7:5511:5600 [3] NCCL INFO comm 0x7f00c8002e10 rank 11 nranks 16 cudaDev 3 busId 4e000 - Init COMPLETE",
            11,
            16,
            3,
            "4e000",
        ),  # 2.7 - 2.14
        (
            "gpu01:20312:20372 [1] NCCL INFO comm 0x55d1a8c1e2b0 rank 1 nranks 4 cudaDev 1 nvmlDev 1 busId 25000 commId "
            "0x4f8a2c19d37e0b21 - Init COMPLETE",
            1,
            4,
            1,
            "25000",
        ),  # 2.18 - 2.20
        (
            "node03:23440:23664 [0] NCCL INFO ncclCommInitRank comm 0x563d5b2b3360 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId "
            "10000 commId 0xb3609cbb6ba7a88a - Init COMPLETE",
            0,
            2,
            0,
            "10000",
        ),  # 2.21+
        (
            "h1:77:90 [5] NCCL INFO ncclCommSplit comm 0x5601a2b3c4d0 rank 1 nranks 4 cudaDev 5 nvmlDev 5 busId ab000 commId "
            "0x9f8e7d6c5b4a3921 parent 0x5600f1e2d3c4 splitCount 1 color 1 key 5 - Init COMPLETE",
            1,
            4,
            5,
            "ab000",
        ),  # split
        (
            "[1,3]<stdout>:node05:21:28 [3] NCCL INFO comm 0x5564 rank 3 nranks 8 cudaDev 3 busId 3b000 - Init COMPLETE",
            3,
            8,
            3,
            "3b000",
        ),  # Open MPI --tag-output
    ],
)
def test_init_complete_lines_of_every_release(line: str, rank: int, nranks: int, dev: int, bus: str) -> None:
    ev = _event(line, "nccl_comm_init")
    assert (ev["subject_rank"], ev["nranks"], ev["cuda_dev"], ev["bus_id"]) == (rank, nranks, dev, bus)


@pytest.mark.parametrize(
    "line",
    [
        "node01:1463327:1463327 [1] NCCL INFO NCCL version 2.27.5+cuda12.9",
        "NCCL version 2.27.5+cuda12.9",  # NCCL_DEBUG=VERSION: the bare banner
    ],
)
def test_version_banner(line: str) -> None:
    assert _event(line, "nccl_version")["version"] == "2.27.5"


@pytest.fixture(scope="module")
def four_nodes():
    return build([CASES / "issue4_ib_error_one_host" / "input"])


def test_host_pid_maps_to_the_global_rank_not_the_local_device(four_nodes) -> None:
    """`[default1]:gpu-a03:43007:... [1] NCCL INFO` is local device 1 on the third node: global rank 9."""
    t = four_nodes
    mine = t.lines.filter((pl.col("host") == "gpu-a03") & (pl.col("pid") == 43007))
    assert mine.height > 0 and set(mine["rank"].to_list()) == {9}
    assert t.world_size == 16


def test_nccl_comms_table(four_nodes) -> None:
    comms = four_nodes.extra["nccl_comms"]
    assert comms.columns[:8] == ["host", "pid", "cuda_dev", "rank", "nranks", "comm_id", "bus_id", "version"]
    row = comms.filter(pl.col("rank") == 9).row(0, named=True)
    assert (row["host"], row["pid"], row["cuda_dev"], row["nranks"], row["bus_id"], row["version"]) == (
        "gpu-a03",
        43007,
        1,
        16,
        "43000",
        "2.21.5",
    )


def test_nccl_warnings_carry_the_return_code_chain_of_their_thread(four_nodes) -> None:
    w = four_nodes.extra["nccl_warnings"].filter(pl.col("host") == "gpu-a03").sort("line")
    assert w["rank"].to_list() == [11, 8]
    first = w.row(0, named=True)
    assert first["where"] == "transport/net_ib.cc:1712" and first["message"].startswith("NET/IB : Got completion")
    assert first["chain"] == ["transport/net.cc:1298 -> 6", "proxy.cc:694 -> 6", "proxy.cc:874 -> 6"]
    assert first["result"] == "ncclRemoteError"


def test_per_rank_table_of_the_report_shows_host_pid_gpu_and_nccl_version() -> None:
    md = render(diagnose([CASES / "issue4_ib_error_one_host" / "input"]), "md")
    rows = [r for r in md.splitlines() if r.startswith("| 9 |")]
    assert rows and rows[0].startswith("| 9 | gpu-a03 | 43007 | cuda:1 |")
    assert "nccl 2.21.5" in md.split("## What happened")[0], "one version for the job: said with the verdict"


def test_nccl_version_per_rank_when_init_never_completed() -> None:
    t = build([CASES / "issue4_nccl_version_differs_by_host" / "input"])
    versions = dict(t.ranks.select("rank", "nccl_version").iter_rows())
    assert {versions[r] for r in range(8)} == {"2.29.7"} and {versions[r] for r in range(8, 12)} == {"2.27.3"}


# Channel 0's transport lines (one per peer) and ring order do pass: `ncclpm diff` compares them; the other
# channels repeat them.
NOISE = [
    "gpu-a03:43007:43068 [1] NCCL INFO Channel 05/32 : 9[1] -> 10[2] via P2P/CUMEM/read",
    "gpu-a03:43007:43068 [1] NCCL INFO Channel 01/0 : 11[3] -> 12[0] [send] via NET/IB/1/GDRDMA",
    "gpu-a03:43007:43068 [1] NCCL INFO Ring 00 : 8 -> 9 -> 10",
    "gpu-a03:43007:43068 [1] NCCL INFO Trees [0] 10/-1/-1->9->8 [1] 10/-1/-1->9->8",
    "gpu-a03:43007:43068 [1] NCCL INFO threadThresholds 8/8/64 | 128/8/64 | 512 | 512",
    "gpu-a03:43007:43068 [1] NCCL INFO Connected all rings, use ring PXN 0 GDR 1",
    "gpu-a03:43007:43068 [1] NCCL INFO 24 coll channels, 24 collnet channels, 16 nvls channels, 32 p2p channels, 32 p2p "
    "channels per peer",
    "gpu-a03:43007:43068 [1] NCCL INFO P2P Chunksize set to 524288",
]


@pytest.mark.parametrize("line", NOISE)
def test_the_bulk_of_nccl_info_output_never_passes_the_prefilter(line: str) -> None:
    assert not any(a in line for a in catalog().anchors)
