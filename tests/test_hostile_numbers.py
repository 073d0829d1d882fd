"""Extreme numbers (issue 13, items 5 and 10): every numeric field of every catalog pattern, fed 2^31, 2^32, 2^63-1,
1e20 and their negatives through the whole pipeline - tables, every rule, every renderer - must not make a rule
fail, a renderer crash or the process blow up. Timestamps in year 1 and 9999 too, and rank counts from a log
(`WORLD_SIZE=999999999`, `[rank2147483647]`, `2/2000000000 clients joined`) must never become a rank range.

How the lines are made: each example line of a pattern is parsed once; for each numeric field, the example's own
value is found in the line at the place whose replacement changes that field (so a `1` elsewhere in the line is
left alone), and that place gets the extreme value. A pattern whose regex refuses the value (`\\d{1,6}`) simply
does not match: the test is about what matches.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from pathlib import Path

import polars as pl
import pytest

from ncclpm.api import catalog
from ncclpm.engine import diagnose_tables
from ncclpm.ingest.build import build_tables
from ncclpm.ingest.text.extract import extract_events, parse_lines
from ncclpm.render import RENDERERS, render
from ncclpm.sources.discover import Job, Source
from tests.test_hostile_files import _capped_python

EXTREMES = ("2147483648", "4294967296", "9223372036854775807", "100000000000000000000", "-9223372036854775808")
FLOAT_EXTREMES = ("1e20", "1e308", "-1e308")
NUMERIC = {"i64", "u64", "f64"}


def _parse(lines: list[str]) -> pl.DataFrame:
    """What the catalogs' patterns read (NCCL's declared messages would replace some of their events: their own
    fields go through `_run` with the rest)."""
    kept = pl.DataFrame({"source": ["x.log"] * len(lines), "line": list(range(1, len(lines) + 1)), "raw": lines})
    return extract_events(parse_lines(kept, catalog()), catalog(), messages=False)


@lru_cache(maxsize=1)
def places() -> tuple[tuple[str, str, str, int, int], ...]:
    """(pattern id, example line, field, start, end): where each numeric field's value sits in each example."""
    cat = catalog()
    examples = [(p, ex.line) for p in cat.patterns if NUMERIC & set(p.fields.values()) for ex in p.examples]
    found = _parse([line for _, line in examples])
    candidates: list[tuple[str, str, str, int, int, str]] = []
    for i, (p, line) in enumerate(examples):
        row = found.filter((pl.col("line") == i + 1) & (pl.col("event") == p.id))
        if row.is_empty():
            continue
        for name, dtype in p.fields.items():
            value = row[name][0]
            if dtype not in NUMERIC or value is None:
                continue
            text = str(int(value)) if float(value).is_integer() else str(value)
            for m in re.finditer(rf"(?<![\d.]){re.escape(text)}(?![\d])", line):
                marker = "7654321"
                candidates.append((p.id, line, name, m.start(), m.end(), line[: m.start()] + marker + line[m.end() :]))
    probe = _parse([c[5] for c in candidates])
    out = []
    for i, (pid, line, name, start, end, _) in enumerate(candidates):
        hit = probe.filter((pl.col("line") == i + 1) & (pl.col("event") == pid))
        if not hit.is_empty() and hit[name][0] == 7654321:
            out.append((pid, line, name, start, end))
    return tuple(out)


def extreme_lines(values: tuple[str, ...], pattern: str | None = None) -> list[str]:
    kinds = {p.id: p.fields for p in catalog().patterns}
    lines = []
    for pid, line, name, start, end in places():
        if pattern is not None and pid != pattern:
            continue
        usable = values if kinds[pid][name] != "f64" else values + FLOAT_EXTREMES
        lines += [line[:start] + v + line[end:] for v in usable]
    return lines


def _run(lines: list[str], name: str = "extreme") -> list[str]:
    """Every table, every rule, every renderer; returns the warnings (a rule that failed is one)."""
    data = ("\n".join(lines) + "\n").encode()
    job = Job(name, [Source("rank0.log", "text", data=data), Source("logs/rank1.log", "text", data=data)])
    d = diagnose_tables(build_tables(job, catalog()))
    for fmt in RENDERERS:
        text = render(d, fmt)
        assert text
        if fmt in ("json", "slack-json"):
            json.loads(text)
    return list(d.warnings)


def test_the_places_cover_every_numeric_field_the_examples_hold() -> None:
    covered = {(pid, name) for pid, _, name, _, _ in places()}
    wanted = {(p.id, f) for p in catalog().patterns for f, t in p.fields.items() if t in NUMERIC}
    assert len(covered) >= 0.9 * len(wanted), sorted(wanted - covered)


def _numeric_patterns() -> list[str]:
    return sorted({p.id for p in catalog().patterns if NUMERIC & set(p.fields.values())})


TIMED = (
    "[rank{r}]:[E1231 23:59:59.999999 ProcessGroupNCCL.cpp:616] [Rank {r}] Watchdog caught collective operation "
    "timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)={ms}) ran for {ms} "
    "milliseconds before timing out."
)
STAMPS = (
    ("0001-01-01T00:00:00.000000", "0001-01-01T00:00:00.000001"),
    ("9999-12-31T23:59:59.999999", "9999-12-31T23:59:58.000000"),
    ("0001-01-01T00:00:00.000000", "9999-12-31T23:59:59.999999"),
)


def _dated(stamps: tuple[str, str], timeout_ms: str) -> list[str]:
    lines = []
    for r, stamp in enumerate(stamps):
        lines.append(f"{stamp} {TIMED.format(r=r, ms=timeout_ms)}")
        lines.append(f"{stamp} [rank{r}]: Epoch 3 step 120 loss 0.25")
        lines.append(f"{stamp} [rank{r}]: RuntimeError: DataLoader timed out after 5 seconds")
    return lines


