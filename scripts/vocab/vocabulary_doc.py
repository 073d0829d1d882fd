"""docs/VOCABULARY.md: what ncclpm reads of each producer's vocabulary, per area - generated (run
`python scripts/regenerate.py`; tests/test_nccl_messages.py checks it is fresh).

Several producers fill the document, one section each, in the order of PRODUCERS: NCCL's WARN formats (the pinned
snapshot of scripts/vocab/data, read by parsers/nccl/), then PyTorch's distributed messages (torch_coverage.py), then
the frameworks' own messages (frameworks_extract.py's list: read by a declared entry, or not declared).
A message is *read* when a declared entry reads it (its meaning, category, strength, fix),
*benign* when its entry says NCCL works around it by itself (never a cause), *out of scope* when an entry says why it
is not read; *missing* when nothing declares it (the coverage test fails then).
"""

from __future__ import annotations

import json
import tomllib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "VOCABULARY.md"
DATA = ROOT / "scripts" / "vocab" / "data"
GOAL = 0.90  # issue 29: read or declared benign, of the pinned release's WARN formats
NO_CAUSE_KINDS = frozenset({"torch_internal"})  # read with their meaning, no cause alone (whatever their category)


@dataclass
class Area:
    name: str
    title: str
    cause: int = 0  # read, and alone it points to a category
    no_cause: int = 0  # read, but alone it names no cause (an internal check, a tear-down)
    benign: int = 0
    out_of_scope: int = 0
    missing: int = 0
    categories: Counter = field(default_factory=Counter)

    @property
    def total(self) -> int:
        return self.cause + self.no_cause + self.benign + self.out_of_scope + self.missing

    def count(self, status: str, category: str | None, no_cause: bool) -> None:
        """One message's verdict: read by an entry of `category` (None: not read; `no_cause`: the entry names no
        cause alone), else declared benign or out of scope, else missing."""
        if category == "benign" or (category is None and status == "benign"):
            self.benign += 1
        elif category is not None and (category == "unknown" or no_cause):
            self.no_cause += 1
        elif category is not None:
            self.cause += 1
            self.categories[category] += 1
        elif status == "out_of_scope":
            self.out_of_scope += 1
        else:
            self.missing += 1


@dataclass
class Section:
    title: str
    intro: str
    areas: list[Area]
    notes: list[str] = field(default_factory=list)
    goal: bool = True  # counted against GOAL (a debugging tool's own messages are shown, not counted)

    def total(self, attr: str) -> int:
        return sum(getattr(a, attr) if attr != "total" else a.total for a in self.areas)


def nccl() -> Section:
    """NCCL's WARN formats at the pinned snapshot, by area of parsers/nccl/."""
    from ncclpm.ingest.catalog import load_catalog

    prefixes = json.loads((DATA / "nccl_prefixes.json").read_text(encoding="utf-8"))
    pinned = prefixes["pinned"]
    extracted = [json.loads(x) for x in (DATA / "nccl_messages.jsonl").read_text(encoding="utf-8").splitlines()]
    ids = {m["id"] for m in extracted if m["level"] == "WARN" and pinned in m["tags"]}
    messages = load_catalog().vocabulary().messages
    by_id = {m.id: m for m in messages}
    titles = {}
    for path in sorted((ROOT / "parsers" / "nccl").glob("*.toml")):
        area = tomllib.loads(path.read_text(encoding="utf-8")).get("area", {})
        titles[area.get("name", path.stem)] = area.get("title", path.stem)
    areas: dict[str, Area] = {}
    for mid in sorted(ids):
        m = by_id.get(mid)
        name = m.area if m else "(undeclared)"
        a = areas.setdefault(name, Area(name, titles.get(name, name)))
        if m is None:
            a.missing += 1
        elif m.category == "benign":
            a.benign += 1
        elif m.category == "unknown":
            a.no_cause += 1
        else:
            a.cause += 1
            a.categories[m.category] += 1
    older = sum(1 for m in messages if m.id not in ids)
    return Section(
        title=f"NCCL {pinned.lstrip('v').split('-')[0]} (pinned snapshot) - {len(ids)} WARN formats",
        intro="Every `WARN` format NCCL's source prints at the pinned release (scripts/vocab: extracted from the "
        f"tree at `{pinned}`), by the area of parsers/nccl/ its entry belongs to. The catalog also declares "
        f"{older} formats only older releases print (2.3 to 2.29, and net plugins' wordings): not counted here.",
        areas=sorted(areas.values(), key=lambda a: (-a.total, a.name)),
        notes=[
            "*names a cause*: alone, the line points to a category (its strength says how far: a lone line is "
            "a lead, conclusive only where the message is unambiguous); *no cause alone*: an internal consistency "
            "check or a tear-down error - the error before it is the cause (read, with its meaning, never a "
            "verdict by itself); *benign*: NCCL works around it by itself (no libibverbs, no GDRCopy, a setting "
            "ignored or capped) and it never drives a verdict.",
        ],
    )


