"""A small C/C++ reader for NCCL's sources: enough of a lexer and of the preprocessor to find NCCL's log calls.

It finds `WARN(...)`, `INFO(...)`, `TRACE_CALL(...)`, `VERSION(...)`, `INFO_LOC(...)` and RAS's `rasOutAppend(...)`
calls, their format argument (adjacent literals joined, `PRIu64`-style and string macros resolved), the function
around them, and the calls that reach a log call through a function-like macro (`CUDACHECK`, `SYSCHECK`, the ibv
and NVML wrappers): there the format is the macro's, with the invocation's arguments put in (`"Call to " name`),
and the site is the invocation, as `__FILE__`/`__LINE__`/`__func__` are when the compiler expands it.

Stdlib only. Not a C++ parser: it reads tokens, balanced brackets and `#define`s, which is what these calls need.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# --- lexer ----------------------------------------------------------------------------------------------------

_TOKEN = re.compile(
    r"""
    (?P<nl>\n)
  | (?P<ws>[ \t\r\f\v]+|\\\n)
  | (?P<lcom>//[^\n]*)
  | (?P<bcom>/\*.*?(?:\*/|\Z))
  | (?P<raw>(?:u8|u|U|L)?R"(?P<delim>[^()\\\s]{0,16})\((?P<rawbody>.*?)\)(?P=delim)")
  | (?P<str>(?:u8|u|U|L)?"(?:[^"\\\n]|\\.|\\\n)*"?)
  | (?P<chr>(?:u8|u|U|L)?'(?:[^'\\\n]|\\.)*'?)
  | (?P<num>\.?[0-9](?:[0-9A-Za-z_.']|[eEpP][+-])*)
  | (?P<id>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<punct>::|->|\#\#|\.\.\.|[^\sA-Za-z0-9_])
    """,
    re.X | re.S,
)


@dataclass(slots=True)
class Tok:
    kind: str  # id, str, chr, num, punct
    text: str
    line: int
    value: str = ""  # a string literal's decoded value


_ESC = {"n": "\n", "t": "\t", "r": "\r", "a": "\a", "b": "\b", "f": "\f", "v": "\v", "\\": "\\", "'": "'", '"': '"'}
_ESC["?"] = "?"
_ESC_RE = re.compile(r"\\(?:x([0-9A-Fa-f]+)|([0-7]{1,3})|(\n)|(.))", re.S)


def decode_c_string(body: str) -> str:
    """The value of a C string literal's body (escapes decoded; a line continuation removed)."""

    def esc(m: re.Match[str]) -> str:
        if m[1]:
            return chr(int(m[1], 16))
        if m[2]:
            return chr(int(m[2], 8))
        if m[3]:
            return ""  # a line continuation inside the literal
        return _ESC.get(m[4], m[4])

    return _ESC_RE.sub(esc, body)


@dataclass
class Lexed:
    code: list[Tok]  # the tokens outside preprocessor directives (comments dropped)
    directives: list[tuple[int, list[Tok]]]  # (line, tokens after '#') for each directive
    lines: list[str]  # the source lines, for context


def lex(text: str) -> Lexed:
    """Tokens of the code that a Linux build compiles (`#if 0` and Windows-only branches left out), and the
    directives of those branches."""
    code: list[Tok] = []
    directives: list[tuple[int, list[Tok]]] = []
    line = 1
    at_line_start = True
    directive: list[Tok] | None = None
    directive_line = 0
    cond = _Conditionals()

    for m in _TOKEN.finditer(text):
        kind = m.lastgroup
        s = m[0]
        if kind == "nl":
            if directive is not None:
                head = directive[0].text if directive else ""
                if cond.active:
                    directives.append((directive_line, directive))
                if head in _CONDITIONAL:
                    was_active = cond.active
                    cond.directive(directive)
                    if was_active or cond.active:  # brace matching reads these (two branches, one brace each)
                        code.append(Tok("cond", head, directive_line))
                directive = None
            line += 1
            at_line_start = True
            continue
        if kind in ("ws", "lcom", "bcom"):
            line += s.count("\n")
            continue
        if at_line_start and s == "#":
            directive, directive_line, at_line_start = [], line, False
            continue
        at_line_start = False
        if kind == "raw":
            tok = Tok("str", s, line, m["rawbody"])
        elif kind == "str":
            q = s.index('"')
            body = s[q + 1 : -1] if len(s) > q + 1 and s.endswith('"') else s[q + 1 :]
            tok = Tok("str", s, line, decode_c_string(body))
        else:
            tok = Tok(kind if kind in ("id", "num", "chr") else "punct", s, line)
        line += s.count("\n")
        if directive is not None:
            directive.append(tok)
        elif cond.active:
            code.append(tok)
    if directive is not None and cond.active:
        directives.append((directive_line, directive))
    return Lexed(code, directives, text.split("\n"))


_CONDITIONAL = {"if", "ifdef", "ifndef", "elif", "else", "endif"}
# What a Linux release build of libnccl defines (True) or not (False); any other condition is taken as true.
_KNOWN = {"NCCL_OS_WINDOWS": False, "_WIN32": False, "_MSC_VER": False, "NCCL_OS_LINUX": True, "__linux__": True}


def _condition(head: str, toks: list[Tok]) -> bool | None:
    words = [t.text for t in toks[1:]]
    if head in ("ifdef", "ifndef") and len(words) == 1 and words[0] in _KNOWN:
        val = _KNOWN[words[0]]
        return val if head == "ifdef" else not val
    if words == ["0"]:
        return False
    neg = words[:1] == ["!"]
    if neg:
        words = words[1:]
    if words[:1] == ["defined"]:
        words = [w for w in words[1:] if w not in ("(", ")")]
    if len(words) == 1 and words[0] in _KNOWN:
        return _KNOWN[words[0]] != neg
    return None


class _Conditionals:
    """The stack of `#if` branches: a branch is skipped when its condition is known false (or an earlier branch of
    the same `#if` was known true)."""

    def __init__(self) -> None:
        self.stack: list[list] = []  # [this branch active, a branch already known taken]
        self.active = True

    def directive(self, toks: list[Tok]) -> None:
        head = toks[0].text if toks else ""
        if head in ("if", "ifdef", "ifndef"):
            c = _condition(head, toks)
            self.stack.append([c is not False, c is True])
        elif head == "elif" and self.stack:
            e = self.stack[-1]
            c = _condition("if", toks)
            e[0] = not e[1] and c is not False
            e[1] = e[1] or c is True
        elif head == "else" and self.stack:
            e = self.stack[-1]
            e[0] = not e[1]
        elif head == "endif" and self.stack:
            self.stack.pop()
        self.active = all(e[0] for e in self.stack)


# --- brackets and arguments -----------------------------------------------------------------------------------

_OPEN = {"(": ")", "[": "]", "{": "}"}


def split_args(toks: list[Tok], start: int) -> tuple[list[list[Tok]], int] | None:
    """`toks[start]` is '(': the comma-separated arguments up to its matching ')', and the index after it."""
    depth = 0
    args: list[list[Tok]] = [[]]
    i = start
    n = len(toks)
    while i < n:
        t = toks[i]
        if t.kind == "cond":
            pass
        elif t.kind == "punct" and t.text in _OPEN:
            depth += 1
            if depth > 1:
                args[-1].append(t)
        elif t.kind == "punct" and t.text in (")", "]", "}"):
            depth -= 1
            if depth == 0:
                if args == [[]]:
                    args = []
                return args, i + 1
            args[-1].append(t)
        elif t.kind == "punct" and t.text == "," and depth == 1:
            args.append([])
        else:
            args[-1].append(t)
        i += 1
    return None


def source_text(toks: list[Tok]) -> str:
    """Tokens written back as compact source text (spacing normalised)."""
    out = ""
    prev: Tok | None = None
    for t in toks:
        if t.kind == "cond":
            continue
        if prev is not None and _needs_space(prev, t):
            out += " "
        out += t.text
        prev = t
    return out


def _needs_space(a: Tok, b: Tok) -> bool:
    if a.kind in ("id", "num") and b.kind in ("id", "num", "str", "chr"):
        return True
    if a.kind == "str" and b.kind in ("id", "str"):
        return True
    if (a.kind == "punct" and a.text == ",") or (b.kind == "punct" and b.text in ("?", ":", "|", "&&", "||")):
        return True
    return a.kind == "punct" and a.text in ("?", "|") and b.kind != "punct"


# --- macros ---------------------------------------------------------------------------------------------------


@dataclass
class Macro:
    name: str
    params: list[str] | None  # None: object-like
    body: list[Tok]
    file: str
    line: int


def parse_defines(directives: list[tuple[int, list[Tok]]], file: str) -> list[Macro]:
    out = []
    for line, toks in directives:
        if len(toks) < 2 or toks[0].text != "define" or toks[1].kind != "id":
            continue
        name = toks[1].text
        rest = toks[2:]
        # function-like only when '(' follows the name without a space: the lexer lost spacing, so compare columns
        # through the raw text is not possible; NCCL never writes `#define X (expr)` for a function-like macro's
        # name, and an object-like `#define X (a|b)` has no identifier list - told apart by the parameter shape.
        params = None
        if rest and rest[0].text == "(":
            parsed = split_args(rest, 0)
            if parsed is not None:
                args, end = parsed
                if all(len(a) == 1 and (a[0].kind == "id" or a[0].text == "...") for a in args):
                    params = ["__VA_ARGS__" if a[0].text == "..." else a[0].text for a in args]
                    rest = rest[end:]
        out.append(Macro(name, params, rest, file, line))
    return out


# --- functions around a position ------------------------------------------------------------------------------

_NOT_FUNCTIONS = {"if", "for", "while", "switch", "catch", "sizeof", "return", "do", "else", "decltype", "alignof"}
_AFTER_PARAMS = {"const", "noexcept", "override", "final", "mutable", "volatile", "throw"}


def function_spans(toks: list[Tok]) -> list[tuple[int, int, str]]:
    """(first token index, last token index, name) of each function body, outermost first; a lambda's body is
    named `operator()` (what `__func__` says in it)."""
    spans: list[tuple[int, int, str]] = []
    stack: list[tuple[int, str | None]] = []
    saved: list[list[tuple[int, str | None]]] = []  # the brace stack at each open `#if`
    for i, t in enumerate(toks):
        if t.kind == "cond":
            # each branch of an `#if` starts from the braces open before it (`#if A  if (x) { #else  if (y) {`)
            if t.text in ("if", "ifdef", "ifndef"):
                saved.append(list(stack))
            elif t.text in ("else", "elif") and saved:
                stack = list(saved[-1])
            elif t.text == "endif" and saved:
                saved.pop()
            continue
        if t.kind != "punct":
            continue
        if t.text == "{":
            stack.append((i, _function_name_before(toks, i)))
        elif t.text == "}" and stack:
            start, name = stack.pop()
            if name is not None:
                spans.append((start, i, name))
    spans.sort()
    return spans


def _function_name_before(toks: list[Tok], brace: int) -> str | None:
    j = brace - 1
    # trailing qualifiers and a trailing return type `-> T`
    while j >= 0 and toks[j].kind == "id" and toks[j].text in _AFTER_PARAMS:
        j -= 1
    k = j
    while k >= 0 and k > brace - 12 and not (toks[k].kind == "punct" and toks[k].text in (")", ";", "{", "}")):
        if toks[k].text == "->":
            j = k - 1
            break
        k -= 1
    if j < 0 or toks[j].text != ")":
        return None
    # find the matching '('
    depth = 0
    while j >= 0:
        if toks[j].text == ")":
            depth += 1
        elif toks[j].text == "(":
            depth -= 1
            if depth == 0:
                break
        j -= 1
    if j <= 0:
        return None
    before = toks[j - 1]
    if before.text == "]":
        return "operator()"
    if before.kind != "id" or before.text in _NOT_FUNCTIONS:
        return None
    # a constructor's initializer list `: a(x), b(y) {` - walk back to the parameter list
    prev = toks[j - 2] if j >= 2 else None
    if prev is not None and prev.text in (",", ":") and prev.text != "::":
        k = j - 2
        depth = 0
        while k >= 0:
            tx = toks[k].text
            if tx in (")", "}"):
                depth += 1
            elif tx in ("(", "{"):
                depth -= 1
            elif depth == 0 and tx in (";",):
                return None
            if depth == 0 and tx == ":" and k > 0 and toks[k - 1].text == ")":
                return _function_name_before([*toks[:k], Tok("punct", "{", 0)], k)
            k -= 1
        return None
    if prev is not None and prev.text in ("=", "return", "(", ",", "?", "&&", "||", "!", "new"):
        return None  # a call, not a definition
    return before.text


def enclosing_function(spans: list[tuple[int, int, str]], index: int) -> str | None:
    """The innermost function body holding token `index`."""
    found = None
    for start, end, name in spans:
        if start > index:
            break
        if start < index < end:
            found = name
    return found


@dataclass
class Call:
    """A log call found in source, or reached through a macro."""

    level: str  # WARN, INFO, CALL, VERSION, RAS
    fmt_toks: list[Tok]
    arg_toks: list[list[Tok]]
    flags: list[Tok]
    line: int
    end_line: int
    token_index: int
    via: list[str] = field(default_factory=list)
    loc_prefix: bool = False  # INFO_LOC: the format is prefixed with "%s:%d (%s) " (file, line, function)
