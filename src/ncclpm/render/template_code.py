"""The report templates' Jinja environment options, and their code compiled once, at install time.

Jinja compiles a template's source to Python at its first use in a process: ~17 ms for the Markdown report, at
every run - a twentieth of a small job. `hatch_build.py` records each shipped template's compiled code
(`write_template_snapshot`; it loads this module by path, so it imports nothing but Jinja and the standard
library), and `SnapshotCache` hands it to the environment while the template's source still has the recorded
checksum, for the same Python and Jinja versions; otherwise the template is compiled as usual. Nothing is ever
written at run time.
"""

from __future__ import annotations

import marshal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jinja2
from jinja2 import BytecodeCache, Environment, FileSystemLoader, StrictUndefined, pass_context, select_autoescape
from jinja2.bccache import Bucket

SNAPSHOT = Path(__file__).resolve().parents[1] / "_templates_snapshot.bin"  # written by hatch_build.py
FORMAT = 1
# The filters the templates use (render/jinja.py gives them): the compiler checks each name exists.
FILTER_NAMES = (
    "duration_ms",
    "ts",
    "ts_full",
    "md_text",
    "md_cell",
    "md_span",
    "md_code",
    "md_block",
    "md_prose",
    "md_fenced",
    "md_quote",
    "plain",
    "prose",
    "folded",
)
CONTEXT_FILTERS = ("prose",)  # filters that take the template's context (Jinja compiles their calls differently)


def new_environment(
    templates: Path,
    finalize: Callable[..., Any],
    filters: dict[str, Callable[..., Any]],
    cache: BytecodeCache | None = None,
) -> Environment:
    """The report environment: the run-time one and the one the snapshot is compiled with are made here alike."""
    env = Environment(
        loader=FileSystemLoader(str(templates)),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=select_autoescape(enabled_extensions=("html", "html.j2"), default_for_string=False),
        finalize=finalize,
        bytecode_cache=cache,
    )
    env.filters.update(filters)
    return env


class SnapshotCache(BytecodeCache):
    """Jinja's bytecode cache, read from the install-time snapshot only (`dump_bytecode` keeps a template compiled
    at run time in memory, for `write_template_snapshot`). Keyed by template name: the file's path differs
    between where the package was built and where it runs. Jinja itself checks the Python version and the
    source's checksum of each entry."""

    def __init__(self, codes: dict[str, bytes] | None = None) -> None:
        self.codes = dict(codes or {})

    def get_cache_key(self, name: str, filename: str | None = None) -> str:
        return name

    def load_bytecode(self, bucket: Bucket) -> None:
        data = self.codes.get(bucket.key)
        if data is not None:
            bucket.bytecode_from_string(data)

    def dump_bytecode(self, bucket: Bucket) -> None:
        self.codes[bucket.key] = bucket.bytecode_to_string()


def read_snapshot(path: Path = SNAPSHOT) -> SnapshotCache:
    """The recorded codes, when the snapshot is there and was made with this Jinja; else an empty cache."""
    try:
        doc = marshal.loads(path.read_bytes())  # the package's own file, written at install (as its .pyc files)
        if doc.get("format") == FORMAT and doc.get("jinja") == jinja2.__version__:
            return SnapshotCache({k: v for k, v in doc["codes"].items() if isinstance(v, bytes)})
    except (OSError, EOFError, ValueError, TypeError, AttributeError, KeyError):
        pass
    return SnapshotCache()


@pass_context
def _finalize_placeholder(ctx: Any, value: Any) -> Any:  # compiled calls pass the context, as render/jinja.py's
    return value


def snapshot_environment(templates: Path, cache: BytecodeCache | None = None) -> Environment:
    """An environment compiling as the run-time one does, with placeholder filters (their code is not compiled
    into templates: only their names are checked; tests compare the sources both environments generate)."""
    filters: dict[str, Callable[..., Any]] = {name: (lambda value, *args, **kw: value) for name in FILTER_NAMES}
    filters |= {name: pass_context(lambda ctx, value, *args, **kw: value) for name in CONTEXT_FILTERS}
    return new_environment(templates, _finalize_placeholder, filters, cache)


def write_template_snapshot(templates: Path, out: Path) -> int:
    """Compile every template of `templates` and record the code (Jinja's bytecode-cache format); returns how many."""
    cache = SnapshotCache()
    env = snapshot_environment(templates, cache)
    for name in env.list_templates():
        env.get_template(name)
    out.write_bytes(marshal.dumps({"format": FORMAT, "jinja": jinja2.__version__, "codes": cache.codes}))
    return len(cache.codes)
