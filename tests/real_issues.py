"""The real-issues corpus (../shared/corpus/real-issues): run ncclpm on each case, score it against the label,
and render the tables published in docs/REAL_ISSUES.md.

Scoring (the corpus README's): 1 when the verdict's category is the labelled one, 0.5 when it is one of the
labelled secondaries, else 0. Every file of a case except `label.json` is input, as a user would pass it.

Run `python -m tests.real_issues` for the table on the terminal; `NCCLPM_UPDATE_DOCS=1 python -m pytest
tests/test_real_issues.py` rewrites the generated part of docs/REAL_ISSUES.md.
"""

from __future__ import annotations

import json
import tomllib
from collections import Counter
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from tests.shared import corpus

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "REAL_ISSUES.md"
MISSES = ROOT / "tests" / "real_issues_misses.toml"
BEGIN, END = "<!-- generated:begin -->", "<!-- generated:end -->"
BANDS = ("conclusive", "likely", "possible")


def corpus_dir() -> Path | None:
    """../shared/corpus/real-issues/cases next to the checkout (or its worktree parent), or $NCCLPM_SHARED."""
    cases = corpus("real-issues", "cases")
    return cases if cases.is_dir() else None


def case_names() -> list[str]:
    cases = corpus_dir()
    return sorted(p.name for p in cases.iterdir() if (p / "label.json").is_file()) if cases else []


@dataclass(frozen=True)
class Result:
    case: str
    label: str
    secondary: tuple[str, ...]
    category: str
    band: str
    confidence: float
    culprits: tuple[int, ...]
    label_culprits: tuple[int, ...] | None

    @property
    def score(self) -> float:
        if self.category == self.label:
            return 1.0
        return 0.5 if self.category in self.secondary else 0.0


@cache
def run_case(name: str) -> Result:
    from ncclpm.api import diagnose

    folder = corpus_dir() / name  # type: ignore[operator]
    label = json.loads((folder / "label.json").read_text(encoding="utf-8"))
    files = sorted(p for p in folder.iterdir() if p.is_file() and p.name != "label.json")
    d = diagnose(files, name=name)
    culprits = label.get("culprit_ranks")
    return Result(
        case=name,
        label=label["category"],
        secondary=tuple(label.get("secondary") or ()),
        category=str(d.category),
        band=d.band,
        confidence=round(d.confidence, 2),
        culprits=tuple(d.culprit_ranks),
        label_culprits=tuple(culprits) if culprits is not None else None,
    )


def run_all() -> list[Result]:
    return [run_case(n) for n in case_names()]


def known_misses() -> dict[str, str]:
    """Cases not expected to be right, with the reason (tests/real_issues_misses.toml)."""
    if not MISSES.is_file():
        return {}
    return {k: v["reason"] for k, v in tomllib.loads(MISSES.read_text(encoding="utf-8")).items()}


def total(results: list[Result]) -> float:
    return sum(r.score for r in results)


def confusion_table(results: list[Result]) -> str:
    labels = sorted({r.label for r in results})
    answers = sorted({r.category for r in results})
    counts = Counter((r.label, r.category) for r in results)
    head = "| label \\ answer | " + " | ".join(f"`{a}`" for a in answers) + " |"
    rule = "|---|" + "---:|" * len(answers)
    rows = [f"| `{lab}` | " + " | ".join(str(counts[(lab, a)] or "") for a in answers) + " |" for lab in labels]
    return "\n".join([head, rule, *rows])


def calibration_table(results: list[Result]) -> str:
    rows = [
        "| band | answers | right (label) | half (secondary) | wrong | right rate |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for band in BANDS:
        rs = [r for r in results if r.band == band]
        right = sum(r.score == 1.0 for r in rs)
        half = sum(r.score == 0.5 for r in rs)
        rate = f"{right / len(rs):.0%}" if rs else "-"
        rows.append(f"| {band} | {len(rs)} | {right} | {half} | {len(rs) - right - half} | {rate} |")
    return "\n".join(rows)


def misses_table(results: list[Result]) -> str:
    reasons = known_misses()
    rows = ["| case | label | answer | score | reason |", "|---|---|---|---:|---|"]
    for r in results:
        if r.score < 1.0:
            answer = f"`{r.category}` ({r.band} {r.confidence:.2f})"
            reason = reasons.get(r.case, "(no reason recorded)").replace("|", "\\|").replace("\n", " ")
            rows.append(f"| {r.case} | `{r.label}` | {answer} | {r.score:g} | {reason} |")
    return "\n".join(rows)


def generated(results: list[Result]) -> str:
    score = total(results)
    n = len(results)
    return "\n\n".join(
        [
            f"**Score: {score:g} / {n} ({score / n:.1%})** - 1 for the labelled category, 0.5 for a labelled secondary.",
            "### Confusion (rows: label, columns: ncclpm's answer)\n\n" + confusion_table(results),
            "### Calibration (per confidence band)\n\n" + calibration_table(results),
            "### Remaining misses\n\n" + misses_table(results),
        ]
    )


def doc_with(results: list[Result], text: str) -> str:
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    return f"{head}{BEGIN}\n{generated(results)}\n{END}{tail}"


if __name__ == "__main__":
    res = run_all()
    for r in res:
        mark = {1.0: "ok  ", 0.5: "half", 0.0: "MISS"}[r.score]
        print(
            f"{mark} {r.case} label={r.label:<24} got={r.category:<24} {r.band:<10} {r.confidence:.2f} "
            f"culprits={list(r.culprits)} label_culprits={r.label_culprits}"
        )
    print(generated(res))
