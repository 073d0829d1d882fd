"""What a small run does not pay for: the shipped TOML catalogs parsed at every start (their parse is recorded at
install time) and the interpreter's teardown (the `ncclpm` command ends once its output is flushed)."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner

from ncclpm.cli import main
from ncclpm.util import resources

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "sample_logs" / "nccl_rank0_sample_generation"


@pytest.fixture
def snapshot_at(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    def use(directory: Path) -> Path:
        out = tmp_path / "snapshot.json"
        resources.write_toml_snapshot(directory, out)
        monkeypatch.setattr(resources, "SNAPSHOT", out)
        resources._snapshot.cache_clear()
        return out

    yield use
    resources._snapshot.cache_clear()


def test_the_snapshot_gives_every_shipped_catalog_as_toml_parses_it(snapshot_at) -> None:
    parsers = resources.data_dir("parsers")
    snapshot_at(parsers)
    recorded = resources._snapshot().keys()
    shipped = sorted(parsers.rglob("*.toml"))  # parsers/nccl/<area>.toml too
    assert sorted(recorded) == sorted(p.relative_to(parsers).as_posix() for p in shipped)
    for path in shipped:
        assert resources.read_toml(path) == tomllib.loads(path.read_text(encoding="utf-8")), path.name


def test_the_snapshot_is_used_only_while_the_file_is_unchanged(tmp_path: Path, snapshot_at) -> None:
    cat = tmp_path / "cat"
    cat.mkdir()
    toml = cat / "x.toml"
    toml.write_text('[a]\nb = "recorded"\n', encoding="utf-8")
    out = snapshot_at(cat)
    digest = resources._digest(toml.read_bytes())
    out.write_bytes(resources.pack_toml_snapshot({"x.toml": (digest, {"a": {"b": "from the snapshot"}})}))
    resources._snapshot.cache_clear()
    assert resources.read_toml(toml) == {"a": {"b": "from the snapshot"}}  # same bytes: the recorded parse
    toml.write_text('[a]\nb = "edited"\n', encoding="utf-8")
    assert resources.read_toml(toml) == {"a": {"b": "edited"}}  # other bytes: parsed afresh


def test_what_marshal_cannot_hold_exactly_is_not_recorded(tmp_path: Path, snapshot_at) -> None:
    (tmp_path / "dated.toml").write_text("when = 2026-11-26T10:00:00Z\n", encoding="utf-8")
    (tmp_path / "nan.toml").write_text("x = nan\n", encoding="utf-8")
    (tmp_path / "plain.toml").write_text("n = 1\n", encoding="utf-8")
    snapshot_at(tmp_path)
    assert resources._snapshot().keys() == ["plain.toml"]
    assert resources.read_toml(tmp_path / "dated.toml")["when"].year == 2026


def test_a_missing_or_damaged_snapshot_means_parsing_toml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = resources.data_dir("parsers") / "kinds.toml"
    good = resources.pack_toml_snapshot({"kinds.toml": (resources._digest(path.read_bytes()), {"kind": []})})
    for content in (
        None,
        b"not a snapshot",
        b"",
        good[:-5],  # cut short: the recorded parse no longer unpacks
        good.replace(b"\x02", b"\x63", 1),  # another format
        b'{"format": 1, "files": {}}',  # the JSON of before
    ):
        snap = tmp_path / "snap.bin"
        if content is not None:
            snap.write_bytes(content)
        monkeypatch.setattr(resources, "SNAPSHOT", snap if content is not None else tmp_path / "none.json")
        resources._snapshot.cache_clear()
        assert resources.read_toml(path) == tomllib.loads(path.read_text(encoding="utf-8"))
    resources._snapshot.cache_clear()


def _command(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    """The installed `ncclpm` command (`command.run`, which runs `cli.run`) run as a user runs it."""
    code = "import sys; sys.argv[0] = 'ncclpm'; from ncclpm.command import run; run()"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, input=stdin, timeout=120)


@pytest.mark.parametrize(
    "args",
    [
        ["rules"],
        ["explain", "CR01"],
        ["explain", "no-such-rule"],
        ["diagnose"],
        ["diagnose", str(SAMPLE), "-f", "json"],
        ["diagnose", str(SAMPLE), "-f", "md", "--fail-on", "possible"],
    ],
)
def test_the_command_exits_with_mains_code_and_all_of_its_output(args: list[str]) -> None:
    """`run` skips the interpreter's teardown: nothing of the report may be lost and the exit code is main's."""
    got = _command(*args)
    want = CliRunner().invoke(main, args)
    assert got.returncode == want.exit_code, got.stderr[-500:]
    assert got.stdout.decode("utf-8") == want.stdout
    assert got.stdout or got.stderr


def test_the_command_writes_its_output_file_whole(tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    got = _command("diagnose", str(SAMPLE), "-f", "html", "-o", str(out))
    assert got.returncode == 0, got.stderr[-500:]
    html = out.read_text(encoding="utf-8")
    assert html.rstrip().endswith("</html>") and len(html) > 10_000
    assert [p.name for p in tmp_path.iterdir()] == ["report.html"], "no temporary file left beside it"


def test_an_anchor_cut_by_newlines_is_found_with_its_metacharacters_literal() -> None:
    import re

    from ncclpm.ingest.text.rawscan import hit_line_regex

    anchor = "a.b(c)|d[e]{f}^$*+?\\g"
    rx = re.compile(hit_line_regex((anchor, "zz"), across_newlines=True))
    assert rx.search("x a.b(c)|d[e]{f}\n^$*+?\\g y")
    assert rx.search("a.b(c)|d[e]{f}^$*+?\\g")
    assert not rx.search("a.b(c)|d[e]{f}^$*+?g")  # the backslash is a character to find
    assert not rx.search("aXb(c)|d[e]{f}^$*+?\\g")  # so is the dot


def test_parse_lines_of_no_text_has_the_schema_of_parse_lines_of_text() -> None:
    """A job of dumps alone skips the text queries (their code would add ~16 MB to its peak); the empty table
    it gets must be the one the queries give."""
    import polars as pl

    from ncclpm.api import catalog
    from ncclpm.ingest.text.extract import PARSED_SCHEMA, parse_lines

    kept = pl.DataFrame({"source": ["a.log"], "line": [1], "raw": ["[rank0]: hello"]})
    assert parse_lines(kept, catalog()).schema == PARSED_SCHEMA
    assert parse_lines(kept.clear(), catalog()).schema == PARSED_SCHEMA


def test_a_user_kind_reading_is_compiled_at_load(tmp_path: Path) -> None:
    """The shipped readings' regexes are compiled by the tests only (`compile_shipped`); a user's are at load."""
    from ncclpm.ingest.catalog import CatalogError, load_catalog

    (tmp_path / "kinds.toml").write_text(
        "[[kind]]\nname = 'my_kind'\nmeaning = 'mine'\n  [[kind.reading]]\n  when = '(unclosed'\n"
        "  set = { net_class = 'ib' }\n",
        encoding="utf-8",
    )
    with pytest.raises(CatalogError, match="does not compile"):
        load_catalog((tmp_path,))
    load_catalog(compile_shipped=True)  # the shipped readings compile


def test_a_wrong_rule_is_refused_before_the_paste_is_read_and_polars_loaded() -> None:
    """`--select`/`--ignore` are checked against the rules' index first: a typo is said at once, not after a paste."""
    code = (
        "import sys, json\nfrom ncclpm.cli import main\n"
        "try:\n    main(sys.argv[1:], prog_name='ncclpm')\nexcept SystemExit as exc:\n    code = exc.code\n"
        "print(json.dumps({'code': code, 'polars': 'polars' in sys.modules, 'read': sys.stdin.read()}), file=sys.stderr)"
    )
    res = subprocess.run(
        [sys.executable, "-c", code, "diagnose", "-", "--select", "NOPE"],
        input=b"[rank0]: pasted\n",
        capture_output=True,
        timeout=60,
    )
    got = json.loads(res.stderr.decode().strip().splitlines()[-1])
    assert got == {"code": 2, "polars": False, "read": "[rank0]: pasted\n"}  # the paste was left unread


