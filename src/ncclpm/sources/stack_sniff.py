"""Is this file a stack dump? Decided from its first bytes, whatever its name.

Stack dumps (py-spy `dump` text or `--json`, faulthandler output on its own, gdb `thread apply all bt`, torch's
debug-server `stacks_<ts>.txt` / `pyspy_dump_<ts>.txt`, Ray Train's `hang_detector/stack_traces/rank_<N>.log`:
`py-spy dump --native` output, or Python tracebacks per thread when py-spy is missing) are
read by `ingest/stacks/`, not as logs. A log that merely contains a faulthandler block (a rank's stderr
after `Fatal Python error`, or after `faulthandler.register(SIGUSR1)`) stays a log: its stacks are read from
its kept lines.
"""

from __future__ import annotations

import re

from ncclpm.sources.line_tags import without_line_tags_bytes

# The first meaningful line of a dump, per tool.
_FIRST = re.compile(
    rb"^(?:Process \d+: "  # py-spy
    rb"|Thread (?:0x[0-9A-Fa-f]+|\d+) \([^()\n]*\)(?::\s*\"[^\"\n]*\")?\s*$"  # py-spy thread (old py-spy starts here)
    rb"|(?:Current thread|Thread) 0x[0-9a-fA-F]+(?: \[[^\]\n]*\])? \(most recent call first\):"  # faulthandler
    rb"|Stack \(most recent call first\):"
    rb"|Thread \d+ \(Thread 0x[0-9a-fA-F]+ \(LWP \d+\)"  # gdb
    rb"|=== Rank \d+: .* ===\s*$"  # torch debug server
    rb"|PARTIAL DATA: \d+/\d+ workers responded"
    rb"|\[py-spy unavailable: .*Python-only traceback follows\])",  # Ray Train's stack_traces/rank_<N>.log
    re.MULTILINE,
)
# gdb prints its attach chatter (new LWPs, libthread_db, the current frame, auto-load warnings) before the first
# `Thread N (Thread 0x... (LWP n) ...):` header, so a gdb dump is known by that header followed by frame #0.
_GDB_THREAD = re.compile(
    rb"^Thread \d+ \(Thread 0x[0-9a-fA-F]+ \(LWP \d+\)[^\n]*\n(?:#0 |Traceback \(most recent)", re.MULTILINE
)
_GDB_MAX_PREAMBLE = 60  # lines before the first thread header
_FH_HEAD = re.compile(rb"\(most recent call first\):")
# a file that is only faulthandler output: headers, frames, blank lines and faulthandler's own notes
_FH_ONLY = re.compile(
    rb"^(?:\s*|(?:Current thread|Thread) 0x[0-9a-fA-F]+.*\(most recent call first\):|Stack \(most recent call first\):"
    rb"|\s+File \"[^\"]*\", line (?:\d+|\?\?\?) in .*|\s+<no Python frame>|\s+\.\.\.|Extension modules: .*"
    rb"|\s*\(total: \d+\))$"
)
# py-spy's `--json` thread list by its first keys, whatever the pid's value: a pid that is no count (negative, a
# fraction, quoted) is the reader's to blank and say, not a reason to take the dump for something else
_JSON_VALUE = rb'(?:[-+\d.eE]+|"[^"\n]{0,64}"|true|false|null)'
_JSON_THREAD = re.compile(rb'^\s*\[\s*\{\s*"pid"\s*:\s*' + _JSON_VALUE + rb'\s*,\s*"thread_id"\s*:')
# A py-spy dump pasted from its middle: frames first, then (within a few lines) a thread or process header. Above
# that header only what a py-spy dump holds: frames, their locals, its separators and process lines.
_PYSPY_FRAME = re.compile(rb"^ {4}\S.*? \([^()\n]*:\d+\)\s*$")
_PYSPY_ABOVE = re.compile(rb"^(?: {4}\S.*? \([^()\n]*\)\s*| {8}\S.*|-{20,}\s*|Python v\S.*|Parent Process \d+: .*)$")
_CUT_MAX = 60  # lines of a cut dump above its first header


_PIECE = re.compile(rb"[^\r\n]+")  # the non-empty lines `splitlines()` gives, found lazily


def _first_lines(head: bytes, n: int) -> list[bytes]:
    """The first `n` meaningful lines (not blank), looking at no more than n + 200 lines: found one by one, not
    by splitting the whole 64 KB head (that split was most of the sniff's cost on a log)."""
    out = []
    for i, m in enumerate(_PIECE.finditer(head)):
        if i >= n + 200:
            break
        raw = m.group()
        if raw.strip(b"\r\n\t \x00\xef\xbb\xbf"):
            out.append(raw)
            if len(out) >= n:
                break
    return out


def stack_format(head: bytes) -> str | None:
    """'json' for `py-spy dump --json`, 'text' for the line-shaped dumps, None when this is not a stack dump."""
    head = without_line_tags_bytes(head)  # a dump collected through pdsh: each line tagged with its host
    if _JSON_THREAD.match(head[:4096]):
        return "json"
    lines = _first_lines(head, 1)
    if lines and _FIRST.match(lines[0].lstrip(b"\xef\xbb\xbf")):
        if _FH_HEAD.search(lines[0]):  # faulthandler: a dump only when nothing else is in the file
            body = head.splitlines()[:-1] if len(head) >= 65536 else head.splitlines()
            return "text" if all(_FH_ONLY.match(line.rstrip(b"\r")) for line in body) else None
        return "text"
    if lines and _cut_start(lines[0]) and _cut_above_header(_first_lines(head, _CUT_MAX)):
        return "text"
    gdb = _GDB_THREAD.search(head) if b"(LWP " in head else None  # a byte search first: the regex scans 64 KB
    if gdb is not None and head.count(b"\n", 0, gdb.start()) <= _GDB_MAX_PREAMBLE:
        return "text"
    return None


def _cut_start(line: bytes) -> bool:
    return bool(_PYSPY_FRAME.match(line)) or line.startswith(b"-" * 20)


def _cut_above_header(lines: list[bytes]) -> bool:
    """A py-spy dump whose top was not copied: frames (or a separator) first, then a header."""
    for line in lines[1:]:
        if _FIRST.match(line):
            return True
        if not _PYSPY_ABOVE.match(line):
            return False
    return False


def looks_like_stack_dump(name: str, head: bytes) -> bool:
    del name  # recognised by content only
    return stack_format(head) is not None
