"""`ncclpm rules`, `ncclpm explain RULE`, `ncclpm tables PATH --table NAME`, and `diagnose -f html|slack|json`
from the command line."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from ncclpm.cli import main
from ncclpm.precedence import PRECEDENCE
from ncclpm.rules import ALL_RULES, by_id
from ncclpm.rules.base import DOC_SECTIONS

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "sample_logs" / "nccl_rank0_sample_generation"


def _run(*args: str, stdin: str | None = None):
    return CliRunner().invoke(main, list(args), input=stdin)


def test_rules_lists_every_rule_once_in_precedence_order() -> None:
    res = _run("rules")
    assert res.exit_code == 0
    lines = [ln for ln in res.stdout.splitlines() if not ln.startswith(" ")]
    reasons = [ln.strip() for ln in res.stdout.splitlines() if ln.startswith(" ")]
    assert [ln.split()[0] for ln in lines] == [rule for rule, _ in PRECEDENCE]
    assert sorted(ln.split()[0] for ln in lines) == sorted(r.id for r in ALL_RULES)
    for ln, (rule, _) in zip(lines, PRECEDENCE, strict=True):
        r = by_id(rule)
        assert r.name in ln and str(r.category) in ln and len(ln.split()) > 3, "id, name, category, title"
    assert reasons == [f"precedence {i}: {why}" for i, (_, why) in enumerate(PRECEDENCE, 1)]


@pytest.mark.parametrize("rule", [r.id for r in ALL_RULES])
def test_explain_prints_the_documented_sections(rule: str) -> None:
    res = _run("explain", rule)
    assert res.exit_code == 0
    assert res.stdout.startswith(f"# {rule} ")
    lines = res.stdout.splitlines()
    for section in DOC_SECTIONS:
        assert section in lines, f"{section!r} as its own Markdown heading (not indented into a code block)"


def test_explain_by_name_and_unknown_rule() -> None:
    rule = ALL_RULES[0]
    assert _run("explain", rule.name).stdout == _run("explain", rule.id).stdout
    res = _run("explain", "XX99")
    assert res.exit_code == 2 and "no rule 'XX99'" in res.output and res.stdout == ""


@pytest.mark.parametrize(
    ("suffix", "reader"), [(".parquet", pl.read_parquet), (".ndjson", pl.read_ndjson), (".csv", pl.read_csv)]
)
def test_tables_format_follows_the_output_extension(tmp_path: Path, suffix: str, reader) -> None:
    out = tmp_path / f"events{suffix}"
    res = _run("tables", str(SAMPLE), "--table", "events", "-o", str(out))
    assert res.exit_code == 0, res.output
    frame = reader(out)
    assert frame.height > 0 and {"source", "line", "kind", "text"} <= set(frame.columns)


def test_tables_to_stdout_and_explicit_format(tmp_path: Path) -> None:
    res = _run("tables", str(SAMPLE), "--table", "ranks")
    assert res.exit_code == 0 and res.stdout.splitlines()[0].startswith("rank,")
    nd = _run("tables", str(SAMPLE), "--table", "ranks", "-f", "ndjson")
    assert json.loads(nd.stdout.splitlines()[0])["rank"] == 0
    forced = tmp_path / "ranks.data"
    assert _run("tables", str(SAMPLE), "-t", "ranks", "-f", "parquet", "-o", str(forced)).exit_code == 0
    assert pl.read_parquet(forced).height == 4


def test_tables_errors(tmp_path: Path) -> None:
    res = _run("tables", str(SAMPLE), "--table", "nope")
    assert res.exit_code == 2 and "available:" in res.output and "events" in res.output
    assert _run("tables", str(SAMPLE), "-f", "parquet").exit_code == 2, "parquet needs -o"
    out = tmp_path / "e.csv"
    out.write_text("keep me")
    res = _run("tables", str(SAMPLE), "-o", str(out))
    assert res.exit_code == 2 and out.read_text() == "keep me"
    assert _run("tables", str(SAMPLE), "-o", str(out), "--force").exit_code == 0 and out.read_text() != "keep me"


def test_tables_from_stdin() -> None:
    text = (SAMPLE / "slurm-48211.out").read_text()
    res = _run("tables", "-", "--table", "events", "-f", "ndjson", stdin=text)
    assert res.exit_code == 0 and any(json.loads(ln)["kind"] == "collective_timeout" for ln in res.stdout.splitlines())


@pytest.mark.parametrize(
    ("fmt", "marker"),
    [
        ("html", "<!DOCTYPE html>"),
        ("slack", "*slow_rank_work*"),
        ("slack-json", '"blocks"'),
        ("json", '"schema_version": 1'),
    ],
)
def test_diagnose_formats(fmt: str, marker: str, tmp_path: Path) -> None:
    res = _run("diagnose", str(SAMPLE), "-f", fmt)
    assert res.exit_code == 0 and marker in res.stdout
    out = tmp_path / f"report.{fmt}"
    assert _run("diagnose", str(SAMPLE), "-f", fmt, "-o", str(out)).exit_code == 0
    assert out.read_text(encoding="utf-8") == res.stdout
