"""The text reader's per-group work gives the tables a one-pass reading gives: the per-line columns computed a
group of files at a time (and after a source's cap), and the events' anchor check done in one pass."""

from __future__ import annotations

import functools
from pathlib import Path

import polars as pl

from ncclpm.api import catalog
from ncclpm.ingest.text import extract
from ncclpm.ingest.text import lines as lines_mod
from ncclpm.ingest.text.extract import parse_lines, row_columns, source_columns
from ncclpm.sources.discover import collect

ROOT = Path(__file__).resolve().parents[1]


def _case_job(tmp_path: Path) -> Path:
    """Every case log as one job of many files (several groups when the group size is small)."""
    for i, p in enumerate(sorted((ROOT / "tests" / "cases").rglob("*.log"))[:120]):
        (tmp_path / f"{i:03d}_{p.name}").write_bytes(p.read_bytes())
    return tmp_path


def test_row_columns_per_group_give_the_same_lines_table(tmp_path: Path, monkeypatch) -> None:
    cat = catalog()
    job = collect([_case_job(tmp_path)]).of_kind("text")
    monkeypatch.setattr(lines_mod, "GROUP_FILES", 7)  # many groups, each with its own query
    plain = lines_mod.read_kept_lines(job, cat.anchors, [], cat.line_start_regex())
    per_group = lines_mod.read_kept_lines(
        job, cat.anchors, [], cat.line_start_regex(), functools.partial(row_columns, catalog=cat)
    )
    per_source = lines_mod.read_kept_lines(
        job, cat.anchors, [], cat.line_start_regex(), functools.partial(source_columns, catalog=cat)
    )
    assert "_direct" in per_group.columns and "_direct" not in plain.columns and "rank" in per_source.columns
    assert plain.height > 1000
    assert parse_lines(per_group, cat).equals(parse_lines(plain, cat), null_equal=True)
    assert parse_lines(per_source, cat).equals(parse_lines(plain, cat), null_equal=True)


def test_a_source_over_the_cap_gets_its_row_columns_after_the_cap(tmp_path: Path, monkeypatch) -> None:
    cat = catalog()
    (tmp_path / "a.log").write_text("".join(f"[rank0]: step {i} loss 1.0\n" for i in range(400)))
    (tmp_path / "b.log").write_text("".join(f"[rank1]: step {i} loss 1.0\n" for i in range(50)))
    monkeypatch.setattr(lines_mod, "MAX_KEPT_LINES", 100)
    job = collect([tmp_path]).of_kind("text")
    w_plain: list[str] = []
    w_group: list[str] = []
    plain = lines_mod.read_kept_lines(job, cat.anchors, w_plain, cat.line_start_regex())
    per_group = lines_mod.read_kept_lines(
        job, cat.anchors, w_group, cat.line_start_regex(), functools.partial(row_columns, catalog=cat)
    )
    per_source = lines_mod.read_kept_lines(
        job, cat.anchors, [], cat.line_start_regex(), functools.partial(source_columns, catalog=cat)
    )
    assert plain.height == 150 and w_group == w_plain and any("a.log: 400 lines" in w for w in w_group)
    assert parse_lines(per_group, cat).equals(parse_lines(plain, cat), null_equal=True)
    assert parse_lines(per_source, cat).equals(parse_lines(plain, cat), null_equal=True)


def test_patterns_with_an_anchor_hit_are_the_ones_contains_any_finds() -> None:
    cat = catalog()
    texts: list[str] = []
    for p in sorted((ROOT / "tests" / "cases").rglob("*.log"))[:200]:
        texts += p.read_text(encoding="utf-8", errors="replace").splitlines()
    texts.append("")
    for chunk in (texts, texts[:50], ["no anchor here"]):
        parsed = pl.DataFrame({"message": chunk})
        one_pass = extract._pattern_rows(parsed, cat.patterns)
        per_pattern = [p for p in cat.patterns if parsed["message"].str.contains_any(list(p.anchors)).any()]
        assert [p.id for p, _ in one_pass] == [p.id for p in per_pattern]
        for p, rows in one_pass:  # the rows `contains_any` keeps, in order
            where = parsed.with_row_index("row").filter(pl.col("message").str.contains_any(list(p.anchors)))
            assert rows.to_list() == where["row"].to_list(), p.id
    # Two anchors of two patterns overlapping in one line (`a`'s end is `b`'s start): both patterns are found.
    a, b, k = next(
        (a, b, k)
        for p in cat.patterns
        for q in cat.patterns
        if p is not q
        for a in p.anchors
        for b in q.anchors
        for k in range(min(len(a), len(b)) - 1, 0, -1)
        if a.endswith(b[:k]) and b not in a and a not in b
    )
    found = {p.id for p in extract._patterns_with_anchor_hits(pl.DataFrame({"message": [a + b[k:]]}), cat.patterns)}
    assert {p.id for p in cat.patterns if a in p.anchors or b in p.anchors} <= found


def test_envelope_head_captured_alone_gives_the_full_regex_groups() -> None:
    """`_envelope_groups` captures the envelope's head and cuts the message off after it: the same columns as the
    full envelope regex, on every case log's lines (also one holding a newline: the full regex then)."""
    cat = catalog()
    lines: list[str] = ["", "\x1b[0m", "x\ny", "[rank3]: \r", " E   boom", "\ufeff[E1218 10:00:00.1 f.cpp:1] m"]
    for p in sorted((ROOT / "tests" / "cases").rglob("*.log"))[:300]:
        lines += p.read_text(encoding="utf-8", errors="replace").splitlines()
    kept = pl.DataFrame({"source": "s", "raw": lines})
    full = kept.with_columns(pl.col("raw").str.extract_groups(cat.envelope_regex()).alias("_e")).unnest("_e")
    for frame in (kept, kept.filter(~pl.col("raw").str.contains("\n", literal=True))):
        got = extract._envelope_groups(frame, cat)
        want = full.filter(pl.col("raw").is_in(frame["raw"].implode()))
        assert got.select(want.columns).equals(want, null_equal=True)
    assert full["message"].null_count() == 1  # only the line holding a newline has no match


