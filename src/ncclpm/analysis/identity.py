"""One job or several, from what names each run - not from where two files happen to hold the same rank number.

The input is cut into **units**: the folders (or files) where its sources part ways, below the folders they all
share (`jobs/4471201/...`, `jobs/4471202/...` -> `4471201`, `4471202`). Each unit's identities are read:
- the scheduler's job id: a Slurm id in its paths (`4471201/`, `slurm-4471201.out`, `job_4471201/`: a number of
  at least 4 digits - torchrun's per-local-rank folders are `0/`..`7/`; not a zero-padded index or a date or time
  stamp its logs fall near: `0001/`, `20250304_093000/`) or in its lines (`SLURM_JOB_ID=` of an env
  dump, slurmstepd's `*** STEP 4471201.0`); torchrun's run id (its log folder `<run_id>_xxxxxxxx/attempt_N/`, its
  `run_id :` line); the master address (`MASTER_ADDR=`, torchrun's
  rendezvous result); the world size it states (`WORLD_SIZE=`, NCCL's `nranks` of its communicators);
- its **global** ranks: ranks a line states itself (`[rank3]:`, `[Rank 3]` of the default group, a script's
  `rank 3`), the rank of a torchrun stream such lines give, NCCL's rank of its process, a flight-recorder dump's
  rank. Local ranks (`[default3]:`, `attempt_0/3/`) and file names (`rank3.log`) are not: every node of a job has a
  `rank0.log` and a `[default0]:` stream, so host folders, Kubernetes pods and per-host dated folders are one
  job's parts;
- its time span (first to last stamped line, error file, dump entry) and whether its name says it is an attempt
  (`attempt_2`, `restart_1`, `requeue_3`, `resume...`, `segment_2`).

Two units are **two jobs** when their strong identities conflict: different Slurm job ids or run ids; different
master addresses at the same time; ranks of one stated world that the other's world cannot hold; the same global
rank at the same time (or at times nothing dates) - or two different flight-recorder dumps of one rank, whenever
written - unless both are attempts by name that did not run at the same time (two attempts of one job named so may
also differ in the uuid run id `torchrun --standalone` draws at each launch). A process's output written twice (a
tee'd console and torchrun's per-rank file, the same dump in two formats) is one job's. Two units with the same
Slurm id or run id are one job, whatever else differs (its nodes, its restarts, a requeue). When only **weak** signs
disagree - the same global ranks at times that do not overlap (a restart, or a second run?), different world sizes
(an elastic job resized?), different master addresses at different times - the units are read as one job and a
warning names the evidence.
One job whose units ran one after the other (attempt folders, or the same ranks at disjoint times) has
**attempts**: the report says which attempt failed how (`attempts_caveat`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from itertools import combinations
from typing import TYPE_CHECKING

import polars as pl

from ncclpm.analysis.attempts import attempt_column, has_attempts, restart_times
from ncclpm.tables.kinds import K

if TYPE_CHECKING:
    from ncclpm.tables import Tables

_NUMBERED_JOB = re.compile(
    r"^(?P<named>slurm|job|jobid|job_id)?[_-]?(?P<id>\d{4,}(?:_\d+)?)(?:[_.-](?:out|err|log|txt|stdout|stderr))*$",
    re.I,
)
# A bare number that reads as a date or a time stamp (`20250304/`, `20250304_093000/`, `20250304093000.log`) names
# when a run was written, not which run: restart and day folders of one job. A number with a leading zero is an
# index (`0001/`): a scheduler never pads its ids.
_STAMP_NAME = re.compile(
    r"^(?P<date>20\d\d(?:0[1-9]|1[0-2])(?:0[1-9]|[12]\d|3[01]))(?:_?(?:[01]\d|2[0-3])[0-5]\d(?:[0-5]\d)?)?$"
)
STAMP_SLACK = timedelta(days=2)  # a day folder holds logs of its day (and of a night run past midnight)
_ATTEMPT_NAME = re.compile(
    r"(?:^|[_.-])(?P<word>attempt|restart|restarted|requeue|requeued|retry|resume|resumed|resuming|segment|"
    r"continuation|continued)(?:[_.-]?(?P<n>\d+))?(?=$|[_.-])",
    re.I,
)
# A folder named like a part of one job: what it holds (logs, dumps), a node, a local rank, an attempt - never a
# job by its name alone. A number of 4 digits or more is a scheduler's job id, not a local rank.
_PARTS = r"logs?|fr|flight[_-]?recorder|traces?|dumps?|torchrun[_-]?logs|stdout|stderr|outputs?|err|out|"
_PARTS += r"(?:attempt|node|host|rank|worker|proc|task|gpu|nid|restart|requeue|retry|segment)[_-]?\d+|\d{1,3}|"
_PARTS += r"[\w.-]*-(?:master|worker|launcher|head|chief)-\d+"  # Kubernetes pods of a PyTorchJob / MPIJob
PART_NAME = re.compile(rf"^(?:{_PARTS})$", re.IGNORECASE)
# torchrun's log folder: `<log_dir>/<run_id>_<8 random characters>/attempt_<N>/<local rank>/` (run_id: `--rdzv-id`,
# or a fresh uuid with --standalone): the run id is in the path.
_TORCHRUN_RUN_DIR = re.compile(r"^(?P<run>.+)_[a-z0-9_]{8}$")
_TORCHRUN_ATTEMPT_DIR = re.compile(r"^attempt_\d+$")
SLURM_VARS = ("SLURM_JOB_ID", "SLURM_JOBID", "PBS_JOBID", "LSB_JOBID", "*** STEP", "*** JOB", "StepId")
MASTER_VARS = ("MASTER_ADDR", "master_addr")
RUN_VARS = ("run_id", "rdzv_id")
_NO_RUN_ID = {"none", "null", "", "default", "0"}
_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$", re.I)
_LOCAL_HOSTS = {"localhost", "127.0.0.1", "::1", "0.0.0.0"}


class SeveralJobsError(ValueError):
    """An input that must be one run (a side of `ncclpm diff`) holds several jobs; the message says which."""


@dataclass
class Unit:
    """One part of the input and what names it."""

    name: str  # as in the source names: the first folder (or the file) below the folders all sources share
    sources: list[str] = field(default_factory=list)
    jobs: set[str] = field(default_factory=set)  # scheduler job ids
    runs: set[str] = field(default_factory=set)  # torchrun run ids
    masters: set[str] = field(default_factory=set)
    worlds: set[int] = field(default_factory=set)
    ranks: set[int] = field(default_factory=set)  # global ranks of its logs
    dump_ranks: set[int] = field(default_factory=set)  # ranks of its flight-recorder dumps
    start: datetime | None = None
    end: datetime | None = None
    attempt: int | None = None  # the number its name gives, when its name says it is an attempt
    is_file: bool = False  # a file beside the others (`console.log`, `rank1.log`), not a folder
    attempt_named: bool = False
    stamped: dict[str, datetime] = field(default_factory=dict)  # date-like numbers of its name -> their day
    dumps: dict[int, tuple[int, int]] = field(default_factory=dict)  # rank -> (entries, newest entry): copies
    holders: dict[tuple[str, int], str] = field(default_factory=dict)  # (logs | dumps, rank) -> a source holding it
    copied: dict[str, set[int]] = field(default_factory=dict)  # other unit -> ranks whose lines both hold (a tee)

    def span(self) -> str:
        if self.start is None or self.end is None:
            return "undated"
        if self.start.date() == self.end.date():
            return f"{self.start:%Y-%m-%d %H:%M:%S}-{self.end:%H:%M:%S}"
        return f"{self.start:%Y-%m-%d %H:%M}-{self.end:%Y-%m-%d %H:%M}"


@dataclass(frozen=True)
class Identity:
    """What the input is: `jobs` (each a tuple of unit names) - one, or several when identities conflict, with
    `evidence` saying why; `weak`: warnings when only weak signs disagree (read as one job); `attempts`: the units
    of one job that ran one after the other, in order, with how each failed."""

    prefix: str
    jobs: tuple[tuple[str, ...], ...]
    evidence: str = ""
    weak: tuple[str, ...] = ()
    attempts: tuple[Attempt, ...] = ()
    loose: tuple[str, ...] = ()  # sources of no job (a stray file beside several jobs)
    # when the attempts are units that ran one after the other (`requeue_2/`, day folders of the same ranks):
    # each of their sources with its attempt's number (1, 2, ... in order) - triage's restart storms read these
    attempt_of_source: tuple[tuple[str, int], ...] = ()

    @property
    def several(self) -> bool:
        return len(self.jobs) > 1


@dataclass(frozen=True)
class Attempt:
    """One attempt of a job (a restart, or a unit run after another): its name, time span and first error line."""

    name: str
    span: str
    failure: str | None  # the first error line (not a victim's), as quoted
    where: str | None  # source:line


def _parts(name: str) -> list[str]:
    return name.replace("!/", "/").split("/")


def _common_folders(names: list[list[str]]) -> list[str]:
    common = names[0][:-1]
    for parts in names[1:]:
        n = 0
        while n < min(len(common), len(parts) - 1) and common[n] == parts[n]:
            n += 1
        common = common[:n]
    return common


def _torchrun_run(part: str, following: list[str]) -> str | None:
    """The run id of torchrun's `<run_id>_xxxxxxxx/` folder (the one an `attempt_N/` folder sits in)."""
    if not following or not _TORCHRUN_ATTEMPT_DIR.match(following[0]) or not (m := _TORCHRUN_RUN_DIR.match(part)):
        return None
    return None if m["run"].lower() in _NO_RUN_ID else m["run"]


