"""Pasted text (`ncclpm diagnose -`): what chat and ticket systems do to a log is undone, so a paste is diagnosed
like the file it came from; and a real log that was never pasted goes through unchanged."""

from __future__ import annotations

import functools
import itertools
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from ncclpm.api import diagnose
from ncclpm.cli import main
from ncclpm.ingest.catalog import load_catalog
from ncclpm.sources import paste as paste_mod
from ncclpm.sources.paste import _CHARS

HEADS = load_catalog().head_regex()  # how the shipped envelopes start a line


def normalise_paste(text: str) -> str:
    return paste_mod.normalise_paste(text, HEADS)


def _normalise_bytes(data: bytes) -> bytes:
    return paste_mod.normalise_paste_bytes(data, HEADS)


ROOT = Path(__file__).resolve().parents[1]
CONSOLE_LOGS = sorted(ROOT.glob("tests/cases/*/input/console.log")) + sorted(ROOT.glob("sample_logs/*/*.out"))
TEXT_FILES = [
    f
    for f in sorted(ROOT.glob("tests/cases/*/input/**/*")) + sorted(ROOT.glob("sample_logs/**/*"))
    if f.is_file() and f.suffix in (".log", ".out", ".txt", ".stderr", ".stdout") and "fr" not in f.parts
]
WATCHDOG = (
    "[rank1]:[E1103 10:10:02.111004512 ProcessGroupNCCL.cpp:688] [Rank 1] Watchdog caught collective "
    "operation timeout: WorkNCCL(SeqNum=1501, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
    "Timeout(ms)=600000) ran for 600001 milliseconds before timing out."
)


# ------------------------------------------------------------------------------------ how pastes get damaged


def hard_wrap(text: str, width: int = 80) -> str:
    """What `fold -w 80` or a terminal copy does: every line cut every 80 characters."""
    return "\n".join(ln[i : i + width] for ln in text.split("\n") for i in range(0, max(len(ln), 1), width))


def word_wrap(text: str, width: int = 80) -> str:
    """What a chat client or a ticket's 'format text' does: greedy wrap at word boundaries."""
    out = []
    for ln in text.split("\n"):
        out += textwrap.wrap(
            ln, width, break_long_words=True, break_on_hyphens=False, drop_whitespace=True, replace_whitespace=False
        ) or [""]
    return "\n".join(out)


def smart(text: str) -> str:
    quotes = itertools.cycle("“”")
    text = "".join(next(quotes) if c == '"' else c for c in text)
    return text.replace("'", "’").replace("...", "…").replace(" - ", " – ").replace("  ", "\u00a0 ")


