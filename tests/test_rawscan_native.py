"""The C matcher and line cutter (`_textcut`, via `rawscan.scan_cut`) give exactly the rows and slow texts the
Python reference gives (the regex's hit lines, `rawscan.cut_rows`), on every text the tests have, on texts made to
hit its edges and on random ones; and the whole reader keeps the same lines with either."""

from __future__ import annotations

import functools
import random
from pathlib import Path

import polars as pl
import pytest

from ncclpm.api import catalog
from ncclpm.ingest.text import lines as lines_mod
from ncclpm.ingest.text import rawscan
from ncclpm.ingest.text.extract import row_columns
from ncclpm.sources.discover import collect

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(rawscan._textcut is None, reason="the C line cutter is not built in this install")


def _edge_texts() -> list[bytes]:
    """Hits on the first and the last line, with and without a final newline, CRLF and lone CR endings, empty
    lines around hits, consecutive hits, a huge line, invalid UTF-8 (replaced by the reader), non-ASCII text, a
    text of newlines only, an empty text, an anchor cut by a newline."""
    hit = b"[rank0]:[E1218 10:00:00.000000 1 ProcessGroupNCCL.cpp:1] [PG ID 0 PG GUID 0 Rank 0] Watchdog caught collective"
    timeout = b"NCCL WARN Timeout waiting for connection"
    return [
        hit,
        hit + b"\n",
        hit + b"\r\n" + b"plain\r\n" + hit + b"\r\n",
        b"plain\n" + hit + b"\n" + hit + b"\n" + hit,
        b"\n\n" + hit + b"\n\n\n" + timeout + b"\r\n\r\n",
        b"a\rb " + timeout + b"\rc\n" + b"\r\n" + timeout + b"\r",
        b"x" * 300_000 + b" " + timeout + b" " + b"y" * 100_000 + b"\n" + b"tail\n",
        b"\xff\xfe bad " + timeout + b" \xc3\n\xe2\x82\n" + timeout + b" \xf0\x9f\x98\x80 ok\n",
        "é ü 漢字 ".encode() * 50 + timeout + b"\n" + "ünicode tail".encode(),
        b"\n" * 70_000,
        b"",
        b"NCCL WA\nRN Timeout waiting\n" + hit + b"\n",
        b"\n".join([b"noise line %d" % i for i in range(5000)] + [timeout] * 3 + [b"end"]),
    ]


def _texts_of_the_repo() -> list[bytes]:
    paths = sorted((ROOT / "tests" / "cases").rglob("*.log")) + sorted((ROOT / "sample_logs").rglob("*"))
    return [p.read_bytes() for p in paths if p.is_file() and p.stat().st_size < 4_000_000]


def _both(texts: list[bytes], whole: bool, following: bool, first: int, monkeypatch) -> None:
    warnings: list[str] = []
    items = [lines_mod._Text(f"t{i}", d, d, whole, first) for i, d in enumerate(texts)]
    series = lines_mod._as_strings(items, warnings)  # invalid UTF-8 replaced, as the reader does
    data = [t.data for t in items]
    anchors = list(catalog().anchors)
    firsts, wholes = [first] * len(data), [whole] * len(data)
    native = rawscan.scan_cut(rawscan.matcher(tuple(anchors)), data, firsts, wholes, following=following)
    found = lines_mod._hit_lines(series, wholes, anchors)
    python = rawscan.cut_group(data, found, firsts, wholes, following=following)
    assert native[1] == python[1]
    assert native[0].schema == python[0].schema
    assert native[0].equals(python[0]), (whole, following, first)


@pytest.mark.parametrize("whole", [True, False])
@pytest.mark.parametrize("following", [True, False])
def test_c_cutter_gives_the_python_rows_on_edge_texts(whole: bool, following: bool, monkeypatch) -> None:
    texts = _edge_texts()
    _both(texts, whole, following, 1, monkeypatch)
    _both(texts[::-1], whole, following, 1_000_001, monkeypatch)  # a block of a big file starts further on
    for t in texts:
        _both([t], whole, following, 1, monkeypatch)


