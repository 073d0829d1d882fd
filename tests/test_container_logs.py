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


# Streamed: a file on disk is decoded a chunk of records at a time (`ContainerLogReader`), never whole.


def _messy_docker(n: int, seed: int = 0) -> bytes:
    """Docker records as the driver writes them (no spaces, UTF-8 unescaped, `<` escaped): lines in pieces on two
    streams, multi-byte characters and JSON escapes everywhere, a line that is no record, an empty write."""
    import random

    rng = random.Random(seed)
    words = ["é", "日本", "🙂", "\\", '"q"', "<tag>", "\t", "a&b", "\u2028", WATCHDOG[:40], "x" * 30]
    out = []
    for i in range(n):
        stream = rng.choice(("stdout", "stderr"))
        line = f"[rank{i % 4}]: " + " ".join(rng.choice(words) for _ in range(rng.randint(0, 8)))
        cuts = sorted(rng.sample(range(1, len(line)), k=min(len(line) - 1, rng.choice((0, 0, 0, 1, 2)))))
        pieces = [line[a:b] for a, b in zip([0, *cuts], [*cuts, len(line)], strict=True)]
        pieces[-1] += "\r\n" if i % 17 == 0 else "\n"
        if i % 23 == 5:
            pieces = ["", *pieces]  # a write of nothing
        for p in pieces:
            record = {"log": p, "stream": stream, "time": f"2024-05-01T12:00:{i % 60:02d}.{i:09d}Z"}
            text = json.dumps(record, ensure_ascii=rng.random() < 0.3, separators=(",", ":"))
            out.append(text.replace("<", "\\u003c").replace(">", "\\u003e") + "\n")
        if i % 101 == 50:
            out.append("not a record: the driver's file cut and appended to\n")
    return "".join(out).encode()


def _messy_cri(n: int, seed: int = 0) -> bytes:
    import random

    rng = random.Random(seed)
    out = []
    for i in range(n):
        stream = rng.choice(("stdout", "stderr"))
        line = f"[rank{i % 4}]: " + " ".join(rng.choice(["é", "日本", "🙂", WATCHDOG[:50], "z"]) for _ in range(5))
        cut = rng.randint(1, len(line) - 1) if i % 3 == 0 else None
        t = f"2024-05-01T12:00:{i % 60:02d}.{i:09d}+00:00"
        if cut is not None:
            out.append(f"{t} {stream} P {line[:cut]}\n{t} {stream} F {line[cut:]}\n")
        else:
            out.append(f"{t} {stream} F {line}\n")
        if i % 97 == 10:
            out.append("\n")
    return "".join(out).encode()


def _streamed(fmt: str, data: bytes, chunk: int, read: int) -> bytes:
    import io

    from ncclpm.sources.container_logs import ContainerLogReader

    reader = ContainerLogReader(io.BytesIO(data), fmt, chunk=chunk)
    parts, buf = [], bytearray(read)
    while n := reader.readinto(memoryview(buf)):
        parts.append(bytes(buf[:n]))
    return b"".join(parts)


def test_streamed_decoding_is_the_whole_file_s_whatever_the_chunks() -> None:
    """Chunks of a few bytes to a few kB: pieces of a line, multi-byte characters and escapes fall across them (a
    chunk is cut at a newline, the pieces of a line carried to the next); the decoded bytes are the whole file's,
    read in blocks of any size."""
    import gzip
    import io

    from ncclpm.sources.container_logs import ContainerLogReader

    cases = [("docker", _messy_docker(600)), ("cri", _messy_cri(600))]
    cases += [("docker", _docker(("stderr", WATCHDOG[:70]), ("stdout", "step 7\n"), ("stderr", WATCHDOG[70:])))]
    cases += [("docker", b"")]  # (no line: one newline, as before)
    for fmt, data in cases:
        whole = decode_container_log(fmt, data)
        assert whole.count(b"\n") >= data.count(b"\n") // 3, fmt
        for chunk in (1, 7, 64, 1000, 4096, 10**6):
            for read in (1, 13, 8192):
                assert _streamed(fmt, data, chunk, read) == whole, (fmt, chunk, read)
        gz = gzip.GzipFile(fileobj=io.BytesIO(gzip.compress(data)), mode="rb")
        assert ContainerLogReader(gz, fmt, chunk=333).read() == whole  # (a rotated .gz: decompressed as read)
    messy = decode_container_log("docker", _messy_docker(600)).decode()
    assert "🙂" in messy and "<tag>" in messy and "\\u" not in messy and "\ufffd" not in messy