def entities(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")


def fenced(text: str) -> str:
    return f"here is the log from last night:\n```text\n{text}\n```\nany idea?"


def quoted(text: str) -> str:
    return "\n".join("> " + ln for ln in text.split("\n"))


def _verdict(d) -> tuple[str, tuple[int, ...]]:
    return str(d.category), tuple(d.culprit_ranks)


@functools.cache
def _file_verdict(log: Path) -> tuple[str, tuple[int, ...]]:
    return _verdict(diagnose([log]))


# ----------------------------------------------------------------------------------------------- the units


def test_fences_entities_smart_characters() -> None:
    paste = "```\n[rank0]: a &gt; b &amp;&amp; c &lt;x&gt; &quot;q&quot; ‘s’ “d” – — … x\u00a0y\u200bz\n```"
    assert normalise_paste(paste) == '[rank0]: a > b && c <x> "q" \'s\' "d" - - ... x yz'


def test_entities_are_only_the_ones_pastes_make() -> None:
    assert normalise_paste("http://h/x?a=1&copy=2&lt=3 &amp;gt; &#39;s&#x27;") == "http://h/x?a=1&copy=2&lt=3 > 's'"


def test_inline_fences_and_jira_blocks() -> None:
    assert normalise_paste("```[rank0]: boom```") == "[rank0]: boom"
    assert normalise_paste("{code:java}\n[rank0]: boom\n{code}") == "[rank0]: boom"


def test_quote_markers_only_on_a_quoted_block() -> None:
    assert normalise_paste("> > [rank0]: a\n> > [rank1]: b") == "[rank0]: a\n[rank1]: b"
    mixed = "[rank0]: a\n[rank1]: b\n> not a quote marker\n[rank2]: c"
    assert normalise_paste(mixed) == mixed


def test_indented_code_block() -> None:
    assert normalise_paste("    [rank0]: a\n      detail\n    [rank1]: b") == "[rank0]: a\n  detail\n[rank1]: b"


@pytest.mark.parametrize("wrap", [hard_wrap, word_wrap], ids=["hard", "word"])
def test_a_single_wrapped_line_is_rejoined(wrap) -> None:
    assert normalise_paste(wrap(WATCHDOG)) == WATCHDOG


@pytest.mark.parametrize("wrap", [hard_wrap, word_wrap], ids=["hard", "word"])
def test_interleaved_ranks_rejoined_line_by_line(wrap) -> None:
    lines = [WATCHDOG.replace("rank1", f"rank{r}").replace("Rank 1", f"Rank {r}") for r in (3, 1, 2)]
    lines.insert(1, "[rank0]:[E1103 10:10:02.2 ProcessGroupNCCL.cpp:1200] short")
    text = "\n".join(lines)
    assert normalise_paste(wrap(text)) == text


def test_traceback_lines_are_not_glued() -> None:
    tb = (
        'Traceback (most recent call last):\n  File "/workspace/train.py", line 120, in <module>\n    main()\n'
        '  File "/workspace/train.py", line 98, in main\n    loss.backward()\n'
        "RuntimeError: CUDA error: an illegal memory access was encountered and the kernel was aborted\n"
        "CUDA kernel errors might be asynchronously reported at some other API call\n"
        "For debugging consider passing CUDA_LAUNCH_BLOCKING=1"
    )
    assert normalise_paste(tb) == tb


def test_short_tables_and_banners_are_not_glued() -> None:
    df = (
        "Filesystem      Size  Used Avail Use% Mounted on\nshm              64M   64M     0 100% /dev/shm\n"
        "/dev/nvme1n1    7.0T  4.1T  2.9T  59% /data"
    )
    assert normalise_paste(df) == df


@pytest.mark.parametrize("path", TEXT_FILES, ids=[str(f.relative_to(ROOT)) for f in TEXT_FILES])
def test_real_logs_go_through_unchanged(path: Path) -> None:
    text = path.read_text(encoding="utf-8", errors="replace")
    assert normalise_paste(text) == text.replace("\r\n", "\n").translate(_CHARS)


def test_binary_stdin_is_left_alone() -> None:
    blob = b"\x1f\x8b\x08\x00" + bytes(range(256))
    assert _normalise_bytes(blob) == blob
    assert _normalise_bytes(b"caf\xe9 &gt; x") == b"caf\xe9 > x", "undecodable bytes kept"


# -------------------------------------------------------------------------- same verdict as the file itself

DAMAGE = {
    "fenced_entities_smart_hard80": lambda t: fenced(entities(smart(hard_wrap(t)))),
    "quoted_word80": lambda t: quoted(word_wrap(t)),
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
@pytest.mark.parametrize(
    "log", CONSOLE_LOGS, ids=[f.parent.parent.name if f.name == "console.log" else f.parent.name for f in CONSOLE_LOGS]
)
def test_pasted_log_same_verdict_as_file(log: Path, damage: str) -> None:
    pasted = DAMAGE[damage](log.read_text(encoding="utf-8", errors="replace"))
    assert pasted != log.read_text(), "the paste is really damaged"
    from_paste = diagnose(stdin_bytes=pasted.encode())
    assert _verdict(from_paste) == _file_verdict(log), from_paste.summary


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_single_line_paste_same_verdict(tmp_path: Path, damage: str) -> None:
    f = tmp_path / "line.log"
    f.write_text(WATCHDOG + "\n")
    from_paste = diagnose(stdin_bytes=DAMAGE[damage](WATCHDOG).encode())
    assert _verdict(from_paste) == _verdict(diagnose([f]))
    fc = from_paste.failing_collective
    assert fc and (fc["op"], fc["seq"], fc["timeout_ms"]) == ("ALLREDUCE", 1501, 600000)


def test_cli_dash_reads_a_paste() -> None:
    log = ROOT / "sample_logs" / "nccl_rank0_sample_generation" / "slurm-48211.out"
    paste = DAMAGE["fenced_entities_smart_hard80"](log.read_text())
    res = CliRunner().invoke(main, ["diagnose", "-", "-f", "slack"], input=paste)
    assert res.exit_code == 0, res.output
    assert "*slow_rank_work*" in res.stdout and "*Culprit:* rank 0" in res.stdout