def test_the_template_snapshot_is_compiled_as_the_run_time_environment_compiles() -> None:
    """The snapshot's environment has placeholder filters: every template must come out of it as the same Python
    source as out of the run-time one (a filter added to one and not the other fails here)."""
    from ncclpm.render.jinja import environment
    from ncclpm.render.template_code import snapshot_environment

    templates = resources.data_dir("templates")
    runtime, snapshot = environment(), snapshot_environment(templates)
    names = runtime.list_templates()
    assert "report.md" in names
    for name in names:
        source = (templates / name).read_text(encoding="utf-8")
        assert snapshot.compile(source, name, raw=True) == runtime.compile(source, name, raw=True), name


def test_a_template_snapshot_is_used_only_while_the_template_is_unchanged(tmp_path: Path, monkeypatch) -> None:
    from ncclpm.render import template_code as tc

    templates = tmp_path / "templates"
    templates.mkdir()
    (templates / "a.md").write_text("recorded {{ 'x' | md_text }}\n", encoding="utf-8")
    out = tmp_path / "snapshot.bin"
    assert tc.write_template_snapshot(templates, out) == 1

    def env():
        return tc.snapshot_environment(templates, tc.read_snapshot(out))

    def no_compiling(*args, **kwargs):
        raise AssertionError("compiled although the snapshot has it")

    fresh = env()
    monkeypatch.setattr(fresh, "compile", no_compiling)
    assert fresh.get_template("a.md").render() == "recorded x\n"  # from the snapshot
    (templates / "a.md").write_text("edited\n", encoding="utf-8")
    assert env().get_template("a.md").render() == "edited\n"  # another source: compiled afresh
    out.write_bytes(b"\x00not marshal")
    assert tc.read_snapshot(out).codes == {}  # a damaged snapshot is no snapshot


