"""Command line: `ncclpm diagnose`, `diff`, `triage`, `watch`, `rules`, `explain`, `tables`, `catalog check`.

Data goes to stdout (or `-o FILE`), diagnostics to stderr. Exit codes: 0 diagnosed, 1 a `--fail-on` threshold
was met, 2 usage or input error (nothing readable, an output file that exists without `--force`), 3 internal
error (a bug in ncclpm: one line on stderr, the traceback with NCCLPM_DEBUG=1) - never 1, which CI reads as
"root cause found" -, 4 no failure in the logs, 5 not a distributed job's logs, 130 interrupted (Ctrl-C).
Everything printed goes through `escape.terminal` (no escape sequence from a log or a file name reaches the
terminal); files are written by `outfile.py`.
"""

from __future__ import annotations

import inspect
import os
import sys
from typing import TYPE_CHECKING

import click

from ncclpm import __version__
from ncclpm.util.collector import modules_loaded
from ncclpm.util.folding import fold_warnings
from ncclpm.util.outfile import OutputError, check_output, write_text

if TYPE_CHECKING:  # (no polars at start-up)
    from pathlib import Path

    from ncclpm.analysis.identity import Identity
    from ncclpm.tables import Tables

EXIT_OK, EXIT_FAIL_ON, EXIT_INPUT, EXIT_INTERNAL, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
EXIT_NO_FAILURE, EXIT_NOT_A_LOG = 4, 5  # diagnose: the logs show no failure / are not a distributed job's logs
# = the values of ncclpm.model.Band and sorted(ncclpm.render.RENDERERS), spelt out so that --help and usage errors
# import no polars (tests check both lists and sys.modules)
BANDS = ("possible", "likely", "conclusive")
FORMATS = ("html", "json", "md", "slack", "slack-json", "text")
DATA_FORMATS = ("json", "slack-json")  # JSON text: made terminal-safe by escaping, never by dropping characters
DIFF_FORMATS = ("html", "json", "md", "slack", "slack-json", "text")  # = sorted(ncclpm.render.diff.DIFF_RENDERERS)


def terminal(text: str) -> str:
    """`escape.terminal`, loaded when first used: `--help` and usage errors print no input (its import, ~10 ms)."""
    from ncclpm.util.escape import terminal as cleaned

    return cleaned(text)


def terminal_json(text: str) -> str:
    """`escape.terminal_json`, loaded when first used."""
    from ncclpm.util.escape import terminal_json as cleaned

    return cleaned(text)


def _say(message: str) -> None:
    """A diagnostic line on stderr: file names and log text in it never act on the terminal."""
    click.echo(terminal(message), err=True)


def _write(
    text: str, output: Path | None, force: bool, fmt: str = "md", coloured: bool = False, quiet: bool = False
) -> None:
    """`coloured`: text the text renderer made with its own colour codes, every input value already escaped by it
    (escape.one_line/plain) - the only output written with escape sequences, and only to a terminal."""
    if output is None:
        if coloured:  # click would strip the codes from a pipe: `--color always` means always
            click.echo(text, nl=False, color=True)
            return
        click.echo(terminal_json(text) if fmt in DATA_FORMATS else terminal(text), nl=False)
        return
    try:
        write_text(output, text, force)
    except OutputError as exc:
        raise click.UsageError(str(exc)) from None
    if not quiet:
        _say(f"wrote {output}")


def _check_output(output: Path | None, force: bool) -> None:
    """Refuse before any work: never overwrite without --force, never create folders."""
    try:
        check_output(output, force)
    except OutputError as exc:
        raise click.UsageError(str(exc)) from None


def _load_patterns(patterns: tuple[Path, ...]) -> None:
    """A bad --patterns catalog is a usage error (exit 2), found before any work."""
    from ncclpm.api import catalog
    from ncclpm.ingest.catalog import CatalogError

    try:
        catalog(tuple(patterns))
    except CatalogError as exc:
        raise click.UsageError(f"--patterns: {exc}") from None


def _read_stdin() -> bytes:
    """All of stdin, read in slices that wait at most 0.2 s: Ctrl-C must work while ncclpm waits for a paste, and
    the signal may land on one of polars' threads, which does not interrupt a blocking read of the main thread."""
    import select

    try:
        fd = sys.stdin.fileno()
    except (AttributeError, OSError, ValueError):  # not a real file (tests): read it at once
        return sys.stdin.buffer.read()
    parts: list[bytes] = []
    while True:
        if select.select([fd], [], [], 0.2)[0]:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return b"".join(parts)
            parts.append(chunk)


def _rule_ids(values: tuple[str, ...], option: str) -> tuple[str, ...]:
    """`--select ST01,DL01 --select rank-died-first`: comma lists, ids or names; an unknown one is a usage error."""
    from ncclpm.ruledocs.index import by_id  # the index (a test keeps it equal to the registry): no polars yet

    out = []
    for item in (part.strip() for v in values for part in v.split(",")):
        if not item:
            continue
        try:
            out.append(by_id(item).id)
        except KeyError:
            raise click.UsageError(f"{option}: no rule {item!r}; `ncclpm rules` lists them") from None
    return tuple(out)


