"""The declared vocabulary: event kinds, envelope columns, rule declarations. Every misspelling fails loudly when the
catalog is loaded or the rule is defined, naming the file; a new envelope is honoured by extraction, paste
re-joining and triage signatures alike."""

from __future__ import annotations

import textwrap
from pathlib import Path

import polars as pl
import pytest

from ncclpm.ingest.catalog import CatalogError, load_catalog
from ncclpm.ingest.selftest import parse_one
from ncclpm.rules import ALL_RULES, check_registry
from ncclpm.rules.base import Rule, RuleError
from ncclpm.sources.paste import normalise_paste
from ncclpm.tables import EXTRA_TABLES, TABLE_NAMES
from ncclpm.tables.kinds import K, UnknownKind
from ncclpm.triage.signature import signature, strip_prefix

ROOT = Path(__file__).resolve().parents[1]
CATALOG = load_catalog()
PATTERN = """
[[pattern]]
id = "x.boom"
kind = "{kind}"
anchor = "boom"
regex = '''boom'''
  [[pattern.example]]
  line = "boom"
"""


def _dir(tmp_path: Path, **files: str) -> Path:
    for name, text in files.items():
        (tmp_path / name).write_text(textwrap.dedent(text), encoding="utf-8")
    return tmp_path


# --------------------------------------------------------------------------------------------------- kinds


def test_every_pattern_kind_is_declared_and_every_declared_kind_is_produced() -> None:
    produced = {p.kind for p in CATALOG.patterns} | {K.exception}  # error files produce exceptions in code
    assert produced <= set(CATALOG.kinds)
    read = {m.kind for m in CATALOG.vocabulary().messages}  # NCCL's messages (parsers/nccl/), cases included
    read |= {c.changes["kind"] for m in CATALOG.vocabulary().messages for c in m.cases if "kind" in c.changes}
    assert read <= set(CATALOG.kinds)
    assert set(CATALOG.kinds) == produced | read, "declared kinds that no pattern or message produces"
    assert all(d.meaning for d in K)


def test_an_undeclared_kind_in_a_catalog_is_refused_with_the_file_and_a_suggestion(tmp_path: Path) -> None:
    extra = _dir(tmp_path, **{"mine.toml": PATTERN.format(kind="colective_timeout")})
    with pytest.raises(
        CatalogError,
        match=r"mine.toml: pattern 'x.boom'.*'colective_timeout' is not declared.*"
        r"did you mean 'collective_timeout'",
    ):
        load_catalog((extra,))


def test_a_kind_declared_in_a_patterns_dir_can_be_used_there(tmp_path: Path) -> None:
    extra = _dir(
        tmp_path,
        **{
            "kinds.toml": '[[kind]]\nname = "boom"\nmeaning = "it went boom"\n',
            "mine.toml": PATTERN.format(kind="boom"),
        },
    )
    cat = load_catalog((extra,))
    assert cat.kinds["boom"].meaning == "it went boom"
    assert parse_one(cat, "boom")[1]["kind"].to_list() == ["boom"]


def test_a_kind_declared_twice_names_both_files(tmp_path: Path) -> None:
    extra = _dir(tmp_path, **{"kinds.toml": '[[kind]]\nname = "cuda_oom"\nmeaning = "again"\n'})
    with pytest.raises(CatalogError, match=r"'cuda_oom' is declared twice \(kinds.toml and kinds.toml\)"):
        load_catalog((extra,))


def test_kinds_are_declared_in_kinds_toml_only(tmp_path: Path) -> None:
    extra = _dir(tmp_path, **{"mine.toml": '[[kind]]\nname = "boom"\nmeaning = "m"\n'})
    with pytest.raises(CatalogError, match=r"mine.toml: \[\[kind\]\] entries belong in kinds.toml"):
        load_catalog((extra,))


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ('name = "boom"', "`meaning`"),
        ('name = "Boom Boom"\nmeaning = "m"', "lower-case identifier"),
        ('name = "boom"\nmeaning = "m"\nvictim = "yes"', "`victim` must be true or false"),
        ('name = "boom"\nmeaning = "m"\nvictm = true', "unknown keys"),
    ],
)
def test_a_malformed_kind_is_refused(tmp_path: Path, entry: str, message: str) -> None:
    extra = _dir(tmp_path, **{"kinds.toml": f"[[kind]]\n{entry}\n"})
    with pytest.raises(CatalogError, match=message):
        load_catalog((extra,))


