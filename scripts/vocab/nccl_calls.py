"""Find NCCL's log calls in one source tree (one release tag), direct and through function-like macros.

`find_calls(files)` takes {path relative to src/: text} and returns `Site`s: the level, the format string as the
compiler sees it, the printf arguments' source text, the NCCL_DEBUG_SUBSYS flags, the file, line and enclosing
function, the macro chain it came through, and a few lines of code around it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from nccl_cpp import Lexed, Macro, Tok, enclosing_function, function_spans, lex, parse_defines, source_text, split_args

# The primitive log calls: name -> (level, index of the flags argument or None, index of the format argument).
# TRACE(...) is left out: it is compiled only with ENABLE_TRACE, never in a release build.
LOGGERS: dict[str, tuple[str, int | None, int]] = {
    "WARN": ("WARN", None, 0),
    "INFO": ("INFO", 0, 1),
    "TRACE_CALL": ("CALL", None, 0),
    "VERSION": ("VERSION", None, 0),
    "rasOutAppend": ("RAS", None, 0),
}

# <inttypes.h> on Linux x86_64/aarch64 (LP64).
PRI = {f"PRI{c}{w}": ("l" if w == "64" else "") + c for c in "diouxX" for w in ("8", "16", "32", "64", "PTR", "MAX")}
PRI.update({f"PRI{c}PTR": "l" + c for c in "diouxX"})
PRI.update({f"PRI{c}MAX": "l" + c for c in "diouxX"})
PRI.update({f"SCN{c}64": "l" + c for c in "diouxX"})

_CONV = re.compile(r"%[-+ #0']*(?:\*|\d+)?(?:\.(?:\*|\d+))?(?:hh|h|ll|l|z|j|t|L|q)?[diouxXeEfFgGaAcspnm%]")

_HOLE = "\x00"  # where an unresolved piece goes while a format is put together
_CONV_OR_HOLE = re.compile(_HOLE + "|" + _CONV.pattern)


def _nargs(conv: str) -> int:
    """How many printf arguments a conversion takes (`%m` prints strerror(errno) and takes none)."""
    return 0 if conv == "%%" or conv.endswith("m") else conv.count("*") + 1


CONTEXT_BEFORE = 3
CONTEXT_MAX = 6


@dataclass
class Site:
    level: str
    format: str
    unresolved: list[str]  # source text of format pieces whose value is not in the source (e.g. STR(NCCL_MAJOR))
    args: list[str]
    flags: list[str]
    file: str
    line: int
    function: str | None
    via: list[str]
    context: list[str]
    dynamic: str | None = None  # the format is not a literal: its expression
    ordinal: int = 0  # how many earlier sites in the same file/function/via have the same format
    key: tuple = field(default=())


@dataclass
class _Template:
    """A log call inside a macro body: its tokens still name the macro's parameters."""

    level: str
    fmt: list[Tok]
    args: list[list[Tok]]
    flags: list[Tok]
    via: list[str]


def _is_call(toks: list[Tok], i: int) -> bool:
    return i + 1 < len(toks) and toks[i + 1].text == "(" and (i == 0 or toks[i - 1].text not in (".", "->", "::"))


def _is_definition(toks: list[Tok], i: int) -> bool:
    """`static void rasOutAppend(const char* format, ...)`: a declaration, not a call."""
    return i > 0 and toks[i - 1].kind == "id" and toks[i - 1].text not in ("return", "else", "do")


