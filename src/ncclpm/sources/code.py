"""Recognise code and configuration among a job's files: they are read for settings, never as log evidence.

A job folder usually carries a snapshot of what ran (`train.py`, a retry wrapper, launch scripts, configs), and
error strings inside it (a docstring quoting an NVML error, a retry wrapper's list of patterns) are not events.
The content decides and the name only tips a close call: `train.log` holding Python is code, `job.py.log`
holding output is a log, and a log with a pasted traceback (`File "x.py", line 3, in f` + its source line) is
still a log.

`code_language(name, head)` returns one of LANGUAGES, or None for anything else (a log, prose, a dump). Python
is decided by the parser (`ast`: a log never parses as Python), the rest by counting, over the first lines,
lines of code (Python / shell shapes, continuation lines of a bracket or `\\`) against lines only a log has
(timestamps, rank prefixes, traceback frames, exception lines, progress bars) - strings and docstrings do not
count.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import PurePosixPath

from ncclpm.sources.line_tags import without_line_tags
from ncclpm.util.encoding import decode_text
from ncclpm.util.structure import load_json, toml_too_deep

LANGUAGES = ("python", "notebook", "shell", "yaml", "toml", "json", "dockerfile")
MAX_CODE_BYTES = 32 * 1024**2  # a larger file is data or a log, never a script or a config: read as a log
MAX_LINES = 400  # lines looked at: a code snapshot is code from its first line, a log is a log early on
MAX_LINE = 2000  # characters of a line looked at: its start tells a log line from code
PARSE_CHARS = 16384  # what the Python parser is given: enough to tell, and the parse stays a few ms
PARSE_WHOLE = 4 * 1024**2  # a Python file with job lines is parsed whole up to this size (code quoting a log)
_BY_SUFFIX = {
    ".py": "python",
    ".pyw": "python",
    ".ipynb": "notebook",
    ".sh": "shell",
    ".bash": "shell",
    ".zsh": "shell",
    ".ksh": "shell",
    ".sbatch": "shell",
    ".slurm": "shell",
    ".pbs": "shell",
    ".env": "shell",
    ".yaml": "yaml",
    ".yml": "yaml",
    ".toml": "toml",
    ".json": "json",
    ".dockerfile": "dockerfile",
}

# Lines only a log has. Anchored ones are tested on the raw line; the others on the line without its string
# literals (a retry wrapper's pattern list quotes log text, a log does not quote it).
_LOG_ANCHORED = re.compile(
    r"""^\s*Traceback\ \(most\ recent\ call\ last\)
    |^\s*File\ "[^"]+",\ line\ \d+
    |^\s*(?:[\w.]+\.)?\w*(?:Error|Exception|Interrupt|Exit|Warning)(?::\s|$)
    |^\[?(?:rank|default)\d+\]?:
    |^\[\d+,\d+\]<std(?:out|err)>:
    |^\[?[IWEF]\d{4}\ \d\d:\d\d:\d\d
    |^\S+:\d+:\d+\ \[\d+\]\ NCCL
    |^\[?(?:INFO|WARNING|WARN|ERROR|DEBUG|CRITICAL|FATAL)\b[\s:\]|-]
    |^\++\ \S
    |^(?:srun|slurmstepd|sbatch|salloc|mpirun|torchrun|bash|sh):[ ]
    |^\*{3}[ ]
    |^\s*Thread\ 0x[0-9A-Fa-f]+
    |^\s*\S+\ \([^()]*\.py:\d+\)\s*$
    |^\s*what\(\):
    |^terminate\ called[ ]""",
    re.X,
)
_LOG_ANYWHERE = re.compile(
    r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d|\b\d\d:\d\d:\d\d[.,]\d{3}|\d%\||\bit/s\]|s/it\]|\bNCCL (?:INFO|WARN|ATTN)\b"
    r"|\((?:core dumped|Segmentation fault)\)"
)
_FRAME = re.compile(r'^\s*File "[^"]+", line \d+')
_STRINGS = re.compile(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'')

_PYTHON_STRONG = re.compile(
    r"""^(?:from\s+\.*[\w.]*\s+import\s+[\w*(]
    |import\s+[\w.]+(?:\s+as\s+\w+)?(?:\s*,\s*[\w.]+(?:\s+as\s+\w+)?)*\s*(?:\#.*)?$
    |(?:async\s+)?def\s+\w+\s*\(
    |class\s+\w+\s*[(:]
    |@[\w.]+(?:\(.*)?$
    |(?:if|elif|while|for|with|try|except|else|finally|async\s+(?:with|for))\b.*:\s*(?:\#.*)?$
    |(?:return|raise|yield|pass|break|continue|assert|global|nonlocal|del)(?:\s|$))""",
    re.X,
)
_PYTHON_WEAK = re.compile(
    r"""^(?:[A-Za-z_][\w.]*(?:\[[^\]]*\])*(?:\s*,\s*[A-Za-z_][\w.]*)*\s*(?:[-+*/%|&@]|//|\*\*)?=[^=]
    |[A-Za-z_][\w.]*\s*:\s*[\w\[\], .|]+\s=\s
    |[A-Za-z_][\w.]*\(
    |[rbuf]{0,2}(?:\"\"\"|'''))""",
    re.X,
)
_SHELL = re.compile(
    r"""^(?:export\s+[A-Za-z_]\w*(?:=|\s*$)
    |(?:[A-Za-z_]\w*=(?:"[^"]*"|'[^']*'|[^\s"']*)\s+)*(?:srun|torchrun|mpirun|mpiexec|deepspeed|accelerate\s+launch
       |colossalai\s+run|python[\d.]*\s+(?:-[mucWO]|\S+\.py\b)|docker\s+(?:run|exec)|singularity\s+exec
       |apptainer\s+exec|cd|source|module\s+(?:load|purge|use)|conda\s+activate|pip\s+install|set\s+[-+][a-z]+
       |unset|mkdir|rm|cp|mv|echo|printf|sleep|wait|exec|ulimit|trap|sbatch|scontrol|nvidia-smi)(?:\s|$)
    |[A-Za-z_]\w*=(?:"[^"]*"|'[^']*'|\$\(.*\)|\$\{.*\}|[^\s"'=]*)\s*(?:\#.*)?$
    |(?:grep|egrep|sed|awk|cat|find|ls|tail|head|tee|test|touch|chmod|ln)\s+[-"'$/.~\w]
    |(?:local|declare|readonly|read)\s+-?\w
    |(?:if|elif|while|until)\s+(?:\[\[?\s|!?\s*\w.*;\s*(?:then|do)\b)
    |(?:then|fi|do|done|else|esac|\{|\})\s*(?:;.*)?$
    |.*;\s*(?:fi|done)\s*$
    |for\s+\w+\s+in\s
    |(?:function\s+)?[A-Za-z_][\w-]*\s*\(\)\s*\{?$)
    |\s\\$""",
    re.X,
)
_SHEBANG = re.compile(r"^#!.*\b(?:(?P<py>python[\d.]*)|(?:ba|z|k|da)?sh)\b")
_SCHEDULER = re.compile(r"^#(?:SBATCH|PBS|BSUB|\$)\s")
_YAML = re.compile(r"^\s*(?:-\s+\S|[\w.-]+:(?:\s+\S.*)?$|---\s*$)")
_YAML_PARENT = re.compile(r"^\s*[\w.-]+:\s*$")
_DOCKER = re.compile(
    r"^(?:FROM|RUN|ENV|COPY|ADD|WORKDIR|CMD|ENTRYPOINT|ARG|LABEL|EXPOSE|USER|VOLUME|SHELL|HEALTHCHECK|STOPSIGNAL)\s"
)
_TOP_LEVEL = re.compile(r"\n(?=[A-Za-z_@])")
_STRONG_STATEMENTS = (
    ast.Import,
    ast.ImportFrom,
    ast.FunctionDef,
    ast.AsyncFunctionDef,
    ast.ClassDef,
    ast.Assign,
    ast.AnnAssign,
    ast.AugAssign,
    ast.If,
    ast.For,
    ast.While,
    ast.With,
    ast.Try,
)


# Lines that only a running job prints, whatever came before them in the file: a traceback (its head, its frames),
# a rank or launcher prefix, a glog / ISO / NCCL stamp, Slurm's and Python logging's default prefixes, a C++ abort,
# a tqdm bar, the frames of torch's failed-collective stack (`#0 all_reduce from .../distributed_c10d.py:2501`).
# At the start of a line: in a config or a script such text is indented, quoted or in a comment.
_JOB_LINE = re.compile(
    r"""^(?:Traceback\ \(most\ recent\ call\ last\):
    |\ {2}File\ "[^"\n]+",\ line\ \d+,\ in\s
    |\[?(?:rank|default)\d+\]?:
    |\[\d+,\d+\]<std(?:out|err)>:
    |\[?[IWEF]\d{4}\ \d\d:\d\d:\d\d
    |\[?\d{4}-\d\d-\d\d[T\ ]\d\d:\d\d:\d\d
    |[\w.-]+:\d+:\d+\ \[\d+\]\ NCCL\ (?:INFO|WARN)
    |(?:srun|slurmstepd):\ error:
    |(?:DEBUG|INFO|WARNING|ERROR|CRITICAL):[\w.]+:
    |terminate\ called\ after
    |\#\d+\ [\w<>.]+\ from\ \S+\.py:\d+\s*$
    |[^\n]{0,80}?\d{1,3}%\|[^\n|]{0,200}\|\ *\d+/\d+\ \[)""",
    re.X | re.M,
)
JOB_LINES = 2  # lines of a job that make a file a log
# torch's failed-collective frame (`#0 all_reduce from .../distributed_c10d.py:2501`): a `#` line that is no comment
_FR_STACK_FRAME = re.compile(r"^#\d+ [\w<>.]+ from \S+\.py:\d+\s*$")
# The last line of a program that died: an uncaught exception, flush left, with a message of a few words
# (`RuntimeError: CUDA error: an illegal memory access was encountered`). A config never ends on one; in code it is
# a syntax error (Python) or a command no shell has.
_DYING_LINE = re.compile(r"^(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception):[ \t]+\S+[ \t]+\S.*$")


def job_lines(text: str, limit: int = JOB_LINES) -> int:
    """How many lines of `text` only a running job prints (`_JOB_LINE`), counting up to `limit`."""
    n = 0
    for _ in _JOB_LINE.finditer(without_line_tags(text)):
        n += 1
        if n >= limit:
            break
    return n


def is_log_after_all(lang: str, text: str) -> bool:
    """Whether a file whose head reads as code (`code_language` gave `lang`) is a log: the whole file holds lines
    only a job prints, or ends on an uncaught exception's line (a training log that starts with its printed config -
    a Hydra/OmegaConf YAML dump, JSON, a pprint'ed dict, an argparse Namespace - or an `env` dump, then its
    failure). A JSON document or a notebook that parses, or a Python program that parses, holds such text only in
    strings: code."""
    if lang in ("json", "notebook"):
        return False
    if job_lines(text) < JOB_LINES and not _ends_dying(text):
        return False
    if lang == "python" and len(text) <= PARSE_WHOLE:
        try:
            ast.parse(text)
            return False
        except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError):
            pass
    return True


def _ends_dying(text: str) -> bool:
    """Whether the file's last line is an uncaught exception's (`_DYING_LINE`): a printed config, then the one line
    a program prints when it dies without a traceback (a CUDA error raised at exit, a re-raised exception)."""
    tail = text[-MAX_LINE:].rstrip()
    last = without_line_tags(tail[tail.rfind("\n") + 1 :])
    return bool(_DYING_LINE.match(last))


def name_hint(name: str) -> str | None:
    """The language a file name suggests (only the last suffix counts: `job.py.log` suggests nothing)."""
    base = PurePosixPath(name.replace("\\", "/")).name.lower()
    if base.startswith(("dockerfile", "containerfile")):
        return "dockerfile"
    return _BY_SUFFIX.get(PurePosixPath(base).suffix)


def decode_head(head: bytes, truncated: bool) -> str:
    text = decode_text(head)
    if truncated and "\n" in text:
        text = text[: text.rindex("\n") + 1]  # the last line was cut: it would look like a syntax error
    return text


@dataclass
class _Tally:
    """How many of a file's first lines look like each language, like log lines or like nothing known."""

    python: int = 0
    python_strong: int = 0
    fences: int = 0
    shell: int = 0
    log: int = 0
    other: int = 0
    yaml: int = 0
    yaml_nested: bool = False
    docker: int = 0
    docker_first: bool = False
    shebang: str | None = None

    @property
    def code(self) -> int:
        return self.python + self.shell

    @property
    def total(self) -> int:
        return self.code + self.log + self.other


def _brackets(line: str) -> int:
    bare = _STRINGS.sub("", line.split(" #", 1)[0])
    return sum(bare.count(c) for c in "([{") - sum(bare.count(c) for c in ")]}")


def _triple_open(line: str, quote: str | None) -> str | None:
    """Triple-quote state after `line` (None = outside a triple-quoted string)."""
    for match in re.finditer(r'"""|\'\'\'', line):
        if quote is None:
            quote = match.group()
        elif match.group() == quote:
            quote = None
    return quote


def _comment(s: str, t: _Tally) -> None:
    if t.total == 0 and (m := _SHEBANG.match(s)):
        t.shebang = "python" if m.group("py") else "shell"
    elif _SCHEDULER.match(s):
        t.shell += 1


def _first_lines(text: str, limit: int) -> Iterator[str]:
    """The first `limit` lines, split lazily: a log is usually decided after a few lines of its 64 KB head."""
    start = 0
    for _ in range(limit):
        if start >= len(text):
            return
        end = text.find("\n", start)
        end = len(text) if end < 0 else end
        yield text[start : min(end, start + MAX_LINE)]
        start = end + 1


def _tally(text: str) -> _Tally:
    t = _Tally()
    quote: str | None = None  # inside a triple-quoted string opened by a code line
    depth = 0  # brackets opened by a code line and not closed yet
    after_frame = continued = False
    for raw in _first_lines(text, MAX_LINES):
        line = raw.rstrip()
        s = line.lstrip()
        if quote is not None:
            quote = _triple_open(line, quote)
            continue
        if not s:
            after_frame = False
            continue
        if s.startswith("```"):
            t.fences += 1  # Markdown: prose around code blocks, a document rather than code
            continue
        if _FR_STACK_FRAME.match(s):  # starts with `#` but is torch's failed-collective frame, not a comment
            t.log += 1
            continue
        if s.startswith("#") and not after_frame:
            _comment(s, t)
            continue
        if _LOG_ANCHORED.match(line) or _LOG_ANYWHERE.search(_STRINGS.sub("", line)) or after_frame:
            t.log += 1
            after_frame = bool(_FRAME.match(line))  # the next line is the frame's source line: log text too
            depth, continued = 0, False
            if t.log >= 20 and t.log * 2 > t.total:
                break  # a log: the rest cannot make it code
            continue
        if set(s) <= set("-=*_~ "):
            continue  # separators: in logs and in YAML alike
        t.yaml += bool(_YAML.match(line))
        t.yaml_nested |= bool(_YAML_PARENT.match(line))
        is_docker = bool(_DOCKER.match(s))
        t.docker_first |= is_docker and t.total == 0 and s.startswith(("FROM", "ARG"))
        t.docker += is_docker or continued
        if continued or (depth == 0 and _SHELL.match(s)):
            t.shell += 1
        elif depth > 0 or _PYTHON_STRONG.match(s) or _PYTHON_WEAK.match(s):
            t.python += 1
            t.python_strong += depth == 0 and bool(_PYTHON_STRONG.match(s))
            depth = min(64, max(0, depth + _brackets(s)))
            quote = _triple_open(s, None)
        else:
            t.other += 1
        continued = s.endswith("\\")
    return t


def _parses_as_python(text: str, truncated: bool) -> bool:
    """True when the text is a Python program with real statements (imports, definitions, assignments,
    control flow, or a call spread over several lines) - never true for a log."""
    if len(text) > PARSE_CHARS:
        text, truncated = text[:PARSE_CHARS], True
    if truncated:  # the head may end inside a block: parse what precedes the last top-level statement
        cut = [m.start() for m in _TOP_LEVEL.finditer(text)]
        text = text[: cut[-1] + 1] if cut else text
    try:
        tree = ast.parse(text)  # a failing parse costs a second, slower pass in CPython: parse once
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError):
        return False
    return any(
        isinstance(node, _STRONG_STATEMENTS)
        or (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) and node.end_lineno != node.lineno)
        for node in tree.body
    )


def _json_kind(text: str, hint: str | None, truncated: bool) -> str | None:
    """JSON and notebooks. Parsed with depth and integers bounded (`structure.load_json`): a file nested deeper
    than any config is not parsed, and is only JSON when named so."""
    try:
        doc = load_json(text)
    except ValueError:  # (`structure.TooDeep` too)
        first = text.lstrip().split("\n", 1)[0]
        try:
            if first.strip() == text.strip():
                raise ValueError("one line: already tried")
            load_json(first)
            return None  # one JSON value per line: a structured log, not a config
        except ValueError:
            pass
        return hint if truncated and hint in ("json", "notebook") else None
    if isinstance(doc, dict) and isinstance(doc.get("cells"), list):
        return "notebook"
    return "json" if isinstance(doc, dict | list) and doc else None


def _structured(text: str, hint: str | None, t: _Tally, truncated: bool) -> str | None:
    """YAML, TOML and Dockerfiles: by name when the content does not look like a log, else by shape."""
    if hint == "toml":
        try:
            if not toml_too_deep(text):  # tomllib recurses once per level: a 600-deep array is no config
                import tomllib  # (only for a file named .toml: ~4 ms a run otherwise)

                tomllib.loads(text)
                return "toml"
        except (ValueError, RecursionError, MemoryError):  # (TOMLDecodeError is a ValueError; so is a 5000-digit int)
            pass
        return "toml" if truncated or t.log == 0 else None
    if hint in ("yaml", "dockerfile"):
        return hint
    if t.log:
        return None
    if t.docker_first and t.docker >= 2 and t.docker * 10 >= t.total * 6:
        return "dockerfile"
    if t.yaml >= 3 and t.yaml_nested and t.yaml * 10 >= t.total * 8:
        return "yaml"
    return None


def code_language(name: str, head: bytes, truncated: bool = False) -> str | None:
    """The language of a code or configuration file (one of LANGUAGES), or None for a log or anything else.

    `head` is the start of the file; `truncated` says whether the file goes on after it."""
    text = decode_head(head, truncated)
    if not text.strip():
        return None
    hint = name_hint(name)
    json_like = hint in ("json", "notebook") or text.lstrip()[:1] in ("{", "[")
    if json_like and (kind := _json_kind(text, hint, truncated)):
        return kind
    text = without_line_tags(text)
    t = _tally(text)
    if t.log > max(1, t.total // 5):
        return None
    if structured := _structured(text, hint, t, truncated):
        return structured
    said = t.shebang or (hint if hint in ("python", "shell") else None)
    if said != "shell" and (t.python or said == "python") and _parses_as_python(text, truncated):
        return "python"
    if said:  # named or marked as code: code unless what is seen of it is mostly not
        return said if t.total == 0 or (t.code and t.code * 10 >= t.total * 3) else None
    if t.log or t.fences or t.code * 10 < t.total * 6 or not (t.code >= 2 or t.code == t.total):
        return None
    if t.shell >= t.python:
        return "shell"
    return "python" if t.python_strong >= 3 else None  # Python that does not parse (Python 2, a cut snippet)
