"""Locate the data directories shipped with ncclpm (`parsers/`, `templates/`).

In a wheel they live in `ncclpm/_data/<name>` (hatch force-include). In a checkout or an editable
install the package is imported from `src/ncclpm`, where no `_data` exists; then the live files at the
repository root are used. Anything else is a broken install and raises a clear error.
"""

from __future__ import annotations

import hashlib
import marshal
from functools import lru_cache
from importlib.resources import files
from pathlib import Path
from typing import Any

SNAPSHOT = Path(__file__).parents[1] / "_toml_snapshot.bin"  # written at install time by hatch_build.py
_FORMAT = 2
_HEAD = 4  # the snapshot starts with the length of its index (bytes, little-endian)


def data_dir(name: str) -> Path:
    """Return the directory holding the shipped data `name` ("parsers" or "templates")."""
    packaged = Path(str(files("ncclpm"))) / "_data" / name
    if packaged.is_dir():
        return packaged
    checkout = Path(__file__).resolve().parents[3] / name
    if checkout.is_dir():
        return checkout
    raise FileNotFoundError(
        f"ncclpm data directory {name!r} not found (looked in {packaged} and {checkout}); reinstall the package"
    )


def _digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def _text(data: bytes) -> str:
    """As `Path.read_text(encoding="utf-8")` reads it (universal newlines)."""
    return data.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")


def _exact(doc: Any) -> bool:
    """`marshal` gives `doc` back unchanged (it holds no TOML date or time; a NaN is never equal to itself)."""
    try:
        return isinstance(doc, dict) and marshal.loads(marshal.dumps(doc)) == doc
    except ValueError:  # a date or a time
        return False


def pack_toml_snapshot(docs: dict[str, tuple[str, dict[str, Any]]]) -> bytes:
    """The snapshot of `docs` (key -> (the file's hash, its parse)): an index (key -> hash, start, end), then each
    parse on its own, so that a run unpacks only the files it reads (not NCCL's vocabulary in a job without it)."""
    index, blobs, at = {}, [], 0
    for key, (digest, doc) in docs.items():
        blob = marshal.dumps(doc)
        index[key] = (digest, at, at + len(blob))
        blobs.append(blob)
        at += len(blob)
    head = marshal.dumps((_FORMAT, index))
    return len(head).to_bytes(_HEAD, "little") + head + b"".join(blobs)


def write_toml_snapshot(directory: Path, out: Path) -> int:
    """Record every TOML file of `directory` parsed, keyed by the file's hash (a file `marshal` cannot hold
    exactly is left out); returns how many. Run at install time (`hatch_build.py` loads this module by path, so
    it imports nothing but the standard library)."""
    import tomllib

    docs = {}
    for path in sorted(directory.rglob("*.toml")):
        data = path.read_bytes()
        doc = tomllib.loads(_text(data))
        if _exact(doc):
            docs[_key(path.relative_to(directory))] = (_digest(data), doc)
    out.write_bytes(pack_toml_snapshot(docs))
    return len(docs)


def toml_error() -> type[ValueError]:
    """`tomllib.TOMLDecodeError`, for an `except` clause (evaluated only when something was raised)."""
    import tomllib

    return tomllib.TOMLDecodeError


def _key(relative: Path) -> str:
    """A file's key in the snapshot: its name, or `folder/name` in a sub-folder (parsers/nccl/net_ib.toml)."""
    return relative.as_posix()


class _Snapshot:
    """A snapshot read (`pack_toml_snapshot`): its index, and its parses unpacked when asked for."""

    def __init__(self, data: bytes) -> None:
        self.index: dict[str, tuple[str, int, int]] = {}
        self.body = memoryview(b"")
        try:
            size = int.from_bytes(data[:_HEAD], "little")
            fmt, index = marshal.loads(data[_HEAD : _HEAD + size])
            if fmt == _FORMAT and isinstance(index, dict):
                self.index, self.body = index, memoryview(data)[_HEAD + size :]
        except (ValueError, EOFError, TypeError):  # damaged, or another format: no snapshot
            pass

    def __len__(self) -> int:
        return len(self.index)

    def keys(self) -> list[str]:
        return list(self.index)

    def parse(self, key: str, digest: str) -> dict[str, Any] | None:
        """The recorded parse of `key` if the file still has the recorded hash, else None."""
        entry = self.index.get(key)
        if entry is None or entry[0] != digest:
            return None
        try:
            doc = marshal.loads(self.body[entry[1] : entry[2]])
        except (ValueError, EOFError, TypeError):
            return None
        return doc if isinstance(doc, dict) else None


@lru_cache(maxsize=1)
def _snapshot() -> _Snapshot:
    try:
        return _Snapshot(SNAPSHOT.read_bytes())
    except OSError:
        return _Snapshot(b"")


def read_toml(path: Path) -> dict[str, Any]:
    """A TOML file parsed. Parsing the shipped catalogs costs ~30 ms per run (a tenth of a small job), unpacking
    their parse recorded at install time a few ms (`marshal`, only the files read); it is used for a file whose
    bytes still have the recorded hash, so an edited or a user's file is always read afresh. Raises what
    `tomllib.loads` and reading the file raise (too deep: a `TOMLDecodeError` too)."""
    data = path.read_bytes()
    snapshot = _snapshot()
    key = path.name if path.name in snapshot.index else f"{path.parent.name}/{path.name}"
    recorded = snapshot.parse(key, _digest(data)) if key in snapshot.index else None
    if recorded is not None:
        return recorded
    import tomllib  # (~4 ms: a run whose catalogs all come from the snapshot does without it)

    try:
        return tomllib.loads(_text(data))
    except RecursionError:  # (`tomllib` recurses once per level: a user's catalog of 5,000-deep arrays)
        raise tomllib.TOMLDecodeError("nested too deep") from None