class Tree:
    def __init__(self, files: dict[str, str | Lexed]):
        """`files`: path relative to src/ -> its text, or its text already lexed (shared between tags)."""
        self.lexed: dict[str, Lexed] = {p: t if isinstance(t, Lexed) else lex(t) for p, t in files.items()}
        self.macros: dict[str, list[Macro]] = {}
        for path, lx in self.lexed.items():
            for m in parse_defines(lx.directives, path):
                self.macros.setdefault(m.name, []).append(m)
        self.templates = self._message_macros()
        self.string_constants = {p: _string_constants(lx.code) for p, lx in self.lexed.items()}

    # -- macros that log -----------------------------------------------------------------------------------
    def _message_macros(self) -> dict[tuple[str, str], list[_Template]]:
        """(macro name, file of its definition) -> the log calls its expansion makes. Macros whose body calls
        another logging macro get that macro's calls, its parameters put in (to a fixpoint)."""
        out: dict[tuple[str, str], list[_Template]] = {}
        defs = [m for ms in self.macros.values() for m in ms if m.params is not None and m.name not in LOGGERS]
        for _round in range(6):
            changed = False
            for m in defs:
                key = (m.name, m.file)
                temps = self._templates_in(m.body, m.file, out, m.name)
                if temps and len(temps) != len(out.get(key, [])):
                    out[key] = temps
                    changed = True
            if not changed:
                break
        return out

    def macro_for(self, name: str, file: str, temps: dict) -> tuple[Macro, list[_Template]] | None:
        """The definition a use in `file` sees: the file's own, else one from a header."""
        cands = [m for m in self.macros.get(name, []) if m.params is not None and (m.name, m.file) in temps]
        if not cands:
            return None
        own = [m for m in cands if m.file == file]
        pick = own[0] if own else sorted(cands, key=lambda m: (not m.file.endswith(".h"), m.file, m.line))[0]
        return pick, temps[(pick.name, pick.file)]

    def _templates_in(self, body: list[Tok], file: str, temps: dict, self_name: str) -> list[_Template]:
        found: list[_Template] = []
        for i, t in enumerate(body):
            if t.kind != "id" or not _is_call(body, i):
                continue
            parsed = split_args(body, i + 1)
            if parsed is None:
                continue
            args, _ = parsed
            if t.text in LOGGERS:
                level, fi, xi = LOGGERS[t.text]
                if len(args) <= xi:
                    continue
                found.append(_Template(level, args[xi], args[xi + 1 :], args[fi] if fi is not None else [], []))
            elif t.text != self_name:
                hit = self.macro_for(t.text, file, temps)
                if hit is None:
                    continue
                macro, inner = hit
                binding = _bind(macro, args)
                for tp in inner:
                    found.append(_instantiate(tp, binding, macro.name))
        return found

    # -- sites -------------------------------------------------------------------------------------------------
    def sites(self) -> list[Site]:
        out: list[Site] = []
        for path in sorted(self.lexed):
            out.extend(self._file_sites(path))
        return out

    def _file_sites(self, path: str) -> list[Site]:
        lx = self.lexed[path]
        toks = lx.code
        spans = function_spans(toks)
        sites: list[Site] = []
        for i, t in enumerate(toks):
            if t.kind != "id" or not _is_call(toks, i):
                continue
            if t.text in LOGGERS:
                if t.text == "rasOutAppend" and _is_definition(toks, i):
                    continue
                parsed = split_args(toks, i + 1)
                if parsed is None:
                    continue
                args, end = parsed
                level, fi, xi = LOGGERS[t.text]
                if len(args) <= xi:
                    continue
                temps = [_Template(level, args[xi], args[xi + 1 :], args[fi] if fi is not None else [], [])]
            else:
                hit = self.macro_for(t.text, path, self.templates)
                if hit is None:
                    continue
                macro, inner = hit
                parsed = split_args(toks, i + 1)
                if parsed is None:
                    continue
                args, end = parsed
                binding = _bind(macro, args)
                temps = [_instantiate(tp, binding, macro.name) for tp in inner]
            end_line = toks[end - 1].line
            fn = enclosing_function(spans, i)
            ctx = _context(lx.lines, t.line, end_line, direct=t.text in LOGGERS)
            for tp in temps:
                fmt, unresolved, dynamic = self.evaluate(tp.fmt, path, hole=_HOLE)
                if dynamic is None:
                    fmt, tp.args = _fill_holes(fmt, tp.args, unresolved)
                    if fmt == "%s":  # INFO(NCCL_ALL, "%s", VERSION_STRING): the text is the constant's
                        fmt, tp.args, more = self.inline_constant_args(fmt, tp.args, path)
                        unresolved += more
                sites.append(
                    Site(
                        level=tp.level,
                        format=fmt,
                        unresolved=unresolved,
                        args=[_short(source_text(a)) for a in tp.args],
                        flags=_flags(tp.flags) if tp.level == "INFO" else [],
                        file=path,
                        line=t.line,
                        function=fn,
                        via=tp.via,
                        context=ctx,
                        dynamic=dynamic,
                    )
                )
        return sites

    def evaluate(
        self, toks: list[Tok], file: str, depth: int = 0, hole: str = "%s"
    ) -> tuple[str, list[str], str | None]:
        """A format argument's value: string literals joined, PRI* and string macros resolved. A piece whose value
        is not in the source (`STR(NCCL_MAJOR)`) becomes `hole` and is listed; a format that is not made of
        literals at all (a variable) is `dynamic`: its expression is returned."""
        if not any(t.kind in ("str", "strz") for t in toks):
            const = self.constant(toks, file, hole)
            if const is None or const[0] == hole * len(const[1]):
                return "", [], source_text(toks)
            return const[0], const[1], None
        out, unresolved = "", []
        i = 0
        while i < len(toks):
            t = toks[i]
            if t.kind in ("str", "strz"):
                out += t.value
            elif t.kind == "id" and t.text in PRI:
                out += PRI[t.text]
            elif t.kind == "id":
                end = i + 1
                if end < len(toks) and toks[end].text == "(":
                    parsed = split_args(toks, end)
                    end = parsed[1] if parsed else len(toks)
                const = self.constant(toks[i:end], file, hole) if end == i + 1 else None
                if const is None:
                    out += hole
                    unresolved.append(source_text(toks[i:end]))
                else:
                    out += const[0]
                    unresolved += const[1]
                i = end
                continue
            i += 1
        return out, unresolved, None

    def constant(self, toks: list[Tok], file: str, hole: str, depth: int = 0) -> tuple[str, list[str]] | None:
        """The value of an expression made only of string literals, PRI* and macros: None when anything else is
        in it (a variable, `?:`). A function-like macro (`STR(NCCL_MAJOR)`) is a hole: its value is the build's."""
        if depth > 5 or not toks:
            return None
        out, unresolved = "", []
        i = 0
        while i < len(toks):
            t = toks[i]
            if t.kind == "str":
                out += t.value
            elif t.kind == "punct" and t.text in ("(", ")") and i in (0, len(toks) - 1):
                pass
            elif t.kind == "id" and t.text in PRI:
                out += PRI[t.text]
            elif t.kind == "id" and i + 1 < len(toks) and toks[i + 1].text == "(":
                if not self._stringifies(t.text):
                    return None
                parsed = split_args(toks, i + 1)
                end = parsed[1] if parsed else len(toks)
                out += hole
                unresolved.append(source_text(toks[i:end]))
                i = end
                continue
            elif t.kind == "id" and t.text in self.string_constants.get(file, {}):
                out += self.string_constants[file][t.text]
            elif t.kind == "id":
                defs = [m for m in self.macros.get(t.text, []) if m.params is None and m.body]
                own = [m for m in defs if m.file == file]
                for m in own or defs:
                    val = self.constant(m.body, m.file, hole, depth + 1)
                    if val is not None:
                        out += val[0]
                        unresolved += val[1]
                        break
                else:
                    if not (t.text.isupper() and not defs):
                        return None
                    out += hole  # a macro the build defines (NCCL_SUFFIX from nccl.h.in)
                    unresolved.append(t.text)
            else:
                return None
            i += 1
        return out, unresolved

    def _stringifies(self, name: str, depth: int = 0) -> bool:
        """`STR(x)`: a macro that makes a string of its argument (`#x`, or through another such macro)."""
        for m in self.macros.get(name, []):
            if m.params is None or depth > 4:
                continue
            body = m.body
            if len(body) == 2 and body[0].text == "#":
                return True
            if body and body[0].kind == "id" and body[0].text != name and self._stringifies(body[0].text, depth + 1):
                return True
        return False

    def inline_constant_args(
        self, fmt: str, args: list[list[Tok]], file: str
    ) -> tuple[str, list[list[Tok]], list[str]]:
        """A `%s` whose argument is a constant string (`INFO(NCCL_ALL, "%s", VERSION_STRING)`) is written into the
        format, as the reader of the log sees it; a piece of it whose value is not in the source stays a `%s`."""
        out, new_args, unresolved = "", [], []
        pos, k = 0, 0
        for m in _CONV.finditer(fmt):
            if _nargs(m[0]) == 0:
                continue
            stars = m[0].count("*")
            arg = args[k + stars] if k + stars < len(args) else None
            const = self.constant(arg, file, _HOLE) if m[0] == "%s" and arg else None
            if const is None or not const[0].replace(_HOLE, ""):
                out += fmt[pos : m.end()]
                new_args.extend(args[k : k + stars + 1])
            else:
                out += fmt[pos : m.start()] + const[0].replace("%", "%%").replace(_HOLE, "%s")
                new_args.extend([Tok("id", u, 0)] for u in const[1])
                unresolved += const[1]
            pos = m.end()
            k += stars + 1
        out += fmt[pos:]
        new_args.extend(args[k:])
        return out, new_args, unresolved


