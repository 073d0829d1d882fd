"""`ncclpm diff GOOD BAD`: what changed between a run that worked and one that failed, ranked by how much each
change can explain the failed run's diagnosis.

`facts.py` / `nccl_facts.py` read each run's facts from its tables (versions, settings, launcher options,
process-group timeout, shape, NCCL's choices), `progress.py` compares how far and how fast each got,
`relevance.py` judges every difference against BAD's diagnosis (data: `parsers/diff_factors.toml`), and
`compare.py` pairs, folds and ranks them into a `DiffReport` (`ncclpm.diff_model`, standard library only: the
only thing renderers read).
"""

from ncclpm.diff.compare import compare
from ncclpm.diff_model import Difference, DiffReport, Fact, Quote, RunSummary

__all__ = ["DiffReport", "Difference", "Fact", "Quote", "RunSummary", "compare"]
