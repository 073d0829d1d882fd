"""Fuzz targets for the shapes issue 13 round two handles (names, escapes, odd text), used by tests/test_fuzz.py
(CI budget) and scripts/fuzz_long.py (long budget).

- file_names_on_disk: files with random names (any bytes but NUL and '/': Latin-1, controls, newlines, escape
  sequences, bidi overrides, very long) in random folders, through discovery, every table, every rule and the
  Markdown report. Besides "no exception, same output twice": every source name is one printable line, no two
  sources share a name, and every file is either a source or named in a warning (nothing lost silently).
- archive_member_names: a tar whose member names are random (duplicates included): same checks.
- zip_member_names: the same in a zip (names stored as raw bytes, no UTF-8 flag: read as cp437).
- job_folder_names: a folder of jobs with random names (and a stray file) through `find_jobs` and `ncclpm
  diagnose`: every job found once with a printable name, the strays named; diagnose refuses the folder (exit 2,
  the jobs share rank 0) or reads it, and nothing it prints acts on a terminal.
- escapes: random text through every escape function, and the result through markdown-it: no HTML, link, image
  or line break from the text, nothing a terminal acts on.
- paste_text: random text with fences, backticks, quotes and entities through `normalise_paste`.
"""

from __future__ import annotations

import io
import json
import os
import tarfile
import tempfile
import unicodedata
import zipfile
from pathlib import Path

from click.testing import CliRunner
from hypothesis import strategies as st
from markdown_it import MarkdownIt

from ncclpm.api import catalog
from ncclpm.cli import main
from ncclpm.engine import diagnose_tables
from ncclpm.ingest.build import build_tables
from ncclpm.render import render
from ncclpm.sources import paste
from ncclpm.sources.discover import collect
from ncclpm.triage import find_jobs
from ncclpm.util import escape

NAME_PIECES = [
    b"rank3.log",
    b"\xe9",
    b"\xff\xfe",
    b"\n",
    b"\r",
    b"\t",
    b"\x1b]0;t\x07",
    b"\x1b[2J",
    b"\xc2\x9b",
    b"\xe2\x80\xae",
    b"..",
    b" ",
    b"[rank1]",
    b"attempt_0",
    b"`",
    b"<img>",
    b"](x)",
    b"a" * 60,
]
name_bytes = st.lists(
    st.one_of(st.sampled_from(NAME_PIECES), st.binary(min_size=1, max_size=4)), min_size=1, max_size=6
).map(lambda parts: b"".join(parts).replace(b"\0", b"_").replace(b"/", b"_")[:200])
INVISIBLE = {"Cc", "Cf", "Cs", "Zl", "Zp"}  # controls, format (bidi, zero-width), surrogates, line breaks
LINES = [
    b"[rank1]: RuntimeError: DataLoader timed out after 5 seconds\n",
    b"[rank2]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n",
    b"step 1 loss 0.5\n",
    b"",
]


def _checked(job_dir: str, files: int) -> str:
    job = collect([job_dir])
    names = [s.name for s in job.sources]
    assert len(set(names)) == len(names), names
    assert not [n for n in names if any(unicodedata.category(c) in INVISIBLE for c in n)], names
    assert len(names) + len(job.warnings) >= files, (names, job.warnings)  # every file: a source or a warning
    t = build_tables(job, catalog())
    d = diagnose_tables(t)
    md = render(d, "md")
    return json.dumps([sorted(names), sorted(t.warnings), str(d.category), list(d.culprit_ranks), len(md)])


def run_file_names(files: list[tuple[bytes, bytes, int]]) -> str:
    with tempfile.TemporaryDirectory(prefix="ncclpm-fuzz-") as d:
        root = os.fsencode(d) + b"/job"
        os.mkdir(root)
        made: set[bytes] = set()
        for folder, name, line in files:
            where = root + (b"/" + folder if folder and folder not in (b".", b"..") else b"")
            try:
                os.makedirs(where, exist_ok=True)
            except OSError:  # a folder named like a file made before (or too long a path): not a test of ncclpm
                continue
            path = where + b"/" + (name if name not in (b".", b"..") else b"x")
            if os.path.isdir(path):
                continue
            with open(path, "wb") as fh:
                fh.write(LINES[line % len(LINES)])
            made.add(path)
        return _checked(os.fsdecode(root), len(made))


