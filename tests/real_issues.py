"""The real-issues corpus: run ncclpm on each case, score it against the label, and render the tables published in
docs/REAL_ISSUES.md. Two batches, same layout and labels: d001-d060 in ../shared/corpus/real-issues/cases and
d061-d132 in ../shared/corpus/real-issues-2/cases (BATCHES); a case is named by its folder (`d074`).

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
BATCHES = ("real-issues", "real-issues-2")  # corpus folders, in case order


def batch_dir(batch: str) -> Path | None:
    """../shared/corpus/<batch>/cases next to the checkout (or its worktree parent), or under $NCCLPM_SHARED."""
    cases = corpus(batch, "cases")
    return cases if cases.is_dir() else None


def corpus_dir() -> Path | None:
    """The first batch's folder (d001-d060)."""
    return batch_dir(BATCHES[0])


def batch_names(batch: str) -> list[str]:
    cases = batch_dir(batch)
    return sorted(p.name for p in cases.iterdir() if (p / "label.json").is_file()) if cases else []


def case_names() -> list[str]:
    """Every case of every batch present."""
    return [n for b in BATCHES for n in batch_names(b)]


@cache
def case_dir(name: str) -> Path:
    for b in BATCHES:
        folder = batch_dir(b)
        if folder is not None and (folder / name / "label.json").is_file():
            return folder / name
    raise KeyError(name)


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

    folder = case_dir(name)
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


def by_batch(results: list[Result]) -> dict[str, list[Result]]:
    names = {b: set(batch_names(b)) for b in BATCHES}
    return {b: [r for r in results if r.case in names[b]] for b in BATCHES if names[b]}


def conclusive_precision(results: list[Result]) -> float | None:
    """Share of the conclusive answers that name the labelled category (None when there are none)."""
    conclusive = [r for r in results if r.band == "conclusive"]
    return sum(r.score == 1.0 for r in conclusive) / len(conclusive) if conclusive else None


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


def _band_row(name: str, rs: list[Result]) -> str:
    right = sum(r.score == 1.0 for r in rs)
    half = sum(r.score == 0.5 for r in rs)
    rate = f"{right / len(rs):.0%}" if rs else "-"
    mean = f"{sum(r.confidence for r in rs) / len(rs):.2f}" if rs else "-"
    return f"| {name} | {len(rs)} | {mean} | {right} | {half} | {len(rs) - right - half} | {rate} |"


def calibration_table(results: list[Result]) -> str:
    """Per confidence band, over all cases and then per batch: how often an answer of that band is right."""
    rows = [
        "| band | answers | mean confidence | right (label) | half (secondary) | wrong | right rate |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    rows += [_band_row(band, [r for r in results if r.band == band]) for band in BANDS]
    batches = by_batch(results)
    if len(batches) > 1:
        for rs in batches.values():
            span = f"{rs[0].case}-{rs[-1].case}"
            rows += [_band_row(f"{band}, {span}", [r for r in rs if r.band == band]) for band in BANDS]
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


def scores_table(results: list[Result]) -> str:
    rows = ["| cases | score | share | conclusive answers right |", "|---|---:|---:|---:|"]
    parts = [*by_batch(results).items(), ("all", results)]
    for batch, rs in parts:
        if not rs:
            continue
        span = f"{rs[0].case}-{rs[-1].case}" if batch != "all" else f"all {len(rs)}"
        cp = conclusive_precision(rs)
        nconc = sum(r.band == "conclusive" for r in rs)
        conc = f"{cp:.0%} of {nconc}" if cp is not None else "-"
        rows.append(f"| {span} | {total(rs):g} / {len(rs)} | {total(rs) / len(rs):.1%} | {conc} |")
    return "\n".join(rows)


def generated(results: list[Result]) -> str:
    score = total(results)
    n = len(results)
    return "\n\n".join(
        [
            f"**Score: {score:g} / {n} ({score / n:.1%})** - 1 for the labelled category, 0.5 for a labelled secondary.",
            scores_table(results),
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
    import sys

    wanted = set(sys.argv[1:])
    res = [run_case(n) for n in case_names() if not wanted or n in wanted]
    for r in res:
        mark = {1.0: "ok  ", 0.5: "half", 0.0: "MISS"}[r.score]
        print(
            f"{mark} {r.case} label={r.label:<24} got={r.category:<24} {r.band:<10} {r.confidence:.2f} "
            f"culprits={list(r.culprits)} label_culprits={r.label_culprits}"
        )
    print(generated(res))
