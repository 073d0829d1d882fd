"""Parse stack dumps into blocks (one block = one thread of one process), whatever tool wrote them.

Formats, all recognised line by line so several can sit in one file (torch's debug server concatenates one
dump per rank under `=== Rank N: <addr> ===` headers) and so faulthandler output inside a rank's log is read
from the log's own kept lines:
- py-spy `dump` text: `Process N: cmd`, `Thread N (idle|active...): "name"` (old py-spy: `Thread 0x7F...`),
  frames `    func (file:line)`; `--native` adds `    func (lib.so)` frames; `--locals` adds indented
  `Arguments:` / `Locals:` sections (a `rank` local names the rank);
- Python faulthandler: `Current thread 0x... (most recent call first):` / `Thread 0x... (...)`, frames
  `  File "path", line N in func`;
- gdb `thread apply all bt` (`Thread 1 (Thread 0x... (LWP N) "name"):`, `#0  0x... in func (args) at f:l` /
  `from lib`) and `thread apply all py-bt` (`  File "path", line N, in func`); old CPython gdb support
  prints Python frames inside C frames as `Frame 0x..., for file f, line N, in func`;
- Python's `traceback.format_stack` under `# Thread <id>` headers (Ray Train's hang detector writes this to
  `stack_traces/rank_<N>.log` when py-spy is unavailable; outermost frame first, reversed here);
- py-spy `dump --json` (a JSON list of threads) is read by `parse_pyspy_json`.
Frames are kept in the order the tool printed them (innermost first for all of these).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from ncclpm.util.clamp import MAX_RANK
from ncclpm.util.structure import Huge, load_json, within

_PROCESS = re.compile(r"^Process (?P<pid>\d+): ?(?P<cmd>.*)$")
_PARENT = re.compile(r"^Parent Process (?P<pid>\d+):")  # py-spy dump --subprocesses: a child (DataLoader worker)
_PYSPY_THREAD = re.compile(r'^Thread (?P<tid>0x[0-9A-Fa-f]+|\d+) \((?P<state>[^()]*)\)(?::\s*"(?P<name>[^"]*)")?\s*$')
_PYSPY_FRAME = re.compile(r"^ {4}(?P<func>\S.*?) \((?P<loc>[^()]*)\)\s*$")
_PYSPY_LOCAL = re.compile(r"^ {12}(?P<name>\w+): (?P<value>.*)$")
_FH_THREAD = re.compile(
    r"^(?P<current>Current thread|Thread) (?P<tid>0x[0-9a-fA-F]+)(?: \[(?P<name>[^\]]*)\])? \(most recent call first\):"
)
_FH_STACK = re.compile(r"^Stack \(most recent call first\):")
_FH_FRAME = re.compile(r'^\s*File "(?P<file>[^"]*)", line (?P<line>\d+|\?\?\?) in (?P<func>.+?)\s*$')
_GDB_THREAD = re.compile(
    r'^Thread (?P<n>\d+) \(Thread (?P<tid>0x[0-9a-fA-F]+) \(LWP (?P<lwp>\d+)\)(?: "(?P<name>[^"]*)")?\):'
)
_GDB_FRAME = re.compile(r"^#(?P<n>\d+)\s+(?:0x[0-9a-fA-F]+ in )?(?P<rest>.+)$")
_GDB_AT = re.compile(r"\) at (?P<file>\S+):(?P<line>\d+)\s*$")
_GDB_FROM = re.compile(r"\) from (?P<lib>\S+)\s*$")
_GDB_PYFRAME = re.compile(r"Frame 0x[0-9a-f]+, for file (?P<file>[^,]+), line (?P<line>\d+), in (?P<func>[\w<>.]+)")
_PYBT_HEAD = re.compile(r"^Traceback \(most recent call first\):")
_PYBT_FRAME = re.compile(r'^\s+File "(?P<file>[^"]*)", line (?P<line>\d+), in (?P<func>\S+)\s*$')
_TB_THREAD = re.compile(r"^# Thread (?P<tid>\d+)\s*$")  # Ray Train's fallback: traceback.format_stack per thread
_TB_FRAME = re.compile(r'^\s+File "(?P<file>[^"]*)", line (?P<line>\d+), in (?P<func>.+?)\s*$')
_SECTION = re.compile(r"^=== Rank (?P<rank>\d+): ?(?P<addr>.*?) ===\s*$")
_ADDR_HOST = re.compile(r"^(?:\w+://)?\[?(?P<host>[\w.:-]+?)\]?(?::\d+)?(?:/|$)")


@dataclass
class Frame:
    """One frame of a stack dump: function, file, line, and the text it was printed as."""

    func: str
    file: str | None
    line: int | None
    native: bool
    src_line: int | None  # line of the dump file the frame was printed on
    text: str = ""  # the frame as printed (quoted as evidence)


@dataclass
class Block:
    """One thread's stack as one tool printed it."""

    fmt: str  # py-spy | py-spy-json | faulthandler | gdb | gdb-py | traceback | fr
    header_line: int | None
    pid: int | None = None
    tid: str | None = None
    thread: str | None = None
    state: str | None = None
    current: bool = False  # faulthandler's "Current thread"
    parent_pid: int | None = None
    pthread: int | None = None  # pthread id (faulthandler, py-spy --json, old py-spy): links dumps of one process
    rank: int | None = None
    rank_from: str | None = None  # section (debug-server header) | log (the log line's own rank)
    host: str | None = None
    locals_rank: int | None = None
    frames: list[Frame] = field(default_factory=list)


