"""Locate the data directories shipped with ncclpm (`parsers/`, `templates/`).

In a wheel they live in `ncclpm/_data/<name>` (hatch force-include). In a checkout or an editable
install the package is imported from `src/ncclpm`, where no `_data` exists; then the live files at the
repository root are used. Anything else is a broken install and raises a clear error.
"""

from __future__ import annotations

import hashlib
import json
import tomllib
from functools import lru_cache
from importlib.resources import files
from pathlib import Path
from typing import Any

SNAPSHOT = Path(__file__).parents[1] / "_toml_snapshot.json"  # written at install time by hatch_build.py


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


def _json_exact(doc: Any) -> bool:
    """JSON gives `doc` back unchanged (TOML dates and times would come back as strings)."""
    try:
        return isinstance(doc, dict) and json.loads(json.dumps(doc)) == doc
    except (TypeError, ValueError):  # a date or a time: JSON has none
        return False


def write_toml_snapshot(directory: Path, out: Path) -> int:
    """Record every TOML file of `directory` parsed, as JSON keyed by the file's hash (a file JSON cannot hold
    exactly is left out); returns how many. Run at install time (`hatch_build.py` loads this module by path, so
    it imports nothing but the standard library)."""
    entries = {}
    for path in sorted(directory.rglob("*.toml")):
        data = path.read_bytes()
        doc = tomllib.loads(_text(data))
        if _json_exact(doc):
            entries[_key(path.relative_to(directory))] = [_digest(data), json.dumps(doc, ensure_ascii=False)]
    out.write_text(json.dumps({"format": 1, "files": entries}), encoding="utf-8")
    return len(entries)


def _key(relative: Path) -> str:
    """A file's key in the snapshot: its name, or `folder/name` in a sub-folder (parsers/nccl/net_ib.toml)."""
    return relative.as_posix()


@lru_cache(maxsize=1)
def _snapshot() -> dict[str, list[str]]:
    try:
        doc = json.loads(SNAPSHOT.read_text(encoding="utf-8"))
        return doc["files"] if doc.get("format") == 1 and isinstance(doc.get("files"), dict) else {}
    except (OSError, ValueError, AttributeError):
        return {}


def read_toml(path: Path) -> dict[str, Any]:
    """A TOML file parsed. Parsing the shipped catalogs costs ~30 ms per run (a tenth of a small job), JSON ~1 ms:
    their parse recorded at install time is used for a file whose bytes still have the recorded hash, so an
    edited or a user's file is always read afresh. Raises what `tomllib.loads` and reading the file raise (too
    deep: a `TOMLDecodeError` too)."""
    data = path.read_bytes()
    snapshot = _snapshot()
    entry = snapshot.get(path.name) or snapshot.get(f"{path.parent.name}/{path.name}")
    if entry is not None and len(entry) == 2 and entry[0] == _digest(data):
        return json.loads(entry[1])
    try:
        return tomllib.loads(_text(data))
    except RecursionError:  # (`tomllib` recurses once per level: a user's catalog of 5,000-deep arrays)
        raise tomllib.TOMLDecodeError("nested too deep") from None