def _torch_coverage():  # type: ignore[no-untyped-def]
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import torch_coverage as tc  # scripts/vocab, next to this file

    return tc


def _torch_areas(rows: list[dict]) -> list[Area]:
    """torch_coverage.py's verdicts on `rows`, by component: read by a declared entry, a piece of a line an entry
    reads, or a group of parsers/torch/declared.toml."""
    from ncclpm.ingest.catalog import load_catalog

    tc = _torch_coverage()
    patterns = [p for p in load_catalog().patterns if p.declared is not None]
    declared = {p.id: p.declared for p in patterns}
    # an internal assertion reads as its rank's crash, never as a cause: counted with what names no cause alone
    no_cause = {p.id for p in patterns if p.kind in NO_CAUSE_KINDS}
    areas: dict[str, Area] = {}
    for v in tc.coverage(rows).verdicts:
        comp = v.row["component"]
        a = areas.setdefault(comp, Area(comp, comp.split(".")[0]))
        category = None
        if v.status in ("read", "part_of", "structured"):
            d = declared.get(v.by)  # the entry that reads it (`structured`: a reader module, no category)
            category = d.category if d is not None else "unknown"
        a.count(v.status, category, v.by in no_cause)
    return sorted(areas.values(), key=lambda a: (-a.total, a.name))


def torch() -> Section:
    """torch's distributed messages of the newest release the extraction read, by component."""
    tc = _torch_coverage()
    newest = [r for r in tc.rows() if tc.gated(r["component"], r["scope"]) and r["last"] == tc.NEWEST]
    older = sum(1 for r in tc.rows() if tc.gated(r["component"], r["scope"]) and r["last"] != tc.NEWEST)
    return Section(
        title=f"PyTorch {tc.NEWEST} (c10d, gloo, flight recorder, torchelastic, torchrun) - {len(newest)} messages",
        intro="Every message torch's released wheel prints from its distributed core (the Python sources, and "
        "`strings` of its libraries for the C++ ones: scripts/vocab/data/torch_messages.jsonl), by component. "
        "A message is read by a declared entry of the catalogs (parsers/torch/, the flat catalogs' torch patterns) "
        "or a piece of a line one reads; the others are declared benign or out of scope with a reason in "
        f"parsers/torch/declared.toml. The {older} wordings only older releases (2.0 to 2.14) print are accounted "
        "for the same way (tests/test_torch_messages.py): not counted here. Strings of the libraries that are not "
        "messages (names, keys and paths with no space, pybind docstrings and schemas, libstdc++/fmt/json's own "
        "texts) are not in the list: `torch_extract.not_a_message` drops them; the debugging tools' own messages "
        "are counted in the next section.",
        areas=_torch_areas(newest),
        notes=[
            "*names a cause*: includes the usage errors torch raises at the call (a tensor on the wrong device or "
            "of the wrong dtype/size/layout, an operation the backend does not support, a group used before "
            "init_process_group, an argument out of range: parsers/torch/usage.toml, category config_version). "
            "*no cause alone*: a victim's line (a watchdog timeout, a teardown), NCCL's result class that the "
            "message before it explains, or an internal assertion of torch (a torch bug or state an earlier error "
            "corrupted). *out of scope*: what a job's failure is not diagnosed from - each group of "
            "parsers/torch/declared.toml says why.",
        ],
    )


