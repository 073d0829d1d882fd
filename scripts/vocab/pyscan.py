"""The messages a Python source raises, logs, warns or prints, read with `ast` (the code is never run).

A message is kept as a template: its literal text with each variable part written `{expr}` (the source of the
expression, as an f-string would name it); literal braces are doubled, as in `str.format`. `%`-style logger calls,
`"..." % args` and `"...".format(...)` are turned into the same form when their arguments can be matched. A message
held in a local variable is looked up in the enclosing function (its assignments and `+=` before the call).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

LOG_METHODS = {
    "debug": "debug",
    "info": "info",
    "warning": "warning",
    "warn": "warning",
    "error": "error",
    "exception": "error",
    "critical": "critical",
    "fatal": "critical",
}
LOG_LEVELS = {"DEBUG": "debug", "INFO": "info", "WARNING": "warning", "WARN": "warning", "ERROR": "error"}
LOG_LEVELS |= {"CRITICAL": "critical", "FATAL": "critical"}
# Module or class constants that hold message text (e.g. torchelastic's ChildFailedError table templates).
CONSTANT_NAME = re.compile(r"(MSG|MESSAGE|TEMPLATE|FORMAT|ERROR|WARN|FAILURE|HINT|BANNER)", re.I)
EXCEPTION_NAME = re.compile(r"(Error|Exception|Timeout|Failure|Warning)$")
PERCENT_SPEC = re.compile(r"%(?:\((\w+)\))?[-#0 +]*(?:\d+|\*)?(?:\.\d+)?[sdrfiuxXeEgGoc%]")
MIN_LETTERS = 3  # a template with fewer literal letters is all variable (`raise RuntimeError(e)`): no vocabulary


@dataclass(frozen=True)
class Message:
    template: str
    call: str  # raise | exception | log | warn | print | constant
    severity: str  # error | warning | info | debug | critical | raise | print | constant
    function: str  # enclosing qualified name, "<module>" at top level
    line: int
    exception: str = ""  # the exception class, for call == raise/exception


def _escape(text: str) -> str:
    return text.replace("{", "{{").replace("}", "}}")


def _hole(node: ast.AST) -> str:
    return "{" + ast.unparse(node) + "}"


class _Templater:
    """Turns an expression into a template; `assigned` resolves names to the expressions assigned to them."""

    def __init__(self, assigned: dict[str, list[ast.expr]]):
        self.assigned = assigned

    def __call__(self, node: ast.AST, depth: int = 0) -> str:
        if isinstance(node, ast.Constant):
            return _escape(node.value) if isinstance(node.value, str) else _hole(node)
        if isinstance(node, ast.JoinedStr):
            parts = []
            for value in node.values:
                if isinstance(value, ast.Constant):
                    parts.append(_escape(str(value.value)))
                elif isinstance(value, ast.FormattedValue):
                    inner = ast.unparse(value.value)
                    conv = {-1: "", 115: "!s", 114: "!r", 97: "!a"}[value.conversion]
                    spec = ""
                    if value.format_spec is not None:
                        spec = ":" + "".join(
                            str(v.value) if isinstance(v, ast.Constant) else ast.unparse(v)
                            for v in value.format_spec.values  # type: ignore[attr-defined]
                        )
                    parts.append("{" + inner + conv + spec + "}")
            return "".join(parts)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            return self(node.left, depth) + self(node.right, depth)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod) and _is_str(node.left):
            args = node.right.elts if isinstance(node.right, ast.Tuple) else [node.right]
            return percent_to_template(node.left.value, args)  # type: ignore[union-attr]
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "format"
            and _is_str(node.func.value)
        ):
            return format_to_template(node.func.value.value, node.args, node.keywords)  # type: ignore[union-attr]
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "join"
            and _is_str(node.func.value)
        ):
            return _hole(node)
        if isinstance(node, ast.Name) and depth < 3 and node.id in self.assigned:
            values = self.assigned[node.id]
            text = "".join(self(v, depth + 1) for v in values)
            if _letters(text) >= MIN_LETTERS:
                return text
        if isinstance(node, ast.IfExp):
            return self(node.body, depth)
        return _hole(node)


def _is_str(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


def _letters(template: str) -> int:
    literal = re.sub(r"\{[^{}]*\}", "", template.replace("{{", "").replace("}}", ""))
    return sum(c.isalpha() for c in literal)


def percent_to_template(fmt: str, args: list[ast.expr]) -> str:
    """`"a %s b %d" % (x, y)` -> `a {x} b {y}`; left as written (escaped) when the arguments do not match."""
    specs = [m for m in PERCENT_SPEC.finditer(fmt) if m.group() != "%%"]
    if len(specs) != len(args) and not (len(args) == 1 and isinstance(args[0], ast.Dict)):
        return _escape(fmt)
    out, last, i = [], 0, 0
    for m in PERCENT_SPEC.finditer(fmt):
        out.append(_escape(fmt[last : m.start()]))
        last = m.end()
        if m.group() == "%%":
            out.append("%")
        elif m.group(1):  # %(name)s from a dict
            out.append("{" + m.group(1) + "}")
        else:
            out.append(_hole(args[i]) if i < len(args) else "{}")
            i += 1
    out.append(_escape(fmt[last:]))
    return "".join(out)


def format_to_template(fmt: str, args: list[ast.expr], keywords: list[ast.keyword]) -> str:
    """`"a {} b {name}".format(x, name=y)` -> `a {x} b {y}`."""
    named = {k.arg: k.value for k in keywords if k.arg}
    out, auto = [], 0
    try:
        parsed = list(__import__("string").Formatter().parse(fmt))
    except ValueError:
        return _escape(fmt)
    for literal, field, spec, conv in parsed:
        out.append(_escape(literal))
        if field is None:
            continue
        if field == "":
            node = args[auto] if auto < len(args) else None
            auto += 1
        elif field.isdigit():
            node = args[int(field)] if int(field) < len(args) else None
        else:
            node = named.get(field.split(".")[0].split("[")[0])
        inner = ast.unparse(node) if node is not None else field
        out.append("{" + inner + (f"!{conv}" if conv else "") + (f":{spec}" if spec else "") + "}")
    return "".join(out)


def _name_of(func: ast.expr) -> str:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return ""


def _logger_like(node: ast.expr) -> bool:
    text = ast.unparse(node).lower()
    return "log" in text.rsplit(".", 1)[-1] or text in {"logging", "self.logger", "cls.logger"}


class _Scanner(ast.NodeVisitor):
    def __init__(self) -> None:
        self.stack: list[str] = []
        self.found: list[Message] = []
        self.assigned_stack: list[dict[str, list[ast.expr]]] = [{}]
        self.functions: list[ast.FunctionDef | ast.AsyncFunctionDef | None] = []

    # --- scopes -----------------------------------------------------------------------------------------------
    def _scope(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> None:
        self.stack.append(node.name)
        self.functions.append(None if isinstance(node, ast.ClassDef) else node)
        self.assigned_stack.append({})
        self.generic_visit(node)
        self.assigned_stack.pop()
        self.functions.pop()
        self.stack.pop()

    def _assigned(self) -> dict[str, list[ast.expr]]:
        """The enclosing function's `name = <expr>` (and `name += <expr>`), read once when first needed."""
        assigned = self.assigned_stack[-1]
        function = self.functions[-1] if self.functions else None
        if function is None or "\0read" in assigned:
            return assigned
        assigned["\0read"] = []
        for sub in ast.walk(function):
            if isinstance(sub, ast.Assign) and len(sub.targets) == 1 and isinstance(sub.targets[0], ast.Name):
                assigned[sub.targets[0].id] = [sub.value]
            elif isinstance(sub, ast.AnnAssign) and isinstance(sub.target, ast.Name) and sub.value is not None:
                assigned[sub.target.id] = [sub.value]
            elif (
                isinstance(sub, ast.AugAssign)
                and isinstance(sub.op, ast.Add)
                and isinstance(sub.target, ast.Name)
                and sub.target.id in assigned
            ):
                assigned[sub.target.id].append(sub.value)
        return assigned

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _scope

    @property
    def function(self) -> str:
        return ".".join(self.stack) or "<module>"

    def _add(self, node: ast.AST, template: str, call: str, severity: str, exception: str = "") -> None:
        if _letters(template) >= MIN_LETTERS:
            self.found.append(Message(template, call, severity, self.function, node.lineno, exception))  # type: ignore[attr-defined]

    def _template(self, parts: list[ast.expr]) -> str:
        needs_names = any(isinstance(n, ast.Name) for p in parts for n in ast.walk(p))
        templater = _Templater(self._assigned() if needs_names else {})
        return " ".join(templater(p) for p in parts)

    # --- what prints --------------------------------------------------------------------------------------------
    def visit_Call(self, node: ast.Call) -> None:
        name = _name_of(node.func)
        func = node.func
        if isinstance(func, ast.Attribute) and name in LOG_METHODS and _logger_like(func.value) and node.args:
            first = node.args[0]
            if _is_str(first) and len(node.args) > 1:
                template = percent_to_template(first.value, node.args[1:])  # type: ignore[attr-defined]
            else:
                template = self._template([first])
            self._add(node, template, "log", LOG_METHODS[name])
        elif isinstance(func, ast.Attribute) and name == "log" and _logger_like(func.value) and len(node.args) >= 2:
            level = ast.unparse(node.args[0]).rsplit(".", 1)[-1]
            msg = node.args[1]
            if _is_str(msg) and len(node.args) > 2:
                template = percent_to_template(msg.value, node.args[2:])  # type: ignore[attr-defined]
            else:
                template = self._template([msg])
            self._add(node, template, "log", LOG_LEVELS.get(level, "info"))
        elif name == "warn" and node.args and ast.unparse(func) in {"warnings.warn", "warn"}:
            self._add(node, self._template([node.args[0]]), "warn", "warning")
        elif name == "print" and isinstance(func, ast.Name) and node.args:
            self._add(node, self._template(list(node.args)), "print", "print")
        elif name == "write" and ast.unparse(func) in {"sys.stderr.write", "sys.stdout.write"} and node.args:
            self._add(node, self._template([node.args[0]]), "print", "print")
        elif EXCEPTION_NAME.search(name) and node.args and name[:1].isupper():
            self._add(node, self._template([node.args[0]]), "exception", "error", name)
        self.generic_visit(node)

    def visit_Raise(self, node: ast.Raise) -> None:
        exc = node.exc
        if isinstance(exc, ast.Call) and exc.args and not EXCEPTION_NAME.search(_name_of(exc.func)):
            # `raise SomeClass("...")` whose name does not say it is an exception (visit_Call skips it)
            self._add(node, self._template([exc.args[0]]), "exception", "error", _name_of(exc.func))
        self.generic_visit(node)

    def _constant(self, node: ast.Assign | ast.AnnAssign, targets: list[ast.expr]) -> None:
        value = node.value
        for target in targets:
            if (
                isinstance(target, ast.Name)
                and CONSTANT_NAME.search(target.id)
                and value is not None
                and (_is_str(value) or isinstance(value, ast.JoinedStr | ast.BinOp))
            ):
                template = _Templater({})(value)
                if _letters(template) >= MIN_LETTERS and " " in template:
                    self.found.append(Message(template, "constant", "constant", self.function, node.lineno))
        self.generic_visit(node)

    def visit_Assign(self, node: ast.Assign) -> None:
        self._constant(node, node.targets)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self._constant(node, [node.target])


def scan(source: str) -> list[Message]:
    """Every message of one module, in source order (duplicates at one line removed)."""
    tree = ast.parse(source)
    scanner = _Scanner()
    scanner.visit(tree)
    seen: set[tuple] = set()
    out = []
    for m in sorted(scanner.found, key=lambda m: (m.line, m.template)):
        key = (m.line, m.template, m.call)
        if key not in seen:
            seen.add(key)
            out.append(m)
    return out
