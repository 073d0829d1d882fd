"""Apply the envelope and the message catalogs to the prefiltered lines.

Input: frame (source, line, raw) from `lines.py` and a `Catalog`. Output: the `lines` table (rank, host, pid,
ts, level, message - each filled from the envelope groups the catalog declares for it) and the `events` table
(one row per pattern match, typed fields from the catalog). All of it is polars expressions over the kept
lines; no Python loop over rows.

Rank resolution, most to least trusted: the envelopes' rank columns (c10's `[rankN]:`, Open MPI / Slurm task
prefixes), a default-PG `[PG ID 0 ... Rank N]` / `[Rank N]` tag, a script's own `rank N` prefix; then the global rank
seen on other lines of the same torchrun `[defaultN]:` stream, the torchrun local rank itself (global on a
single node), the one rank a whole file talks about, and finally the file path (`rank3.log`,
`attempt_0/3/stderr.log`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import polars as pl

from ncclpm.ingest import envelopes as env_mod
from ncclpm.ingest.catalog import MESSAGE_RANK, Catalog, Pattern
from ncclpm.ingest.envelopes import Envelope
from ncclpm.ingest.readings import apply_readings
from ncclpm.ingest.text.nccl_messages import read_messages
from ncclpm.ingest.text.rawscan import FEW_LINES, only_words
from ncclpm.sources.discover import ANSI_CSI
from ncclpm.tables.schema import DTYPE_NAMES, EVENT_FIELDS, EVENTS_SCHEMA, LINES_SCHEMA, empty
from ncclpm.util.frames import engine_for

_TAG = (
    r"\[(?:PG (?:ID )?(?<_tag_pg_id>\d+) (?:PG GUID (?<_tag_guid>[^\s(\]]+)(?:\((?<_tag_desc>[^)]*)\))? "
    r"|\((?<_tag_desc2>[^)]*)\) )?)?Rank (?<_tag_rank>\d+)\]"
)
_SCRIPT_RANK = r"^\[?(?i:rank)[\s_:=#-]{0,3}(?<_script_rank>\d{1,6})\b"
# torchrun's failure summary names each failed worker (`  rank      : 3 (local_rank: 3)`): a line of the agent's
_AGENT_SUMMARY_RANK = r"^\s*rank\s*: \d+ \(local_rank: \d+\)"
_FILE_RANK = r"(?:(?:^|/)attempt_\d+/(?<_file_local>\d+)/[^/]+$|(?i:rank)[_-]?(?<_file_rank>\d+)[^/\d]*$)"
_ISO_FORMATS = ("%Y-%m-%dT%H:%M:%S%.f", "%Y-%m-%dT%H:%M:%S")


def _int(col: str) -> pl.Expr:
    return pl.col(col).cast(pl.Int32, strict=False)


def _iso(col: str) -> pl.Expr:
    norm = pl.col(col).str.replace(",", ".").str.replace(" ", "T")
    return pl.coalesce([norm.str.strptime(pl.Datetime("us"), f, strict=False) for f in _ISO_FORMATS])


def _mmdd(col: str, year: int) -> pl.Expr:
    """glog's `MMDD HH:MM:SS[.ffffff]` (month unpadded in c10's logger) in `year`."""
    parts = pl.col(col).str.split_exact(" ", 1)  # a split, not a regex: 3x faster on a million lines
    md = parts.struct.field("field_0").cast(pl.Int32, strict=False)
    t = parts.struct.field("field_1")
    micro = t.str.slice(9, 6).str.pad_end(6, "0").cast(pl.Int32, strict=False).fill_null(0)
    return pl.datetime(
        year,
        md // 100,
        md % 100,
        t.str.slice(0, 2).cast(pl.Int32, strict=False),
        t.str.slice(3, 2).cast(pl.Int32, strict=False),
        t.str.slice(6, 2).cast(pl.Int32, strict=False),
        micro,
        time_unit="us",
    )


def _column(catalog: Catalog, column: str, cast: Callable[[str], pl.Expr] = pl.col) -> pl.Expr:
    """A `lines` column from the envelope groups declared to fill it, most trusted envelope first."""
    groups = [cast(e.columns[column]) for e in catalog.column_sources(column)]
    return pl.coalesce(groups) if groups else pl.lit(None)


def _stamp_columns(catalog: Catalog) -> list[tuple[str, Envelope]]:
    """A column per envelope that dates its lines, most trusted first: its time read as a datetime (`_dated`), or
    kept as text for glog's `MMDD`, which needs the job's year (`_reference_year`)."""
    return [(f"_ts{i}", e) for i, e in enumerate(catalog.column_sources("ts"))]


def _reference_year(env: pl.DataFrame, catalog: Catalog) -> int:
    """Year for timestamps that have none (glog MMDD): the newest year any dated line of the job shows."""
    dated = [pl.col(c).dt.year().max() for c, e in _stamp_columns(catalog) if e.ts_format in ("iso", "mdy")]
    years = env.select(pl.max_horizontal(dated)).item() if dated else None
    return int(years) if years else 1970


def _mdy(col: str) -> pl.Expr:
    return pl.col(col).str.strptime(pl.Datetime("us"), "%m/%d/%Y %H:%M:%S", strict=False)


def _dated(e: Envelope) -> pl.Expr:
    """An envelope's time that carries its date (ISO, US `MM/DD/YYYY`) as a datetime."""
    return (_mdy if e.ts_format == "mdy" else _iso)(e.columns["ts"])