def _default_format(output: Path | None) -> str:
    """A person at a terminal gets the compact text report; a pipe or a file gets Markdown."""
    return "text" if output is None and sys.stdout.isatty() else "md"


def _report_width(output: Path | None) -> int:
    """The text report's width: the terminal's, within 60-120 columns; 100 in a file."""
    import shutil

    return min(max(shutil.get_terminal_size((100, 24)).columns, 60), 120) if output is None else 100


def _use_colour(choice: str, output: Path | None) -> bool:
    """`--color auto` colours a terminal unless NO_COLOR is set (https://no-color.org); `always`/`never` decide."""
    if choice != "auto":
        return choice == "always" and output is None
    return (
        output is None and sys.stdout.isatty() and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"
    )


def _terminal_columns() -> int:
    """`shutil.get_terminal_size().columns` (COLUMNS, else the terminal's, else 80), without importing `shutil`
    and the `bz2`, `lzma` it loads (~3 ms of `--help`)."""
    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    if columns > 0:
        return columns
    try:
        return os.get_terminal_size(sys.__stdout__.fileno()).columns or 80  # type: ignore[union-attr]
    except (AttributeError, ValueError, OSError):
        return 80


class _HelpFormatter(click.HelpFormatter):
    """click's, as wide as click makes it (the terminal's width, 50-80 columns), measured by `_terminal_columns`."""

    def __init__(self, indent_increment: int = 2, width: int | None = None, max_width: int | None = None) -> None:
        if width is None and click.formatting.FORCED_WIDTH is None:
            width = max(min(_terminal_columns(), 80 if max_width is None else max_width) - 2, 50)
        super().__init__(indent_increment, width, max_width)


class _Context(click.Context):
    formatter_class = _HelpFormatter


class _Command(click.Command):
    context_class = _Context


class _Group(click.Group):
    context_class = _Context
    command_class = _Command


class _Main(click.Group):
    """Turns an unexpected exception into exit code 3 and one line naming it (Python's default would be 1), and
    Ctrl-C into exit code 130 without a traceback."""

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.Abort, BrokenPipeError):
            raise
        except KeyboardInterrupt:
            _say("ncclpm: interrupted")
            ctx.exit(EXIT_INTERRUPTED)
        except Exception as exc:
            if os.environ.get("NCCLPM_DEBUG"):
                raise
            filename, lineno = _innermost_own_frame(exc)
            first = (str(exc).strip().splitlines() or [""])[0][:300]
            _say(
                f"ncclpm: internal error: {type(exc).__name__}: {first} (at {os.path.basename(filename)}:{lineno}) - a "
                "bug in ncclpm, please report it; NCCLPM_DEBUG=1 shows the traceback"
            )
            ctx.exit(EXIT_INTERNAL)

    context_class = _Context
    command_class = _Command
    group_class = _Group


def _innermost_own_frame(exc: BaseException) -> tuple[str, int]:
    """Where an exception broke inside ncclpm: the innermost frame of a module of the `ncclpm` package (by the module
    the code belongs to, never by a path: a checkout in a folder named `ncclpm` holds tests and a venv too), else the
    innermost frame."""
    import traceback

    frames = list(traceback.walk_tb(exc.__traceback__))
    own = [(f, n) for f, n in frames if str(f.f_globals.get("__name__", "")).partition(".")[0] == "ncclpm"]
    frame, lineno = (own or frames)[-1]
    return frame.f_code.co_filename, lineno


class _PathArg(click.Path):
    """`click.Path(path_type=pathlib.Path)`, `pathlib` imported when a path is given: `--help`, `rules` and
    `explain` do without it (~5 ms: it loads `urllib.parse` and `ipaddress`)."""

    def coerce_path_result(self, value: str | os.PathLike[str]) -> Path:  # type: ignore[override]
        from pathlib import Path

        return Path(value)


@click.group(cls=_Main, context_settings={"help_option_names": ["-h", "--help"], "auto_envvar_prefix": "NCCLPM"})
@click.version_option(__version__, prog_name="ncclpm")
def main() -> None:
    """Find the rank and the reason behind a failed PyTorch distributed job."""


# options diagnose, diff and triage share
patterns_option = click.option(
    "--patterns",
    multiple=True,
    type=_PathArg(file_okay=False, exists=True),
    help="Extra folder of TOML pattern catalogs.",
)
select_option = click.option(
    "--select", multiple=True, help="Only these rules: ids or names, comma-separated or repeated."
)
ignore_option = click.option(
    "--ignore", multiple=True, help="Skip these rules: ids or names, comma-separated or repeated."
)

# diagnose's and diff's text reports colour alike
colour_option = click.option(
    "--color",
    "--colour",
    "colour",
    type=click.Choice(["auto", "always", "never"]),
    default="auto",
    show_default=True,
    help="Colour the text report (auto: on a terminal, unless NO_COLOR is set).",
)