def test_c_cutter_gives_the_python_rows_on_every_log_of_the_repo(monkeypatch) -> None:
    texts = _texts_of_the_repo()
    assert len(texts) > 100
    for whole in (True, False):
        _both(texts, whole, True, 1, monkeypatch)
    _both(texts, True, False, 1, monkeypatch)


def _random_text(rnd: random.Random, anchors: list[str]) -> bytes:
    """Anchors whole, cut by one or two newlines (or CRLF), cut short, between runs of the bytes around them."""
    alphabet = "abcdeNCLIO :.%|\n\n\r[]0123é"
    parts = []
    for _ in range(rnd.randint(0, 40)):
        if rnd.random() < 0.3:
            a = rnd.choice(anchors)
            if rnd.random() < 0.3:
                k = rnd.randint(0, len(a))
                a = a[:k] + rnd.choice(["\n", "\n\n", "\r\n", ""]) + a[k:]
            if rnd.random() < 0.2:
                a = a[rnd.randint(0, len(a)) :] if rnd.random() < 0.5 else a[: rnd.randint(0, len(a))]
            parts.append(a)
        else:
            parts.append("".join(rnd.choice(alphabet) for _ in range(rnd.randint(0, 12))))
    return "".join(parts).encode()


def test_the_matcher_finds_the_regex_lines_in_random_texts(monkeypatch) -> None:
    """An anchor cut by newlines sends a text read whole to the slow path exactly when the regex's match holds a
    newline: not when an anchor lying wholly in the same line starts after it (the regex takes that one)."""
    rnd = random.Random(15)
    anchors = list(catalog().anchors)
    texts = [_random_text(rnd, anchors) for _ in range(600)]
    for whole in (True, False):
        for i in range(0, len(texts), 6):
            _both(texts[i : i + 6], whole, True, 1, monkeypatch)
    _both(texts, True, False, 1, monkeypatch)


def test_the_matcher_takes_any_anchor_set() -> None:
    """Short and long anchors, one or many, sharing bytes, non-ASCII: the same lines as the regex."""
    rnd = random.Random(7)
    words = ["ab", "abc", "b", "é!", "xyzzy", "a" * 20, "bcd" * 5, "%|", "Done", "NCCL WARN", "c" * 9, "zz"]
    for size in (1, 2, 5, 12):
        anchors = rnd.sample(words, size)
        texts = [
            "".join(
                rnd.choice([*anchors, "a", "b", "c", "\n", " ", "é", "z"]) for _ in range(rnd.randint(0, 300))
            ).encode()
            for _ in range(40)
        ]
        for whole in (True, False):
            _assert_same_cut(anchors, texts, whole)


def test_the_matcher_takes_many_anchors_sharing_their_last_bytes() -> None:
    """Thousands of anchors, many ending alike (a candidate is compared with the literals of its bucket hashed on
    its last bytes: collisions, buckets of one length, tails cut by a newline in a text read whole): the same lines
    as the regex."""
    rnd = random.Random(11)
    tails = ["ing", "tion", "ed", "s", "Error", "é", "_id"]
    letters = "abcdeNCLWR _:é"
    anchors = sorted(
        {"".join(rnd.choice(letters) for _ in range(rnd.randint(0, 9))) + rnd.choice(tails) for _ in range(3000)}
    )
    texts = []
    for _ in range(60):
        parts = [rnd.choice([*rnd.sample(anchors, 3), "a", "b", "ing", "\n", " ", "é", "\x00", "\r"])]
        parts += [rnd.choice([rnd.choice(anchors), "xx", "ing", "\n", " ", "s", "\r"]) for _ in range(120)]
        texts.append("".join(parts).encode())
    for whole in (True, False):
        _assert_same_cut(anchors, texts, whole)