def test_code_naming_an_undeclared_kind_fails_at_import() -> None:
    assert K.collective_timeout == "collective_timeout"
    with pytest.raises(UnknownKind, match=r"'colective_timeout' is not declared in kinds.toml.*'collective_timeout'"):
        exec(compile("from ncclpm.tables.kinds import K\nKINDS = [K.colective_timeout]\n", "rules/mine.py", "exec"), {})


def test_a_rule_query_on_an_undeclared_kind_raises() -> None:
    from ncclpm.api import build

    t = build([ROOT / "sample_logs" / "nccl_rank0_sample_generation"])
    assert t.kinds(K.collective_timeout).height > 0
    with pytest.raises(UnknownKind, match=r"Tables\.kinds"):
        t.kinds("collective_timeouts")


def test_victim_kinds_are_the_declared_ones() -> None:
    from ncclpm.analysis.victims import VICTIM_KINDS

    assert set(VICTIM_KINDS) == {d.name for d in K if d.victim} and K.collective_timeout in VICTIM_KINDS


# --------------------------------------------------------------------------------------------------- rules


def test_a_rule_needing_an_unknown_table_fails_when_defined() -> None:
    with pytest.raises(RuleError, match=r"`needs` names unknown tables \['evnets'\]"):

        class Misspelt(Rule):
            needs = frozenset({"evnets"})


def test_every_table_name_is_one_tables_can_answer() -> None:
    from ncclpm.analysis import analyse
    from ncclpm.api import build

    t = build([ROOT / "sample_logs" / "gloo_rank0_slow_work"])
    assert set(t.extra) == set(EXTRA_TABLES)
    facts = analyse(t)
    assert {name for name in TABLE_NAMES if facts.has(name)} >= {
        "lines",
        "events",
        "ranks",
        "fr_entries",
        "fr_analysis",
    }


def test_a_rule_explaining_an_unknown_rule_fails_at_registration() -> None:
    class Explains(Rule):
        id, name, explains = "ZZ01", "zz", ("CT1",)

    with pytest.raises(RuleError, match=r"ZZ01 .*`explains` names unknown rule ids \['CT1'\]"):
        check_registry((*ALL_RULES, Explains))
    check_registry(ALL_RULES)


def test_a_rule_without_a_place_in_the_precedence_table_fails_at_registration() -> None:
    class Placeless(Rule):
        id, name = "ZZ02", "zz2"

    with pytest.raises(RuleError, match=r"precedence.py: ZZ02 is missing"):
        check_registry((*ALL_RULES, Placeless))


def test_a_rule_id_registered_twice_fails() -> None:
    with pytest.raises(RuleError, match="registered twice"):
        check_registry((*ALL_RULES, ALL_RULES[0]))


# ----------------------------------------------------------------------------------------------- envelopes

CLUSTER = """
[[envelope]]
id = "test.cluster_host"
slot = "viewer"
regex = '''<(?<cluster_host>[\\w.-]+)> '''
columns = { host = "cluster_host" }
  [[envelope.example]]
  line = "<gpu-node-7> [rank3]: RuntimeError: boom"
  expect = { rank = 3, host = "gpu-node-7", message = "RuntimeError: boom" }
"""
LINE = "<gpu-node-7> [rank3]:[E1122 08:24:16.797000000 ProcessGroupNCCL.cpp:2] RuntimeError: shard 42 of 64 is bad"


def test_an_envelope_from_a_patterns_dir_is_honoured_everywhere(tmp_path: Path) -> None:
    cat = load_catalog((_dir(tmp_path, **{"cluster.toml": CLUSTER}),))
    # extraction: its declared column is filled, the envelopes after it still apply
    parsed, _ = parse_one(cat, LINE)
    row = parsed.row(0, named=True)
    assert (row["host"], row["rank"], row["level"]) == ("gpu-node-7", 3, "E")
    # triage: stripped from the signature (the shipped catalog does not know it)
    assert signature(LINE, cat) == "RuntimeError: shard <n> of <n> is bad"
    assert signature(LINE).startswith("<gpu-node-<n>>")
    assert strip_prefix(LINE, cat) == "RuntimeError: shard 42 of 64 is bad"
    # paste: a line that starts with it is not glued onto the previous one cut at 80 columns (lines of 160
    # characters end exactly at the cut, so only the start of the next line tells it is a new one)
    log = "\n".join(f"{LINE} (attempt {i})".ljust(160, ".") for i in range(3))
    wrapped = "\n".join(line[i : i + 80] for line in log.split("\n") for i in range(0, len(line), 80))
    assert normalise_paste(wrapped, cat.head_regex()) == log
    assert normalise_paste(wrapped, CATALOG.head_regex()) != log


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("regex = '''<(?<h>\\w+)> '''\ncolumns = { host = \"hostname\" }", "names group 'hostname'"),
        ("regex = '''<(?<h>\\w+)> '''\ncolumns = { hostname = \"h\" }", "not an envelope column"),
        ("regex = '''<(?<h>\\w+)> '''\ncolumns = { ts = \"h\" }", "needs `ts_format`"),
        ("regex = '''<(?<h>\\w+)> '''\ncolumns = { ts = \"h\" }\nts_format = \"unix\"", "needs `ts_format`"),
        ("regex = '''<(?<message>\\w+)> '''", "reserved"),
        ("regex = '''<(?<c10_rank>\\w+)> '''", "reuses group name 'c10_rank'"),
        ("regex = '''<\\w+> '''\nhead = '''\\pL+'''", "compile as a Python regex"),
        ("regex = '''<\\w+> '''\nlevel = { default = \"I\", colour = \"red\" }", "`default` and `words` only"),
        ("regex = '''<\\w+> '''\nslots = \"x\"", "unknown keys"),
    ],
)
def test_a_malformed_envelope_is_refused(tmp_path: Path, body: str, message: str) -> None:
    extra = _dir(tmp_path, **{"env.toml": f'[[envelope]]\nid = "t.e"\nslot = "viewer"\n{body}\n'})
    with pytest.raises(CatalogError, match=message):
        load_catalog((extra,))