@main.command()
@click.argument("paths", nargs=-1, required=True)
@click.option(
    "-f",
    "--format",
    "fmt",
    type=click.Choice(FORMATS),
    help="Report format [default: text on a terminal, md when piped or written to a file].",
)
@click.option("-o", "--output", type=_PathArg(dir_okay=False), help="Write the report here.")
@click.option("--force", is_flag=True, help="Overwrite --output if it exists.")
@select_option
@ignore_option
@patterns_option
@click.option("--fail-on", type=click.Choice(BANDS), help="Exit 1 when a root cause of at least this band is found.")
@click.option("--name", help="Job name shown in the report.")
@colour_option
@click.option("-v", "--verbose", is_flag=True, help="Also show internals: rules not evaluated, rivals' own summaries.")
@click.option("-q", "--quiet", is_flag=True, help="No warnings on stderr: errors only.")
@click.option("--one-job", is_flag=True, help="Read PATHS as one job even when they hold several jobs.")
def diagnose(
    paths: tuple[str, ...],
    fmt: str | None,
    output: Path | None,
    force: bool,
    select: tuple[str, ...],
    ignore: tuple[str, ...],
    patterns: tuple[Path, ...],
    fail_on: str | None,
    name: str | None,
    colour: str,
    verbose: bool,
    quiet: bool,
    one_job: bool,
) -> None:
    """Diagnose one job: PATHS are a log folder, files, archives, or `-` for pasted text on stdin. A folder of
    several jobs is refused (exit 2; `ncclpm triage` diagnoses each of them), unless --one-job is given."""
    _check_output(output, force)
    select, ignore = _rule_ids(select, "--select"), _rule_ids(ignore, "--ignore")  # usage errors before a paste
    files = [p for p in paths if p != "-"]
    stdin = _read_stdin() if "-" in paths else None
    # The sources first, without polars: polars' settings depend on the job (a job of dumps, a small job).
    from ncclpm.ingest.polars_setup import tune_for
    from ncclpm.sources.discover import collect

    job = collect(files, name=name) if stdin is None else None
    if stdin is None or not files:  # (files beside a paste are collected later, by `build`: no settings then)
        tune_for(job, len(stdin) if stdin is not None else 0)
    from ncclpm.api import build
    from ncclpm.engine import diagnose_tables
    from ncclpm.render import render
    from ncclpm.tables.schema import Band, Category

    _load_patterns(patterns)
    modules_loaded()
    fmt = fmt or _default_format(output)
    name = name or ("pasted text" if stdin is not None and not files else None)
    tables = build(files, stdin_bytes=stdin, patterns=patterns, name=name, job=job)
    tables = _one_job_only(tables, files, one_job)
    d = diagnose_tables(tables, select, ignore)
    del tables  # the report needs only the diagnosis: the tables' memory (a job's dumps) goes back before it
    for w in () if quiet else fold_warnings(d.warnings):
        _say(f"ncclpm: warning: {w}")
    if d.n_sources == 0:  # an error: said on stderr, nothing on stdout (a pipe reading the report gets nothing)
        _say("ncclpm: error: nothing readable in the input (see warnings above)")
        sys.exit(EXIT_INPUT)
    coloured = fmt == "text" and _use_colour(colour, output)
    width = _report_width(output)
    text = (
        render(d, fmt, verbose=verbose, color=coloured, width=width)
        if fmt == "text"
        else render(d, fmt, verbose=verbose)
    )
    _write(text, output, force, fmt, coloured=coloured, quiet=quiet)
    if d.category == Category.NO_FAILURE:
        sys.exit(EXIT_NO_FAILURE)
    if d.category == Category.NOT_A_TRAINING_LOG:
        sys.exit(EXIT_NOT_A_LOG)
    if fail_on and d.category.names_a_cause and d.band.rank >= Band(fail_on).rank:
        sys.exit(EXIT_FAIL_ON)


def _one_job_only(tables: Tables, files: list[str], one_job: bool) -> Tables:
    """Stop (exit 2) when the input is several jobs (`analysis/identity.py`), saying which, why and how to diagnose
    them; with --one-job, go on and say so in the report's warnings. Weak signs that it may be several runs are a
    warning: the input is read as one job."""
    from dataclasses import replace

    from ncclpm.analysis.identity import describe, job_identity

    found = job_identity(tables)
    if not found.several:
        said = [f"read as one job, though {w} (if these are separate runs, diagnose each)" for w in found.weak[:3]]
        return replace(tables, warnings=(*tables.warnings, *said)) if said else tables
    said_jobs = describe(found, files[0] if len(files) == 1 else None)
    if one_job:
        return replace(tables, warnings=(*tables.warnings, said_jobs + " - read as one job (--one-job)"))
    _say(f"ncclpm: error: {said_jobs}; one verdict for all of them would be wrong")
    for stray in found.loose[:20]:
        _say(f"ncclpm: warning: {stray}: in none of the {len(found.jobs)} jobs (a stray file beside them)")
    if len(found.loose) > 20:
        _say(f"ncclpm: warning: ... and {len(found.loose) - 20} more files in none of the jobs")
    for hint in _job_hints(found, files):
        _say(f"ncclpm:   diagnose each job:     {hint}")
    _say("ncclpm:   read them as one job:  add --one-job")
    sys.exit(EXIT_INPUT)