def cases() -> dict[str, list[str]]:
    """name -> the lines of one job: one extreme value in every pattern; every extreme value in one pattern (the
    rule that reads it decides on it alone); timestamps at the ends of the calendar with extreme timeouts."""
    out = {f"value {v}": extreme_lines((v,)) for v in EXTREMES}
    out |= {f"pattern {p}": extreme_lines(EXTREMES, p) for p in _numeric_patterns()}
    out |= {
        f"dated {a[:4]}-{b[:4]} timeout {ms}": _dated((a, b), ms)
        for a, b in STAMPS
        for ms in ("600000", "86400000000000000", "9223372036854775807")
    }
    return {k: v for k, v in out.items() if v}


def run_cases() -> dict[str, str]:
    """name -> what went wrong (a rule that failed, an exception) for every case; {} when all went through."""
    problems = {}
    for name, lines in cases().items():
        try:
            failed = [w for w in _run(lines) if w.startswith("rule ")]
        except Exception as exc:  # the report names it
            failed = [f"{type(exc).__name__}: {exc}"[:500]]
        if failed:
            problems[name] = failed[0][:500]
    return problems


_CASES_CHILD = """
import json, resource, sys, time
start = time.perf_counter()
from tests.test_hostile_numbers import run_cases
problems = run_cases()
usage = {"seconds": time.perf_counter() - start, "rss_mb": int(next(x for x in open('/proc/self/status') if x.startswith('VmHWM')).split()[1]) >> 10}
print("USAGE " + json.dumps(usage), file=sys.stderr)
print("PROBLEMS " + json.dumps(problems), file=sys.stderr)
"""


def test_extreme_numbers_in_every_numeric_field_and_at_the_ends_of_the_calendar() -> None:
    """In a memory-capped child: before the bounds, one of these jobs took 23 GB (a rank range from 2^63)."""
    assert len(cases()) > len(_numeric_patterns())
    code, usage, err = _capped_python(_CASES_CHILD, [], cap_mb=1500, timeout=240)
    assert usage.get("rss_mb", 0) < 1500, usage
    assert code == 0, err[-3000:]
    problems = json.loads(next(x for x in err.splitlines() if x.startswith("PROBLEMS "))[9:])
    assert problems == {}, problems


# ------------------------------------------------------------------------- 10. no rank range from a number


RANK_BOMBS = (
    "[rank0]: WORLD_SIZE=999999999 RANK=0 LOCAL_RANK=0",
    "[rank2147483646]: RuntimeError: DataLoader timed out after 5 seconds",
    "[rank0]: torch.distributed.DistStoreError: Timed out after 901 seconds waiting for clients. 2/2000000000 clients "
    "joined.",
    "[PG ID 0 PG GUID 0(default_pg) Rank 2147483646] Watchdog caught collective operation timeout",
    "[rank1]: RuntimeError: DataLoader timed out after 5 seconds",
)
_EVERY_FORMAT = """
import json, resource, sys, time
from ncclpm.api import diagnose
from ncclpm.render import RENDERERS, render
start = time.perf_counter()
d = diagnose([sys.argv[1]])
sizes = {fmt: len(render(d, fmt)) for fmt in RENDERERS}
usage = {"seconds": time.perf_counter() - start, "rss_mb": int(next(x for x in open('/proc/self/status') if x.startswith('VmHWM')).split()[1]) >> 10}
print("USAGE " + json.dumps(usage), file=sys.stderr)
print(json.dumps({"category": str(d.category), "warnings": list(d.warnings), "sizes": sizes}))
"""


@pytest.mark.parametrize("world", ["999999999", "1048576"])
def test_a_rank_count_from_a_log_is_never_materialised(tmp_path: Path, world: str) -> None:
    """Past the bounds the numbers are ignored (with a warning); within them (a million ranks) no rule lists them."""
    job = tmp_path / "job"
    job.mkdir()
    lines = [line.replace("999999999", world).replace("2000000000", world) for line in RANK_BOMBS]
    lines = [line.replace("2147483646", str(int(world) - 1)) for line in lines]
    (job / "console.log").write_text("\n".join(lines) + "\n")
    code, usage, err = _capped_python(_EVERY_FORMAT, [str(job)], cap_mb=700)
    assert code == 0, err[-2000:]
    assert usage["rss_mb"] < 700 and usage["seconds"] < 60, usage


@pytest.fixture(scope="module")
def real_diagnosis():
    from ncclpm.api import diagnose

    return diagnose([Path(__file__).parent / "cases" / "rank0_slow_work__torchrun_3ranks" / "input"])


@pytest.mark.parametrize("year", [1, 9999])
@pytest.mark.parametrize("timeout_ms", [600000, 86400000000000000, 2**63 - 1])
def test_every_renderer_holds_any_time_and_any_timeout(real_diagnosis, year: int, timeout_ms: int) -> None:
    """Behind the bounds, the renderers' own time arithmetic is clamped too (a Diagnosis built by other code)."""
    from dataclasses import replace
    from datetime import datetime

    d = real_diagnosis
    stamp = datetime(year, 12 if year > 1 else 1, 31 if year > 1 else 1, 23 if year > 1 else 0, 59 if year > 1 else 0)
    ranks = tuple({**r, "first_error_ts": stamp, "last_activity_ts": stamp, "timed_out": True} for r in d.ranks)
    fc = {**(d.failing_collective or {}), "timeout_ms": timeout_ms}
    odd = replace(d, ranks=ranks, failing_collective=fc)
    for fmt in RENDERERS:
        assert render(odd, fmt)
