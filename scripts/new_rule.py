"""Make a new rule with its two cases: where it must fire and where it must stay silent.

    python scripts/new_rule.py XX01 my-rule-name --category rank_crash --kind cuda_error --after CR01 \\
        --why-here "why it stands after CR01" --title "One line: what it finds" \\
        --detects "the lines it reads" --matters "why a reader cares" --example "a real line" \\
        --fix "what to change" --fires path/to/job_where_it_fires --silent path/to/near_miss_job

It writes `src/ncclpm/rules/my_rule_name.py` (a working rule: the lines of that event kind are its evidence, the
ranks they name its culprits), registers it in `rules/__init__.py`, gives it its place in `precedence.py`, copies
the two jobs (real logs: never made up) into `tests/cases/my_rule_name__fires/` and `..._silent/` with their
`expected.toml` (`must_fire` / `must_not_fire`), and regenerates the rules index and the README table
(scripts/regenerate.py). Then refine the rule's evidence and words, and run
`python -m pytest -q tests/test_cases.py -k my_rule_name tests/test_rules_meta.py tests/test_startup.py
tests/test_readme.py`.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RULES = ROOT / "src" / "ncclpm" / "rules"
CASES = ROOT / "tests" / "cases"

TEMPLATE = '''"""{id} {name}."""

from __future__ import annotations

from typing import ClassVar

import polars as pl

from ncclpm.model import said
from ncclpm.rules.base import Finding, Fix, Rule, quotes, ranks_text
from ncclpm.tables import Tables
from ncclpm.tables.kinds import K
from ncclpm.tables.schema import Category


class {cls}(Rule):
    """{title}

    ## What it detects
{detects}

    ## Why it matters
{matters}

    ## Example
{example}
    """

    id = "{id}"
    name = "{name}"
    category = Category.{category}
    base_confidence = 0.6
    explains = ("CT01",)
    FIXES: ClassVar[dict[str, Fix]] = {{
        "fix": Fix({fix!r}),
    }}

    def evidence(self, t: Tables) -> pl.DataFrame:
        return t.kinds(K.{kind}).sort("ts", "source", "line", nulls_last=True)

    def assess(self, t: Tables, ev: pl.DataFrame) -> Finding | None:
        ranks = tuple(sorted(set(ev["rank"].drop_nulls().to_list())))
        who = ranks_text(ranks).capitalize() if ranks else "A process"
        return self.finding(
            culprit_ranks=ranks,
            summary=f"{{who}}: `{{said(ev['text'][0], t.line_prefix)}}`.",
            explanation={title!r},
            evidence=quotes(ev, 3),
            fixes=self.fixes(),
        )
'''


def _wrap(text: str) -> str:
    return textwrap.fill(text, width=110, initial_indent="    ", subsequent_indent="    ")


def _insert_after(path: Path, anchor: str, line: str) -> None:
    text = path.read_text(encoding="utf-8")
    at = text.index(anchor) + len(anchor)
    path.write_text(text[:at] + line + text[at:], encoding="utf-8")


def _case(folder: Path, job: Path, spec: dict[str, object]) -> None:
    folder.mkdir(parents=True, exist_ok=False)
    copy = shutil.copytree if job.is_dir() else lambda a, b: (b.mkdir(), shutil.copy2(a, b / a.name))
    copy(job, folder / "input")
    lines = [f"# {spec.pop('comment')}"] + [f"{k} = {_toml(v)}" for k, v in spec.items()]
    (folder / "expected.toml").write_text("\n".join(lines) + "\n", encoding="utf-8")


def _toml(value: object) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return f'"{value}"' if isinstance(value, str) else str(value)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("id", help="two letters and two digits, e.g. XX01")
    p.add_argument("name", help="kebab-case, e.g. my-rule-name")
    for flag in ("category", "kind", "after", "why-here", "title", "detects", "matters", "example", "fix"):
        p.add_argument(f"--{flag}", required=True)
    p.add_argument("--fires", type=Path, required=True, help="a real job (folder or file) where the rule must fire")
    p.add_argument("--silent", type=Path, required=True, help="a real near miss where it must stay silent")
    a = p.parse_args(argv)

    from ncclpm.model import Category
    from ncclpm.precedence import RANK
    from ncclpm.tables.kinds import K

    if not re.fullmatch(r"[A-Z]{2}\d{2}", a.id) or not re.fullmatch(r"[a-z0-9]+(?:-[a-z0-9]+)*", a.name):
        p.error("id like XX01, name like my-rule-name")
    if a.id in RANK or a.after not in RANK:
        p.error(f"{a.id} exists already, or --after {a.after} is not a rule")
    K.check(a.kind, where="--kind")  # a declared event kind (parsers/kinds.toml)
    category = Category(a.category).name
    module = a.name.replace("-", "_")
    cls = "".join(part.capitalize() for part in a.name.split("-"))
    target = RULES / f"{module}.py"
    if target.exists():
        p.error(f"{target} exists")

    fields = dict(id=a.id, name=a.name, cls=cls, category=category, kind=a.kind, title=a.title, fix=a.fix)
    fields |= {k: _wrap(getattr(a, k)) for k in ("detects", "matters", "example")}
    target.write_text(TEMPLATE.format(**fields), encoding="utf-8")
    registry = RULES / "__init__.py"
    imports = "from ncclpm.rules.base import Rule, RuleError\n"
    _insert_after(registry, imports, f"from ncclpm.rules.{module} import {cls}\n")
    _insert_after(registry, "ALL_RULES: tuple[type[Rule], ...] = (\n", f"    {cls},\n")
    precedence = ROOT / "src" / "ncclpm" / "precedence.py"
    lines = precedence.read_text().splitlines(keepends=True)
    anchor = next(line for line in lines if line.startswith(f'    ("{a.after}"'))
    _insert_after(precedence, anchor, f"    ({json.dumps(a.id)}, {json.dumps(a.why_here, ensure_ascii=False)}),\n")
    touched = [str(target), str(registry), str(precedence)]
    subprocess.run(["ruff", "check", "-q", "--fix", "--select", "I", *touched], cwd=ROOT, check=False)  # sorted
    subprocess.run(["ruff", "format", "-q", *touched], cwd=ROOT, check=False)

    fires, silent = CASES / f"{module}__fires", CASES / f"{module}__silent"
    _case(fires, a.fires, {"comment": f"{a.id} must fire: {a.title}", "category": a.category, "must_fire": [a.id]})
    _case(silent, a.silent, {"comment": f"a near miss: {a.id} must stay silent", "must_not_fire": [a.id]})
    got = json.loads(
        subprocess.run(
            [sys.executable, "-m", "ncclpm", "diagnose", str(silent / "input"), "-f", "json"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    spec = (silent / "expected.toml").read_text(encoding="utf-8")
    (silent / "expected.toml").write_text(spec + f'category = "{got["category"]}"\n', encoding="utf-8")
    subprocess.run([sys.executable, str(ROOT / "scripts" / "regenerate.py"), "--fast"], cwd=ROOT, check=True)
    print(f"wrote {target.relative_to(ROOT)}, {fires.relative_to(ROOT)}, {silent.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