def _job_hints(found: Identity, files: list[str]) -> list[str]:
    """`ncclpm triage DIR` when triage splits DIR into the same jobs; else each job's own paths."""
    from pathlib import Path

    from ncclpm.triage.jobs import find_jobs

    if len(files) == 1 and Path(files[0]).is_dir():
        root = Path(files[0]) / found.prefix
        if len(find_jobs([root])) == len(found.jobs):
            return [f"ncclpm triage {root}"]
        if all(len(j) == 1 for j in found.jobs):
            listed = [str(root / j[0]) for j in found.jobs[:6]]
            return ["ncclpm triage " + " ".join(listed) + (" ..." if len(found.jobs) > 6 else "")]
        hints = [f"ncclpm diagnose {' '.join(str(root / u) for u in j)}" for j in found.jobs[:3]]
        return hints + (["..."] if len(found.jobs) > 3 else [])
    return ["ncclpm triage PATH... (each job a folder or an archive of its own)"]


@main.command("diff")
@click.argument("runs", nargs=-1)
@click.option("-g", "--good", "good_more", multiple=True, help="Add a file or folder to GOOD (repeatable).")
@click.option("-b", "--bad", "bad_more", multiple=True, help="Add a file or folder to BAD (repeatable).")
@click.option(
    "-f",
    "--format",
    "fmt",
    type=click.Choice(DIFF_FORMATS),
    help="Report format [default: text on a terminal, md when piped or written to a file].",
)
@click.option("-o", "--output", type=_PathArg(dir_okay=False), help="Write the report here.")
@click.option("--force", is_flag=True, help="Overwrite --output if it exists.")
@patterns_option
@colour_option
@click.option("-q", "--quiet", is_flag=True, help="No warnings on stderr: errors only.")
def diff_runs(
    runs: tuple[str, ...],
    good_more: tuple[str, ...],
    bad_more: tuple[str, ...],
    fmt: str | None,
    output: Path | None,
    force: bool,
    patterns: tuple[Path, ...],
    colour: str,
    quiet: bool,
) -> None:
    """Compare a run that worked (GOOD) with one that failed (BAD): what changed, ranked by how much it can
    explain BAD's failure. GOOD and BAD are each a log folder, a file or an archive (`-` for pasted text on
    one side); -g/-b add more files to a side."""
    from ncclpm.api import diff
    from ncclpm.render.diff import render_diff

    if len(runs) not in (0, 2):
        raise click.UsageError("give GOOD and BAD (two paths), or the files of each side with -g/-b")
    good = [*runs[:1], *good_more]
    bad = [*runs[1:], *bad_more]
    if not good or not bad:
        raise click.UsageError("both GOOD and BAD need at least one path")
    stdin_side = "good" if "-" in good else "bad" if "-" in bad else None
    if "-" in good and "-" in bad:
        raise click.UsageError("only one side can be read from stdin")
    _check_output(output, force)
    _load_patterns(patterns)
    from ncclpm.analysis.identity import SeveralJobsError

    modules_loaded()
    try:
        report = diff(
            [p for p in good if p != "-"],
            [p for p in bad if p != "-"],
            patterns=patterns,
            stdin_bytes=_read_stdin() if stdin_side else None,
            stdin_side=stdin_side,
        )
    except SeveralJobsError as exc:
        _say(f"ncclpm: error: {exc}; a diff compares one run with one run: give one job's folder or files per side")
        sys.exit(EXIT_INPUT)
    for w in () if quiet else fold_warnings(report.warnings):
        _say(f"ncclpm: warning: {w}")
    fmt = fmt or _default_format(output)
    coloured = fmt == "text" and _use_colour(colour, output)
    width = _report_width(output)
    text = render_diff(report, fmt, color=coloured, width=width) if fmt == "text" else render_diff(report, fmt)
    _write(text, output, force, fmt, coloured=coloured, quiet=quiet)
    if report.good.sources == 0 or report.bad.sources == 0:
        side = "GOOD" if report.good.sources == 0 else "BAD"
        _say(f"ncclpm: error: nothing readable in {side} (see warnings above)")
        sys.exit(EXIT_INPUT)


@main.command("rules")
def list_rules() -> None:
    """List the rules in precedence order: within a confidence band, an earlier rule wins over a later one."""
    from ncclpm.precedence import PRECEDENCE
    from ncclpm.ruledocs.index import by_id  # the rules' documentation without importing them (and polars)

    for place, (rule_id, why) in enumerate(PRECEDENCE, 1):
        r = by_id(rule_id, registered=True)
        title = " ".join(r.doc.split("\n\n")[0].split())
        click.echo(f"{r.id}  {r.name:<34} {r.category!s:<22} {title}\n      precedence {place}: {why}")