def _assert_same_cut(anchors: list[str], texts: list[bytes], whole: bool) -> None:
    """The C matcher's cut of `texts` equals the Python reference's (polars' search for the anchors, then the cut)."""
    items = [lines_mod._Text(f"t{i}", d, d, whole) for i, d in enumerate(texts)]
    series = lines_mod._as_strings(items, [])
    firsts, wholes = [1] * len(texts), [whole] * len(texts)
    native = rawscan.scan_cut(rawscan.matcher(tuple(anchors)), texts, firsts, wholes, following=True)
    found = lines_mod._hit_lines(series, wholes, anchors)
    python = rawscan.cut_group(texts, found, firsts, wholes, following=True)
    assert native[1] == python[1] and native[0].equals(python[0]), (anchors[:5], whole)


def test_holds_any_and_only_words_are_what_contains_any_gives() -> None:
    """`rawscan.holds_any` (the C matcher on each string) and `only_words` give what polars' `contains_any` gives:
    anchors at either end, in a line after a newline or a carriage return, beside NUL bytes and U+FFFD, none."""
    cat = catalog()
    words, read = tuple(cat.stack_anchors), tuple(cat.read_anchors)
    rnd = random.Random(9)
    pieces = [*rnd.sample(list(read), 40), *words, "x", " ", "\n", "\r", "\x00", "\ufffd", "é", "NCCL", "WAR"]
    raw = pl.Series("raw", ["", *("".join(rnd.choice(pieces) for _ in range(rnd.randint(0, 6))) for _ in range(3000))])
    assert rawscan.holds_any(raw, read).equals(raw.str.contains_any(list(read)))
    expected = raw.str.contains_any(list(words)) & ~raw.str.contains_any(list(read))
    got = rawscan.only_words(raw, words, read)
    assert got.sum() > 10 and got.equals(expected)
    assert rawscan.only_words(pl.Series("raw", ["plain"]), words, read).to_list() == [False]


def test_newlines_in_c_are_what_bytes_count_gives() -> None:
    """`rawscan.newlines` (C, 16 bytes at a time) counts what `bytes.count` counts, in any range of any bytes (NUL
    bytes, carriage returns only, invalid UTF-8, long runs), ranges out of bounds clipped."""
    rnd = random.Random(5)
    pieces = [b"\n", b"\r", b"\x00", b"\xff\xfe", b"a" * 15, b"\n" * 17, b"\r\n", "漢".encode()]
    for _ in range(400):
        data = bytearray(b"".join(rnd.choice(pieces) for _ in range(rnd.randint(0, 300))))
        start, end = sorted(rnd.randint(-3, len(data) + 3) for _ in range(2))
        clip = (max(start, 0), max(min(end, len(data)), max(start, 0)))
        assert rawscan.newlines(data, start, end) == data.count(b"\n", *clip)
        assert rawscan.newlines(memoryview(bytes(data)), 0, len(data)) == data.count(b"\n")
    assert rawscan.newlines(b"\n" * 70_000, 0, 70_000) == 70_000
    assert rawscan.newlines(b"\r" * 5000, 0, 5000) == 0


def _strict_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def test_the_utf8_check_agrees_with_the_strict_decoders() -> None:
    """`_textcut.utf8` (the matcher's texts are not decoded) accepts exactly what Python's strict decoder (and
    Rust's, polars') accepts: overlong forms, surrogates, code points past U+10FFFF and cut sequences refused."""
    rnd = random.Random(3)
    pieces = [b"a", b"\n", b"abcdefgh" * 2, "é".encode(), "漢".encode(), "😀".encode(), b"\xed\xa0\x80"]
    pieces += [b"\xed\x9f\xbf", b"\xe0\x80\x80", b"\xe0\xa0\x80", b"\xf0\x80\x80\x80", b"\xf0\x90\x80\x80"]
    pieces += [b"\xf4\x8f\xbf\xbf", b"\xf4\x90\x80\x80", b"\xc0\x80", b"\xc1\xbf", b"\xc2\x80"]
    pieces += [b"\xf5\x80\x80\x80", b"\xff", b"\x80"]
    for i in range(20_000):
        if i % 2:
            data = bytes(rnd.randrange(256) for _ in range(rnd.randint(0, 12)))
        else:
            data = b"".join(rnd.choice(pieces) for _ in range(rnd.randint(0, 8)))
            data = data[: rnd.randint(0, len(data))] if rnd.random() < 0.3 else data
        assert rawscan._textcut.utf8([data]) == _strict_utf8(data), data
    assert rawscan.all_utf8([b"ok", memoryview(b"x\xc3")[:1]]) and rawscan.all_utf8([])
    assert not rawscan.all_utf8([b"ok", b"\xc3"])