# What a number of a dump can mean: a rank (clamp.MAX_RANK: the largest jobs have ~10^5 ranks), a pid or thread id
# (Linux: below 2^22, pid_t is 32 bits), a line number. A number past its bound is left blank and counted.
LIMITS = {"rank": MAX_RANK, "pid": 2**31 - 1, "line": 2**31 - 1, "thread": 2**64 - 1}
NOT_A_COUNT = "!"  # a `dropped` key so prefixed counts values that are no count at all (-5, 12.5, "123")


def _int(text: str | None, what: str = "line", dropped: Counter[str] | None = None) -> int | None:
    """`text` as a number when it is one within LIMITS[what]; past it None, counted in `dropped`."""
    if not text or not text.isascii() or not text.isdigit():
        return None
    if len(text) <= 20 and (value := int(text)) <= LIMITS[what]:
        return value
    if dropped is not None:
        dropped[what] += 1
    return None


def _hex(text: str) -> int | None:
    """A thread id printed in hex (`0x7f...`), when it fits 64 bits."""
    return int(text, 16) if len(text) <= 18 else None


def _gdb_func(rest: str, dropped: Counter[str] | None = None) -> tuple[str, str | None, int | None, bool]:
    """Function, file, line and nativeness of a gdb frame line after `#N  0x... in `."""
    file: str | None = None
    line: int | None = None
    if m := _GDB_AT.search(rest):
        file, line, rest = m["file"], _int(m["line"], "line", dropped), rest[: m.start() + 1]
    elif m := _GDB_FROM.search(rest):
        file, rest = m["lib"], rest[: m.start() + 1]
    # drop the argument list: the last top-level parenthesised group
    depth, cut = 0, len(rest)
    for i in range(len(rest) - 1, -1, -1):
        ch = rest[i]
        if ch == ")":
            depth += 1
        elif ch == "(":
            depth -= 1
            if depth == 0:
                cut = i
                break
    func = rest[:cut].strip() or rest.strip()
    return re.sub(r"\(\)(?: const)?$", "", func), file, line, True  # C++ `f() const ()` -> `f`