def run_member_names(members: list[tuple[bytes, int]]) -> str:
    with tempfile.TemporaryDirectory(prefix="ncclpm-fuzz-") as d:
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tf:
            for name, line in members:
                data = LINES[line % len(LINES)] or b"x\n"
                info = tarfile.TarInfo(os.fsdecode(name))
                info.size = len(data)
                tf.addfile(info, io.BytesIO(data))
        Path(d, "job.tar").write_bytes(buf.getvalue())
        return _checked(d, 1)


def run_zip_member_names(members: list[tuple[bytes, int]]) -> str:
    with tempfile.TemporaryDirectory(prefix="ncclpm-fuzz-") as d:
        buf = io.BytesIO()
        names = [name or b"x" for name, _ in members]
        with zipfile.ZipFile(buf, "w") as zf:  # ASCII stand-ins of the same length, replaced by the raw bytes
            for i, (name, (_, line)) in enumerate(zip(names, members, strict=True)):
                zf.writestr(f"{i:04d}".ljust(len(name), "_")[: max(len(name), 4)], LINES[line % len(LINES)] or b"x\n")
        data = buf.getvalue()
        for i, name in enumerate(names):
            stand_in = f"{i:04d}".ljust(len(name), "_")[: max(len(name), 4)].encode()
            data = data.replace(stand_in, name.ljust(len(stand_in), b"_"))
        Path(d, "job.zip").write_bytes(data)
        return _checked(d, 1)


TERMINAL = ("\x1b", "\x9b", "\x07", "\u202e", "\u2066")


def run_job_folder_names(args: tuple[list[bytes], bytes]) -> str:
    names, stray = args
    with tempfile.TemporaryDirectory(prefix="ncclpm-fuzz-") as d:
        root = os.fsencode(d) + b"/jobs"
        os.mkdir(root)
        made = []
        for i, name in enumerate(dict.fromkeys(n for n in names if n not in (b".", b".."))):
            os.mkdir(root + b"/" + name)
            with open(root + b"/" + name + b"/console.log", "w") as fh:
                fh.write(LINES[i % 2].decode().replace("[rank1]", "[rank0]").replace("[rank2]", "[rank0]"))
            made.append(name)
        if stray not in (b".", b"..", *made):
            with open(root + b"/" + stray, "w") as fh:
                fh.write("notes\n")
        warnings: list[str] = []
        jobs = find_jobs([os.fsdecode(root)], warnings)
        shown = [j.name for j in jobs]
        assert len(set(shown)) == len(shown), shown
        for text in (*shown, *warnings):
            assert not any(unicodedata.category(c) in INVISIBLE for c in text), text
        res = CliRunner().invoke(main, ["diagnose", os.fsdecode(root), "-f", "md"])
        assert res.exit_code in (0, 2), (res.exit_code, res.output[-2000:])
        assert not any(c in res.output for c in TERMINAL), res.output[-2000:]
        if res.exit_code == 2:
            assert "separate jobs" in res.stderr and "ncclpm triage" in res.stderr, res.stderr
        else:
            assert len(made) < 2 or "separate jobs" not in res.stderr, res.stderr
        tmp = escape.clean_name(os.fsdecode(root))  # (the temporary folder's name differs from run to run)
        relative = [x.replace(tmp, "JOBS") for x in (*shown, *warnings, res.output)]
        return json.dumps([relative[: len(shown)], sorted(relative[len(shown) : -1]), res.exit_code, relative[-1]])