def torch_tools() -> Section:
    """The debugging tools' own messages (torch_coverage.TOOLS): shown, declared, not counted against the goal."""
    tc = _torch_coverage()
    newest = [r for r in tc.rows() if tc.tool(r["component"], r["scope"]) and r["last"] == tc.NEWEST]
    return Section(
        title=f"PyTorch {tc.NEWEST} debugging tools (debug server, flight-recorder analyser) - {len(newest)} messages",
        intro="The messages of the tools a person runs to look into a job - the debug HTTP server "
        "(torch.distributed.debug and c10d's control plane: HTTP status texts, its handlers' replies) and the "
        "flight-recorder analyser (`python -m torch.distributed.flight_recorder.fr_trace`: its report) - are the "
        "tools' own interface, not lines a failing job's log holds: counted here, apart from the goal above. "
        "ncclpm reads the flight-recorder dumps themselves (FR01/FR02), not the analyser's printout.",
        areas=_torch_areas(newest),
        goal=False,
    )


# --- the frameworks on torch (vLLM, SGLang, verl, OpenRLHF, Ray): frameworks_extract.py's list -----------------------

FRAMEWORKS = DATA / "frameworks_messages.jsonl"


def _frameworks_coverage():  # type: ignore[no-untyped-def]
    _torch_coverage()  # scripts/vocab on the path
    import frameworks_coverage as fc  # scripts/vocab, next to this file

    return fc


SMALL_AREA = 5  # sub-packages with fewer messages are shown together, as `<package>.(other)`


def _framework_area(row: dict, sizes: Counter) -> str:
    """The package and its first sub-package (`vllm.distributed`, `sglang.srt`, `ray.util`): where the code is."""
    area = ".".join(row["component"].split(".")[:2])
    return area if sizes[area] >= SMALL_AREA else f"{row['package']}.(other)"


def framework_counts(rows: list[dict]) -> tuple[list[Area], Counter, Counter]:
    """frameworks_coverage.py's verdicts on `rows`, per area: each message read by a declared entry of the catalogs
    (the same test as torch's: an anchor in its line and the entry's regex matching there), sorted by the entry's
    category, or declared benign / out of scope / part of a line an entry reads (parsers/frameworks/declared.toml),
    or missing. Also: the messages each entry reads, and the missing ones per component."""
    from ncclpm.ingest.catalog import load_catalog

    fc = _frameworks_coverage()
    patterns = [p for p in load_catalog().patterns if p.declared is not None]
    declared = {p.id: p.declared for p in patterns}
    no_cause = {p.id for p in patterns if p.kind in NO_CAUSE_KINDS}
    areas: dict[str, Area] = {}
    readers: Counter = Counter()
    missing: Counter = Counter()
    sizes = Counter(".".join(r["component"].split(".")[:2]) for r in rows)
    for v in fc.coverage(rows).verdicts:
        name = _framework_area(v.row, sizes)
        a = areas.setdefault(name, Area(name, v.row["package"]))
        read = v.status in ("read", "part_of")
        if read:
            readers[v.by] += 1
        elif v.status not in ("benign", "out_of_scope"):
            missing[v.row["component"]] += 1
        a.count(v.status, declared[v.by].category if read else None, v.by in no_cause)
    return sorted(areas.values(), key=lambda a: (-a.total, a.name)), readers, missing