@main.command()
@click.argument("rule")
def explain(rule: str) -> None:
    """Explain a rule: what it detects, why it matters, an example, the fix."""
    from ncclpm.ruledocs.index import by_id

    try:
        r = by_id(rule)
    except KeyError:
        raise click.UsageError(f"no rule {rule!r}; see `ncclpm rules`") from None
    click.echo(f"# {r.id} {r.name} ({r.category})\n\n{inspect.cleandoc(r.doc)}")


@main.command()
@click.argument("paths", nargs=-1, required=True)
@click.option("-t", "--table", "name", default="events", show_default=True, help="Table to export.")
@click.option(
    "-f",
    "--format",
    "fmt",
    type=click.Choice(["csv", "ndjson", "parquet"]),
    help="Default: from the -o extension (.parquet, .ndjson), else csv.",
)
@click.option("-o", "--output", type=_PathArg(dir_okay=False))
@click.option("--force", is_flag=True)
def tables(paths: tuple[str, ...], name: str, fmt: str | None, output: Path | None, force: bool) -> None:
    """Export one parsed table (events, lines, ranks, tracebacks, elastic, fr_entries, ...)."""
    from ncclpm.api import build
    from ncclpm.tables.export import export_table

    if fmt is None:
        suffix = output.suffix.lower() if output is not None else ""
        fmt = {".parquet": "parquet", ".pq": "parquet", ".ndjson": "ndjson", ".jsonl": "ndjson"}.get(suffix, "csv")

    _check_output(output, force)
    stdin = _read_stdin() if "-" in paths else None
    modules_loaded()
    t = build(
        [p for p in paths if p != "-"], stdin_bytes=stdin, fr_columns="all" if name == "fr_entries" else "analysis"
    )
    try:
        text = export_table(t, name, fmt, output, force)
    except (KeyError, OutputError) as exc:
        raise click.UsageError(str(exc.args[0])) from None
    if text is not None:  # NDJSON: escapes keep the data; CSV: a terminal gets it cleaned, a pipe gets it as is
        click.echo(
            terminal_json(text) if fmt == "ndjson" else terminal(text) if sys.stdout.isatty() else text, nl=False
        )


TRIAGE_FORMATS = ("csv", "html", "md", "ndjson", "parquet")  # -o's format; by its extension when -f is not given


def _triage_format(output: Path | None, fmt: str | None) -> str | None:
    """The format of `triage -o`: `-f`, else the extension (.html/.htm: the fleet page, .md: the summary, else a
    table format); None without -o and -f (the summary on stdout)."""
    from ncclpm.triage.table import table_format

    if fmt is not None or output is None:
        return fmt
    suffix = output.suffix.lower()
    if suffix in (".html", ".htm"):
        return "html"
    if suffix in (".md", ".markdown"):
        return "md"
    try:
        return table_format(output)
    except ValueError:
        raise click.UsageError(
            f"{output}: the format comes from the extension (.html, .md, .parquet, .csv, .ndjson) or -f"
        ) from None


def _reports_dir(reports: Path | None, force: bool) -> str | None:
    """`--reports DIR`: made if missing (its parent must exist), never a file or a symlink; a folder that already
    holds files is written into only with --force (reports of an earlier run would be overwritten)."""
    if reports is None:
        return None
    if reports.is_symlink() or (reports.exists() and not reports.is_dir()):
        raise click.UsageError(f"--reports {reports}: not a folder")
    if reports.is_dir() and not force and any(reports.iterdir()):
        raise click.UsageError(f"--reports {reports}: the folder is not empty (use --force to write into it)")
    if not reports.exists():
        if not reports.parent.is_dir():
            raise click.UsageError(f"--reports {reports}: {reports.parent} does not exist")
        reports.mkdir()
    return str(reports.resolve())