class _Reader:
    """State machine over (line number, text, rank hint) of one source."""

    def __init__(self) -> None:
        self.blocks: list[Block] = []
        self.block: Block | None = None
        self.pid: int | None = None
        self.parent_pid: int | None = None
        self.section_rank: int | None = None
        self.section_host: str | None = None
        self.gdb_threads: dict[str, Block] = {}
        self.pybt: Block | None = None
        self.dropped: Counter[str] = Counter()  # numbers past their bound, by what they are

    def _int(self, text: str | None, what: str = "line") -> int | None:
        return _int(text, what, self.dropped)

    def _open(self, block: Block, rank_hint: int | None) -> Block:
        if self.section_rank is not None:
            block.rank, block.rank_from = self.section_rank, "section"
        elif rank_hint is not None:
            block.rank, block.rank_from = rank_hint, "log"
        block.host = self.section_host
        block.parent_pid = self.parent_pid
        self.blocks.append(block)
        self.block = block
        return block

    def feed(self, lineno: int | None, text: str, rank_hint: int | None) -> None:
        text = text.rstrip("\r\n")
        head = text[:2]
        if self.block is not None and (head[:1] in (" ", "\t") or (head[:1] == "#" and head[1:].isdigit())):
            self._frame(lineno, text)
            return
        if m := _SECTION.match(text):
            self.section_rank = self._int(m["rank"], "rank")
            host = _ADDR_HOST.match(m["addr"].strip())
            self.section_host = host["host"] if host else None
            self.block, self.pid = None, None
            return
        if m := _PROCESS.match(text):
            self.pid, self.block, self.parent_pid = self._int(m["pid"], "pid"), None, None
            return
        if m := _PARENT.match(text):
            self.parent_pid = self._int(m["pid"], "pid")
            return
        if m := _PYSPY_THREAD.match(text):
            tid = m["tid"]
            pid = self.pid if self.pid is not None else (None if tid.startswith("0x") else self._int(tid, "pid"))
            blk = self._open(Block("py-spy", lineno, pid, tid, m["name"], m["state"]), rank_hint)
            blk.pthread = _hex(tid) if tid.startswith("0x") else None
            return
        if m := _FH_THREAD.match(text) or _FH_STACK.match(text):
            groups = m.groupdict()
            blk = Block("faulthandler", lineno, self.pid, groups.get("tid"), groups.get("name"))
            blk.current = groups.get("current") == "Current thread"
            blk.pthread = _hex(groups["tid"]) if groups.get("tid") else None
            self._open(blk, rank_hint)
            return
        if m := _GDB_THREAD.match(text):
            self._gdb_thread(m, lineno, rank_hint)
            return
        if m := _TB_THREAD.match(text):
            blk = self._open(Block("traceback", lineno, self.pid, m["tid"]), rank_hint)
            blk.pthread = self._int(m["tid"], "thread")
            return
        if _PYBT_HEAD.match(text) and self.block is not None and self.block.fmt == "gdb":
            gdb = self.block
            self.pybt = self._open(Block("gdb-py", lineno, gdb.pid, gdb.tid, gdb.thread), rank_hint)
            self.pybt.current = gdb.current
            return
        self._frame(lineno, text)

    def _gdb_thread(self, m: re.Match[str], lineno: int | None, rank_hint: int | None) -> None:
        lwp = self._int(m["lwp"], "pid")
        # `thread apply all py-bt` repeats the thread headers: py-bt frames go to a gdb-py block of that thread
        known = self.gdb_threads.get(m["tid"])
        if known is not None:
            self.block, self.pybt = known, None
            return
        pid = self.pid if self.pid is not None else (lwp if m["n"] == "1" else None)
        blk = self._open(Block("gdb", lineno, pid, m["lwp"], m["name"]), rank_hint)
        blk.current = m["n"] == "1"  # gdb's thread 1 is the process's first (main) thread
        self.gdb_threads[m["tid"]] = blk

    def _frame(self, lineno: int | None, text: str) -> None:
        blk = self.block
        if blk is None:
            return
        if blk.fmt == "py-spy":
            if m := _PYSPY_FRAME.match(text):
                loc = m["loc"]
                file, _, line = loc.rpartition(":")
                if file and line.isascii() and line.isdigit():
                    blk.frames.append(Frame(m["func"], file, self._int(line), False, lineno, text.strip()))
                else:
                    blk.frames.append(Frame(m["func"], loc, None, True, lineno, text.strip()))
            elif (m := _PYSPY_LOCAL.match(text)) and m["name"] in ("rank", "global_rank") and blk.locals_rank is None:
                blk.locals_rank = self._int(m["value"].strip().strip("\"'"), "rank")
        elif blk.fmt == "faulthandler":
            if m := _FH_FRAME.match(text):
                blk.frames.append(Frame(m["func"], m["file"], self._int(m["line"]), False, lineno, text.strip()))
        elif blk.fmt == "gdb":
            if self.pybt is not None and (m := _PYBT_FRAME.match(text)):
                self.pybt.frames.append(Frame(m["func"], m["file"], self._int(m["line"]), False, lineno, text.strip()))
            elif m := _GDB_FRAME.match(text):
                if py := _GDB_PYFRAME.search(m["rest"]):
                    blk.frames.append(Frame(py["func"], py["file"], self._int(py["line"]), False, lineno, text.strip()))
                else:
                    func, file, line, native = _gdb_func(m["rest"], self.dropped)
                    blk.frames.append(Frame(func, file, line, native, lineno, text.strip()))
        elif (m := _TB_FRAME.match(text) if blk.fmt == "traceback" else None) or (
            blk.fmt == "gdb-py" and (m := _PYBT_FRAME.match(text))
        ):  # (a traceback is printed outermost first: its frames are reversed at the end)
            blk.frames.append(Frame(m["func"], m["file"], self._int(m["line"]), False, lineno, text.strip()))