def run_escapes(text: str) -> str:
    outs = {
        "md_text": escape.md_text(text),
        "md_cell": escape.md_cell(text),
        "md_span": "`" + escape.md_span(text) + "`",
        "md_prose": escape.md_prose(text),
        "md_block": "    " + escape.md_block(text),
        "md_fenced": escape.md_fenced(text.splitlines() or [""]),
        "slack_text": escape.slack_text(text),
        "slack_code": escape.slack_code(text),
        "clean_name": escape.clean_name(text),
        "terminal": escape.terminal(text),
    }
    for name, out in outs.items():
        assert not any(c in out for c in TERMINAL), (name, out)
    for name in ("md_text", "md_cell", "md_span", "md_prose", "slack_text", "clean_name"):
        assert "\n" not in outs[name] and "\r" not in outs[name], name
    for name in ("slack_text", "slack_code"):
        assert "<" not in outs[name] and ">" not in outs[name], name
    parser = MarkdownIt("commonmark").enable("table")
    for name in ("md_text", "md_cell", "md_span", "md_prose", "md_block", "md_fenced"):
        doc = "Before: " + outs[name] if name not in ("md_block", "md_fenced") else "Before.\n\n" + outs[name]
        tokens = [t for tok in parser.parse(doc + "\n\nAfter.\n") for t in [tok, *(tok.children or [])]]
        kinds = {t.type for t in tokens}
        assert not kinds & {"image", "link_open", "html_inline", "html_block", "heading_open"}, (name, kinds)
        assert tokens[-2].content == "After.", (name, doc)  # nothing swallowed what follows
    assert escape.csv_cell(text)[:1] not in ("=", "+", "-", "@") if text else True
    return json.dumps(outs, ensure_ascii=False)


PASTE_PIECES = ["```", "```text", "~~~", "`", "> ", "&gt;", "&amp;lt;", "&#x27;", "{code}", "\u201c", "\n", " " * 4]
paste_text = st.lists(
    st.one_of(
        st.sampled_from(PASTE_PIECES),
        st.sampled_from([ln.decode() for ln in LINES if ln]),
        st.text(max_size=20),
        st.integers(1, 400).map(lambda n: "`" * n),
    ),
    max_size=30,
).map("".join)


def run_paste(text: str) -> str:
    return paste.normalise_paste(text, catalog().head_regex())


folder_bytes = st.one_of(st.just(b""), name_bytes, st.tuples(name_bytes, name_bytes).map(lambda p: p[0] + b"/" + p[1]))
TARGET_SPECS = {
    "file_names_on_disk": (
        st.lists(st.tuples(folder_bytes, name_bytes, st.integers(0, 3)), min_size=1, max_size=5),
        run_file_names,
        6,
        2_000,
    ),
    "archive_member_names": (
        st.lists(
            st.tuples(
                st.one_of(name_bytes, st.sampled_from([b"logs/rank3.log", b"/etc/x", b"../../x"])), st.integers()
            ),
            min_size=1,
            max_size=6,
        ),
        run_member_names,
        6,
        2_000,
        ([(b"\xc2\x9b", 0)], [(b"\xef\xbb\xbf", 0)]),  # a C1 control (8-bit CSI), a BOM: in names before
    ),
    "zip_member_names": (
        st.lists(st.tuples(name_bytes, st.integers()), min_size=1, max_size=6),
        run_zip_member_names,
        6,
        2_000,
    ),
    "job_folder_names": (
        st.tuples(st.lists(name_bytes, min_size=1, max_size=6), name_bytes),
        run_job_folder_names,
        4,
        1_000,
        (([b"rank3.log", b"rank3.log\n"], b"rank3.log"),),  # two jobs printed alike: one name, two rows before
    ),
    "escapes": (
        st.one_of(
            st.text(),
            st.lists(st.sampled_from(NAME_PIECES + [p.encode() for p in PASTE_PIECES]), max_size=12).map(
                lambda p: b"".join(p).decode("utf-8", "surrogateescape")
            ),
        ),
        run_escapes,
        60,
        50_000,
        ("`<A>``", "\\`<img src=x>`"),  # `md_prose` took `<A>` for code: CommonMark reads raw HTML there
    ),
    "paste_text": (paste_text, run_paste, 40, 20_000),
}
