"""Writing the one file the user asked for (`-o`, `--summary`): never over a file without --force, never through a
symlink, never into a folder that does not exist, never half-written.

The path is checked twice: before any work (`check_output`, so a refusal costs nothing) and again when the file is
written - a run can take minutes, and a symlink or a file can appear at the path meanwhile. The content goes to a
temporary file in the same folder first, which then takes the path in one step: without --force by a hard link,
which fails if anything is there (a file, a symlink, even a dangling one); with --force by a rename, which replaces
a symlink itself instead of writing where it points. The temporary file is removed whatever happens.
"""

from __future__ import annotations

import contextlib
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # (the CLI imports this module at start-up: `--help` does without `pathlib`)
    from collections.abc import Callable
    from pathlib import Path


class OutputError(Exception):
    """The output cannot be written where asked (a usage error: exit code 2)."""


def check_output(output: Path | None, force: bool) -> None:
    """Refuse before any work: never overwrite without --force, never create folders."""
    if output is None:
        return
    if (output.exists() or output.is_symlink()) and not force:  # a dangling symlink would be written through
        raise OutputError(f"{output} exists; use --force to overwrite it")
    if output.is_dir() and not output.is_symlink():
        raise OutputError(f"{output} is a directory")
    if not output.parent.is_dir():
        raise OutputError(f"folder {output.parent} does not exist (ncclpm does not create folders)")


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _place(tmp: Path, output: Path, force: bool) -> None:
    if force:
        if output.is_dir() and not output.is_symlink():
            raise OutputError(f"{output} is a directory")
        os.replace(tmp, output)  # a symlink at `output` is replaced, not followed
        return
    try:
        os.link(tmp, output)  # atomic, and refuses anything already at `output`
    except FileExistsError:
        raise OutputError(f"{output} exists (it appeared while ncclpm ran); use --force to overwrite it") from None
    except OSError:  # a file system without hard links: exclusive create, never following a link
        try:
            fd = os.open(output, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o666)
        except FileExistsError:
            raise OutputError(f"{output} exists (it appeared while ncclpm ran); use --force to overwrite it") from None
        import shutil  # (tempfile and shutil: loaded when a file is written, not for `ncclpm --help`)

        with os.fdopen(fd, "wb") as dst, tmp.open("rb") as src:
            shutil.copyfileobj(src, dst)


def write_output(output: Path, write: Callable[[Path], None], force: bool) -> None:
    """Call `write(tmp)` to write the content to a temporary file, then put it at `output` (module docstring)."""
    import tempfile
    from pathlib import Path

    check_output(output, force)
    try:
        fd, name = tempfile.mkstemp(dir=output.parent, prefix=f".{output.name}.", suffix=".ncclpm-tmp")
    except OSError as exc:
        raise OutputError(f"cannot write {output}: {exc.strerror or exc}") from None
    os.close(fd)
    tmp = Path(name)
    try:
        write(tmp)
        tmp.chmod(0o666 & ~_umask())
        _place(tmp, output, force)
    except OSError as exc:
        raise OutputError(f"cannot write {output}: {exc.strerror or exc}") from None
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()


def write_text(output: Path, text: str, force: bool) -> None:
    write_output(output, lambda tmp: tmp.write_text(text, encoding="utf-8"), force)
