"""Container runtimes' log files (sources/container_logs.py): Docker's json-file and the CRI format of containerd
and CRI-O store a container's writes, not its lines - a line written in pieces is several records. Read as the
lines the container wrote, a log in either gives the events the bare log gives, with each write's time."""

from __future__ import annotations

import json
from pathlib import Path

from ncclpm.api import build
from ncclpm.sources.container_logs import container_format, decode_container_log, needs_decoding

WATCHDOG = (
    "[rank1]:[E501 12:00:03.000000000 ProcessGroupNCCL.cpp:632] [Rank 1] Watchdog caught collective operation "
    "timeout: WorkNCCL(SeqNum=7, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600042 "
    "milliseconds before timing out."
)


def _docker(*writes: tuple[str, str]) -> bytes:
    return "".join(
        json.dumps({"log": text, "stream": stream, "time": f"2024-05-01T12:00:0{i}.123456789Z"}) + "\n"
        for i, (stream, text) in enumerate(writes)
    ).encode()


def test_formats_are_told_by_their_first_bytes() -> None:
    assert container_format(_docker(("stderr", "x\n"))) == "docker"
    assert container_format(b"2024-05-01T12:00:00.123456789Z stderr F hello\n") == "cri"
    assert container_format(b"2024-05-01T12:00:00.123456789+02:00 stdout P hel") == "cri"
    assert container_format(b'{"message": "x"}\n') is None  # a JSON log of another shape
    assert container_format(b"2024-05-01 12:00:00,123 INFO x\n") is None
    assert not needs_decoding("cri", b"2024-05-01T12:00:00Z stderr F a\n2024-05-01T12:00:01Z stderr F b\n")


def test_docker_pieces_are_joined_per_stream_and_unescaped() -> None:
    data = _docker(
        ("stderr", WATCHDOG[:70]),
        ("stdout", "step 7 loss 0.5\n"),  # another stream between the pieces
        ("stderr", WATCHDOG[70:] + "\n"),
        ("stderr", "peer 10.0.0.2<47341> closed\n"),
    )
    assert b"\\u003c" in data or b"<" in data
    lines = decode_container_log("docker", data).decode().splitlines()
    assert lines == [
        "2024-05-01T12:00:01.123456789Z step 7 loss 0.5",
        f"2024-05-01T12:00:00.123456789Z {WATCHDOG}",
        "2024-05-01T12:00:03.123456789Z peer 10.0.0.2<47341> closed",
    ]


def test_cri_partial_records_are_joined_and_other_lines_kept() -> None:
    data = (
        f"2024-05-01T12:00:00.1Z stderr P {WATCHDOG[:50]}\n"
        "2024-05-01T12:00:00.2Z stdout F step 7\n"
        f"2024-05-01T12:00:00.3Z stderr P {WATCHDOG[50:90]}\n"
        f"2024-05-01T12:00:00.4Z stderr F {WATCHDOG[90:]}\n"
        "not a record\n"
    ).encode()
    assert needs_decoding("cri", data)
    lines = decode_container_log("cri", data).decode().splitlines()
    assert lines == [
        "2024-05-01T12:00:00.2Z stdout F step 7",
        f"2024-05-01T12:00:00.1Z stderr F {WATCHDOG}",
        "not a record",
    ]


def test_a_container_log_gives_the_bare_logs_events(tmp_path: Path) -> None:
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "train.log").write_text(WATCHDOG + "\n")
    docker = tmp_path / "docker"
    docker.mkdir()
    (docker / "0123abcd-json.log").write_bytes(_docker(("stderr", WATCHDOG[:100]), ("stderr", WATCHDOG[100:] + "\n")))
    cri = tmp_path / "cri"
    cri.mkdir()
    (cri / "0.log").write_text(
        f"2024-05-01T12:00:00.1Z stderr P {WATCHDOG[:100]}\n2024-05-01T12:00:00.1Z stderr F {WATCHDOG[100:]}\n"
    )
    want = build([bare]).events.select("event", "rank", "timeout_ms", "ran_ms").rows()
    assert want and want[0][0] == "pg.watchdog_timeout"
    for job in (docker, cri):
        tables = build([job])
        assert tables.events.select("event", "rank", "timeout_ms", "ran_ms").rows() == want, job.name
        assert tables.events["ts"].to_list()[0].year == 2024  # each write's time is the line's
        assert any("container log" in w for w in tables.warnings)


def test_a_rotated_gzipped_docker_log_is_read(tmp_path: Path) -> None:
    import gzip

    (tmp_path / "0123abcd-json.log.1.gz").write_bytes(
        gzip.compress(_docker(("stderr", WATCHDOG[:100]), ("stderr", WATCHDOG[100:] + "\n")))
    )
    events = build([tmp_path]).events
    assert events.select("event", "rank").rows() == [("pg.watchdog_timeout", 1)]


def test_whole_lines_read_in_polars_as_the_record_by_record_reading() -> None:
    """Most files hold whole lines only (read in polars); with a line that is no JSON, or a record with more keys
    (`attrs` of a logging option), the result is the one the record-by-record reading gives."""
    from ncclpm.sources.container_logs import _docker_pieces_joined

    data = _docker(("stderr", WATCHDOG + "\n"), ("stdout", 'a "quoted" <tag> \\ é\r\n'))
    data += b"not a record\n" + json.dumps({"log": "x\n", "stream": "stderr", "attrs": {"tag": "t"}}).encode() + b"\n"
    for text in (data, data.replace(b"not a record\n", b"")):
        got = decode_container_log("docker", text).decode().splitlines()
        assert got == _docker_pieces_joined(text.decode())
        assert got[1] == '2024-05-01T12:00:01.123456789Z a "quoted" <tag> \\ é'