def _not_a_job_id(digits: str, unit: Unit) -> bool:
    """A bare number in a name that is an index (a leading zero) or a date or time stamp: kept aside (`stamped`)
    until the unit's lines date it - a date its logs do not fall near is a job id after all (`_stamps_or_ids`)."""
    if digits.startswith("0"):
        return True
    if not (m := _STAMP_NAME.match(digits)):
        return False
    try:
        unit.stamped[digits] = datetime.strptime(m["date"], "%Y%m%d")
    except ValueError:  # (20250231: no day)
        return False
    return True


def _stamps_or_ids(units: dict[str, Unit]) -> None:
    """A date-like name whose unit's logs run far from that date is a job id (Slurm's ids reach 8 digits)."""
    for u in units.values():
        for digits, day in u.stamped.items():
            if u.start is not None and u.end is not None and not u.start - STAMP_SLACK <= day <= u.end + STAMP_SLACK:
                u.jobs.add(digits)


def _units(sources: list[str]) -> tuple[str, dict[str, Unit], dict[str, str], list[str]]:
    """(the shared folders as written, units by name, unit of each source, the shared folders)."""
    split = {s: _parts(s) for s in sources}
    prefix = _common_folders(list(split.values()))
    units: dict[str, Unit] = {}
    unit_of: dict[str, str] = {}
    for s, parts in split.items():
        rest = parts[len(prefix) :]
        name = rest[0]
        unit = units.setdefault(name, Unit(name, is_file=len(rest) == 1))
        unit.sources.append(s)
        unit_of[s] = name
        for i, part in enumerate(rest):
            if m := _NUMBERED_JOB.match(part):
                if m["named"] or not _not_a_job_id(m["id"], unit):
                    unit.jobs.add(m["id"])
            elif (run := _torchrun_run(part, rest[i + 1 : i + 2])) is not None:
                unit.runs.add(run)
        if m := _ATTEMPT_NAME.search(name):
            unit.attempt_named = True
            unit.attempt = int(m["n"]) if m["n"] else None
    first = sources[0]
    tokens = re.split(r"(!/|/)", first)
    shown = "".join(tokens[: 2 * len(prefix) - 1]) if prefix else ""
    return shown, units, unit_of, prefix