def _string_constants(toks: list[Tok]) -> dict[str, str]:
    """`[static] [constexpr] [const] char [const]* NAME = "text";` (or `char NAME[] = ...`) of a file: a string a
    log call may print through `%s`."""
    out: dict[str, str] = {}
    for i in range(2, len(toks) - 2):
        if toks[i].text != "=" or toks[i - 1].kind != "id":
            continue
        j = i - 2
        if toks[j].text == "]" and j >= 1 and toks[j - 1].text == "[":
            j -= 2
        while j >= 0 and toks[j].text in ("*", "const"):
            j -= 1
        if j < 0 or toks[j].text != "char":
            continue
        k = i + 1
        value = ""
        while k < len(toks) and toks[k].kind == "str":
            value += toks[k].value
            k += 1
        if k > i + 1 and k < len(toks) and toks[k].text == ";":
            out.setdefault(toks[i - 1].text, value)
    return out


def _fill_holes(fmt: str, args: list[list[Tok]], unresolved: list[str]) -> tuple[str, list[list[Tok]]]:
    """Each hole of `fmt` becomes a `%s` whose argument is the unresolved piece's source text, in order."""
    if _HOLE not in fmt:
        return fmt, args
    out_args: list[list[Tok]] = []
    holes = iter(unresolved)
    k = 0
    for m in _CONV_OR_HOLE.finditer(fmt):
        if m[0] == _HOLE:
            out_args.append([Tok("id", next(holes), 0)])
        else:
            n = _nargs(m[0])
            out_args.extend(args[k : k + n])
            k += n
    out_args.extend(args[k:])
    return fmt.replace(_HOLE, "%s"), out_args


