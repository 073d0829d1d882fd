"""A fleet of real failed jobs for `ncclpm triage`: every real case the project has, each packed as the archive a
cluster would keep - the test cases (`tests/cases/*/input`), the sample logs, the real-issues corpus (`../shared/corpus/real-issues*/
cases/*`, without the `label.json` answer) the real-gloo runs (`../shared/corpus/real-gloo/<scenario>/<variant>`) and the nvrx flight-recorder runs.

Nothing is invented: times, hosts and ranks are whatever the logs say (a job whose logs give no date has no
`failed_at`). `python -m tests.fleet_corpus OUT` writes the archives into OUT and prints how many.
"""

from __future__ import annotations

import io
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SKIP = {"label.json"}  # the real-issues answer key: not part of what the job left behind


def shared() -> Path:
    """The shared corpus' folder (`tests/shared.py` finds it: $NCCLPM_SHARED, or beside the checkout)."""
    from tests.shared import SHARED

    return SHARED or ROOT.parent / "shared"


def real_cases() -> Iterator[tuple[str, Path]]:
    """(archive name, folder) for every real case found."""
    for case in sorted((ROOT / "tests" / "cases").iterdir()):
        if (case / "input").is_dir():
            yield f"tests-cases-{case.name}", case / "input"
    for sample in sorted((ROOT / "sample_logs").iterdir()):
        if sample.is_dir():
            yield f"sample-logs-{sample.name}", sample
    corpus = shared() / "corpus"
    for part in ("real-issues", "real-issues-2"):
        cases = corpus / part / "cases"
        if cases.is_dir():
            for case in sorted(cases.iterdir()):
                if (case / "label.json").is_file():
                    yield f"{part}-{case.name}", case
    gloo = corpus / "real-gloo"
    if gloo.is_dir():
        for scenario in sorted(p for p in gloo.iterdir() if p.is_dir() and not p.name.startswith("_")):
            for variant in sorted(p for p in scenario.iterdir() if p.is_dir()):
                yield f"real-gloo-{scenario.name}-{variant.name}", variant
    nvrx = corpus / "nvrx-fr"
    if nvrx.is_dir():
        for run in sorted(p for p in nvrx.iterdir() if p.is_dir()):
            yield f"nvrx-fr-{run.name}", run


def pack(folder: Path, target: Path, arcname: str) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=1) as tar:
        for path in sorted(folder.rglob("*")):
            if path.is_file() and path.name not in SKIP:
                tar.add(path, arcname=f"{arcname}/{path.relative_to(folder)}")
    target.write_bytes(buf.getvalue())


def build_fleet(out: Path, limit: int | None = None) -> list[Path]:
    """Pack the real cases into `out` (at most `limit`), one `.tar.gz` each; returns the archives."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, folder in real_cases():
        if limit is not None and len(written) >= limit:
            break
        target = out / f"{name}.tar.gz"
        pack(folder, target, name)
        written.append(target)
    return written


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: python -m tests.fleet_corpus OUT")
    print(len(build_fleet(Path(sys.argv[1]))), "archives")