def test_a_job_without_dumps_does_not_load_the_dump_reader() -> None:
    """The flight-recorder reader (its modules, `pickle`) is ~7 ms of imports a text job does not need (Jinja, for
    the Markdown report, loads `pickle` itself)."""
    code = (
        "import sys\nfrom ncclpm.cli import main\n"
        "try:\n    main(sys.argv[1:], prog_name='ncclpm')\nexcept SystemExit:\n    pass\n"
        "dump = ('ncclpm.ingest.flight_recorder.load', 'ncclpm.ingest.flight_recorder.decode', 'pickle')\n"
        "print(sorted(m for m in dump if m in sys.modules), file=sys.stderr)"
    )
    res = subprocess.run(
        [sys.executable, "-c", code, "diagnose", str(SAMPLE), "-f", "json"], capture_output=True, timeout=120
    )
    assert res.stderr.decode().strip().splitlines()[-1] == "[]"


def test_a_c_module_built_from_older_sources_means_the_python_text_path(monkeypatch) -> None:
    """An editable checkout updated without reinstalling keeps its old `_textcut`: read with Python, not crash."""
    import importlib
    import types

    from ncclpm.ingest import text
    from ncclpm.ingest.text import rawscan

    stale = types.ModuleType("ncclpm.ingest.text._textcut")
    stale.Block = object  # an older build: no Matcher, scan_cut, utf8
    monkeypatch.setitem(sys.modules, "ncclpm.ingest.text._textcut", stale)
    monkeypatch.setattr(text, "_textcut", stale, raising=False)
    try:
        assert importlib.reload(rawscan)._textcut is None and not rawscan.native()
    finally:
        monkeypatch.undo()
        importlib.reload(rawscan)


_GC_AFTER = """
import gc, json, os, sys
sys.argv = ["ncclpm", *sys.argv[1:]]
usual = gc.get_threshold()
exit_ = os._exit
def report(code):
    print(json.dumps({"usual": usual == gc.get_threshold(), "frozen": gc.get_freeze_count()}), file=sys.stderr)
    exit_(code)
os._exit = report
from ncclpm.command import run
run()
"""


def test_the_command_freezes_its_modules_and_collects_the_work_as_usual() -> None:
    """`ncclpm.command.run` holds the collector back while modules load (`util/collector.py`); a command that works (`diagnose`) then
    freezes them and puts the usual threshold back before reading the job."""
    res = subprocess.run(
        [sys.executable, "-c", _GC_AFTER, "diagnose", str(SAMPLE), "-f", "json"], capture_output=True, timeout=120
    )
    got = json.loads(res.stderr.decode().strip().splitlines()[-1])
    assert got["usual"] and got["frozen"] > 10_000, got


def test_the_cli_called_in_process_leaves_the_collector_alone() -> None:
    import gc

    before = gc.get_threshold(), gc.get_freeze_count()
    assert CliRunner().invoke(main, ["diagnose", str(SAMPLE), "-f", "json"]).exit_code == 0
    assert (gc.get_threshold(), gc.get_freeze_count()) == before
