"""What the serving and RL frameworks' failures are said as: a KV-cache connector's transfer is not NCCL's network, a
Ray driver's cluster is not torch's store, a weight-sync group's confidence follows the error its line quotes, and
a Ray worker's death that its file's order puts before a rank's wait is who that rank waited for - unless the dead
process is the waiting rank's own."""

from __future__ import annotations

from pathlib import Path

import pytest

from ncclpm.api import diagnose

ENGINE = "(SGLangEngine pid=5521, ip=10.0.0.3) [2025-06-01 10:10:00 TP0] "


def _diagnose(tmp_path: Path, lines: list[str]):
    log = tmp_path / "job.log"
    log.write_text("\n".join(lines) + "\n")
    return diagnose([log])


def test_sglang_disaggregation_transfer_is_a_kv_cache_transfer(tmp_path: Path) -> None:
    d = _diagnose(
        tmp_path,
        [
            "[2025-06-01 10:00:00 TP3] Decode transfer failed for request rank=3 decode_req.req.rid='a1b2c3' "
            "decode_req.req.bootstrap_room=81723 with exception KVTransferError(bootstrap_room=81723): Request 81723 "
            "timed out after 30.0s in KVPoll.WaitingForInput"
        ],
    )
    assert d.primary.rule == "NW01"
    assert "KV-cache transfer" in d.summary and "SGLang's PD disaggregation" in d.summary, d.summary
    assert "NCCL" not in d.summary
    assert not any("nccl-tests" in f or "NCCL_SOCKET_IFNAME" in f for f in d.primary.fixes), d.primary.fixes


def test_an_nccl_transport_error_keeps_nccl_s_words(tmp_path: Path) -> None:
    d = _diagnose(
        tmp_path,
        [
            "node12:4411:4502 [5] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got completion from peer "
            "10.0.3.14<41524> with error 12, opcode 0, len 0, vendor err 129 (Recv)"
        ],
    )
    assert d.primary.rule == "NW01" and "KV-cache" not in d.summary
    assert not any("KV-cache" in f for f in d.primary.fixes)


def test_a_torch_store_connect_failure_still_names_master_addr(tmp_path: Path) -> None:
    d = _diagnose(
        tmp_path,
        [
            "[rank1]: torch.distributed.DistNetworkError: The client socket has timed out after 600000ms while "
            "trying to connect to (10.0.0.2, 29500)."
        ],
    )
    assert d.primary.rule == "RZ01" and "Ray" not in d.summary, d.summary


@pytest.mark.parametrize(
    ("error", "confidence"),
    [
        # a wait for the members that timed out: one never arrived (torch's own store timeout is read beside it)
        ("Timed out after 601 seconds waiting for clients. 1/9 clients joined.", 0.85),
        # the group's master not reached: the rendezvous, less sure which side is wrong
        ("[Errno 111] Connection refused", 0.75),
        ("Connection to the weight-sync master 10.0.0.2:40123 was not established", 0.75),
        # another error: the group failed to form, the quoted error may be the cause
        ("CUDA error: an illegal instruction was encountered", 0.6),
    ],
)
def test_weight_sync_group_confidence_follows_the_quoted_error(tmp_path: Path, error: str, confidence: float) -> None:
    d = _diagnose(tmp_path, [f"{ENGINE}Failed to initialize custom process group: {error}."])
    rz = next(f for f in d.findings if f.rule == "RZ01")
    assert rz.confidence == pytest.approx(confidence), rz.summary


def test_a_weight_sync_group_timeout_names_no_rank_from_the_engine_s_own(tmp_path: Path) -> None:
    # the engine's TP0 is the group's rank 1 (its rank offset): the ranks that stayed away cannot be listed
    d = _diagnose(
        tmp_path,
        [
            f"{ENGINE}Failed to initialize custom process group: Timed out after 601 seconds waiting for clients. "
            "1/9 clients joined.."
        ],
    )
    assert d.primary.rule == "RZ01" and d.culprit_ranks == (), d.summary
    assert "1 of 9" in d.summary and "MASTER_ADDR" not in d.primary.fixes[0], d.primary.fixes


def test_a_bare_weight_sync_failure_is_a_lead(tmp_path: Path) -> None:
    d = _diagnose(tmp_path, ["[2025-06-01 10:10:00] NCCL4Py unique-id generation failed"])
    assert d.primary.rule == "RZ01" and d.confidence == pytest.approx(0.6)


RAYLET = (
    "(raylet{at}) A worker died or was killed while executing a task by an unexpected system error. RayTask ID: ff01 "
    "Worker ID: 8a9b Node ID: 4f5e Worker IP address: {ip} Worker port: 10012 Worker PID: {pid} Worker exit type: "
    "SYSTEM_ERROR Worker exit detail: Worker unexpectedly exits with a connection error code 2. End of file."
)
WAIT = (
    "(RayWorkerWrapper pid=5521, ip=10.0.0.3) [rank0]:[E1128 10:12:41.482913207 ProcessGroupNCCL.cpp:616] [Rank 0] "
    "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=4812, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
    "Timeout(ms)=600000) ran for 600043 milliseconds before timing out."
)


def test_another_worker_s_undated_death_above_the_wait_is_who_it_waited_for(tmp_path: Path) -> None:
    d = _diagnose(tmp_path, [RAYLET.format(at=", ip=10.0.0.4", ip="10.0.0.4", pid=7140), WAIT])
    assert d.primary.rule == "CR02" and "10.0.0.4" in d.summary and "rank 0 then timed out" in d.summary


def test_the_waiting_rank_s_own_death_above_its_wait_is_not_named(tmp_path: Path) -> None:
    # Ray's driver may print the raylet's report of a worker's death before that worker's last lines: the dead
    # process is the waiting rank's own (same pid, same node) - its teardown, whatever the order
    d = _diagnose(tmp_path, [RAYLET.format(at="", ip="10.0.0.3", pid=5521), WAIT])
    assert d.primary.rule != "CR02", d.summary


def test_a_death_in_another_file_is_not_placed_by_order(tmp_path: Path) -> None:
    (tmp_path / "a.log").write_text(RAYLET.format(at=", ip=10.0.0.4", ip="10.0.0.4", pid=7140) + "\n")
    (tmp_path / "b.log").write_text(WAIT + "\n")
    d = diagnose([tmp_path / "a.log", tmp_path / "b.log"])
    assert d.primary.rule != "CR02", d.summary