def test_newlines_are_counted_exactly_in_long_runs(monkeypatch) -> None:
    """The cutter counts newlines eight bytes at a time, with sums per byte lane: runs of every length around
    those sizes, and a lane full of newlines."""
    texts = [b"\n" * n + b"NCCL WARN x\n" + b"a\n" * n + b"NCCL WARN y" for n in (0, 1, 7, 8, 9, 255, 2040, 2041, 9000)]
    _both(texts, False, True, 1, monkeypatch)
    _both(texts, True, True, 1, monkeypatch)


def test_the_reader_keeps_the_same_lines_with_either_cutter(tmp_path: Path, monkeypatch) -> None:
    cat = catalog()
    for i, p in enumerate(sorted((ROOT / "tests" / "cases").rglob("*.log"))[:150]):
        (tmp_path / f"{i:03d}_{p.name}").write_bytes(p.read_bytes())
    for i, t in enumerate(_edge_texts()):
        (tmp_path / f"edge{i}.log").write_bytes(t)
    job = collect([tmp_path]).of_kind("text")
    per_line = functools.partial(row_columns, catalog=cat)

    def read() -> tuple[pl.DataFrame, list[str]]:
        warnings: list[str] = []
        return lines_mod.read_kept_lines(job, cat.anchors, warnings, cat.line_start_regex(), per_line), warnings

    native, w_native = read()
    monkeypatch.setenv("NCCLPM_TEXT_PYTHON", "1")
    python, w_python = read()
    assert native.height > 1000 and w_native == w_python
    assert native.equals(python, null_equal=True)


def test_a_block_holds_texts_that_polars_reads_without_a_copy(tmp_path: Path) -> None:
    """A group's texts read (or copied) into one `_textcut.Block`: polars' Series shares its memory and keeps it
    alive after the block is gone; a text that does not fit is refused whole; a file that cannot be read raises
    as Python's reading does."""
    a, b = tmp_path / "a.log", tmp_path / "b.log"
    a.write_bytes(b"first\nNCCL WARN x\n")
    b.write_bytes(b"x" * 5000)
    block = rawscan._textcut.Block(4096)  # rounded up to a page
    assert block.read_file(str(a)) == 18 and block.append("é\n".encode()) == 3 and len(block) == 2
    assert block.read_file(str(b)) == -1 and block.append(b"y" * 5000) == -1 and len(block) == 2
    assert (
        block.used == 21 and block.room == 4096 - 21 and bytes(memoryview(block)) == "first\nNCCL WARN x\né\n".encode()
    )
    block.append(b"popped")
    block.pop()
    series = pl.Series(block).cast(pl.String)
    del block
    assert series.to_list() == ["first\nNCCL WARN x\n", "é\n"]
    with pytest.raises(FileNotFoundError, match=r"gone\.log"):
        rawscan._textcut.Block(4096).read_file(str(tmp_path / "gone.log"))
    with pytest.raises(IsADirectoryError):
        rawscan._textcut.Block(4096).read_file(str(tmp_path))
    bad = rawscan._textcut.Block(4096)
    bad.append(b"\xff\xfe not UTF-8")
    with pytest.raises(pl.exceptions.ComputeError):
        pl.Series(bad).cast(pl.String)