def _timestamp(catalog: Catalog, year: int, env: pl.DataFrame | None = None) -> pl.Expr:
    """Each line's time, from the most trusted envelope that dates it (`env`: leaving out the time columns no line
    of it fills: glog's text is read into a date on every row otherwise)."""
    stamps = [
        _mmdd(c, year) if e.ts_format == "mmdd" else pl.col(c)
        for c, e in _stamp_columns(catalog)
        if env is None or env[c].null_count() < env.height
    ]
    return pl.coalesce(stamps) if stamps else pl.lit(None, pl.Datetime("us"))


def _seen(env: pl.DataFrame | None, groups: Sequence[str]) -> bool:
    """Whether some line of `env` (None: any frame) matched one of these envelope groups. An expression over a
    column of nulls only gives nulls, but polars still runs it on every row (each ISO time column cost ~10 ms on the
    512-rank job's 160k lines, most of them with another envelope)."""
    return env is None or any(env[g].null_count() < env.height for g in groups)


def _level(catalog: Catalog, env_groups: pl.DataFrame | None = None) -> pl.Expr:
    """The level group of the envelope that has one, else the level an envelope gives the lines it wraps
    (`env_groups`: leaving out the envelopes no line of it matched)."""
    levels: list[pl.Expr] = []
    for env in catalog.column_sources("level"):
        if not _seen(env_groups, env.groups):
            continue
        if "level" in env.columns:
            # `E`, or a logging level name (`ERROR`, `WARNING`, `DEBUG`): the levels table's one letter
            word = pl.col(env.columns["level"]).str.to_uppercase()
            levels.append(pl.when(word == "DEBUG").then(pl.lit("V")).otherwise(word.str.slice(0, 1)))
            continue
        matched = pl.any_horizontal([pl.col(g).is_not_null() for g in env.groups])
        expr: pl.Expr | pl.expr.whenthen.Then | None = None
        for word, level in env.level_words.items():
            hit = matched & pl.col("message").str.contains(word, literal=True)
            expr = pl.when(hit).then(pl.lit(level)) if expr is None else expr.when(hit).then(pl.lit(level))
        if env.level_default:
            dflt = pl.lit(env.level_default)
            expr = pl.when(matched).then(dflt) if expr is None else expr.when(matched).then(dflt)
        if expr is not None:
            levels.append(expr)  # type: ignore[arg-type]
    return pl.coalesce(levels) if levels else pl.lit(None, pl.String)


# GitHub turns `#23` in a pasted issue body into a link to issue 23 of the repository, and a copy of the rendered page
# keeps the link: `frame https://github.com/o/r/issues/23: + 0x196fe3 (...)`.
_AUTOLINK = r"https://github\.com/[\w.-]+/[\w.-]+/(?:issues|pull)/(\d+)"


def _without_ansi(kept: pl.DataFrame) -> pl.DataFrame:
    """Colour and cursor codes of a log captured from a terminal (loguru, rich, `script`) are presentation, not
    content: they sit around the time and the level, where the envelope must match, and would be junk in quotes.
    GitHub's autolinks of `#N` in a copied issue are undone the same way (`_AUTOLINK`)."""
    raw = pl.col("raw")
    plain = raw.str.replace_all(ANSI_CSI, "")
    kept = kept.with_columns(pl.when(raw.str.contains("\x1b", literal=True)).then(plain).otherwise(raw).alias("raw"))
    unlinked = raw.str.replace_all(_AUTOLINK, "#$1")
    return kept.with_columns(
        pl.when(raw.str.contains("github.com/", literal=True)).then(unlinked).otherwise(raw).alias("raw")
    )


_REST = "(?<message>.*)$"
_SPLIT_ROWS = 2000  # fewer lines: the one composed head (the split's own regexes, compiled per thread, cost more)
_SAMPLE_ROWS = 64
_WIDENINGS = 4  # the envelopes a sample uses, then those the lines left may use, this many times at most
# (catalog id, the envelopes a frame's sample used) -> the envelopes its lines needed: where the next frame starts
_WIDENED: dict[tuple[int, frozenset[int]], frozenset[int]] = {}