def _own_rank() -> pl.Expr:
    """A line a process printed itself under its global rank (not a local rank, a file name's, or a launcher's
    failure summary naming it)."""
    return pl.col("rank").is_not_null() & pl.col("rank_local").eq(False)


MIN_UNDATED_COPIES = 3  # undated lines two units share before they are taken for copies (every run prints alike)


def _copied_lines(lines: pl.DataFrame, units: dict[str, Unit], unit_of: dict[str, str]) -> None:
    """Ranks whose lines two units both hold (at least half of the fewer): one process's output written twice -
    torchrun's console (`--tee`) and its per-rank `attempt_0/N/stdout.log`, a log copied to two folders. Stamped
    lines are compared with their stamps; undated ones need MIN_UNDATED_COPIES in common as well (every run of a
    script prints the same words)."""
    own = (
        lines.filter(_own_rank())
        .select(pl.col("source").replace_strict(unit_of, default=None).alias("unit"), "rank", "ts", "message")
        .filter(pl.col("unit").is_not_null())
        .unique()
    )
    if own.is_empty():
        return
    counts = {
        (u, r): (n, dated)
        for u, r, n, dated in own.group_by("unit", "rank").agg(pl.len(), pl.col("ts").is_not_null().any()).iter_rows()
    }
    both = (
        own.join(own, on=["rank", "ts", "message"], suffix="_b", nulls_equal=True)
        .filter(pl.col("unit") < pl.col("unit_b"))
        .group_by("unit", "unit_b", "rank")
        .len()
    )
    for a, b, rank, n in both.iter_rows():
        (na, dated_a), (nb, dated_b) = counts[(a, rank)], counts[(b, rank)]
        if 2 * n >= min(na, nb) and (dated_a or dated_b or n >= MIN_UNDATED_COPIES):
            units[a].copied.setdefault(b, set()).add(rank)
            units[b].copied.setdefault(a, set()).add(rank)


