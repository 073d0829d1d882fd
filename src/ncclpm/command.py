"""The `ncclpm` command's entry point (`[project.scripts]`, `python -m ncclpm`): the CLI, `ncclpm.cli.run`, with
the garbage collector held back while its modules load (`ncclpm.util.collector`)."""

from __future__ import annotations

from ncclpm.util.collector import hold_back


def run() -> None:
    hold_back()
    from ncclpm.cli import run as cli_run

    cli_run()
