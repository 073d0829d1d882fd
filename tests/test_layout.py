"""Where things live (issue 25): a few stages as folders, not a flat package; the contract in one place; each C
helper beside the Python reference it speeds up, with its parity test; tests that find the shared corpus relative
to the checkout."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "ncclpm"
MAX_ROOT_MODULES = 10
# C helper -> (the Python reference beside it, the test that compares both)
C_HELPERS = {
    "ingest/text/_textcut.c": ("ingest/text/rawscan.py", "test_rawscan_native.py"),
    "ingest/flight_recorder/_frdecode.c": ("ingest/flight_recorder/decode.py", "test_fr_native.py"),
    "ingest/flight_recorder/_frscan.c": ("ingest/flight_recorder/scan.py", "test_fr_native.py"),
}


def test_few_modules_sit_at_the_package_root() -> None:
    root = sorted(p.name for p in SRC.glob("*.py"))
    assert len(root) <= MAX_ROOT_MODULES, root


def test_tables_is_defined_once_in_the_contract_package() -> None:
    homes = [
        p.relative_to(SRC).as_posix()
        for p in SRC.rglob("*.py")
        if any(isinstance(n, ast.ClassDef) and n.name == "Tables" for n in ast.walk(ast.parse(p.read_text())))
    ]
    assert homes == ["tables/__init__.py"]


def test_each_c_helper_sits_beside_its_python_reference_with_a_parity_test() -> None:
    built = {src for src in ast.literal_eval(_hatch_sources())}
    assert built == {f"src/ncclpm/{c}" for c in C_HELPERS}, "hatch_build.py builds every helper, from its home"
    for helper, (reference, test) in C_HELPERS.items():
        assert (SRC / helper).parent == (SRC / reference).parent and (SRC / reference).is_file()
        assert (ROOT / "tests" / test).is_file()


def _hatch_sources() -> str:
    tree = ast.parse((ROOT / "hatch_build.py").read_text())
    node = next(n for n in ast.walk(tree) if isinstance(n, ast.Assign) and ast.unparse(n.targets[0]) == "SOURCES")
    return repr([ast.literal_eval(c.args[0]) for c in node.value.elts])  # type: ignore[attr-defined]


def test_no_test_names_an_absolute_path_of_a_checkout() -> None:
    """The shared corpus is found relative to the checkout (tests/shared.py, or NCCLPM_SHARED): a test naming
    `/work/shared/...` (or any absolute path into a checkout or the corpus) works on one machine only. System paths
    (`/proc`, `/usr/bin/chromium`) are not the checkout's."""
    offenders = []
    for path in (ROOT / "tests").glob("*.py"):  # the tests and their helpers (generators of cases are tools)
        if path.name == Path(__file__).name:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and _names_a_checkout(node.value):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not offenders, offenders


def _names_a_checkout(text: str) -> bool:
    return text.startswith(("/work/", "/home/")) or (text.startswith("/") and "shared/corpus" in text)