def _widen(unit: Unit, start: datetime | None, end: datetime | None) -> None:
    if start is not None:
        unit.start = start if unit.start is None else min(unit.start, start)
    if end is not None:
        unit.end = end if unit.end is None else max(unit.end, end)


def _read_facts(t: Tables, units: dict[str, Unit], unit_of: dict[str, str]) -> None:
    lines = t.lines
    if not lines.is_empty():
        per = lines.group_by("source").agg(
            pl.col("rank").filter(_own_rank()).unique(),
            pl.col("ts").min().alias("start"),
            pl.col("ts").max().alias("end"),
        )
        for source, ranks, start, end in per.iter_rows():
            if (u := units.get(unit_of.get(source, ""))) is not None:
                u.ranks.update(int(r) for r in ranks)
                for r in ranks:
                    u.holders.setdefault(("logs", int(r)), source)
                _widen(u, start, end)
        _copied_lines(lines, units, unit_of)
    ev = t.events
    named = ev.filter(pl.col("kind") == K.job_identity).select("source", "var", "value")
    for source, var, value in named.iter_rows():
        u = units.get(unit_of.get(source, ""))
        if u is None or not value:
            continue
        if var in SLURM_VARS:
            u.jobs.add(str(value).split(".")[0] if var != "PBS_JOBID" else str(value))
        elif var in MASTER_VARS and value not in _LOCAL_HOSTS:
            u.masters.add(str(value))
        elif var in RUN_VARS and str(value).lower() not in _NO_RUN_ID:
            u.runs.add(str(value))
    worlds = ev.filter(pl.col("kind").is_in([K.world_size, K.nccl_comm_init]) & pl.col("nranks").is_not_null())
    for source, n in worlds.group_by("source").agg(pl.col("nranks").max()).iter_rows():
        if (u := units.get(unit_of.get(source, ""))) is not None and n:
            u.worlds.add(int(n))
    errors = ev.filter(pl.col("event") == "elastic.error_file")  # (dated by the file; its rank is only local)
    for source, ts in errors.select("source", "ts").iter_rows():
        if (u := units.get(unit_of.get(source, ""))) is not None:
            _widen(u, ts, ts)
    if t.fr is not None and not t.fr.dumps.is_empty():
        # grouped on the Categorical itself, the few names made text after: a cast of the column first made a string
        # per entry (+200 MB, the command's peak, at 1,024 ranks x 2,000 entries)
        times = (
            t.fr.compact.lazy()
            .group_by("source")
            .agg(pl.col("time_created_ns").min().alias("first"), pl.col("time_created_ns").max().alias("last"))
            .collect()
            .with_columns(pl.col("source").cast(pl.String))
        )
        span = {s: (a, b) for s, a, b in times.iter_rows()}
        dumps = t.fr.dumps.select("source", "rank", "n_entries", "newest_created_ns")
        for source, rank, n, newest in dumps.iter_rows():
            u = units.get(unit_of.get(source, ""))
            if u is None or rank is None:
                continue
            u.dump_ranks.add(int(rank))
            u.holders.setdefault(("dumps", int(rank)), source)
            u.dumps[int(rank)] = (int(n or 0), int(newest or 0))
            first, last = span.get(source, (None, None))
            _widen(u, _from_ns(first), _from_ns(last))


