"""Tests for ncclpm.sources.archives: every format, nesting, and hostile archives built in memory."""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import os
import stat
import struct
import sys
import tarfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ncclpm.sources.archives import Limits, Member, archive_kind, iter_archive, read_gzip_bounded

MB = 1024 * 1024
LOGS = {
    "logs/node0/rank0.log": b"[rank0] NCCL INFO init\n" * 50,
    "logs/node1/rank1.log": b"[rank1] Watchdog caught collective operation timeout\n" * 20,
    "fr/dump_0.json": b'{"version": "2.1", "entries": []}\n',
}


# ------------------------------------------------------------------------------------------- builders


def make_tar(entries: dict[str, bytes] | list[tarfile.TarInfo | tuple[str, bytes]], mode: str = "w") -> bytes:
    buf = io.BytesIO()
    items = list(entries.items()) if isinstance(entries, dict) else entries
    level = {"compresslevel": 1} if mode in ("w:gz", "w:bz2") else {}  # bz2: 100 kB blocks
    with tarfile.open(fileobj=buf, mode=mode, **level) as tf:
        for item in items:
            if isinstance(item, tarfile.TarInfo):
                tf.addfile(item)
                continue
            name, data = item
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def make_zip(entries: dict[str, bytes] | list[tuple[str | zipfile.ZipInfo, bytes]]) -> bytes:
    buf = io.BytesIO()
    items = list(entries.items()) if isinstance(entries, dict) else entries
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in items:
            zf.writestr(name, data)
    return buf.getvalue()


def make_zst_tar(entries: dict[str, bytes]) -> bytes:
    zstandard = pytest.importorskip("zstandard")
    return zstandard.ZstdCompressor().compress(make_tar(entries))