@main.command()
@click.argument("paths", nargs=-1, required=True, type=_PathArg())
@click.option(
    "-o",
    "--output",
    type=_PathArg(dir_okay=False),
    help="Write here: the fleet page (.html), the summary (.md) or the table, one row per job (.parquet, .csv, "
    ".ndjson) - by extension, or -f.",
)
@click.option("-f", "--format", "fmt", type=click.Choice(TRIAGE_FORMATS), help="The format of -o (or of stdout).")
@click.option(
    "--summary",
    "summary_out",
    type=_PathArg(dir_okay=False),
    help="Write the Markdown summary here (default: stdout when there is no -o).",
)
@click.option(
    "--table",
    "table_out",
    type=_PathArg(dir_okay=False),
    help="Also write the table here (.parquet, .csv, .ndjson), e.g. beside -o fleet.html.",
)
@click.option(
    "--hosts",
    "hosts_out",
    type=_PathArg(dir_okay=False),
    help="Write the per-host roll-up here (.parquet, .csv, .ndjson): one row per culprit host.",
)
@click.option(
    "--reports",
    type=_PathArg(file_okay=False),
    help="Write each job's own HTML report into this folder; the fleet page links to them.",
)
@click.option("-j", "--jobs", "workers", type=click.IntRange(min=1), help="Parallel processes [default: all cores].")
@click.option("--ray", "ray_address", metavar="ADDRESS", help="Run on Ray: auto, local, ray://host:port, host:port.")
@click.option(
    "--baseline",
    "baseline_path",
    type=_PathArg(dir_okay=False, exists=True),
    help="An earlier triage table (.parquet/.csv/.ndjson): failure signatures it never had are marked new.",
)
@select_option
@ignore_option
@patterns_option
@click.option("--progress-every", type=float, default=10.0, hidden=True, help="Seconds between progress lines.")
@click.option("--force", is_flag=True, help="Overwrite outputs that exist.")
@click.option("-q", "--quiet", is_flag=True, help="No progress and no warnings on stderr: errors only.")
def triage(
    paths: tuple[Path, ...],
    output: Path | None,
    fmt: str | None,
    summary_out: Path | None,
    table_out: Path | None,
    hosts_out: Path | None,
    reports: Path | None,
    workers: int | None,
    ray_address: str | None,
    baseline_path: Path | None,
    select: tuple[str, ...],
    ignore: tuple[str, ...],
    patterns: tuple[Path, ...],
    quiet: bool,
    progress_every: float,
    force: bool,
) -> None:
    """Triage many jobs: PATHS are jobs (folders, archives) or folders of jobs; one row per job. `-o fleet.html`
    writes one page for the people who run the cluster (counts, failures over time, clusters, culprit hosts, every
    job); `-o table.parquet` the table; the Markdown summary goes to stdout when there is no -o."""
    from ncclpm.triage import find_jobs, to_frame
    from ncclpm.triage.baseline import BaselineError, baseline_context, mark_new, read_baseline
    from ncclpm.triage.table import table_format

    fmt = _triage_format(output, fmt)
    for out in (output, summary_out, table_out, hosts_out):
        _check_output(out, force)
    for out in (table_out, hosts_out):
        if out is not None:
            try:
                table_format(out)
            except ValueError as exc:
                raise click.UsageError(str(exc)) from None
    options = {
        "select": _rule_ids(select, "--select"),
        "ignore": _rule_ids(ignore, "--ignore"),
        "patterns": tuple(str(p) for p in patterns),
        "reports": _reports_dir(reports, force),
    }
    _load_patterns(patterns)
    modules_loaded()
    baseline = None
    if baseline_path is not None:
        try:
            baseline = read_baseline(baseline_path)
        except BaselineError as exc:
            raise click.UsageError(str(exc)) from None
    warnings: list[str] = []
    jobs = find_jobs(paths, warnings)
    for w in () if quiet else warnings:
        _say(f"ncclpm: warning: {w}")
    if not jobs:
        _say("ncclpm: error: no job found in " + ", ".join(str(p) for p in paths))
        sys.exit(EXIT_INPUT)
    rows, interrupted = _run_triage(jobs, workers, ray_address, options, quiet, progress_every)
    frame = to_frame(rows)
    context = None
    if baseline is not None and baseline_path is not None:
        frame = mark_new(frame, baseline)
        context = baseline_context(frame, baseline, baseline_path.name)
    if interrupted:
        _say(f"ncclpm: interrupted after {frame.height} of {len(jobs)} jobs; pending jobs cancelled")
    partial = " (partial: interrupted)" if interrupted else ""
    _write_triage_outputs(frame, context, fmt, output, table_out, hosts_out, force, partial, reports)
    failed = frame["error"].is_not_null().sum()
    nothing = frame.height == 0 or failed == frame.height  # nothing readable: an input error, no summary on stdout
    if summary_out is not None or (output is None and fmt is None and not interrupted and not nothing):
        from ncclpm.triage import render_summary

        _write(render_summary(frame, baseline=context), summary_out, force, quiet=quiet)
    _say(f"ncclpm: {frame.height} jobs, {failed} unreadable, {frame['seconds'].sum():.1f} s of work")
    if nothing and not interrupted:
        for row in frame.filter(frame["error"].is_not_null()).head(10).iter_rows(named=True):
            _say(f"ncclpm: {row['job']}: {row['error']}")
        _say("ncclpm: error: nothing readable in " + ", ".join(str(p) for p in paths) + " (errors above)")
        sys.exit(EXIT_INPUT)
    if interrupted:
        sys.exit(EXIT_INTERRUPTED)