def test_readings_computed_on_their_kinds_rows_only_give_the_same_events(tmp_path: Path, monkeypatch) -> None:
    """`apply_readings` evaluates the readings on the events of kinds that have some (a large table) or on every
    event (a small one): the same columns either way, on the events of every case log."""
    from ncclpm.ingest import readings
    from ncclpm.ingest.build import build_tables

    cat = catalog()
    events = build_tables(collect([_case_job(tmp_path)]), cat).events
    # (NCCL's declared messages set their attributes themselves, over the readings: parsers/nccl/)
    events = events.filter(~pl.col("event").str.contains(r"^nccl\.(?:warn|hand)\."))
    assert events.height > 500 and events["net_class"].is_not_null().any()
    captured = {f for p in cat.patterns for f in p.fields}  # a reading may name what a line says (`signal`)
    attrs = {a for k in cat.kinds.values() for r in k.readings for a in r.set} - {"victim"} - captured
    bare = events.with_columns(pl.lit(None, readings.EVENT_FIELDS[a]).alias(a) for a in attrs)
    monkeypatch.setattr(readings, "_FEW", 10**9)
    every_row = readings.apply_readings(bare, cat.kinds)
    monkeypatch.setattr(readings, "_FEW", 0)
    read_rows = readings.apply_readings(bare, cat.kinds)
    assert read_rows.equals(every_row, null_equal=True) and every_row.equals(events, null_equal=True)


def test_events_of_kinds_by_row_numbers_are_the_filter_s_rows(tmp_path: Path, monkeypatch) -> None:
    """`Tables.kinds` gathers the rows of each kind (numbered once, in Python for a few events, else by a
    partition): the rows, order and schema a filter gives."""
    import dataclasses

    import ncclpm.tables as tables_mod
    from ncclpm.ingest.build import build_tables

    built = build_tables(collect([_case_job(tmp_path)]), catalog())
    kinds = built.events["kind"].unique().sort().to_list()
    assert len(kinds) > 10
    for few in (0, 10**9):
        monkeypatch.setattr(tables_mod, "_FEW_EVENTS", few)
        t = dataclasses.replace(built)  # (its own kept answers)
        for wanted in [[k] for k in kinds] + [kinds[::3], kinds[1::2] + kinds[1::2], ["cuda_oom", "progress"]]:
            expected = t.events.filter(pl.col("kind").is_in(wanted))
            assert t.kinds(*wanted).equals(expected, null_equal=True), wanted


def test_wrap_pairs_told_in_python_are_the_query_s(tmp_path: Path, monkeypatch) -> None:
    """`_may_join` narrows a few rows' pairs in Python (the line start left to `unwrap.joins`), many rows' in a
    query that also checks the line start: the same texts to re-join, on every case log cut as the scan cuts it
    (and on its pairs made longer, so that more of them reach the exact check)."""
    from ncclpm.ingest.text.rawscan import matcher, scan_cut

    cat = catalog()
    start = cat.line_start_regex()
    texts = [lines_mod._text(s, start) for s in collect([_case_job(tmp_path)]).of_kind("text")]
    whole = [t.whole for t in texts]
    rows, _ = scan_cut(matcher(tuple(cat.anchors)), [t.data for t in texts], [1] * len(texts), whole, following=True)
    padded = rows.with_columns(pl.concat_str(pl.col("raw"), pl.lit("x" * 70)).alias("raw"))
    told = [i for i, w in enumerate(whole) if w]
    assert rows.height > 1000 and told
    for frame in (rows, padded):
        monkeypatch.setattr(lines_mod, "FEW_LINES", 10**9)
        few = lines_mod._may_join(frame, told, start)
        monkeypatch.setattr(lines_mod, "FEW_LINES", 0)
        assert few == lines_mod._may_join(frame, told, start)
    assert lines_mod._join_pairs_few(padded, set(told))  # (the exact check was reached)


def test_texts_read_the_slow_way_share_the_group_s_per_line_columns(tmp_path: Path, monkeypatch) -> None:
    """Texts re-joined whole (an anchor cut by a newline, a hit line glued to its neighbour) go through the per-line
    columns with their group's fast texts, in one call: each source's lines as when they were computed apart."""
    cat = catalog()
    job = collect([_case_job(tmp_path)]).of_kind("text")
    slow: list[str] = []
    read = lines_mod._frame_from_bytes
    monkeypatch.setattr(lines_mod, "_frame_from_bytes", lambda name, *a: slow.append(name) or read(name, *a))
    per_source = lines_mod.read_kept_lines(
        job, cat.anchors, [], cat.line_start_regex(), functools.partial(source_columns, catalog=cat)
    )
    assert slow  # (some case logs are read the slow way)
    for name in list(slow):  # (read alone, each is read the slow way again)
        alone = next(s for s in job if s.name == name)
        apart = lines_mod.read_kept_lines(
            [alone], cat.anchors, [], cat.line_start_regex(), functools.partial(source_columns, catalog=cat)
        )
        assert per_source.filter(pl.col("source") == name).equals(apart, null_equal=True), name