def test_column_precedence_innermost_first_and_full_dates_first() -> None:
    # Kubernetes' ISO timestamp (outer) beats c10's month-day (inner, no year); c10's rank beats Slurm's task id.
    parsed, _ = parse_one(CATALOG, "2024-05-01T10:11:12.5Z stdout F 7: [rank3]:[E501 09:00:00.000 x.cpp:1] msg")
    row = parsed.row(0, named=True)
    assert row["ts"] == pl.Series(["2024-05-01 10:11:12.5"]).str.to_datetime()[0]
    assert row["rank"] == 3 and row["level"] == "E"
    assert CATALOG.column_sources("rank")[0].id == "torch.c10_rank"


def test_catalog_kinds_lists_each_kind_with_its_patterns() -> None:
    from click.testing import CliRunner

    from ncclpm.cli import main

    out = CliRunner().invoke(main, ["catalog", "kinds"])
    assert out.exit_code == 0
    assert "collective_timeout [victim]: a collective did not complete" in out.output
    assert "exception: " in out.output and "py.exception_line" in out.output


# ------------------------------------------------------------------------------------------------- readings


def test_readings_set_columns_rules_read() -> None:
    def row(line: str, kind: str) -> dict:
        _, events = parse_one(CATALOG, line)
        return events.filter(pl.col("kind") == kind).row(0, named=True)

    ib = "node5:71:90 [0] NCCL WARN NET/IB: Got completion from peer 10.1.0.5<35010> with status=IBV_WC_RETRY_EXC_ERR(12) opcode=IBV_WC_SEND(0) vendor_err=129 hca mlx5_3"
    assert (row(ib, K.network_error)["net_class"], row(ib, K.network_error)["strength"]) == ("ib", 0.88)
    assert row("[rank1]: RuntimeError: Connection closed by peer [10.0.0.2]:1234", K.exception)["victim"] is True
    assert row("[rank1]: RuntimeError: shard 3 is corrupt", K.exception)["victim"] is False
    timeout = "[rank0]:[E1218 20:27:21.426 ProcessGroupNCCL.cpp:629] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=BROADCAST, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600010 milliseconds before timing out."
    assert row(timeout, K.collective_timeout)["victim"] is True, "a victim kind's events are victims"
    summary = "[rank0]: torch.distributed.DistBackendError: NCCL error in: x.cpp:1, remote process exited or there was a network error, NCCL version 2.21.5"
    assert row(summary, K.nccl_error)["net_class"] == "remote_exited"


def test_readings_apply_to_error_files_too() -> None:
    from ncclpm.api import build

    t = build([ROOT / "tests" / "cases" / "mismatched_collectives__dtype_debug_detail" / "input"])
    files = t.events.filter(pl.col("event") == "elastic.error_file")
    assert files.height and files["victim"].dtype == pl.Boolean and files["victim"].null_count() == 0


@pytest.mark.parametrize(
    ("reading", "message"),
    [
        ('set = { net_clas = "ib" }', "'net_clas' is not an events column"),
        ('set = { strength = "high" }', "is not a Float64"),
        ("set = { victim = 1 }", "is not a Boolean"),
        ("when = '''(?<=x)y'''\nset = { victim = true }", "Rust regex dialect"),
        ("when = 3\nset = { victim = true }", "`when` must be a regex"),
        ("sett = { victim = true }", "optional `when`"),
    ],
)
def test_a_malformed_reading_is_refused(tmp_path: Path, reading: str, message: str) -> None:
    extra = _dir(
        tmp_path, **{"kinds.toml": f'[[kind]]\nname = "boom"\nmeaning = "m"\n  [[kind.reading]]\n  {reading}\n'}
    )
    with pytest.raises(CatalogError, match=message):
        load_catalog((extra,))