def _run_triage(
    jobs: list, workers: int | None, ray_address: str | None, options: dict, quiet: bool, every: float
) -> tuple[list[dict], bool]:
    """Run the jobs with progress on stderr: a bar on a terminal, a line every `every` seconds elsewhere (a cron
    job's or CI's log), nothing with -q. Returns (rows, interrupted)."""
    from contextlib import nullcontext

    from ncclpm.triage import Interrupted, run_local, run_ray
    from ncclpm.triage.progress import ProgressLines

    bar_ctx = (
        click.progressbar(length=len(jobs), label=f"triage {len(jobs)} jobs", file=sys.stderr)
        if not quiet and sys.stderr.isatty()
        else nullcontext()
    )
    lines = ProgressLines(len(jobs), _say, every) if not quiet and not sys.stderr.isatty() else None
    with bar_ctx as bar:

        def tick(_row: dict) -> None:
            if bar is not None:
                bar.update(1)
            if lines is not None:
                lines.tick()

        try:
            if ray_address:
                return run_ray(jobs, ray_address, tick, options), False
            return run_local(jobs, workers, tick, options), False
        except Interrupted as stop:  # Ctrl-C: the pending jobs were cancelled; keep the finished ones
            return stop.rows, True


def _write_triage_outputs(
    frame, context, fmt: str | None, output: Path | None, table_out: Path | None, hosts_out: Path | None,
    force: bool, partial: str, reports: Path | None,
) -> None:  # fmt: skip
    """-o in its format (the fleet page, the summary, the table; stdout for -f without -o), --table, --hosts."""
    from ncclpm.triage import write_table
    from ncclpm.triage.hosts import write_hosts

    if fmt in ("html", "md"):
        if fmt == "html":
            from ncclpm.render.fleet import render_fleet
            from ncclpm.triage.fleet import fleet_context

            text = render_fleet(fleet_context(frame, baseline=context, reports=reports, output=output))
        else:
            from ncclpm.triage import render_summary

            text = render_summary(frame, baseline=context)
        _write(text, output, force, fmt)
    elif fmt is not None:
        if output is None:
            raise click.UsageError(f"-f {fmt}: a table is written to a file: give -o")
        _write_frame(lambda: write_table(frame, output, force, fmt), output, partial)
    if table_out is not None:
        _write_frame(lambda: write_table(frame, table_out, force), table_out, partial)
    if hosts_out is not None:
        _write_frame(lambda: write_hosts(frame, hosts_out, force), hosts_out, partial)


def _write_frame(write, path: Path, partial: str) -> None:
    try:
        write()
    except OutputError as exc:
        raise click.UsageError(str(exc)) from None
    _say(f"wrote {path}{partial}")


def _signal_number(value: str | None) -> int | None:
    """`USR1`, `SIGUSR1` or `10` -> the signal's number (a usage error for anything else)."""
    import signal

    if value is None:
        return None
    name = value.strip().upper()
    try:
        return (
            int(signal.Signals(int(name)))
            if name.isdigit()
            else int(signal.Signals[name if name.startswith("SIG") else f"SIG{name}"])
        )
    except (KeyError, ValueError):
        raise click.UsageError(f"--signal: no signal {value!r} (e.g. USR1)") from None


@main.command()
@click.argument("jobdir", type=_PathArg(file_okay=False, exists=True))
@click.option(
    "--pid",
    "pids",
    multiple=True,
    type=click.IntRange(min=1),
    help="The launcher or a rank (repeatable): its process tree is watched "
    "[default: the processes working in JOBDIR or writing logs there].",
)
@click.option(
    "--idle",
    "idle_s",
    type=click.FloatRange(min=0.5),
    default=300.0,
    show_default=True,
    help="A hang: no rank logged a line for this many seconds while the ranks sit idle (no CPU).",
)
@click.option(
    "--open-share",
    type=click.FloatRange(min=0.01, max=1.0),
    default=0.5,
    show_default=True,
    help="A hang: a collective the logs show started is still open after this share of its timeout.",
)
@click.option("--once", is_flag=True, help="Exit after the first collection.")
@click.option("--native", is_flag=True, help="py-spy --native: C/C++ frames too (slower).")
@click.option(
    "--signal",
    "signal_name",
    metavar="SIG",
    help="Also send SIG (e.g. USR1) to every rank that handles it, for the job's own faulthandler.register(SIG) dump.",
)
@click.option(
    "--debug-server/--no-debug-server",
    default=True,
    show_default=True,
    help="Ask torch's debug server (where the job started one) for its stacks and flight recorder.",
)
@click.option("--post", metavar="URL", help="Send the report as Slack JSON to this webhook after each collection.")
@click.option(
    "--out",
    "out_root",
    type=_PathArg(file_okay=False),
    help="Where collections go [default: JOBDIR/ncclpm-watch].",
)
@click.option(
    "--poll",
    "poll_s",
    type=click.FloatRange(min=0.05, max=60),
    default=0.5,
    show_default=True,
    help="Seconds between two looks at the logs and processes.",
)
@click.option(
    "--start-timeout",
    "start_timeout_s",
    type=click.FloatRange(min=1),
    default=600.0,
    show_default=True,
    help="Give up when no process of the job shows up within this many seconds.",
)
def watch(
    jobdir: Path,
    pids: tuple[int, ...],
    idle_s: float,
    open_share: float,
    once: bool,
    native: bool,
    signal_name: str | None,
    debug_server: bool,
    post: str | None,
    out_root: Path | None,
    poll_s: float,
    start_timeout_s: float,
) -> None:
    """Watch a running job beside it and catch a hang while it happens: when a timeout line appears, a collective
    stays open too long, or no rank logs while the ranks sit idle, collect every rank's stacks (py-spy), torch's
    debug-server dumps, the host's context into JOBDIR/ncclpm-watch/<UTC time>/ with a manifest, diagnose the job
    and print the report. Exits when the job ends. Needs the `watch` extra: pip install 'nccl-postmortem[watch]'."""
    from ncclpm.watch.deps import MissingDependency, check

    try:
        tools = check()
    except MissingDependency as exc:
        raise click.UsageError(str(exc)) from None
    from ncclpm.watch.runner import Settings, Watcher, quiet_down

    modules_loaded()
    if post is not None and not post.startswith(("http://", "https://")):
        raise click.UsageError(f"--post: {post!r} is not an http(s) URL")
    quiet_down()
    settings = Settings(
        jobdir=jobdir,
        out_root=out_root if out_root is not None else jobdir / "ncclpm-watch",
        pids=pids,
        idle_s=idle_s,
        open_share=open_share,
        once=once,
        native=native,
        signal=_signal_number(signal_name),
        post=post,
        poll_s=poll_s,
        start_timeout_s=start_timeout_s,
        debug_server=debug_server,
    )

    def say(text: str) -> None:
        _say(f"ncclpm watch: {text}")

    def show(text: str) -> None:
        click.echo(terminal(text), nl=not text.endswith("\n"))

    outcome = Watcher(settings, tools, say, show).run()
    say(outcome.reason + (f"; {len(outcome.collections)} collection(s)" if outcome.collections else ""))
    sys.exit(outcome.code)