def parse_stack_lines(
    lines: Iterable[tuple[int | None, str, int | None]], dropped: Counter[str] | None = None
) -> list[Block]:
    """Blocks of every stack printed in these (line number, text, rank hint) lines; empty blocks dropped. Numbers
    past what they can mean (LIMITS) are left blank and counted in `dropped`."""
    reader = _Reader()
    for lineno, text, rank in lines:
        reader.feed(lineno, text, rank)
    # gdb prints a process's threads last to first: the pid (thread 1's LWP) is known only at the end
    gdb = [b for b in reader.blocks if b.fmt in ("gdb", "gdb-py")]
    pids = {b.pid for b in gdb if b.current and b.pid is not None}
    if len(pids) == 1:
        for b in gdb:
            b.pid = b.pid if b.pid is not None else next(iter(pids))
    for b in reader.blocks:
        if b.fmt == "traceback":
            b.frames.reverse()  # printed outermost first
    if dropped is not None:
        dropped.update(reader.dropped)
    return [b for b in reader.blocks if b.frames]


def parse_pyspy_json(text: str, dropped: Counter[str] | None = None) -> list[Block]:
    """`py-spy dump --json`: a list of threads, each with pid, thread name/ids and frames (innermost first).
    Refused (ValueError) when it nests deeper than any dump (`structure.MAX_NESTING`); a number past what it can
    mean (LIMITS: an integer past Int64 included) is left blank and counted in `dropped`."""
    dropped = Counter() if dropped is None else dropped
    doc = load_json(text)
    threads = doc if isinstance(doc, list) else [doc]
    blocks = []

    def number(value: object, what: str) -> int | None:
        if value is None:
            return None
        got = within(value, 0, LIMITS[what])
        if got is None:
            # past its bound, or no count at all (negative, a fraction, text, true/false): blank, and said
            whole = isinstance(value, Huge) or (isinstance(value, int) and not isinstance(value, bool))
            dropped[what if whole and (isinstance(value, Huge) or value > 0) else NOT_A_COUNT + what] += 1
        return got

    for th in threads:
        if not isinstance(th, dict) or not isinstance(th.get("frames"), list):
            continue
        pid = number(th.get("pid"), "pid")
        os_tid = number(th.get("os_thread_id"), "pid")
        thread_id = number(th.get("thread_id"), "thread")
        blk = Block("py-spy-json", None, pid, str(os_tid if os_tid is not None else thread_id))
        blk.thread = th.get("thread_name") if isinstance(th.get("thread_name"), str) else None
        blk.state = "active" if th.get("active") else "idle"
        blk.current = os_tid is not None and os_tid == pid
        blk.pthread = thread_id
        for fr in th["frames"]:
            if not isinstance(fr, dict):
                continue
            line = number(fr.get("line"), "line")
            name = fr.get("filename") or fr.get("short_filename")
            native = fr.get("line") is None or line == 0  # (a line past its bound: a Python frame, line unknown)
            func = str(fr.get("name") or "?")
            shown = f"{fr.get('short_filename') or name}:{line}" if not native else str(name)
            blk.frames.append(Frame(func, str(name) if name else None, line, native, None, f"{func} ({shown})"))
            local_vars = fr.get("locals")
            for loc in local_vars if isinstance(local_vars, list) else ():
                if isinstance(loc, dict) and loc.get("name") in ("rank", "global_rank") and blk.locals_rank is None:
                    blk.locals_rank = _int(str(loc.get("repr", "")).strip("\"'"), "rank", dropped)
        if blk.frames:
            blocks.append(blk)
    return blocks