def frameworks() -> Section:
    """The frameworks' own messages (scripts/vocab/data/frameworks_messages.jsonl), by package and sub-package."""
    fc = _frameworks_coverage()
    rows = list(fc.rows())
    wheels = json.loads((DATA / "frameworks_wheels.json").read_text(encoding="utf-8"))
    releases = ", ".join(f"{w['package']} {w['version']}" for w in wheels)
    areas, readers, missing = framework_counts(rows)
    errors = [r for r in rows if fc.raised(r)]
    error_areas, _, _ = framework_counts(errors)
    largest = ", ".join(f"{c} {n}" for c, n in sorted(missing.items(), key=lambda kv: (-kv[1], kv[0]))[:5])
    read_errors = sum(a.cause + a.no_cause for a in error_areas)
    declared_errors = sum(a.benign + a.out_of_scope for a in error_areas)
    own = sum(n for e, n in readers.items() if not e.startswith("usage."))
    return Section(
        title=f"Frameworks on torch (vLLM, SGLang, verl, OpenRLHF, Ray) - {len(rows)} messages",
        intro="The distributed and communication messages of the programs that run torch.distributed and NCCL "
        "outside training scripts, read from their released wheels' Python sources (scripts/vocab/"
        f"frameworks_extract.py: {releases}; both releases' wordings, each counted once), by package and "
        "sub-package. Their workers' failures are torch's and NCCL's words (the sections above); these are the "
        "frameworks' own lines around them. A message is read when a declared entry of the catalogs reads its "
        "line (parsers/frameworks.toml, and the torch entries a framework's line matches), or declared benign, "
        "out of scope or part of a line an entry reads, with a reason, in parsers/frameworks/declared.toml "
        "(scripts/vocab/frameworks_coverage.py counts them). The goal applies to the messages raised or logged "
        "at error level (tests/test_frameworks_messages.py); the others are counted, not gated.",
        areas=areas,
        notes=[
            f"Of the {len(errors)} messages raised, or logged at error level (what a failure is worded in), "
            f"{read_errors + declared_errors} are read or declared "
            f"({_pct(read_errors + declared_errors, len(errors))}; goal {fc.GOAL:.0%}): {read_errors} read "
            f"({_pct(read_errors, len(errors))}), {declared_errors} declared benign or out of scope. Of the "
            f"{sum(readers.values())} read in all, {own} by the frameworks' own entries and "
            "the torch/NCCL entries their lines match, "
            f"{sum(readers.values()) - own} by torch's argument-check families (parsers/torch/usage.toml: a "
            "framework's `ValueError` about its own settings reads as the job's configuration, config_version). "
            "*out of scope*: a framework's check of its own arguments, settings and installation raised at the "
            "call, a per-request error it recovers from, an internal state check outside its distributed code - "
            "each group of parsers/frameworks/declared.toml says why. "
            + (f"*missing* (not declared either way, not gated): the largest components: {largest}. " * bool(largest))
            + f"Sub-packages of fewer than {SMALL_AREA} messages are counted together as `<package>.(other)`.",
        ],
        goal=False,
    )


# The producers of the document, in order.
PRODUCERS: list[Callable[[], Section]] = [nccl, torch, torch_tools, frameworks]


def _pct(n: int, total: int) -> str:
    return f"{100 * n / total:.1f}%" if total else "-"


def render(sections: list[Section]) -> str:
    out = [
        "# The producers' vocabulary",
        "",
        "<!-- generated by scripts/vocab/vocabulary_doc.py: run `python scripts/regenerate.py` -->",
        "",
        "What ncclpm reads of the messages its inputs are written in, read from the producers' own sources "
        "(issue 29): each message is declared once, with what it means, the category it points to, how strong it "
        "is alone, whom it incriminates and the fix. Read / benign / out of scope per area; a message nothing "
        "declares fails the coverage test.",
    ]
    for s in sections:
        total = s.total("total")
        read = s.total("cause") + s.total("no_cause")
        covered = read + s.total("benign")
        out += [
            "",
            f"## {s.title}",
            "",
            s.intro,
            "",
            f"**Read or declared benign: {covered} of {total} ({_pct(covered, total)}"
            + (f"; goal {GOAL:.0%})** - " if s.goal else "; not counted against the goal)** - ")
            + f"read {read} ({s.total('cause')} name a cause alone, {s.total('no_cause')} no cause alone), "
            f"benign {s.total('benign')}, out of scope {s.total('out_of_scope')}, missing {s.total('missing')}.",
            "",
            "| area | formats | read: names a cause | read: no cause alone | benign | out of scope | missing | "
            "categories named |",
            "|---|---:|---:|---:|---:|---:|---:|---|",
        ]
        for a in s.areas:
            cats = ", ".join(f"{c} {n}" for c, n in sorted(a.categories.items(), key=lambda kv: (-kv[1], kv[0])))
            out.append(
                f"| {a.name} ({a.title}) | {a.total} | {a.cause} | {a.no_cause} | {a.benign} | {a.out_of_scope} | "
                f"{a.missing} | {cats} |"
            )
        out += ["", *s.notes]
    return "\n".join(out) + "\n"


def generate() -> str:
    return render([p() for p in PRODUCERS])


if __name__ == "__main__":
    DOC.write_text(generate(), encoding="utf-8")