@main.group()
def catalog() -> None:
    """Pattern catalog tools."""


@catalog.command("check")
@click.argument("dirs", nargs=-1, type=_PathArg(file_okay=False, exists=True))
def catalog_check(dirs: tuple[Path, ...]) -> None:
    """Validate the shipped catalogs (and DIRS) and the code readings: ids, regexes, fields, examples."""
    from ncclpm.ingest.catalog import CatalogError, load_catalog
    from ncclpm.ingest.code.settings import ReadingError, load_readings, run_reading_examples
    from ncclpm.ingest.selftest import run_examples

    try:
        cat = load_catalog(tuple(dirs))
        readings, _ = load_readings()
    except (CatalogError, ReadingError) as exc:
        click.echo(f"catalog error: {exc}", err=True)
        sys.exit(EXIT_INPUT)
    modules_loaded()
    problems = run_examples(cat) + run_reading_examples()
    for p in problems:
        click.echo(p, err=True)
    click.echo(
        f"{len(cat.patterns)} patterns, {len(cat.envelopes)} envelopes, {len(cat.kinds)} kinds, "
        f"{len(readings)} code readings: "
        f"{'OK' if not problems else f'{len(problems)} problem(s)'}"
    )
    sys.exit(EXIT_INPUT if problems else EXIT_OK)


@catalog.command("kinds")
@click.argument("dirs", nargs=-1, type=_PathArg(file_okay=False, exists=True))
def catalog_kinds(dirs: tuple[Path, ...]) -> None:
    """The declared event kinds (shipped and DIRS): what each means and the patterns that produce it."""
    from ncclpm.ingest.catalog import CatalogError, load_catalog

    try:
        cat = load_catalog(tuple(dirs))
    except CatalogError as exc:
        click.echo(f"catalog error: {exc}", err=True)
        sys.exit(EXIT_INPUT)
    for decl in sorted(cat.kinds.values(), key=lambda d: d.name):
        ids = ", ".join(p.id for p in cat.patterns if p.kind == decl.name) or "(produced by code)"
        victim = " [victim]" if decl.victim else ""
        click.echo(f"{decl.name}{victim}: {decl.meaning}\n    {ids}")


def run() -> None:
    """The `ncclpm` command: `main`, then an exit without tearing the interpreter down. Freeing every module, the
    tables and polars' memory one by one costs 30-50 ms, a tenth of a small job's run; by then the report is out
    and every file written by `outfile` is closed, so the process ends once the standard streams are flushed.
    With NCCLPM_DEBUG an internal error's traceback takes Python's usual way out."""
    try:
        main(prog_name="ncclpm")
        code: object = 0
    except SystemExit as exc:
        code = exc.code
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except OSError:  # the reader went away (EPIPE): leave it to Python's own shutdown
        raise SystemExit(code) from None
    if code is None:
        code = 0
    elif not isinstance(code, int):  # sys.exit("message"): Python prints it and exits 1
        print(code, file=sys.stderr, flush=True)
        code = 1
    os._exit(code)
