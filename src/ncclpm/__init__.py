"""ncclpm - post-mortem analyzer for failed PyTorch distributed jobs (NCCL and gloo).

`ncclpm.diagnose(paths)` returns a `Diagnosis`; `ncclpm.build(paths)` returns the parsed `Tables`. Importing the
package loads nothing else: the entry points load the parsers, tables and rules when first used.
"""

from __future__ import annotations

TYPE_CHECKING = False  # (not `typing`'s: the command's start-up imports `typing` later, see ncclpm.command)
if TYPE_CHECKING:
    from typing import Any

__version__ = "0.1.0"
__all__ = ["Diagnosis", "__version__", "build", "diagnose"]


def __getattr__(name: str) -> Any:
    if name in ("build", "diagnose"):
        from ncclpm import api

        return getattr(api, name)
    if name == "Diagnosis":
        from ncclpm.model import Diagnosis

        return Diagnosis
    raise AttributeError(f"module 'ncclpm' has no attribute {name!r}")