def special(name: str, kind: bytes, linkname: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = linkname
    return info


def patch_zip(data: bytes, member: str, *, flags: int = 0, method: int | None = None, size: int | None = None) -> bytes:
    """Rewrite header fields of one member, in both the local and the central directory header."""
    out = bytearray(data)
    for sig, flag_at, size_at, name_len_at, name_at in (
        (b"PK\x03\x04", 6, 22, 26, 30),
        (b"PK\x01\x02", 8, 24, 28, 46),
    ):
        pos = out.find(sig)
        while pos >= 0:
            name_len = struct.unpack_from("<H", out, pos + name_len_at)[0]
            if out[pos + name_at : pos + name_at + name_len].decode() == member:
                struct.pack_into("<H", out, pos + flag_at, struct.unpack_from("<H", out, pos + flag_at)[0] | flags)
                if method is not None:
                    struct.pack_into("<H", out, pos + flag_at + 2, method)
                if size is not None:
                    struct.pack_into("<I", out, pos + size_at, size)
            pos = out.find(sig, pos + 4)
    return bytes(out)


def read(data: bytes | Path, name: str = "job.tar.gz", **limits: int | float) -> tuple[list[Member], list[str]]:
    warnings: list[str] = []
    members = list(iter_archive(data, name, warnings, Limits(**limits)))  # type: ignore[arg-type]
    return members, warnings


def names(members: list[Member]) -> list[str]:
    return [m.name for m in members]


@pytest.fixture(scope="module")
def zeros_50mb() -> bytes:
    return bytes(50 * MB)


@pytest.fixture(scope="module")
def gz_bomb(zeros_50mb: bytes) -> bytes:
    return gzip.compress(zeros_50mb, compresslevel=1)


@pytest.fixture(scope="module")
def zip_bomb(zeros_50mb: bytes) -> bytes:
    return make_zip([("first.log", b"before the bomb\n"), ("bomb.log", zeros_50mb), ("after.log", b"after\n")])


def tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


@pytest.fixture()
def sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An empty cwd; afterwards the cwd must still be empty and nothing new may appear around it."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    before = tree(tmp_path.parent)
    yield tmp_path
    assert list(cwd.iterdir()) == []
    new = tree(tmp_path.parent) - before
    assert new == set(), f"files appeared on disk: {new}"
    assert not Path("/escape.log").exists()


# ----------------------------------------------------------------------------------------- sniffing


@pytest.mark.parametrize(
    ("build", "kind"),
    [
        (lambda: make_tar(LOGS), "tar"),
        (lambda: make_tar(LOGS, "w:gz"), "tar.gz"),
        (lambda: make_tar(LOGS, "w:bz2"), "tar.bz2"),
        (lambda: make_tar(LOGS, "w:xz"), "tar.xz"),
        (lambda: make_zst_tar(LOGS), "tar.zst"),
        (lambda: make_zip(LOGS), "zip"),
        (lambda: gzip.compress(b"plain log line\n" * 100), "gz"),
        (lambda: b"plain log line\n" * 100, None),
        (lambda: os.urandom(4096).replace(b"\x1f\x8b", b"xx").replace(b"PK", b"pk"), None),
    ],
)
def test_archive_kind_sniffs_content_not_name(build, kind) -> None:
    data = build()
    assert archive_kind("misleading.name.zip", data[:512]) == kind
    assert archive_kind("x", data[:65536]) == kind


def test_archive_kind_uses_name_only_as_a_hint_for_short_gzip() -> None:
    tgz = make_tar(LOGS, "w:gz")
    assert archive_kind("job.tgz", tgz[:12]) == "tar.gz"
    assert archive_kind("job.log.gz", tgz[:12]) == "gz"
    assert archive_kind("job.tar.gz", gzip.compress(b"not a tar " * 100)) == "gz"
    assert archive_kind("job.tar.gz", b"") is None


# -------------------------------------------------------------------------------------- good archives


@pytest.mark.parametrize(
    ("name", "build"),
    [
        ("job.tar", lambda: make_tar(LOGS)),
        ("job.tar.gz", lambda: make_tar(LOGS, "w:gz")),
        ("job.tgz", lambda: make_tar(LOGS, "w:gz")),
        ("job.tar.bz2", lambda: make_tar(LOGS, "w:bz2")),
        ("job.tar.xz", lambda: make_tar(LOGS, "w:xz")),
        ("job.tar.zst", lambda: make_zst_tar(LOGS)),
        ("job.zip", lambda: make_zip(LOGS)),
    ],
)
def test_every_format_yields_its_files_with_prefixed_names(name, build, sandbox: Path) -> None:
    members, warnings = read(build(), name)
    assert warnings == []
    assert {m.name: m.data for m in members} == {f"{name}!/{k}": v for k, v in LOGS.items()}


def test_path_input_reads_like_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = make_tar(LOGS, "w:gz")
    path = tmp_path / "in" / "job.tar.gz"
    path.parent.mkdir()
    path.write_bytes(data)
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    before = tree(tmp_path.parent)
    assert read(path) == read(data)
    assert tree(tmp_path.parent) == before


def test_missing_path_is_a_warning(tmp_path: Path) -> None:
    members, warnings = read(tmp_path / "nope.tar.gz", "nope.tar.gz")
    assert members == [] and len(warnings) == 1 and "nope.tar.gz: cannot be read" in warnings[0]


def test_single_file_gz_keeps_its_name() -> None:
    members, warnings = read(gzip.compress(b"a\n" * 10) + gzip.compress(b"b\n"), "rank0.log.gz")
    assert warnings == []
    assert members == [Member("rank0.log.gz", b"a\n" * 10 + b"b\n")]


def test_directories_are_skipped_silently() -> None:
    members, warnings = read(make_tar([special("logs", tarfile.DIRTYPE), ("logs/a.log", b"a")]), "j.tar")
    assert names(members) == ["j.tar!/logs/a.log"] and warnings == []


def test_nested_targz_inside_zip_and_gz_member_are_expanded(sandbox: Path) -> None:
    inner = make_tar({"logs/rank2.log": b"rank2\n", "rank3.log.gz": gzip.compress(b"rank3\n")}, "w:gz")
    outer = make_zip({"nodes/node1/job.tar.gz": inner, "top.log": b"top\n"})
    members, warnings = read(outer, "job.zip")
    assert warnings == []
    assert {m.name: m.data for m in members} == {
        "job.zip!/nodes/node1/job.tar.gz!/logs/rank2.log": b"rank2\n",
        "job.zip!/nodes/node1/job.tar.gz!/rank3.log.gz": b"rank3\n",
        "job.zip!/top.log": b"top\n",
    }
    for m in members:  # what the caller sees is never an archive any more
        assert archive_kind(m.name, m.data[:512]) is None


def test_nested_archive_five_deep_stops_at_max_depth(sandbox: Path) -> None:
    data = make_tar({"deep5.log": b"5"}, "w:gz")
    for level in (4, 3, 2, 1, 0):
        data = (make_zip if level % 2 else make_tar)({f"l{level + 1}.arc": data, f"deep{level}.log": b"x"})
    members, warnings = read(data, "job.tar")
    assert sorted(names(members)) == [
        "job.tar!/deep0.log",
        "job.tar!/l1.arc!/deep1.log",
        "job.tar!/l1.arc!/l2.arc!/deep2.log",
    ]
    assert len(warnings) == 1
    assert "l1.arc!/l2.arc!/l3.arc" in warnings[0] and "max_depth=2" in warnings[0]
    deeper, _ = read(data, "job.tar", max_depth=5)
    assert len(deeper) == 6


# ------------------------------------------------------------------------------------ hostile entries


def test_hostile_tar_entries_are_never_followed_or_read(sandbox: Path) -> None:
    data = make_tar(
        [
            ("/etc/passwd", b"not the real passwd\n"),
            ("../../escape.log", b"tries to escape\n"),
            special("link-to-passwd", tarfile.SYMTYPE, "/etc/passwd"),
            special("link-up", tarfile.SYMTYPE, "../../../../etc/shadow"),
            special("hard", tarfile.LNKTYPE, "/etc/passwd"),
            special("dev/null", tarfile.CHRTYPE),
            special("dev/sda", tarfile.BLKTYPE),
            special("pipe", tarfile.FIFOTYPE),
            special("dir/", tarfile.DIRTYPE),
            ("ok/rank0.log", b"fine\n"),
        ],
        "w:gz",
    )
    members, warnings = read(data, "evil.tar.gz")
    assert {m.name: m.data for m in members} == {
        "evil.tar.gz!/etc/passwd": b"not the real passwd\n",
        "evil.tar.gz!/escape.log": b"tries to escape\n",
        "evil.tar.gz!/ok/rank0.log": b"fine\n",
    }
    special_warnings = [w for w in warnings if "never followed" in w]
    assert special_warnings == [
        "evil.tar.gz: skipped 1 FIFO(s), 2 device file(s), 1 hard link(s), 2 symlink(s)"
        " - links and special files are never followed or read"
    ]
    renamed = [w for w in warnings if "made relative" in w]
    assert len(renamed) == 1 and "2 member name(s)" in renamed[0] and "'/etc/passwd' -> 'etc/passwd'" in renamed[0]
    assert len(warnings) == 2


def test_hostile_zip_entries(sandbox: Path) -> None:
    link = zipfile.ZipInfo("link")
    link.external_attr = (stat.S_IFLNK | 0o777) << 16
    fifo = zipfile.ZipInfo("fifo")
    fifo.external_attr = (stat.S_IFIFO | 0o644) << 16
    data = make_zip(
        [
            (link, b"/etc/passwd"),
            (fifo, b""),
            ("/abs/a.log", b"a"),
            ("..\\..\\win.log", b"w"),
            ("C:/x/b.log", b"b"),
            ("bad\x1b[31mname.log", b"c"),
            ("..", b"nothing"),
            ("ok.log", b"ok"),
        ]
    )
    members, warnings = read(data, "evil.zip")
    assert {m.name: m.data for m in members} == {
        "evil.zip!/abs/a.log": b"a",
        "evil.zip!/win.log": b"w",
        "evil.zip!/x/b.log": b"b",
        "evil.zip!/bad?[31mname.log": b"c",
        "evil.zip!/ok.log": b"ok",
    }
    assert "evil.zip: skipped 1 FIFO(s), 1 symlink(s)" in warnings[0]
    assert "5 member name(s)" in warnings[1]
    assert len(warnings) == 2


def test_zip_member_with_empty_name_is_skipped() -> None:
    data = make_zip([(zipfile.ZipInfo(""), b"nameless"), ("ok.log", b"ok")])
    assert read(data, "e.zip") == ([Member("e.zip!/ok.log", b"ok")], [])


# ------------------------------------------------------------------------------------------------ bombs


def test_zip_bomb_stops_on_ratio_and_keeps_earlier_members(zip_bomb: bytes, sandbox: Path) -> None:
    members, warnings = read(zip_bomb, "bomb.zip")
    assert names(members) == ["bomb.zip!/first.log"]
    assert len(warnings) == 1
    assert "bomb.zip" in warnings[0] and "bomb.zip!/bomb.log" in warnings[0] and "max_ratio=200" in warnings[0]


def test_zip_bomb_member_over_member_limit_is_skipped(zip_bomb: bytes) -> None:
    members, warnings = read(zip_bomb, "bomb.zip", max_member_bytes=4 * MB)
    assert names(members) == ["bomb.zip!/first.log", "bomb.zip!/after.log"]
    assert warnings == ["bomb.zip: 1 member(s) skipped - larger than max_member_bytes=4194304: 'bomb.zip!/bomb.log'"]


def test_gzip_bomb_outer_and_as_member(gz_bomb: bytes) -> None:
    members, warnings = read(gz_bomb, "rank0.log.gz")
    assert members == [] and "max_ratio=200" in warnings[0] and "rank0.log.gz" in warnings[0]
    tar = make_tar([("a.log", b"a"), ("rank1.log.gz", gz_bomb), ("z.log", b"z")])
    members, warnings = read(tar, "job.tar", max_member_bytes=MB)
    assert names(members) == ["job.tar!/a.log", "job.tar!/z.log"]
    assert len(warnings) == 1 and "'job.tar!/rank1.log.gz'" in warnings[0] and "max_member_bytes=1048576" in warnings[0]


def test_read_gzip_bounded(gz_bomb: bytes) -> None:
    assert read_gzip_bounded(gzip.compress(b"x" * 100), 100) == b"x" * 100
    with pytest.raises(ValueError, match="limit of 1048576 bytes"):
        read_gzip_bounded(gz_bomb, MB)
    with pytest.raises(OSError, match="truncated"):
        read_gzip_bounded(gzip.compress(os.urandom(1000))[:-30], MB)
    with pytest.raises(OSError):
        read_gzip_bounded(b"not gzip", MB)


def test_tar_bomb_of_many_members_stops_at_max_members() -> None:
    data = make_tar({f"m/{i}.log": b"x" for i in range(300)}, "w:gz")
    members, warnings = read(data, "many.tar.gz", max_members=100)
    assert len(members) == 100
    assert len(warnings) == 1 and "max_members=100" in warnings[0] and "many.tar.gz" in warnings[0]


def test_targz_of_zeros_stops_on_ratio_while_streaming(zeros_50mb: bytes) -> None:
    data = make_tar([("a.log", b"a"), ("zeros.log", zeros_50mb)], "w:gz")
    members, warnings = read(data, "z.tar.gz", ratio_min_bytes=MB)
    assert names(members) == ["z.tar.gz!/a.log"]
    assert "'z.tar.gz!/zeros.log'" in warnings[0] and "max_ratio=200" in warnings[0]


def test_max_total_bytes_counts_nested_archives() -> None:
    inner = make_zip({f"{i}.log": bytes(MB) for i in range(3)})
    data = make_tar([("inner.zip", inner), ("after.log", b"x")], "w:gz")
    members, warnings = read(data, "t.tar.gz", max_total_bytes=3 * MB, max_ratio=1e9)
    assert names(members) == ["t.tar.gz!/inner.zip!/0.log", "t.tar.gz!/inner.zip!/1.log"]
    assert "max_total_bytes=3145728" in warnings[0] and "'t.tar.gz!/inner.zip!/2.log'" in warnings[0]


# ----------------------------------------------------------------------------------- lies and damage


def test_zip_with_lying_sizes_is_read_with_bounded_streams() -> None:
    data = make_zip([("small-liar.log", bytes(4 * MB)), ("big-liar.log", b"honest content\n"), ("ok.log", b"ok")])
    data = patch_zip(patch_zip(data, "small-liar.log", size=10), "big-liar.log", size=0x7FFF0000)
    members, warnings = read(data, "liar.zip", max_member_bytes=MB)
    assert {m.name: m.data for m in members} == {
        "liar.zip!/big-liar.log": b"honest content\n",
        "liar.zip!/ok.log": b"ok",
    }
    assert len(warnings) == 1 and "'liar.zip!/small-liar.log'" in warnings[0] and "CRC" in warnings[0]


def test_zip_member_larger_than_declared_is_bounded() -> None:
    data = patch_zip(make_zip([("liar.log", bytes(8 * MB))]), "liar.log", size=0x7FFF0000)
    members, warnings = read(data, "liar.zip", max_member_bytes=MB)
    assert members == [] and "max_member_bytes=1048576" in warnings[0]


def test_encrypted_and_unsupported_zip_members_are_skipped() -> None:
    data = make_zip([("secret.log", b"s"), ("odd.log", b"o"), ("ok.log", b"ok")])
    data = patch_zip(patch_zip(data, "secret.log", flags=0x1), "odd.log", method=99)
    members, warnings = read(data, "enc.zip")
    assert names(members) == ["enc.zip!/ok.log"]
    assert "enc.zip: 1 member(s) skipped - encrypted: 'enc.zip!/secret.log'" in warnings
    assert any("'enc.zip!/odd.log'" in w and "unreadable" in w for w in warnings)


@pytest.mark.parametrize("mode", ["w", "w:gz", "w:bz2", "w:xz"])
def test_truncated_tar_keeps_members_before_the_cut(mode: str) -> None:
    entries = {f"r{i}.log": os.urandom(20_000) for i in range(12)}
    data = make_tar(entries, mode)
    members, warnings = read(data[: len(data) * 2 // 3], "cut.tar")
    assert 1 <= len(members) < 12
    assert all(entries[m.name.removeprefix("cut.tar!/")] == m.data for m in members)
    assert len(warnings) == 1 and "cut.tar" in warnings[0] and "truncated" in warnings[0]


def test_tar_cut_exactly_between_members_is_reported() -> None:
    data = make_tar({"a.log": b"a" * 512, "b.log": b"b" * 512})
    members, warnings = read(data[:2048], "cut.tar")
    assert names(members) == ["cut.tar!/a.log", "cut.tar!/b.log"]
    assert len(warnings) == 1 and "truncated" in warnings[0]


def test_tar_with_corrupt_header_midway() -> None:
    data = bytearray(make_tar({"a.log": b"a" * 512, "b.log": b"b" * 512, "c.log": b"c"}))
    data[1024:1034] = b"GARBAGE!!!"
    members, warnings = read(bytes(data), "bad.tar")
    assert names(members) == ["bad.tar!/a.log"]
    assert len(warnings) == 1 and "unreadable tar header" in warnings[0]


def test_absurd_declared_tar_size_does_not_hang() -> None:
    data = bytearray(make_tar({"a.log": b"a", "huge.log": b"h" * 100}))
    header = bytearray(data[1024:1536])
    header[124:136] = b"\x80" + b"\xff" * 11  # base-256 size of about 2**88
    header[148:156] = b" " * 8
    header[148:156] = b"%06o\0 " % sum(header)
    data[1024:1536] = header
    members, warnings = read(bytes(data), "absurd.tar", max_member_bytes=MB)
    assert names(members) == ["absurd.tar!/a.log"]
    assert len(warnings) == 2
    assert any("'absurd.tar!/huge.log'" in w and "max_member_bytes" in w for w in warnings)
    assert any(w.startswith("absurd.tar: damaged or truncated") for w in warnings)


def test_truncated_zip_recovers_members_from_local_headers() -> None:
    entries = {f"r{i}.log": os.urandom(5000) + b"\n" * 5000 for i in range(6)}
    data = make_zip(entries)
    members, warnings = read(data[: len(data) // 2], "cut.zip")
    assert 1 <= len(members) < 6
    assert all(entries[m.name.removeprefix("cut.zip!/")] == m.data for m in members)
    assert len(warnings) == 1 and warnings[0].startswith("cut.zip: zip central directory missing")
    assert "truncated" in warnings[0] and f"recovered {len(members)} entry(ies)" in warnings[0]


def test_zip_recovery_handles_data_descriptors_and_stops_on_limits() -> None:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:  # streamed writes use data descriptors
        entries = [("a.log", b"a" * 1000), ("dir/", b""), ("b.log", b"b" * 3000), ("big.log", bytes(MB))]
        for name, data in entries:
            if name.endswith("/"):
                zf.mkdir(name)
                continue
            with zf.open(name, "w") as member:
                member.write(data)
    data = buf.getvalue()
    cut = data[: data.rfind(b"PK\x01\x02") - 10]
    members, warnings = read(cut, "dd.zip")
    assert names(members) == ["dd.zip!/a.log", "dd.zip!/b.log", "dd.zip!/big.log"]
    members, warnings = read(cut, "dd.zip", max_member_bytes=64 * 1024)
    assert names(members) == ["dd.zip!/a.log", "dd.zip!/b.log"]
    assert "max_member_bytes=65536" in warnings[0] and "'dd.zip!/big.log'" in warnings[0]


def test_random_bytes_named_like_archives() -> None:
    noise = os.urandom(10_000)
    for name, data in [
        ("r.tar.gz", noise.replace(b"\x1f\x8b", b"xx")),
        ("r.tar.gz", b"\x1f\x8b" + noise),
        ("r.zip", b"PK\x03\x04" + noise),
        ("r.tar.xz", b"\xfd7zXZ\x00" + noise),
        ("r.tar.zst", b"\x28\xb5\x2f\xfd" + noise),
        ("r.tar.bz2", b"BZh91AY&SY" + noise),
    ]:
        members, warnings = read(data, name)
        assert members == [] and 1 <= len(warnings) <= 3
        assert all(w.startswith(f"{name}: ") and len(w) < 1000 for w in warnings)


def test_compressed_non_tar_is_reported() -> None:
    members, warnings = read(lzma.compress(b"a log, not a tar\n" * 100), "rank0.log.xz")
    assert members == [] and "not a readable tar archive inside the xz compression" in warnings[0]
    members, warnings = read(bz2.compress(b"x" * 100), "rank0.log.bz2")
    assert members == [] and "bz2" in warnings[0]


def test_missing_zstandard_is_a_clear_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    data = make_zst_tar(LOGS)
    monkeypatch.setitem(sys.modules, "zstandard", None)
    members, warnings = read(data, "job.tar.zst")
    assert members == [] and warnings == [
        "job.tar.zst: a .tar.zst archive needs the 'zstandard' package (pip install zstandard) - skipped"
    ]


# -------------------------------------------------------------------------------------- properties

VALID = {
    "job.tar.gz": make_tar({**LOGS, "inner.tgz": make_tar({"x.log": b"x" * 300}, "w:gz")}, "w:gz"),
    "job.zip": make_zip({**LOGS, "r.log.gz": gzip.compress(b"r" * 300)}),
}
SMALL = {"max_member_bytes": 256 * 1024, "max_total_bytes": MB, "ratio_min_bytes": 64 * 1024}


def run_twice(data: bytes, name: str) -> tuple[list[Member], list[str]]:
    first = read(data, name, **SMALL)
    assert read(data, name, **SMALL) == first
    return first


@settings(max_examples=60, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.sampled_from(sorted(VALID)),
    flips=st.lists(st.tuples(st.floats(0, 1, exclude_max=True), st.integers(0, 255)), max_size=6),
    cut=st.one_of(st.none(), st.floats(0, 1)),
)
def test_mutated_archives_never_raise_and_are_deterministic(name: str, flips, cut) -> None:
    data = bytearray(VALID[name])
    for where, value in flips:
        data[int(where * len(data))] = value
    if cut is not None:
        data = data[: int(cut * len(data))]
    members, _ = run_twice(bytes(data), name)
    assert all(m.name.startswith(f"{name}!/") for m in members)


@settings(max_examples=60, deadline=None, database=None)
@given(
    prefix=st.sampled_from([b"", b"\x1f\x8b\x08\x00", b"PK\x03\x04", b"\x28\xb5\x2f\xfd", b"\xfd7zXZ\x00"]),
    noise=st.binary(max_size=2048),
)
def test_random_bytes_never_raise(prefix: bytes, noise: bytes) -> None:
    run_twice(prefix + noise, "random.tar.gz")