def _code_job_ids(t: Tables, units: dict[str, Unit], shared: list[str]) -> None:
    """Job ids of `env` dumps saved as files of their own (read as scripts: the `code_settings` table's `job_id`
    rows), given to the unit whose folder holds them."""
    code = t.extra.get("code_settings")
    if code is None or code.is_empty():
        return
    for source, value in code.filter(pl.col("setting") == "job_id").select("source", "value").iter_rows():
        parts = _parts(str(source))
        if parts[: len(shared)] == shared and len(parts) > len(shared) + 1 and parts[len(shared)] in units:
            units[parts[len(shared)]].jobs.add(str(value))


def _from_ns(ns: int | None) -> datetime | None:
    if ns is None or not 0 < ns < 7 * 10**18:  # (1970 .. 2191: clamp's dates)
        return None
    return datetime.fromtimestamp(ns / 1e9, tz=UTC).replace(tzinfo=None)  # (naive UTC, as error files)


def _overlap(a: Unit, b: Unit) -> bool | None:
    """Whether the two ran at the same time (None: one of them is not dated)."""
    if a.start is None or a.end is None or b.start is None or b.end is None:
        return None
    return max(a.start, b.start) <= min(a.end, b.end)


def _copies(a: Unit, b: Unit, ranks: set[int]) -> bool:
    """The shared ranks are the same flight-recorder dumps (one job's dumps in two formats)."""
    return all(r in a.dumps and a.dumps.get(r) == b.dumps.get(r) for r in ranks)


def _same_rank(a: Unit, b: Unit) -> tuple[int, str] | None:
    """A global rank both hold in the same kind of evidence (two logs, or two dumps that are not copies): a job's
    logs and its dumps share their ranks, of course. (rank, what holds it)."""
    logs = (a.ranks & b.ranks) - a.copied.get(b.name, set())
    if logs:
        return min(logs), "logs"
    dumps = a.dump_ranks & b.dump_ranks
    if dumps and not _copies(a, b, dumps):
        return min(dumps), "dumps"
    return None


