"""Where the shared reference corpus is: `$NCCLPM_SHARED` when set, else `shared/` beside the checkout (or beside
the folder of worktrees it sits in). Never an absolute path. A test that needs it is skipped without it, with
`ABSENT` in its reason: `conftest.py` counts those skips in one line at the end of the run."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ABSENT = "shared corpus absent"


def _find() -> Path | None:
    env = os.environ.get("NCCLPM_SHARED")
    candidates = [Path(env)] if env else [ROOT.parent / "shared", ROOT.parent.parent / "shared"]
    return next((c for c in candidates if (c / "corpus").is_dir()), None)


SHARED = _find()


def corpus(*parts: str) -> Path:
    """A path in the shared corpus; when the corpus is absent, one that does not exist (`../shared/corpus/...`)."""
    return (SHARED or ROOT.parent / "shared").joinpath("corpus", *parts)
