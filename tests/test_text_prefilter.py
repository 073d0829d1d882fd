"""The line prefilter: one regex alternation of the catalog anchors keeps exactly the lines `contains_any` keeps."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from ncclpm.api import catalog
from ncclpm.ingest.text import lines
from ncclpm.ingest.text.lines import anchor_regex
from ncclpm.sources.discover import _mostly_control

ROOT = Path(__file__).resolve().parents[1]


def test_anchor_regex_keeps_the_same_lines_as_contains_any() -> None:
    anchors = list(catalog().anchors)
    lines = [*anchors, *(f"x {a} y" for a in anchors), "a.b", "(x)", "[rank0]:", "\\", "a|b", "$HOME ^"]
    lines += ["axb", "x", "ab"]  # what the metacharacters would match if they were not escaped
    for p in sorted((ROOT / "tests" / "cases").rglob("*.log"))[:200]:
        lines += p.read_text(encoding="utf-8", errors="replace").splitlines()
    s = pl.Series(lines)
    assert s.str.contains(anchor_regex(tuple(anchors))).equals(s.str.contains_any(anchors))
    meta = ("a.b", "(x)", "a|b")  # metacharacters are literal (case logs may hold them too: `all_reduce(x)`)
    assert s.str.contains(anchor_regex(meta)).equals(s.str.contains_any(list(meta)))
    assert s.str.contains(anchor_regex(meta)).sum() >= 3


def test_control_byte_count_is_the_plain_definition() -> None:
    samples = [
        bytes(range(256)) * 32,
        b"log line\n" * 900,
        b"\x00" * 8192,
        b"\x01" * 9 + b"a" * 80,
        b"",
        b"\x1b[0m" * 50,
    ]
    for s in samples:
        slow = sum(1 for b in s if b < 9 or 13 < b < 32) > max(8, len(s) // 10)
        assert _mostly_control(s) == slow


def test_big_and_gzipped_files_read_in_blocks_give_the_same_lines(tmp_path: Path, monkeypatch) -> None:
    import gzip

    from ncclpm.ingest.text import lines as lines_mod
    from ncclpm.sources.discover import collect

    logs = sorted((ROOT / "tests" / "cases").rglob("*.log"))[:40]
    text = b"".join(p.read_bytes() for p in logs)
    (tmp_path / "big.log").write_bytes(text + b"tail without newline NCCL WARN x")
    (tmp_path / "z.log.gz").write_bytes(gzip.compress(text))
    (tmp_path / "bad.log").write_bytes(text[:5000] + b"\xff\xfe NCCL WARN broken utf8\n" + text[5000:9000])
    anchors = list(catalog().anchors)
    job = collect([tmp_path])
    whole_w: list[str] = []
    monkeypatch.setattr(lines_mod, "CHUNK_BYTES", 1 << 40)  # nothing is big: the whole-file readers
    monkeypatch.setattr(lines_mod, "_is_big", lambda s: False)
    whole = lines_mod.read_kept_lines(job.of_kind("text"), anchors, whole_w)
    monkeypatch.undo()
    monkeypatch.setattr(lines_mod, "CHUNK_BYTES", 4096)  # every file in many blocks
    monkeypatch.setattr(lines_mod, "_is_big", lambda s: True)
    block_w: list[str] = []
    blocks = lines_mod.read_kept_lines(job.of_kind("text"), anchors, block_w)
    assert whole.height > 100 and blocks.equals(whole)
    assert sorted(block_w) == sorted(whole_w) and any("bad.log" in w for w in block_w)


def test_blocks_scanned_in_the_pool_keep_their_order_warnings_and_failures(tmp_path: Path, monkeypatch) -> None:
    """A big file's blocks are scanned in the worker pool, several at once: its lines keep their numbers and order,
    invalid UTF-8 in several blocks gives one warning, and a gzip cut short is skipped with one warning (after
    blocks already scanned), while the files around it are read."""
    import gzip

    from ncclpm.ingest.text import lines as lines_mod
    from ncclpm.sources.discover import collect

    lines = [f"[rank{i % 8}]: NCCL WARN step {i} timeout\n".encode() for i in range(3000)]
    noise = [b"noise line that holds no anchor at all\n"] * 7
    text = b"".join(a + b"".join(noise) for a in lines)
    (tmp_path / "a.log").write_bytes(text)
    (tmp_path / "b.log").write_bytes(text.replace(b"step 5", b"step \xff5").replace(b"step 2900", b"st\xfe 2900"))
    (tmp_path / "c.log.gz").write_bytes(gzip.compress(text))
    (tmp_path / "d.log").write_bytes(text[:5000])
    blocks = lines_mod._blocks

    def cut_short(src, *args):  # a gzip stream that ends early: after some blocks
        for i, block in enumerate(blocks(src, *args)):
            if src.name == "c.log.gz" and i == 5:
                raise EOFError("Compressed file ended before the end-of-stream marker was reached")
            yield block

    monkeypatch.setattr(lines_mod, "_blocks", cut_short)
    monkeypatch.setattr(lines_mod, "CHUNK_BYTES", 4096)
    monkeypatch.setattr(lines_mod, "_is_big", lambda s: s.name != "d.log")
    warnings: list[str] = []
    kept = lines_mod.read_kept_lines(collect([tmp_path]).of_kind("text"), list(catalog().anchors), warnings)
    a = kept.filter(pl.col("source") == "a.log")
    assert a["line"].to_list() == [1 + 8 * i for i in range(3000)]
    assert a["raw"].to_list() == [x.decode().rstrip("\n") for x in lines]
    assert kept.filter(pl.col("source") == "b.log").height == 3000
    assert set(kept["source"]) == {"a.log", "b.log", "d.log"}
    assert [w.split(":")[0] for w in warnings] == ["b.log", "c.log.gz"]
    assert "not valid UTF-8" in warnings[0] and "could not be read as text" in warnings[1]


@pytest.mark.parametrize(
    ("raws", "split"),
    [
        (["NCCL WARN Call to connect returned Connection refused", "next line"], False),
        (["NCCL INFO NET/Socket : Using [0]eth0:10.0.3.14<0>", "NCCL WARN 10.0.3.14<41524> failed"], False),
        (["step 1\rNCCL WARN Cuda failure", "next"], True),
        (["100%|##########| 5/5 [00:01<00:00,  3.20it/s]NCCL WARN Cuda failure", "next"], True),
        (["Sampling: 100%|####| 5/5 [00:01<00:0", "0,  3.20it/s]NCCL WARN Cuda failure"], True),  # a bar cut by a wrap
        (["ok", None], False),
        ([], False),
    ],
)
def test_may_split_reads_rows_alike_in_python_and_in_polars(
    raws: list[str | None], split: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`_keep` re-checks the anchors only where a line may be split (a carriage return, a tqdm bar's end, also
    across the row after it): a few rows are looked at in Python, more in polars, with the same answer."""
    rows = pl.DataFrame({"raw": raws}, schema={"raw": pl.String()})
    assert lines._may_split(rows) is split
    monkeypatch.setattr(lines, "SPLIT_CHECK_ROWS", -1)
    assert lines._may_split(rows) is split