def _conflict(a: Unit, b: Unit) -> str | None:
    """Why a and b are two jobs (None: nothing says so)."""
    if a.jobs and b.jobs and not a.jobs & b.jobs:
        return f"{a.name} is job {_one(a.jobs)} and {b.name} is job {_one(b.jobs)}"
    if a.runs and b.runs and not a.runs & b.runs and not _relaunches(a, b):
        return f"{a.name} is torchrun run {_one(a.runs)} and {b.name} is run {_one(b.runs)}"
    if a.jobs & b.jobs or a.runs & b.runs:
        return None  # one job: its nodes, restarts, requeues
    together = _overlap(a, b)
    for x, y in ((a, b), (b, a)):  # y's ranks fit its own world, not x's: two worlds
        held = y.ranks | y.dump_ranks
        if x.worlds and y.worlds and held and together is not False and max(x.worlds) <= max(held) < max(y.worlds):
            return (
                f"{x.name} states a world of {max(x.worlds)} ranks and {y.name} holds rank {max(held)} of its world "
                f"of {max(y.worlds)}"
            )
    if a.masters and b.masters and not a.masters & b.masters and together is not False:
        return f"{a.name} rendezvoused at {_one(a.masters)} and {b.name} at {_one(b.masters)}"
    shared = _same_rank(a, b)
    attempts = a.attempt_named and b.attempt_named and together is not True  # (attempts run one after another)
    if shared and not attempts and _rank_twice_is_strong(a, b, shared[1], together):
        rank, what = shared
        when = {True: "at the same time", None: "and nothing dates them apart", False: "with other entries"}[together]
        held = f"rank {rank}'s dump" if what == "dumps" else f"rank {rank}"
        return (
            f"{held} is in {a.holders[(what, rank)]} and in {b.holders[(what, rank)]} {when}, and one job has one "
            f"rank {rank}"
        )
    return None


def _relaunches(a: Unit, b: Unit) -> bool:
    """Two parts named as attempts whose torchrun run ids are the uuids `--standalone` draws at each launch: each
    restart by hand (or by a script) is a new launch, so a new uuid - the names say which, not the ids. An id given
    with `--rdzv-id` names the run, and two of them are two runs."""
    attempts = a.attempt_named and b.attempt_named and _overlap(a, b) is not True  # (attempts run one after another)
    return attempts and all(_UUID.match(r) for r in a.runs | b.runs)


def _rank_twice_is_strong(a: Unit, b: Unit, what: str, together: bool | None) -> bool:
    """Whether one global rank held by two parts makes them two jobs: two different dumps of it (a rank writes
    one dump per run), two logs at the same time, or two undated folders not named like parts of one job. Undated,
    a loose file (a job folder's `console.log` and a rank's own `rank1.log`) or a part (`torchrun_logs/`, `logs/`)
    is weak evidence, and so are logs at disjoint times."""
    if what == "dumps" or together is True:
        return True
    return together is None and not any(u.is_file or PART_NAME.match(u.name) for u in (a, b))


def _weak(a: Unit, b: Unit) -> str | None:
    """A sign that a and b may be two runs, too weak to split them (they are read as one job)."""
    if a.jobs & b.jobs or a.runs & b.runs:
        return None
    shared = _same_rank(a, b)
    if shared and not (a.attempt_named or b.attempt_named):
        if _overlap(a, b) is None:
            return f"rank {shared[0]} is in {a.name} and in {b.name}, undated: one process's output twice, or two runs?"
        return (
            f"rank {shared[0]} is in {a.name} ({a.span()}) and again in {b.name} ({b.span()}): a restart of one "
            "job, or two runs?"
        )
    if a.worlds and b.worlds and max(a.worlds) != max(b.worlds):
        return f"{a.name} states a world of {max(a.worlds)} ranks and {b.name} of {max(b.worlds)}"
    if a.masters and b.masters and not a.masters & b.masters:
        return f"{a.name} rendezvoused at {_one(a.masters)} and {b.name} ({b.span()}) at {_one(b.masters)}"
    return None


def _one(values: set[str]) -> str:
    return sorted(values)[0]


