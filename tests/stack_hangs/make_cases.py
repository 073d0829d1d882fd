"""Copy the runs made by make_hang.py into tests/cases/stacks__*/input/ the way users would hand them over.

    python tests/stack_hangs/make_cases.py RUNS_DIR

RUNS_DIR holds checkpoint/, dataloader/, collective/ and debugserver/ (one make_hang.py run each). Each case
takes the files as they were written (paths already neutralised by make_hang.py), only renamed or left out:
"only the dumps" cases keep the dumps, named by rank as a user collecting them by hand would; "with logs"
cases keep console.log and torchrun's per-rank logs and error files beside dumps named by pid, so the rank
comes from the logs. expected.toml and SOURCE.md are written by hand and not touched here.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

CASES = Path(__file__).resolve().parents[1] / "cases"


def _pid_ranks(run: Path) -> dict[str, int]:
    import re

    found = re.findall(r"\] rank(\d+): pid (\d+) world", (run / "console.log").read_text(errors="replace"))
    return {pid: int(rank) for rank, pid in found}


def _copy(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dst)


def _logs(run: Path, inp: Path) -> None:
    _copy(run / "console.log", inp / "console.log")
    for f in sorted((run / "torchrun_logs").rglob("*")):
        if f.is_file() and f.stat().st_size:
            _copy(f, inp / f.relative_to(run))


def by_rank(run: Path, inp: Path, kind: str, name: str) -> None:
    ranks = _pid_ranks(run)
    for f in sorted((run / "dumps" / kind).iterdir()):
        _copy(f, inp / name.format(rank=ranks[f.stem], suffix=f.suffix))


def by_pid(run: Path, inp: Path, kind: str, folder: str) -> None:
    for f in sorted((run / "dumps" / kind).iterdir()):
        _copy(f, inp / folder / f.name)


def case(name: str) -> Path:
    inp = CASES / name / "input"
    shutil.rmtree(inp, ignore_errors=True)
    return inp


def main(runs: Path) -> None:
    ck, dl, co, ds = runs / "checkpoint", runs / "dataloader", runs / "collective", runs / "debugserver"
    by_rank(ck, case("stacks__checkpoint_pyspy_only"), "pyspy", "pyspy_rank{rank}{suffix}")
    inp = case("stacks__checkpoint_pyspy_with_logs")
    _logs(ck, inp)
    by_pid(ck, inp, "pyspy", "pyspy")
    by_rank(ck, case("stacks__checkpoint_gdb_only"), "gdb", "gdb_rank{rank}{suffix}")
    inp = case("stacks__checkpoint_native_locals")
    by_rank(ck, inp, "pyspy_native", "native_rank{rank}{suffix}")
    by_pid(ck, inp, "pyspy_locals", "locals")
    by_rank(dl, case("stacks__dataloader_pyspy_json_only"), "pyspy_json", "rank{rank}{suffix}")
    inp = case("stacks__dataloader_with_logs")
    _logs(dl, inp)
    by_pid(dl, inp, "pyspy_subprocesses", "pyspy")
    inp = case("stacks__collective_faulthandler_only")
    for f in sorted(co.glob("faulthandler_rank*.txt")):
        _copy(f, inp / f.name)
    inp = case("stacks__collective_with_logs")
    _logs(co, inp)
    by_pid(co, inp, "gdb", "gdb")
    if ds.exists():
        inp = case("stacks__debugserver_stacks_only")
        # the newest periodic dump that every rank answered (later ones were taken while the job was ending)
        full = [p for p in sorted((ds / "debug").glob("stacks_*.txt")) if "Error:" not in p.read_text()]
        _copy(full[-1], inp / full[-1].name)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
