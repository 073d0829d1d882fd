"""Python's garbage collector held back while the `ncclpm` command loads its modules (`ncclpm.command`).

Start-up creates ~100k objects (the classes, functions and tables of click's, polars' and ncclpm's modules) that
live until the process ends. At CPython's default threshold (a young collection every 700 new objects) the
collector walks them ~120 times, ~50 ms of CPU in a tiny job and ~10 ms of `--help`. While modules load the
threshold is `LOADING` (a collection every 100k new objects: memory is still reclaimed if anything loops); once a
command has imported what it needs, `modules_loaded` freezes what exists (`gc.freeze`: never walked again) and
puts the usual threshold back for the work, whose garbage is collected as before. Only the command's entry point
holds the collector back: importing `ncclpm.cli` (tests, a library) leaves it alone, and so do triage's workers.
"""

from __future__ import annotations

import gc

LOADING = (100_000, 10, 10)
_usual: tuple[int, int, int] | None = None


def hold_back() -> None:
    """Collect rarely until `modules_loaded` (the command's entry point calls this first)."""
    global _usual
    _usual = gc.get_threshold()
    gc.set_threshold(*LOADING)


def modules_loaded() -> None:
    """A command has imported its modules: freeze them and give the collector its usual threshold back. Does
    nothing unless `hold_back` held the collector back (a test or a library calling the CLI keeps its settings)."""
    global _usual
    if _usual is not None and gc.get_threshold() == LOADING:
        gc.freeze()
        gc.set_threshold(*_usual)
    _usual = None