def _pairs(units: list[Unit]) -> list[tuple[Unit, Unit]]:
    """The pairs of units that can conflict or disagree at all, in name order: those holding a rank in common, and
    those whose ids, master addresses or stated worlds differ. A job of 512 per-rank files (512 parts, one rank
    each, one master, one world) has none: its parts are not compared two by two (130,000 pairs)."""
    found: set[tuple[int, int]] = set()
    index = {id(u): i for i, u in enumerate(units)}
    holders: dict[tuple[str, int], list[Unit]] = {}
    for u in units:
        for r in u.ranks:
            holders.setdefault(("logs", r), []).append(u)
        for r in u.dump_ranks:
            holders.setdefault(("dumps", r), []).append(u)
    for group in holders.values():
        found.update((index[id(a)], index[id(b)]) for a, b in combinations(group, 2))
    for values in (
        lambda u: u.jobs,
        lambda u: u.runs,
        lambda u: u.masters,
        lambda u: {max(u.worlds)} if u.worlds else set(),
    ):
        kinds: dict[frozenset, list[Unit]] = {}
        for u in units:
            if v := values(u):
                kinds.setdefault(frozenset(v), []).append(u)
        groups = list(kinds.values())
        for g1, g2 in combinations(groups, 2):
            found.update((min(index[id(a)], index[id(b)]), max(index[id(a)], index[id(b)])) for a in g1 for b in g2)
    return [(units[i], units[j]) for i, j in sorted(found)]


def _named(u: Unit) -> bool:
    """Whether a unit says who it is: ids, ranks, a master address."""
    return bool(u.jobs or u.runs or u.ranks or u.dump_ranks or u.masters)


def _several(units: list[Unit], conflicts: list[tuple[Unit, Unit, str]]) -> list[list[Unit]]:
    """The jobs, once two units are known to be two: every unit in a conflict and every other unit that says who it
    is and is not named like a part of one job (`logs/`, `node3/`, `attempt_1/`...), those sharing a job or run id
    together."""
    fighting = {u.name for a, b, _ in conflicts for u in (a, b)}
    jobs: list[list[Unit]] = []
    for u in units:
        if u.name not in fighting and (PART_NAME.match(u.name) or not _named(u)):
            continue
        same = [j for j in jobs if any(u.jobs & v.jobs or u.runs & v.runs for v in j)]
        jobs = [j for j in jobs if j not in same] + [[v for j in same for v in j] + [u]]
    return sorted(jobs, key=lambda j: j[0].name)


def _first_errors(events: pl.DataFrame, key: str) -> dict[object, tuple[str, str]]:
    """The first own error (not a victim's line) of each value of `key`: its text and source:line."""
    errors = events.filter((pl.col("severity") == "error") & ~pl.col("victim").fill_null(False)).sort(
        "ts", "source", "line", nulls_last=True
    )
    first: dict[object, tuple[str, str]] = {}
    for value, source, line, text in errors.select(key, "source", "line", "text").iter_rows():
        if value is not None and value not in first:
            first[value] = (str(text).strip()[:200], f"{source}:{line}")
    return first


def _span(stamps: pl.Series) -> str:
    unit = Unit("")
    _widen(unit, stamps.min(), stamps.max())  # type: ignore[arg-type]
    return unit.span()


