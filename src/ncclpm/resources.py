"""Locate the data directories shipped with ncclpm (`parsers/`, `templates/`).

In a wheel they live in `ncclpm/_data/<name>` (hatch force-include). In a checkout or an editable
install the package is imported from `src/ncclpm`, where no `_data` exists; then the live files at the
repository root are used. Anything else is a broken install and raises a clear error.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path


def data_dir(name: str) -> Path:
    """Return the directory holding the shipped data `name` ("parsers" or "templates")."""
    packaged = Path(str(files("ncclpm"))) / "_data" / name
    if packaged.is_dir():
        return packaged
    checkout = Path(__file__).resolve().parents[2] / name
    if checkout.is_dir():
        return checkout
    raise FileNotFoundError(
        f"ncclpm data directory {name!r} not found (looked in {packaged} and {checkout}); reinstall the package"
    )