def test_a_chunk_of_records_is_decoded_in_polars_or_record_by_record_alike() -> None:
    """Chunks of whole lines go through polars, chunks with a piece record by record: both read every record alike
    (an empty line, a write of nothing, a line that is no record), so how a file is cut never changes its lines."""
    from ncclpm.sources.container_logs import _docker_lines, _docker_pieces_joined

    text = _docker(("stderr", WATCHDOG + "\n"), ("stdout", "\n"), ("stdout", " x\r\n")).decode()
    text += " \nnot a record\n" + json.dumps({"log": "\n", "stream": "stdout"}) + "\n\n"
    assert _docker_lines(text, {}) == _docker_pieces_joined(text)


def test_a_big_container_log_is_never_held_whole(tmp_path: Path, monkeypatch) -> None:
    """Reading 16 MB of records holds a chunk of them and its lines, not the file (Python's allocations, traced;
    benchmarks/bench_container.py measures a 500 MB file's peak RSS)."""
    import tracemalloc

    from ncclpm.sources import container_logs
    from ncclpm.sources.discover import collect

    record = json.dumps({"log": WATCHDOG + " é\n", "stream": "stderr", "time": "2024-05-01T12:00:00.1Z"})
    path = tmp_path / "0123abcd-json.log"
    with path.open("w") as fh:
        for _ in range(16 * 1024**2 // len(record)):
            fh.write(record + "\n")
    job = collect([path])
    [src] = job.sources
    assert src.container == "docker" and src.data is None  # read from the file as it is needed
    size = 0
    monkeypatch.setattr(container_logs, "CHUNK_BYTES", 256 * 1024)
    tracemalloc.start()
    try:
        with src.open_lines() as lines:
            buf = memoryview(bytearray(64 * 1024))
            while n := lines.readinto(buf):
                size += n
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert size > 12 * 1024**2
    assert peak < 4 * 1024**2, peak


def test_a_streamed_container_log_gives_the_events_of_its_lines(tmp_path: Path, monkeypatch) -> None:
    """A container log over 2 MB of lines is read in blocks, decoded as read; its events are those of the same
    lines in a plain file (watchdog timeouts at chunk ends, in pieces, among multi-byte noise). Gzipped alike."""
    import gzip

    from ncclpm.ingest.text import lines as lines_mod
    from ncclpm.sources import container_logs

    monkeypatch.setattr(lines_mod, "CHUNK_BYTES", 512 * 1024)  # blocks of the text reader ...
    monkeypatch.setattr(container_logs, "CHUNK_BYTES", 100_000)  # ... and chunks of records: many of each
    writes = []
    for i in range(40_000):
        writes.append(("stdout", f"step {i} loss 0.5 日本 é 🙂 <{i}>\n"))
        if i % 1500 == 7:
            timeout = WATCHDOG.replace("SeqNum=7", f"SeqNum={i}")
            writes += [("stderr", timeout[:33]), ("stdout", "between\n"), ("stderr", timeout[33:] + "\n")]
    data = _docker(*writes)
    for name, content in (("a-json.log", data), ("b-json.log.1.gz", gzip.compress(data))):
        job = tmp_path / name.split("-")[0]
        job.mkdir()
        (job / name).write_bytes(content)
        plain = tmp_path / f"{job.name}_plain"
        plain.mkdir()
        (plain / "a.log").write_bytes(decode_container_log("docker", data))
        assert len(decode_container_log("docker", data)) > lines_mod.SMALL_TEXT
        got, want = (build([p]).events.drop("source", strict=False) for p in (job, plain))
        timeouts = (got["event"] == "pg.watchdog_timeout").sum()
        assert timeouts == len(range(7, 40_000, 1500)) and got.equals(want), name