def _attempts(
    t: Tables, units: list[Unit], unit_of: dict[str, str]
) -> tuple[tuple[Attempt, ...], tuple[tuple[str, int], ...]]:
    """How each attempt of one job failed, in order: its units when they ran one after the other (named as
    attempts, or the same ranks at disjoint times; with each of their sources' attempt number), else torchrun's
    attempts (`attempts.py`: `attempt_N/` folders, restart lines) - the readings triage's restart storms use."""
    sequential = len(units) >= 2 and (
        any(u.attempt_named for u in units)
        or any(a.ranks & b.ranks and _overlap(a, b) is False for a, b in _pairs(units))
    )
    if sequential:
        ordered = sorted(units, key=lambda u: (u.start is None, u.start or datetime.min, u.attempt or 0, u.name))
        events = t.events.with_columns(pl.col("source").replace_strict(unit_of, default=None).alias("_unit"))
        first = _first_errors(events, "_unit")
        number = {u.name: n for n, u in enumerate(ordered, 1)}
        by_source = tuple(sorted((source, number[unit]) for source, unit in unit_of.items() if unit in number))
        return tuple(Attempt(u.name, u.span(), *first.get(u.name, (None, None))) for u in ordered), by_source
    restarts = restart_times(t)
    if not has_attempts(t.events, restarts):
        return (), ()
    tagged = t.events.with_columns(attempt_column(restarts).alias("_attempt")).filter(pl.col("_attempt").is_not_null())
    numbers = sorted(set(tagged["_attempt"].to_list()))
    if len(numbers) < 2:
        return (), ()
    first = _first_errors(tagged, "_attempt")
    return tuple(
        Attempt(
            f"attempt {n}",
            _span(tagged.filter(pl.col("_attempt") == n)["ts"].drop_nulls()),
            *first.get(n, (None, None)),
        )
        for n in numbers
    ), ()


def job_identity(t: Tables) -> Identity:
    """One job, or the jobs the input holds (see the module docstring)."""
    sources = list(t.sources)
    if len(sources) < 2:
        return Identity("", (tuple(sources),))
    prefix, units, unit_of, shared = _units(sources)
    if len(units) < 2:
        return Identity(prefix, (tuple(units),))
    _read_facts(t, units, unit_of)
    _stamps_or_ids(units)
    _code_job_ids(t, units, shared)
    ordered = [units[n] for n in sorted(units)]
    pairs = _pairs(ordered)
    conflicts = [(a, b, why) for a, b in pairs if (why := _conflict(a, b))]
    if conflicts:
        jobs = _several(ordered, conflicts)
        if len(jobs) > 1:
            kept = {u.name for j in jobs for u in j}
            return Identity(
                prefix,
                tuple(tuple(u.name for u in j) for j in jobs),
                conflicts[0][2],
                loose=tuple(sorted(s for u in ordered if u.name not in kept for s in u.sources)),
            )
    weak = tuple(dict.fromkeys(w for a, b in pairs if (w := _weak(a, b))))
    attempts, by_source = _attempts(t, ordered, unit_of)
    return Identity(prefix, (tuple(sorted(units)),), weak=weak, attempts=attempts, attempt_of_source=by_source)


def describe(found: Identity, root: str | None = None, limit: int = 4) -> str:
    """One line: how many jobs, which, and the evidence (`root`: what the source names are relative to)."""
    names = [" + ".join(j) if len(j) <= 2 else f"{j[0]} + {len(j) - 1} more" for j in found.jobs]
    shown = names if len(names) <= limit + 1 else [*names[:limit], f"... {names[-1]}"]
    where = f"{found.prefix} holds" if found.prefix else f"{root or 'the input'} holds"
    return f"{where} {len(found.jobs)} separate jobs ({', '.join(shown)}), not one: {found.evidence}"


def attempts_caveat(found: Identity) -> str | None:
    """The report's sentence on a job that ran several attempts: which attempt failed how."""
    if not found.attempts:
        return None
    shown = found.attempts if len(found.attempts) <= 6 else (*found.attempts[:3], None, *found.attempts[-2:])
    parts = []
    for a in shown:
        if a is None:
            parts.append(f"... {len(found.attempts) - 5} more")
            continue
        how = f"failed with `{a.failure}` ({a.where})" if a.failure else "shows no error of its own"
        parts.append(f"{a.name} ({a.span}) {how}")
    return f"This job ran {len(found.attempts)} attempts, read together: " + "; ".join(parts) + "."
