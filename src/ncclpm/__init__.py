"""ncclpm - post-mortem analyzer for failed PyTorch distributed jobs (NCCL and gloo).

`ncclpm.diagnose(paths)` returns a `Diagnosis`; `ncclpm.build(paths)` returns the parsed `Tables`.
"""

from __future__ import annotations

__version__ = "0.1.0"

from ncclpm.api import build, diagnose
from ncclpm.diagnosis import Diagnosis

__all__ = ["Diagnosis", "__version__", "build", "diagnose"]