def _bind(macro: Macro, args: list[list[Tok]]) -> dict[str, list[list[Tok]]]:
    params = macro.params or []
    binding: dict[str, list[list[Tok]]] = {}
    for k, p in enumerate(params):
        if p == "__VA_ARGS__":
            binding[p] = args[k:]
        else:
            binding[p] = [args[k]] if k < len(args) else [[]]
    return binding


def _subst(toks: list[Tok], binding: dict[str, list[list[Tok]]]) -> list[Tok]:
    out: list[Tok] = []
    i = 0
    while i < len(toks):
        t = toks[i]
        if t.text == "#" and i + 1 < len(toks) and toks[i + 1].text in binding:
            text = source_text([x for a in binding[toks[i + 1].text] for x in a])
            out.append(Tok("strz", '"' + text + '"', t.line, text))  # `#param`: a string made from code
            i += 2
            continue
        if t.text == "##":
            i += 1
            continue
        if t.kind == "id" and t.text in binding:
            joined: list[Tok] = []
            for k, a in enumerate(binding[t.text]):
                if k:
                    joined.append(Tok("punct", ",", t.line))
                joined.extend(a)
            out.extend(joined)
        else:
            out.append(t)
        i += 1
    return out


def _instantiate(tp: _Template, binding: dict[str, list[list[Tok]]], macro: str) -> _Template:
    args: list[list[Tok]] = []
    for a in tp.args:
        if [x.text for x in a if x.text != "##"] == ["__VA_ARGS__"] and "__VA_ARGS__" in binding:
            args.extend(binding["__VA_ARGS__"])
        else:
            args.append(_subst(a, binding))
    return _Template(tp.level, _subst(tp.fmt, binding), args, _subst(tp.flags, binding), [macro, *tp.via])


def _flags(toks: list[Tok]) -> list[str]:
    names = sorted({t.text.removeprefix("NCCL_") for t in toks if t.kind == "id" and t.text.startswith("NCCL_")})
    return names or ([source_text(toks)] if toks else [])


def _short(s: str, n: int = 100) -> str:
    return s if len(s) <= n else s[: n - 3] + "..."


def _context(lines: list[str], line: int, end_line: int, direct: bool) -> list[str]:
    """A few lines around a call: some before it (the condition), the call itself, one after (what it returns)."""
    first = max(1, line - (CONTEXT_BEFORE if direct else 1))
    last = min(len(lines), end_line + 1)
    if last - first + 1 > CONTEXT_MAX:
        last = max(end_line, first + CONTEXT_MAX - 1)
        if last - first + 1 > CONTEXT_MAX:
            first = max(1, last - CONTEXT_MAX + 1)
    chunk = [lines[k - 1].rstrip() for k in range(first, last + 1)]
    while chunk and not chunk[-1].strip():
        chunk.pop()
    indent = min((len(x) - len(x.lstrip()) for x in chunk if x.strip()), default=0)
    return [_short(x[indent:], 140) for x in chunk]