def test_texts_that_do_not_fit_a_block_are_read_as_python_bytes(tmp_path: Path, monkeypatch) -> None:
    """A group whose texts are not all in its block (a file grown past it) is read from Python bytes: the same
    lines."""
    cat = catalog()
    for i, p in enumerate(sorted((ROOT / "tests" / "cases").rglob("*.log"))[:60]):
        (tmp_path / f"{i:03d}_{p.name}").write_bytes(p.read_bytes())
    job = collect([tmp_path]).of_kind("text")
    whole = lines_mod.read_kept_lines(job, cat.anchors, [], cat.line_start_regex())
    monkeypatch.setattr(lines_mod, "BLOCK_BYTES", 8192)
    monkeypatch.setattr(lines_mod, "GROUP_BYTES", 4096)
    small = lines_mod.read_kept_lines(job, cat.anchors, [], cat.line_start_regex())
    assert whole.height > 300 and small.equals(whole)


def test_the_filter_lets_no_byte_through_unverified(monkeypatch) -> None:
    """The filter keys each byte by its low 4 bits (and the whole byte before): anchors whose bytes differ from the
    text's only in their high 4 bits (letters flipped in case, `a` against `q`, digits against punctuation) pass it
    and must be refused by the comparison; an anchor's first byte after any byte, at a text's first byte, right
    after a newline or a carriage return, and an anchor cut by a newline or CRLF in a text read as lines."""
    rnd = random.Random(21)
    anchors = rnd.sample(sorted(catalog().anchors), 60)

    def flip(a: str) -> str:
        i = rnd.randrange(len(a))
        c = ord(a[i])
        return a[:i] + (chr(c ^ rnd.choice([0x10, 0x20, 0x30])) if 0x21 <= c < 0x5F else a[i]) + a[i + 1 :]

    texts = []
    for _ in range(120):
        parts = []
        for _ in range(rnd.randint(1, 30)):
            a = rnd.choice(anchors)
            piece = rnd.choice(
                [a, flip(a), flip(flip(a)), a[: len(a) // 2] + rnd.choice(["\n", "\r\n"]) + a[len(a) // 2 :]]
            )
            parts.append(chr(rnd.randrange(1, 127)) + piece if rnd.random() < 0.7 else piece)
            parts.append(rnd.choice(["", " ", "\n", "\r\n", "\r", "\n\n", "x" * rnd.randint(0, 20)]))
        texts.append("".join(parts).encode())
    for whole in (True, False):
        for i in range(0, len(texts), 10):
            _both(texts[i : i + 10], whole, True, 1, monkeypatch)
    _both(texts, False, False, 7, monkeypatch)


def _nccl_text() -> bytes:
    """The repo's logs holding NCCL's lines, one after the other (a text like a big job's)."""
    paths = sorted((ROOT / "tests" / "cases").rglob("*.log")) + sorted((ROOT / "sample_logs").rglob("*.log"))
    texts = [p.read_bytes() for p in paths if p.is_file() and p.stat().st_size < 1_000_000]
    return b"".join(t if t.endswith(b"\n") else t + b"\n" for t in texts if b"NCCL" in t)


def test_a_text_cut_anywhere_reads_as_the_regex_reads_it(monkeypatch) -> None:
    """A big file's blocks read as lines, with their first lines' numbers, where the cuts fall mid-line and
    mid-anchor; the same text with CRLF endings, with lines of 200 kB around its anchors, and encoded as UTF-16
    (NUL bytes between the characters: valid UTF-8, no anchor in it)."""
    rnd = random.Random(23)
    text = _nccl_text()
    assert len(text) > 100_000 and text.count(b"NCCL WARN") > 5
    variants = [
        text,
        text.replace(b"\n", b"\r\n"),
        text.replace(b"NCCL WARN", b"y" * 200_000 + b"NCCL WARN", 3),
        text[:100_000].decode().encode("utf-16-le"),
    ]
    for data in variants:
        cuts = sorted(rnd.sample(range(1, len(data)), 12))
        pieces = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]
        for following in (True, False):
            _both(pieces, False, following, 1_000, monkeypatch)
        _both(pieces[:4], True, True, 1, monkeypatch)