def _envelope_groups(kept: pl.DataFrame, catalog: Catalog) -> pl.DataFrame:
    """The envelope's groups and `message`. Regex captures are computed over the whole match, so the head alone is
    captured and the message is the rest of the line: the groups `envelope_regex()` gives (its `(?<message>.*)$`
    matches the rest of any line without a newline, so it never changes which head matches) at ~60 % of the cost."""
    full = catalog.envelope_regex()
    if not (full.startswith("^") and full.endswith(_REST)) or kept["raw"].str.contains("\n", literal=True).any():
        return kept.with_columns(pl.col("raw").str.extract_groups(full).alias("_e")).unnest("_e")
    env = pl.concat([kept, _head_groups(kept["raw"], catalog)], how="horizontal")
    return env.with_columns(pl.col("raw").str.strip_prefix(pl.col("_envelope_head")).alias("message")).drop(
        "_envelope_head"
    )


def _captures(raw: pl.Series, regex: str) -> pl.DataFrame:
    return raw.str.extract_groups(regex).struct.unnest()


def _sample(raw: pl.Series) -> pl.Series:
    """At most `_SAMPLE_ROWS` lines, evenly spread."""
    step = max(1, raw.len() // _SAMPLE_ROWS)
    return raw.gather(range(0, min(raw.len(), step * _SAMPLE_ROWS), step))


def _marked(raw: pl.Series, regex: str, prefix: str) -> frozenset[int]:
    """The numbers of the groups `{prefix}{i}` of `regex` that some line captures."""
    found = _captures(raw, regex)
    nulls = found.null_count().row(0)  # (one query: a column at a time cost ~40 us each, ~110 columns)
    return frozenset(
        int(c[len(prefix) :])
        for c, n in zip(found.columns, nulls, strict=True)
        if c.startswith(prefix) and n < found.height
    )


def _head_groups(raw: pl.Series, catalog: Catalog) -> pl.DataFrame:
    """`_envelope_head` and every envelope group of each line (of lines without a newline), as the composed head
    captures them. The captures' cost grows with the groups of the regex (77 in the shipped catalog), and a job's
    lines use a few envelopes: on a big frame, the envelopes a sample of its lines uses are composed alone, and
    only the lines where another envelope may match at a slot's start get the whole composition (exact:
    `envelopes.others_reachable`)."""
    full = catalog.envelope_regex()
    head = f"^(?<_envelope_head>{full[1 : -len(_REST)]})"
    if raw.len() < _SPLIT_ROWS:
        return _captures(raw, head)
    groups = catalog.envelope_head_groups(head)
    if any(g.isdigit() for g in groups):  # an unnamed group: numbered by its place, which the split would move
        return _captures(raw, head)
    sampled = _marked(_sample(raw), catalog.envelope_marks(), "_used")
    used = _WIDENED.get((id(catalog), sampled), sampled)  # a job's frames mostly widen alike (hint only)
    for widening in range(_WIDENINGS + 1):
        slots, others, others_marked = catalog.envelope_subset(used)
        if others is None or others_marked is None:  # every envelope is used
            return _captures(raw, head)
        elsewhere = raw.str.contains(others)
        if elsewhere.sum() <= raw.len() // _SAMPLE_ROWS or widening == _WIDENINGS:
            break
        used |= _marked(_sample(raw.filter(elsewhere)), others_marked, "_other")  # (one more at least)
    if elsewhere.sum() > raw.len() // 4:
        return _captures(raw, head)
    if len(_WIDENED) >= 256:
        _WIDENED.clear()
    _WIDENED[(id(catalog), sampled)] = used
    part = {s.name: s for s in _captures(raw, f"^(?<_envelope_head>{slots})")}
    nulls = pl.Series([None], dtype=pl.String).new_from_index(0, raw.len())
    if elsewhere.any():
        rows = elsewhere.arg_true()
        whole = _captures(raw.gather(rows), head)
        for g, n in zip(whole.columns, whole.null_count().row(0), strict=True):
            if g in part or n < whole.height:  # (the others are nulls in both)
                part[g] = part.get(g, nulls.clone().alias(g)).scatter(rows, whole[g])
    return pl.DataFrame([part[g] if g in part else nulls.alias(g) for g in groups])


def _with_envelope(kept: pl.DataFrame, catalog: Catalog) -> pl.DataFrame:
    env = _envelope_groups(_without_ansi(kept), catalog)
    env = env.with_columns(
        _column(catalog, "role").alias("_role"),
        _column(catalog, "local_rank", _int).alias("_local"),
        pl.col("message").str.extract_groups(_TAG).alias("_t"),
        pl.col("message").str.extract_groups(_SCRIPT_RANK).alias("_s"),
        pl.col("source").str.extract_groups(_FILE_RANK).alias("_f"),
    ).unnest("_t", "_s", "_f")
    return env


def row_columns(kept: pl.DataFrame, catalog: Catalog) -> pl.DataFrame:
    """What `parse_lines` reads from each line on its own (envelope, rank hints, host, pid, level, pg tag, time):
    row by row, so the reader computes it a group of files at a time (`read_kept_lines(then=...)`), and only these
    columns are kept (each of the envelope's ~40 groups costs 16 bytes a line, even when empty)."""
    env = _with_envelope(kept, catalog)
    inputs, ranks = _resolve_rank(catalog, env)
    env = env.with_columns(inputs) if inputs else env
    return env.select(
        *kept.columns,
        "message",
        "_role",
        "_local",
        *ranks,
        "_file_rank",
        "_file_local",
        # kept only for a word of the stack (a launcher's command line): not one of the file's own lines for ranks
        only_words(env["raw"], tuple(catalog.stack_anchors), tuple(catalog.read_anchors)).alias("_words_only")
        if catalog.stack_anchors
        else pl.lit(False).alias("_words_only"),
        _column(catalog, "host").cast(pl.String).alias("host"),
        _column(catalog, "pid", _int).cast(pl.Int64).alias("pid"),
        _level(catalog, env).cast(pl.String).alias("level"),
        pl.coalesce("_tag_guid", "_tag_pg_id").alias("tag_pg"),
        pl.coalesce("_tag_desc", "_tag_desc2").alias("tag_pg_desc"),
        *[
            (
                pl.col(e.columns["ts"])
                if e.ts_format == "mmdd"
                else _dated(e)
                if _seen(env, [e.columns["ts"]])
                else pl.lit(None, pl.Datetime("us"))
            ).alias(c)
            for c, e in _stamp_columns(catalog)
        ],
    )


def _rank_sources(catalog: Catalog) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
    """(slot position, group) of the envelopes filling `rank`, innermost first, and of those filling `local_rank`."""
    order = {slot: i for i, slot in enumerate(env_mod.slots(catalog.envelopes))}
    ranks = [(order[e.slot], e.columns["rank"]) for e in catalog.column_sources("rank")]
    return ranks, [(order[e.slot], e.columns["local_rank"]) for e in catalog.column_sources("local_rank")]


def _envelope_rank(
    ranks: list[tuple[int, str]], locals_: list[tuple[int, str]], wrappers: frozenset[int]
) -> tuple[pl.Expr, pl.Expr, pl.Expr]:
    """The `rank` column of the envelopes, innermost first - but a launcher's number outside a local rank is not
    a rank: when an envelope inside it fills `local_rank` (torchrun's `[default1]:`, a worker's `TP1` within its
    group), the outer launcher started that launcher, one per node (`srun -l` over torchrun: `3: [default1]:`, the
    node's task id), not the ranks. Also (for `_fill_ranks`, which applies it to the whole file): the slot of the
    envelope the rank came from, and the outermost slot whose number a line shows to be no rank - a local rank
    inside it, another rank inside it or stated by torch's tag in the message (`_stated`: `1: [rank5]:`, `1: [E...]
    [PG ID 0 PG GUID 0(default_pg) Rank 5] Watchdog`: srun's task 1 started torchrun, whose worker is rank 5), or a
    torchrun agent's summary of a worker under it (`1:   rank      : 5 (local_rank: 1)`: the agent printed it,
    not a rank). Each envelope's number is read once, into `_rk_<group>` (`_resolve_rank`'s inputs): these
    expressions compare them pairwise, and each reference to a cast would cast again, on every line. `ranks` and
    `locals_` are the envelopes some line matched; `wrappers`, the slots of the catalog's rank envelopes that wrap
    another rank or local-rank envelope (only those can be disowned, whether or not the inner one matched)."""
    if not ranks:
        return pl.lit(None), pl.lit(None), pl.lit(None)
    agent = pl.col("message").str.contains(_AGENT_SUMMARY_RANK)
    stated = pl.col("_stated")
    taken, slot_taken, disowned = [], [], []
    for at, group in ranks:
        rank = pl.col(f"_rk_{group}")
        inside = [pl.col(g).is_not_null() for where, g in locals_ if where > at]
        allowed = ~pl.any_horizontal(inside) if inside else pl.lit(True)
        taken.append(pl.when(allowed).then(rank))
        slot_taken.append(pl.when(allowed & rank.is_not_null()).then(pl.lit(at)))
        other = [pl.col(f"_rk_{g}").is_not_null() & (pl.col(f"_rk_{g}") != rank) for where, g in ranks if where > at]
        if at in wrappers:  # (a wrapper of other envelopes: the innermost, c10's `[rank3]:`, is the process's own)
            said = pl.any_horizontal([*inside, *other, stated != rank, agent])
            disowned.append(pl.when(rank.is_not_null() & said).then(pl.lit(at)))
    return (
        pl.coalesce(taken),
        pl.coalesce(slot_taken),
        pl.max_horizontal(disowned) if disowned else pl.lit(None, pl.Int32),
    )


_RANK_EXPRS: dict[tuple, tuple[Catalog, list[pl.Expr], list[pl.Expr]]] = {}  # (id(catalog), groups seen) -> ...


def _resolve_rank(catalog: Catalog, env: pl.DataFrame) -> tuple[list[pl.Expr], list[pl.Expr]]:
    """What `row_columns` adds first (each envelope's number, read once) and then selects: `_direct`: the rank a
    line names (its envelopes, else a global `[PG 0 Rank N]` tag, else a script's own words); `_other_rank`: the
    same without the envelopes; `_rank_slot`, `_disowned`: see `_envelope_rank`. Only over the rank and local-rank
    envelopes some line of `env` matched (`_seen`: most groups of lines have one or none, and the pairwise
    comparisons of eleven envelopes' numbers cost ~5 ms a small job when built over all of them); built once per
    catalog and set of envelopes seen (a triage worker reads a thousand jobs with one catalog)."""
    every_rank, every_local = _rank_sources(catalog)
    inner = [at for at, _ in every_rank + every_local]
    wrappers = frozenset(at for at, _ in every_rank if any(where > at for where in inner))
    ranks = [(at, g) for at, g in every_rank if _seen(env, [g])]
    locals_ = [(at, g) for at, g in every_local if _seen(env, [g])]
    key = (id(catalog), tuple(ranks), tuple(locals_))
    held = _RANK_EXPRS.get(key)
    if held is not None and held[0] is catalog:
        return held[1], held[2]
    tag_is_global = pl.col("_tag_pg_id").is_null() | (pl.col("_tag_pg_id") == "0")
    tagged = pl.when(tag_is_global).then(_int("_tag_rank"))
    other = pl.coalesce(tagged, _int("_script_rank"))
    # c10's `[PG 0 Rank N]` is the process's global rank; a bare `[Rank N]` (torch <= 2.2) is its rank in the
    # group of the work, which a subgroup's (Megatron's tensor-parallel group) makes another number
    default_pg = pl.when(pl.col("_tag_pg_id") == "0").then(_int("_tag_rank"))
    inputs = [*(_int(g).alias(f"_rk_{g}") for _, g in ranks), default_pg.alias("_stated")] if ranks else []
    rank, slot, disowned = _envelope_rank(ranks, locals_, wrappers)
    columns = [
        pl.coalesce(rank, other).alias("_direct"),
        other.alias("_other_rank"),
        slot.cast(pl.Int32).alias("_rank_slot"),
        disowned.cast(pl.Int32).alias("_disowned"),
    ]
    if len(_RANK_EXPRS) >= 256:  # (tests build many catalogs)
        _RANK_EXPRS.clear()
    _RANK_EXPRS[key] = (catalog, inputs, columns)
    return inputs, columns


def _fill_ranks(env: pl.DataFrame) -> pl.DataFrame:
    stream = ["source", "_role", "_local"]
    # A launcher whose number is no rank on one line of a file (`_envelope_rank`) started launchers, not ranks: its
    # number is no rank on the file's other lines either (`1: Traceback ...` beside `1: [rank5]: ...`).
    if env["_disowned"].null_count() < env.height:  # (Series: most jobs have no launcher's number to disown)
        disowned = pl.col("_disowned").max().over("source")
        env = env.with_columns(
            pl.when(pl.col("_rank_slot") <= disowned)
            .then(pl.col("_other_rank"))
            .otherwise(pl.col("_direct"))
            .alias("_direct")
        )
    # the process the file's rank printed from: a line of another process (its own pid on it: vLLM's API server
    # beside `(Worker_TP1 pid=2212)`) is not that rank's
    rank_pid = pl.col("pid").filter(pl.col("_direct").is_not_null()).drop_nulls().first().over("source")
    env = env.with_columns(
        pl.col("_direct").drop_nulls().mode().sort().first().over(stream).alias("_stream_rank"),
        # A file that mostly talks about one rank is that rank's log (a per-rank file with some unprefixed
        # lines); a console where only one rank printed prefixed lines is not.
        pl.when(
            (pl.col("_direct").drop_nulls().n_unique().over("source") == 1)
            & (
                (pl.col("_direct").is_not_null() & ~pl.col("_words_only")).sum().over("source")
                > 0.5 * (~pl.col("_words_only")).sum().over("source")
            )
            & (pl.col("pid").is_null() | rank_pid.is_null() | (pl.col("pid") == rank_pid))
        )
        .then(pl.col("_direct").drop_nulls().first().over("source"))
        .alias("_file_single"),
    )
    rank = pl.coalesce(
        "_direct",
        pl.when(pl.col("_local").is_not_null()).then("_stream_rank"),
        "_local",
        "_file_single",
        _int("_file_rank"),
        _int("_file_local"),
    ).cast(pl.Int32)
    # A global rank comes from the line itself, its torchrun stream's own lines, or the rank its whole file talks
    # about; a local rank (torchrun's `[defaultN]:`) or a file name's (`rank3.log`, `attempt_0/3/`) is only local
    # (every node of a job has a rank0.log): `analysis/identity.py` does not take it for the job's rank.
    is_global = (
        pl.col("_direct").is_not_null()
        | (pl.col("_local").is_not_null() & pl.col("_stream_rank").is_not_null())
        | (pl.col("_local").is_null() & pl.col("_file_single").is_not_null())
    )
    return env.with_columns(rank.alias("rank"), pl.when(rank.is_not_null()).then(~is_global).alias("rank_local"))


PARSED_SCHEMA = pl.Schema({**LINES_SCHEMA, "raw": pl.String(), "tag_pg": pl.String(), "tag_pg_desc": pl.String()})
_RANK_HINTS = (
    "_role",
    "_local",
    "_direct",
    "_other_rank",
    "_rank_slot",
    "_disowned",
    "_file_rank",
    "_file_local",
    "_stream_rank",
    "_file_single",
    "_words_only",
)


def source_columns(kept: pl.DataFrame, catalog: Catalog) -> pl.DataFrame:
    """`row_columns` and each line's rank (`_fill_ranks`: from the line, the other lines of its source and stream,
    the file name), for whole sources: the reader computes them a group of files at a time, in its scan threads
    (`read_kept_lines(then=...)`), and the rank hints are dropped there."""
    return _fill_ranks(row_columns(kept, catalog)).drop(_RANK_HINTS)


def parse_lines(kept: pl.DataFrame, catalog: Catalog) -> pl.DataFrame:
    """The `lines` table (plus the pg tag columns `tag_pg`/`tag_pg_desc` used by extraction). `kept` holds
    (source, line, raw), with its `row_columns` (or `source_columns`) already or without."""
    if kept.is_empty():  # a job of dumps only: no regex compiled, no string code paged in (~16 MB of its peak)
        return empty(PARSED_SCHEMA)
    if "rank" in kept.columns:  # `source_columns`
        env = kept
    else:
        env = _fill_ranks(kept if "_direct" in kept.columns else row_columns(kept, catalog))
    year = _reference_year(env, catalog)
    return _segments_share_their_line(
        env.select(
            "source",
            "line",
            "rank",
            "rank_local",
            "host",
            "pid",
            _timestamp(catalog, year, env).alias("ts"),
            "level",
            "message",
            "raw",
            "tag_pg",
            "tag_pg_desc",
        )
    )


def _segments_share_their_line(lines: pl.DataFrame) -> pl.DataFrame:
    """The segments of a physical line (the reader splits a progress bar from the text glued after it: `...[29:55<
    4:48:08, 155.57 examples/s][E ProcessGroupNCCL.cpp:475] [Rank 2] Watchdog...`) were one line to whatever
    wrapped it: a segment with no host or time of its own takes its line's first one's (kubectl's pod, journald's
    host, a CRI record's time). The rank is not taken: two processes' output can share a terminal's line."""
    key = ["source", "line"]
    if lines.height < 2:
        return lines
    line, source = lines["line"], lines["source"]  # (Series: no query a group, most groups have no split line)
    if not ((line == line.shift(1)) & (source == source.shift(1))).any():
        return lines
    return lines.with_columns(
        pl.col("host").fill_null(pl.col("host").first().over(key)),
        pl.col("ts").fill_null(pl.col("ts").first().over(key)),
    )


@dataclass(frozen=True)
class _PatternPlan:
    """The expressions of one pattern's plan (`_pattern_events`), built once per pattern: a job's plans were built
    anew each time (~40 patterns with hits a job, ~60 expressions each)."""

    hits: pl.Expr  # the rows it matches: holding one of its anchors, and its regex
    matches: pl.Expr  # the same among rows known to hold one of its anchors: its regex alone
    extract: list[pl.Expr]  # `_m`, the groups (and `_all`, each match, for a repeating pattern: first)
    columns: list[pl.Expr | str]
    tags: list[pl.Expr]


_PLANS: dict[int, tuple[Pattern, _PatternPlan]] = {}  # id(pattern) -> (it, its expressions)


def _pattern_plan(p: Pattern) -> _PatternPlan:
    held = _PLANS.get(id(p))
    if held is not None and held[0] is p:
        return held[1]
    matches = pl.col("message").str.contains(p.regex)
    hits = pl.col("message").str.contains_any(list(p.anchors)) & matches
    if p.repeat:  # one event per match: each match is read again on its own for its groups
        extract = [
            pl.col("message").str.extract_all(p.regex).alias("_all"),
            pl.col("_all").str.extract_groups(p.regex).alias("_m"),
        ]
    else:
        extract = [pl.col("message").str.extract_groups(p.regex).alias("_m")]
    cols = [
        typed(pl.col("_m").struct.field(name), p.fields[name]).cast(dtype).alias(name)
        for name, dtype in EVENT_FIELDS.items()
        if name in p.fields
    ]
    rank = pl.col("rank")
    if MESSAGE_RANK in p.fields:
        rank = pl.coalesce(rank, typed(pl.col("_m").struct.field(MESSAGE_RANK), "i64").cast(pl.Int32, strict=False))
    columns: list[pl.Expr | str] = [
        "source",
        "line",
        rank.alias("rank"),
        "host",
        "ts",
        "level",
        pl.lit(p.id).alias("event"),
        pl.lit(p.kind).alias("kind"),
        pl.lit(p.severity).alias("severity"),
        pl.col("raw").alias("text"),
        *cols,
        "tag_pg",
        "tag_pg_desc",
    ]
    tags = [
        pl.coalesce(c, f"tag_{c}").alias(c) if c in p.fields else pl.col(f"tag_{c}").alias(c) for c in ("pg", "pg_desc")
    ]
    plan = _PatternPlan(hits, matches, extract, columns, tags)
    if len(_PLANS) >= 4096:  # (the shipped catalog has ~250 patterns; tests build many catalogs)
        _PLANS.clear()
    _PLANS[id(p)] = (p, plan)
    return plan


def _pattern_events(parsed: pl.LazyFrame, p: Pattern, *, anchored: bool = False) -> pl.LazyFrame:
    """The events of one pattern, with only the fields it declares (the others are added once, at the end).
    `anchored`: every row holds one of its anchors (`_pattern_rows`), so they are not looked for again (polars
    builds an automaton of them at each call: ~0.4 ms a pattern, ~15 patterns a job)."""
    plan = _pattern_plan(p)
    hits = parsed.filter(plan.matches if anchored else plan.hits)
    if p.repeat:
        hits = hits.with_columns(plan.extract[0]).explode("_all").with_columns(plan.extract[1])
    else:
        hits = hits.with_columns(plan.extract[0])
    return hits.select(plan.columns).with_columns(plan.tags).drop("tag_pg", "tag_pg_desc")


def typed(raw: pl.Expr, dtype_name: str) -> pl.Expr:
    """A captured string as the catalog field's declared type. `ms` reads a duration into milliseconds:
    `10000ms`, `60s`, `900 seconds`, `5 min`, `2h`, or a clock `29:55` / `1:01:03` (tqdm's elapsed)."""
    if dtype_name != "ms":
        return raw.cast(DTYPE_NAMES[dtype_name], strict=False)
    text = raw.str.strip_chars().str.to_lowercase()
    clock = text.str.extract_groups(r"^(?:(?<h>\d{1,4}):)?(?<m>\d{1,2}):(?<s>\d{2})$")
    unit = text.str.extract_groups(
        r"^(?<n>\d+(?:\.\d+)?)\s*(?<u>ms|milliseconds?|s|secs?|seconds?|m|mins?|minutes?|h|hours?)?$"
    )
    n = unit.struct.field("n").cast(pl.Float64, strict=False)
    u = unit.struct.field("u").fill_null("ms")
    scale = (
        pl.when(u.str.starts_with("ms") | u.str.starts_with("milli"))
        .then(1)
        .when(u.str.starts_with("s"))
        .then(1_000)
        .when(u.str.starts_with("m"))
        .then(60_000)
        .otherwise(3_600_000)
    )
    seconds = sum(
        (
            clock.struct.field(f).cast(pl.Int64, strict=False).fill_null(0) * k
            for f, k in (("h", 3600), ("m", 60), ("s", 1))
        ),
        pl.lit(0, pl.Int64),
    )
    from_clock = pl.when(clock.struct.field("s").is_not_null()).then(seconds * 1000)
    # Out-of-range numbers become null rather than an overflow error.
    from_unit = pl.when(n < 9e15).then((n * scale).cast(pl.Int64, strict=False))
    return pl.coalesce(from_clock, from_unit)


def _drop_superseded(events: pl.DataFrame, catalog: Catalog) -> pl.DataFrame:
    """A more specific reading of a line replaces the generic ones it declares (`supersedes`): NCCL's
    `Cuda failure 2 'out of memory'` is GPU memory exhaustion, not a generic CUDA error."""
    rules = [(p.id, k) for p in catalog.patterns for k in p.supersedes]
    if not rules or events.is_empty():
        return events
    table = pl.DataFrame(rules, schema={"event": pl.String(), "kind": pl.String()}, orient="row")
    gone = events.select("source", "line", "event").join(table, on="event").select("source", "line", "kind").unique()
    return (
        events
        if gone.is_empty()
        else events.join(gone, on=["source", "line", "kind"], how="anti", maintain_order="left")
    )


_OWNERS: dict[int, tuple[Sequence[Pattern], list[str], dict[str, list[int]]]] = {}  # id(patterns) -> (them, ...)


def _anchor_owners(patterns: Sequence[Pattern]) -> tuple[list[str], dict[str, list[int]]]:
    """The patterns' anchors, sorted, and which patterns (their indexes) own each: built once per catalog's patterns
    (a triage worker reads every job with the same ones)."""
    held = _OWNERS.get(id(patterns))
    if held is not None and held[0] is patterns:
        return held[1], held[2]
    owners: dict[str, list[int]] = {}
    for i, p in enumerate(patterns):
        for a in dict.fromkeys(p.anchors):
            owners.setdefault(a, []).append(i)
    anchors = sorted(owners)
    if isinstance(patterns, tuple):  # (a list may change: not kept)
        if len(_OWNERS) >= 8:
            _OWNERS.clear()
        _OWNERS[id(patterns)] = (patterns, anchors, owners)
    return anchors, owners


def _pattern_rows(parsed: pl.DataFrame, patterns: Sequence[Pattern]) -> list[tuple[Pattern, pl.Series]]:
    """The patterns one of whose anchors occurs in some line, each with the numbers of those rows (ascending).
    Building a pattern's plan compiles its regex (~10 ms each), so skipping the ones that cannot match is most of a
    small job's time; and a pattern's plan reads only its rows (each plan filtered every line: ~7 ms apiece on the
    512-rank job's 160k lines, for patterns with a few hundred). Every occurrence of every anchor is found in one
    overlapping Aho-Corasick pass (one `contains_any` per pattern scanned the lines ~100 times); the anchors found
    are few (a job's lines hold a few dozen of the ~1,000), so they are told to their patterns in Python, not by a
    join and a query per pattern."""
    if parsed.is_empty():
        return []
    anchors, owners = _anchor_owners(patterns)
    if not anchors:
        return []
    found = parsed.select(pl.col("message").str.extract_many(anchors, overlapping=True).alias("anchor"))
    if parsed.height > FEW_LINES:  # a Python loop over every line: ~3 us a line, 5x the join's cost at 160k lines
        return _pattern_rows_joined(found, owners, patterns)
    rows: dict[int, list[int]] = {}
    for row, held in enumerate(found.to_series().to_list()):
        if not held:
            continue
        for i in dict.fromkeys(i for a in held for i in owners[a]):
            rows.setdefault(i, []).append(row)
    return [(p, pl.Series("row", rows[i], dtype=pl.UInt32)) for i, p in enumerate(patterns) if i in rows]


def _pattern_rows_joined(
    found: pl.DataFrame, owners: dict[str, list[int]], patterns: Sequence[Pattern]
) -> list[tuple[Pattern, pl.Series]]:
    """`_pattern_rows` of a large frame: each line's anchors joined to their patterns in polars."""
    owned = pl.DataFrame(
        [(a, i) for a, held in owners.items() for i in held],
        schema={"anchor": pl.String(), "pattern": pl.UInt32()},
        orient="row",
    )
    hits = (
        found.with_row_index("row")
        .explode("anchor")
        .drop_nulls("anchor")
        .join(owned, on="anchor", maintain_order="left")
        .select("pattern", "row")
    )
    parts = hits.partition_by("pattern", as_dict=True, maintain_order=True)
    rows = {key[0]: part["row"].unique(maintain_order=True) for key, part in parts.items()}
    return [(p, rows[i]) for i, p in enumerate(patterns) if i in rows]


def _patterns_with_anchor_hits(parsed: pl.DataFrame, patterns: Sequence[Pattern]) -> list[Pattern]:
    """The patterns one of whose anchors occurs in some line (`_pattern_rows`)."""
    return [p for p, _ in _pattern_rows(parsed, patterns)]


# Each events column as a typed null, for the fields no pattern of a job declared (~40 a job): made once, not a
# `pl.lit` each per job (expressions are immutable).
_NULL_FIELDS = {c: pl.lit(None, dtype).alias(c) for c, dtype in EVENTS_SCHEMA.items()}


def extract_events(parsed: pl.DataFrame, catalog: Catalog, *, messages: bool = True) -> pl.DataFrame:
    """The `events` table: one row per (line, pattern) match, sorted by source and line; then NCCL's messages read
    by their declared entries (`messages`; the catalog's own examples are checked without them).

    Every pattern is one lazy plan over its rows (the lines holding one of its anchors), and all of them run in one
    `collect_all` (in parallel): one query instead of one per pattern, which was most of a small job's time."""
    plans = [
        _pattern_events(parsed[rows].lazy(), p, anchored=True) for p, rows in _pattern_rows(parsed, catalog.patterns)
    ]
    frames = pl.collect_all(plans, engine=engine_for(parsed.height)) if plans else []  # type: ignore[arg-type]
    if not frames:  # (a select of literals on a frame without columns would make one row of nulls)
        events = apply_readings(empty(EVENTS_SCHEMA), catalog.kinds)
        return read_messages(parsed, events, catalog.vocabulary, catalog.kinds) if messages else events
    # Sorted before the fields no pattern declared are added: the sort copies every column it is given.
    got = _drop_superseded(pl.concat(frames, how="diagonal_relaxed"), catalog).sort(
        "source", "line", "event", maintain_order=True
    )  # (stable: one pattern's several rows on a line keep their order)
    have = set(got.columns)
    events = got.select([pl.col(c) if c in have else null for c, null in _NULL_FIELDS.items()]).cast(
        EVENTS_SCHEMA  # type: ignore[arg-type]
    )
    events = apply_readings(events, catalog.kinds)
    return read_messages(parsed, events, catalog.vocabulary, catalog.kinds) if messages else events


def lines_table(parsed: pl.DataFrame) -> pl.DataFrame:
    return parsed.select(list(LINES_SCHEMA.keys())).cast(LINES_SCHEMA)  # type: ignore[arg-type]
