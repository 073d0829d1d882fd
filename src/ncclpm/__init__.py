"""ncclpm - post-mortem analyzer for failed PyTorch distributed jobs (NCCL and gloo).

`ncclpm.diagnose(paths)` returns a `Diagnosis`; `ncclpm.build(paths)` returns the parsed `Tables`.
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["Diagnosis", "__version__", "build", "diagnose"]


def __getattr__(name: str) -> object:
    """Import on first use: `ncclpm --help` and usage errors never load polars (start-up time)."""
    if name in ("build", "diagnose"):
        from ncclpm import api

        return getattr(api, name)
    if name == "Diagnosis":
        from ncclpm.diagnosis import Diagnosis

        return Diagnosis
    raise AttributeError(f"module 'ncclpm' has no attribute {name!r}")