def test_no_rule_matches_text_with_a_regex() -> None:
    """What a line means is read once, by the catalog: rules/ runs no regex over `message` or `text`."""
    import re

    offenders = []
    for path in sorted((ROOT / "src" / "ncclpm" / "rules").glob("*.py")):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"""col\(["'](?:message|text)["']\)\.str\.|\[["'](?:message|text)["']\]\.str\.""", line):
                offenders.append(f"{path.name}:{n}")
    assert not offenders, offenders


# ----------------------------------------------------------------------------------------------- precedence


def test_precedence_lists_every_rule_once_and_the_engine_follows_it() -> None:
    from ncclpm import precedence
    from ncclpm.engine import _rank_key
    from ncclpm.rules.base import Finding
    from ncclpm.tables.schema import Category

    assert precedence.check({r.id for r in ALL_RULES}) == []
    assert precedence.check({r.id for r in ALL_RULES} | {"ZZ01"}) == ["ZZ01 is missing (every rule must have a place)"]
    assert all(why.strip() for _, why in precedence.PRECEDENCE)

    def finding(rule: str, conf: float) -> Finding:
        return Finding(rule, rule, Category.RANK_CRASH, conf, (), "", "", ())

    # same band: the earlier rule wins even with a lower confidence; a better band wins over precedence
    assert max([finding("CR01", 0.89), finding("NV01", 0.86)], key=_rank_key).rule == "NV01"
    assert max([finding("CR01", 0.9), finding("NV01", 0.7)], key=_rank_key).rule == "CR01"
    assert max([finding("ST01", 0.7), finding("ST01", 0.8)], key=_rank_key).confidence == 0.8


# ------------------------------------------------------------------------------------------------- fix text


@pytest.mark.parametrize("rule", ALL_RULES, ids=[r.id for r in ALL_RULES])
def test_how_to_fix_is_generated_from_the_fixes(rule: type[Rule]) -> None:
    doc = rule.doc()
    section = doc.split("## How to fix\n", 1)[1]
    assert section.splitlines() == [f"- {f.doc()}" for f in rule.FIXES.values()]
    assert rule.FIXES, "every rule says how to fix what it finds"


def test_a_hand_written_how_to_fix_section_is_refused() -> None:
    with pytest.raises(RuleError, match="generated from FIXES"):

        class Handwritten(Rule):
            """Title.

            ## How to fix
            Something else than the findings say.
            """


def test_fix_slots_are_filled_in_findings_and_explained_in_docs() -> None:
    from ncclpm.rules.base import Fix

    fix = Fix("Check the ports of {hosts|the named hosts} now.")
    assert fix.render() == "Check the ports of the named hosts now."
    assert fix.render({"hosts": "node7"}) == "Check the ports of node7 now."
    assert Fix("`emptyDir: {medium: Memory}`").render({}) == "`emptyDir: {medium: Memory}`", "not a slot"
    with pytest.raises(KeyError):
        fix.render({})


# ----------------------------------------------------------------------------------------------------- enums


def test_closed_vocabularies_are_enums() -> None:
    from ncclpm.api import diagnose
    from ncclpm.tables.schema import Band, Category

    assert [Band.of(c) for c in (0.2, 0.6, 0.85)] == [Band.POSSIBLE, Band.LIKELY, Band.CONCLUSIVE]
    assert Band.POSSIBLE.rank < Band.LIKELY.rank < Band.CONCLUSIVE.rank
    d = diagnose([ROOT / "sample_logs" / "gloo_rank0_slow_work"])
    assert isinstance(d.band, Band) and isinstance(d.category, Category)
    assert d.to_dict()["band"] == "conclusive" and type(d.to_dict()["band"]) is Band  # a str: JSON as is


def test_no_bare_unknown_literal_in_the_code() -> None:
    """`Category.UNKNOWN`, not a string that a typo would silently change."""
    import re

    hits = [
        f"{p.relative_to(ROOT)}:{n}"
        for p in sorted((ROOT / "src" / "ncclpm").rglob("*.py"))
        for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
        if re.search(r"""["']unknown["']""", line) and not line.strip().startswith("UNKNOWN = ")
    ]
    assert not hits, hits
