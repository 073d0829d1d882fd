"""Merge every rank's main-thread stack into one prefix tree and name the ranks that are somewhere else.

Input: the `stacks` table. One stack per process (rank, or host:pid when nothing maps the pid): its main thread
from the best dump available (py-spy, then faulthandler, then gdb's Python frames, then gdb's C frames); the
flight recorder's entry frames (where a rank last *entered* a collective) are used only when no live dump
exists. Stacks are compared on their Python frames (function, file, line), outermost first. Ranks with the same
stack form a class; when one class is larger than every other, the others are the suspects (the "minority
stack" idea of STAT and of large-scale hang triage). Each class is named by what it was doing - the frame an
`[[activity]]` of `parsers/stack_frames.toml` recognises - and the user's innermost frame, with library
frames (torch, Python, site-packages) folded away: `all_reduce ← train_step (train.py:14)`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from ncclpm.ingest.stacks.frames import frame_rules, short_file

FORMAT_PREFERENCE = {"py-spy": 0, "py-spy-json": 1, "faulthandler": 2, "traceback": 2, "gdb-py": 3, "gdb": 4, "fr": 5}


@dataclass(frozen=True)
class StackFrame:
    func: str
    file: str  # short: `torch/distributed/distributed_c10d.py`, `train.py`
    line: int | None
    user: bool
    native: bool
    source: str
    src_line: int | None
    text: str
    rank: int | None

    @property
    def key(self) -> tuple:
        return (self.func.rsplit(".", 1)[-1], self.file, self.line) if not self.native else (self.func, self.file)

    def label(self) -> str:
        where = f"{self.file}:{self.line}" if self.line is not None else self.file
        return f"{self.func} ({where})"


@dataclass(frozen=True)
class StackClass:
    members: tuple[str, ...]  # "rank 2" or "host:pid"
    ranks: tuple[int, ...]
    frames: tuple[StackFrame, ...]  # outermost first
    where: str  # "all_reduce ← train_step (train.py:14)"
    activity: str | None  # collective | dataloader | checkpoint | ... (parsers/stack_frames.toml)
    op: str | None  # the collective's function when activity == "collective"
    call_site: str | None  # the user's frame that called it: "train_step (train.py:14)"
    quote: StackFrame | None  # the frame to quote as evidence
    fmt: str


@dataclass(frozen=True)
class TreeNode:
    depth: int
    frames: tuple[str, ...]  # folded labels of this segment of the path
    count: int
    members: tuple[str, ...]
    suspect: bool
    majority: bool


@dataclass(frozen=True)
class StackTree:
    classes: tuple[StackClass, ...]  # largest first
    majority: StackClass | None
    suspects: tuple[StackClass, ...]
    nodes: tuple[TreeNode, ...]
    source: str  # "live" (dumps of running processes) | "fr" (flight-recorder entry frames)
    n_processes: int
    formats: tuple[str, ...] = field(default=())

    def summary(self) -> str:
        """`ranks 0, 1, 3: all_reduce ← train_step (train.py:14); rank 2: save (checkpoint) ← ...`"""
        return "; ".join(f"{_members_text(c)}: {c.where}" for c in self.classes)


def _members_text(c: StackClass) -> str:
    if c.ranks and len(c.ranks) == len(c.members):
        ranks = sorted(c.ranks)
        shown = ", ".join(map(str, ranks[:8])) + (f" … ({len(ranks)} ranks)" if len(ranks) > 8 else "")
        return ("rank " if len(ranks) == 1 else "ranks ") + shown
    return ", ".join(c.members[:8]) + (f" … ({len(c.members)})" if len(c.members) > 8 else "")


def _identity(r: dict) -> str:
    if r["rank"] is not None:
        return f"rank {r['rank']}"
    if r["pid"] is not None:
        return f"{r['host']}:{r['pid']}" if r["host"] else f"pid {r['pid']}"
    return f"{r['source']}#{r['dump']}"


def _chosen_dumps(stacks: pl.DataFrame) -> tuple[pl.DataFrame, str]:
    main = stacks.filter(pl.col("main_thread") & pl.col("parent_pid").is_null())  # ranks, not their workers
    live = main.filter(pl.col("format") != "fr")
    chosen, source = (live, "live") if not live.is_empty() else (main, "fr")
    dumps = (
        chosen.group_by("dump", maintain_order=True)
        .agg(
            pl.col("rank").first(),
            pl.col("host").first(),
            pl.col("pid").first(),
            pl.col("source").first(),
            pl.col("format").first(),
            (~pl.col("native")).sum().alias("n_python"),
        )
        .with_columns(
            pl.col("format").replace_strict(FORMAT_PREFERENCE, default=9, return_dtype=pl.Int32).alias("_pref")
        )
    )
    return dumps, source


def _frames_by_dump(stacks: pl.DataFrame, dumps: list[int]) -> dict[int, list[StackFrame]]:
    """The frames of these dumps, outermost first, in one pass over the table; a dump with Python frames keeps
    only those (native frames vary with addresses and build, Python frames are what the user wrote)."""
    chosen = stacks.filter(pl.col("dump").is_in(dumps)).sort("dump", "depth")
    out: dict[int, list[StackFrame]] = {}
    for dump, func, file, line, user, native, source, src_line, text, rank in chosen.select(
        "dump", "func", "file", "code_line", "user", "native", "source", "line", "text", "rank"
    ).iter_rows():
        shown = short_file(file) if not native else (file or "?")
        out.setdefault(dump, []).append(
            StackFrame(func, shown, line, bool(user), bool(native), source, src_line, text, rank)
        )
    for dump, frames in out.items():
        python = [f for f in frames if not f.native]
        out[dump] = python or frames
    return out


def _describe(frames: list[StackFrame]) -> tuple[str, str | None, str | None, str | None, StackFrame | None]:
    """(where, activity, op, call_site, frame to quote) of one stack (frames outermost first)."""
    rules = frame_rules()
    inner = list(reversed(frames))
    for i, fr in enumerate(inner):
        caller = inner[i + 1].func if i + 1 < len(inner) else None
        act = rules.match(fr.func, fr.file, caller, fr.user)
        if act is None:
            continue
        while i + 1 < len(inner) and not inner[i + 1].user:  # name the API the user called: torch.save, not _save
            nxt = rules.match(
                inner[i + 1].func, inner[i + 1].file, inner[i + 2].func if i + 2 < len(inner) else None, False
            )
            if nxt is None or nxt.id != act.id:
                break
            i, fr = i + 1, inner[i + 1]
        shown = act.show.format(func=fr.func.rsplit(".", 1)[-1])
        user = next((f for f in inner[i:] if f.user), None)
        site = user.label() if user is not None else None
        if user is fr:
            return fr.label(), act.activity, None, site, fr
        op = fr.func.rsplit(".", 1)[-1] if act.activity == "collective" else None
        return (f"{shown} ← {site}" if site else shown), act.activity, op, site, user or fr
    user_i = next((i for i, f in enumerate(inner) if f.user), None)
    if user_i is None:
        return (inner[0].label() if inner else "?"), None, None, None, inner[0] if inner else None
    user = inner[user_i]
    callee = inner[user_i - 1] if user_i > 0 else None
    where = f"{callee.func.rsplit('.', 1)[-1]} ← {user.label()}" if callee is not None else user.label()
    return where, None, None, user.label(), user


def _fold(frames: list[StackFrame], is_leaf: bool, outer: StackFrame | None) -> tuple[str, ...]:
    """Labels of a path segment: the user's frames, the library calls they made that name an activity
    (`torch.save`, `DataLoader __next__`), and the innermost library frame at the leaf."""
    rules = frame_rules()
    out: list[str] = []
    shown_act = None  # the activity named by the last label, so its own inner frames are not named again
    for i, f in enumerate(frames):
        caller = frames[i - 1] if i else outer
        if f.user:
            out.append(f.label())
            shown_act = None
        elif caller is not None and caller.user and (act := rules.match(f.func, f.file, caller.func, False)):
            out.append(act.show.format(func=f.func.rsplit(".", 1)[-1]))
            shown_act = act.id
    leaf = frames[-1] if is_leaf and frames and not frames[-1].user else None
    if leaf is not None:
        name = leaf.func.rsplit(".", 1)[-1]
        same = shown_act is not None and (act := rules.match(leaf.func, leaf.file, None, False)) and act.id == shown_act
        if not same and out[-1:] != [name]:
            out.append(name)
    if not out and frames:
        out.append("…")
    return tuple(out)


class _Trie:
    def __init__(self) -> None:
        self.children: dict[tuple, _Trie] = {}
        self.frame: StackFrame | None = None
        self.members: list[str] = []


def _nodes(classes: list[StackClass], suspects: set[str], majority: set[str]) -> tuple[TreeNode, ...]:
    root = _Trie()
    for c in classes:
        for m in c.members:
            node = root
            node.members.append(m)
            for fr in c.frames:
                node = node.children.setdefault(fr.key, _Trie())
                node.frame = fr
                node.members.append(m)
    out: list[TreeNode] = []

    def walk(node: _Trie, depth: int) -> None:
        for child in sorted(node.children.values(), key=lambda n: -len(n.members)):
            seg = [child]
            while len(seg[-1].children) == 1:
                seg.append(next(iter(seg[-1].children.values())))
            frames = [n.frame for n in seg if n.frame is not None]
            members = tuple(child.members)
            out.append(
                TreeNode(
                    depth,
                    _fold(frames, not seg[-1].children, node.frame),
                    len(members),
                    members,
                    bool(suspects) and set(members) <= suspects,
                    bool(majority) and set(members) <= majority,
                )
            )
            walk(seg[-1], depth + 1)

    walk(root, 0)
    return tuple(out)


_LAST: list[tuple[pl.DataFrame, StackTree | None]] = []  # the rule and the report ask for the same tree


def build_stack_tree(stacks: pl.DataFrame | None) -> StackTree | None:
    """The merged tree and the classes of ranks; None when the job holds no main-thread stack."""
    if stacks is None or stacks.is_empty():
        return None
    if _LAST and _LAST[0][0] is stacks:
        return _LAST[0][1]
    tree = _build(stacks)
    _LAST[:] = [(stacks, tree)]
    return tree


def _build(stacks: pl.DataFrame) -> StackTree | None:
    dumps, source = _chosen_dumps(stacks)
    if dumps.is_empty():
        return None
    best: dict[str, dict] = {}
    for r in dumps.sort("_pref", "source", "dump").iter_rows(named=True):
        best.setdefault(_identity(r), r)
    groups: dict[tuple, list[tuple[str, dict, list[StackFrame]]]] = {}
    frames_of = _frames_by_dump(stacks, [r["dump"] for r in best.values()])
    for ident, r in best.items():
        frames = frames_of[r["dump"]]
        groups.setdefault(tuple(f.key for f in frames), []).append((ident, r, frames))
    classes = []
    for members in groups.values():
        members.sort(key=lambda m: (m[1]["rank"] is None, m[1]["rank"] or 0, m[0]))
        frames = members[0][2]
        where, activity, op, site, quote = _describe(frames)
        ranks = tuple(m[1]["rank"] for m in members if m[1]["rank"] is not None)
        classes.append(
            StackClass(
                tuple(m[0] for m in members),
                ranks,
                tuple(frames),
                where,
                activity,
                op,
                site,
                quote,
                members[0][1]["format"],
            )
        )
    classes.sort(key=lambda c: (-len(c.members), c.ranks[:1] or (1 << 30,), c.members))
    top = len(classes[0].members)
    majority = classes[0] if len(classes) > 1 and all(len(c.members) < top for c in classes[1:]) else None
    suspects = tuple(classes[1:]) if majority is not None else ()
    nodes = _nodes(
        classes,
        {m for c in suspects for m in c.members},
        set(majority.members) if majority is not None else set(),
    )
    return StackTree(
        tuple(classes), majority, suspects, nodes, source, len(best), tuple(sorted({c.fmt for c in classes}))
    )


def describe_dumps(stacks: pl.DataFrame, dumps: list[int]) -> list[tuple[int, StackClass]]:
    """Each of these dumps (any thread, any process) described like a class of one: where it is and doing what."""
    out = []
    frames_of = _frames_by_dump(stacks, dumps)
    for dump in dumps:
        if dump not in frames_of:
            continue
        frames = frames_of[dump]
        rows = stacks.filter(pl.col("dump") == dump)
        where, activity, op, site, quote = _describe(frames)
        r = rows.row(0, named=True)
        ranks = (r["rank"],) if r["rank"] is not None else ()
        out.append(
            (dump, StackClass((_identity(r),), ranks, tuple(frames), where, activity, op, site, quote, r["format"]))
        )
    return out
