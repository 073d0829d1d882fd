"""Golden reports: every sample_logs/ job rendered in every format must stay byte-identical.

A change of wording or of a verdict is then a visible diff in tests/golden/. When it is intended, regenerate
with `NCCLPM_UPDATE_GOLDEN=1 python -m pytest tests/test_golden.py` and commit the files with the change.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ncclpm.api import diagnose
from ncclpm.render import render

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "golden"
JOBS = sorted(p.name for p in (ROOT / "sample_logs").iterdir() if p.is_dir())
FORMATS = {"md": "md", "text": "txt", "json": "json", "slack": "slack.txt", "slack-json": "slack.json", "html": "html"}
UPDATE = os.environ.get("NCCLPM_UPDATE_GOLDEN") == "1"


@pytest.mark.parametrize("job", JOBS)
def test_sample_reports_unchanged(job: str) -> None:
    d = diagnose([ROOT / "sample_logs" / job], name=f"sample_logs/{job}")
    stale = []
    for fmt, ext in FORMATS.items():
        path = GOLDEN / f"{job}.{ext}"
        got = render(d, fmt)
        if UPDATE:
            path.write_text(got, encoding="utf-8")
        elif not path.exists() or path.read_text(encoding="utf-8") != got:
            stale.append(path.name)
    assert not stale, f"reports differ from tests/golden ({', '.join(stale)}); if intended: NCCLPM_UPDATE_GOLDEN=1"


def test_every_golden_file_has_a_job() -> None:
    """A golden file of a removed sample would otherwise linger unchecked."""
    expected = {f"{job}.{ext}" for job in JOBS for ext in FORMATS.values()}
    assert {p.name for p in GOLDEN.iterdir()} == expected
