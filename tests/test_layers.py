"""Layers: which package may import which. The stages are ordered (`ORDER`): each imports only those below it;
the model depends on nothing; rendering reads only the model; no two packages import each other. Every import
counts: inside functions, and under `if TYPE_CHECKING:` (a type is a dependency too: one pointing up is a layer
the code leans on without saying so)."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "ncclpm"


def _unit(module: str) -> str:
    """The layer a module belongs to: its subpackage (`ingest`), or the top-level module (`engine`)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "ncclpm"


def _is_module(name: str) -> bool:
    return (SRC / f"{name}.py").exists() or (SRC / name).is_dir()


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "ncclpm":  # `from ncclpm import x`: a submodule, or a name of the package itself
                names = [f"ncclpm.{a.name}" for a in node.names if _is_module(a.name)] or ["ncclpm"]
            else:
                names = [node.module]
            found |= {n for n in names if n.startswith("ncclpm")}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("ncclpm.")}
    return found


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC.parent).with_suffix("")
        module = ".".join(p for p in rel.parts if p != "__init__")
        unit = _unit(module)
        graph.setdefault(unit, set()).update(_unit(m) for m in _imports(path) if _unit(m) != unit)
    return graph


GRAPH = _graph()


def test_model_depends_on_nothing() -> None:
    assert GRAPH["model"] == set()
    tree = ast.parse((SRC / "model.py").read_text())
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names} | {
        n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module
    }
    assert imported <= set(sys.stdlib_module_names) | {"__future__"}, imported


def test_render_reads_only_the_model() -> None:
    """...and leaf helpers that import nothing of ncclpm themselves (resources, escaping, number formatting)."""
    leaves = {unit for unit, deps in GRAPH.items() if not deps}
    assert "model" in GRAPH["render"]
    assert GRAPH["render"] <= leaves | {"ncclpm"}, GRAPH["render"] - leaves


# The stages, lowest first: a unit imports only units listed before it (and the package's own `__version__`).
# sources -> ingest -> tables -> analysis -> rules -> engine -> report -> Diagnosis -> render; `tables` sits below
# `ingest` in imports because it is the contract ingest builds and every later stage reads.
ORDER = (
    "util",
    "model",
    "diff_model",
    "precedence",
    "tables",
    "sources",
    "ingest",
    "analysis",
    "rules",
    "report",
    "engine",
    "diff",
    "render",
    "ruledocs",
    "api",
    "triage",
    "watch",
    "cli",
    "command",
    "__main__",
)


def test_every_unit_has_its_place_in_the_stages() -> None:
    assert set(GRAPH) - {"ncclpm"} == set(ORDER), "a new package or root module: give it its place in ORDER"


@pytest.mark.parametrize("unit", ORDER)
def test_a_stage_imports_only_the_stages_below_it(unit: str) -> None:
    below = set(ORDER[: ORDER.index(unit)]) | {"ncclpm"}
    assert GRAPH.get(unit, set()) <= below, f"{unit} imports {sorted(GRAPH[unit] - below)}"


@pytest.mark.parametrize(("lower", "upper"), [("ingest", "analysis"), ("sources", "ingest"), ("render", "triage")])
def test_a_lower_layer_does_not_import_an_upper_one(lower: str, upper: str) -> None:
    assert upper not in GRAPH[lower], f"{lower} imports {upper}"


def test_no_two_packages_import_each_other() -> None:
    def reach(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for nxt in GRAPH.get(todo.pop(), ()):
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return seen

    cycles = sorted(u for u in GRAPH if u in reach(u) and u != "ncclpm")
    assert not cycles, {u: sorted(GRAPH[u]) for u in cycles}


def test_importing_ncclpm_or_its_renderers_loads_no_parser_table_or_rule() -> None:
    code = (
        "import sys, ncclpm, ncclpm.render, ncclpm.model\n"
        "heavy = [m for m in sys.modules if m.split('.')[:2] in (['ncclpm','sources'], ['ncclpm','ingest'], "
        "['ncclpm','tables'], ['ncclpm','rules'], ['ncclpm','analysis'], ['ncclpm','report'], ['ncclpm','triage']) "
        "or m == 'polars']\n"
        "print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_generators_used_only_by_tests_are_not_shipped() -> None:
    """The wheel packages src/ncclpm: synthetic-dump and job-archive generators live in tests/synth."""
    shipped = {p.stem for p in SRC.rglob("*.py")}
    assert not shipped & {"fr_dumps", "make_jobs"}
    assert (SRC.parents[1] / "tests" / "synth" / "fr_dumps.py").is_file()


def test_the_triage_job_generator_runs_beside_any_install(tmp_path: Path) -> None:
    """`python -m tests.synth.make_jobs` needs only the checkout's case folders: it imports nothing of ncclpm, so
    it works with an editable install, a built wheel, or none (benchmarks/README.md, Triage)."""
    root = SRC.parents[1]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    code = "import sys, runpy; sys.argv = ['make_jobs', sys.argv[1], '--n', '3']; sys.modules['ncclpm'] = None; "
    code += "runpy.run_module('tests.synth.make_jobs', run_name='__main__')"
    subprocess.run([sys.executable, "-c", code, str(tmp_path)], cwd=root, env=env, check=True, capture_output=True)
    assert (tmp_path / "expected.csv").is_file() and len(list(tmp_path.glob("job-*"))) == 3
