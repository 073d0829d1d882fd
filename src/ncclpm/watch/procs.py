"""The job's processes: found from `--pid` or from JOBDIR, sorted into ranks (with their DataLoader workers), and
sampled for CPU use.

Without `--pid`, a job's process is one whose working directory is JOBDIR (or inside it) or that holds a file
under JOBDIR open (a log torchrun redirected there); `--pid` names the launcher or any rank, and the tree under
it is watched (for a rank: its launcher's, when its siblings are ranks too). Never the watcher itself, its
ancestors (the shell or sbatch script that started it) or another `ncclpm watch`.

Which processes are ranks: those whose environment sets RANK (torchrun, accelerate, DeepSpeed, Lightning set it
per rank), else OMPI_COMM_WORLD_RANK / PMI_RANK / PMIX_RANK / SLURM_PROCID (mpirun, srun), else the Python
children of a Python launcher (torch.multiprocessing.spawn), else the Python processes themselves. A process
below a rank with the same rank value (a DataLoader worker inherits the environment) belongs to that rank.
Everything is read from /proc through psutil; a process that vanishes or cannot be read is skipped.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

RANK_VARS = ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID")  # most trusted first
LOCAL_VARS = ("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID")
IDLE_CPU = 0.05  # below this share of one core over the sampling window, a process uses no CPU
_HELPERS = ("multiprocessing.resource_tracker", "multiprocessing.forkserver", "compile_worker")
# launchers: never a rank themselves, even before their workers exist (a module run with -m, or a script's name)
LAUNCHERS = frozenset(
    {
        "torchrun",
        "torch.distributed.run",
        "torch.distributed.launch",
        "accelerate",
        "deepspeed",
        "mpirun",
        "mpiexec",
        "srun",
        "horovodrun",
        "composer",
        "lightning",
    }
)


@dataclass
class Proc:
    pid: int
    ppid: int
    name: str
    cmdline: tuple[str, ...]
    env: dict[str, str]
    create_time: float

    @property
    def python(self) -> bool:
        first = Path(self.cmdline[0]).name if self.cmdline else ""
        return any(w in n.lower() for n in (self.name, first) for w in ("python", "pypy"))

    @property
    def launcher(self) -> bool:
        return any(Path(a).name in LAUNCHERS for a in self.cmdline[:4])

    def rank_var(self, names: Iterable[str]) -> tuple[str, int] | None:
        for var in names:
            value = self.env.get(var, "")
            if value.strip().isdigit():
                return var, int(value)
        return None


@dataclass
class Rank:
    """One rank process of the job on this host."""

    pid: int
    rank: int | None  # None when nothing says which rank it is (its dump is then named by pid)
    rank_from: str  # how the rank was found: "RANK", "SLURM_PROCID", "launcher's child", "python process"
    local_rank: int | None
    cmdline: tuple[str, ...]
    create_time: float
    workers: list[int] = field(default_factory=list)

    @property
    def label(self) -> str:
        """The stem of its files: `rank3` (which the stack reader maps to rank 3), else `pid12345`."""
        return f"rank{self.rank}" if self.rank is not None else f"pid{self.pid}"

    def describe(self) -> str:
        who = f"rank {self.rank}" if self.rank is not None else "a rank (number unknown)"
        return f"{who}, pid {self.pid}"


def _read(ps: ModuleType, pid: int) -> Proc | None:
    try:
        p = ps.Process(pid)
        with p.oneshot():
            info = (p.ppid(), p.name(), tuple(p.cmdline()), p.create_time())
        try:
            env = p.environ()
        except (ps.AccessDenied, OSError):
            env = {}
    except (ps.NoSuchProcess, ps.AccessDenied, ps.ZombieProcess, OSError):
        return None
    return Proc(pid, info[0], info[1], info[2], env, info[3])


def _own_family(ps: ModuleType) -> set[int]:
    """This process and its ancestors (the shell or batch script that started it)."""
    mine = {os.getpid()}
    with contextlib.suppress(ps.NoSuchProcess, ps.AccessDenied, OSError):
        mine |= {p.pid for p in ps.Process().parents()}
    return mine


def _is_watcher(proc: Proc) -> bool:
    """A `ncclpm watch` (this one's peers on the node) or one of its helpers (py-spy, the debug-server asker)."""
    args = [Path(a).name for a in proc.cmdline[:4]]
    watch = ("ncclpm" in args or "ncclpm.cli" in proc.cmdline) and "watch" in proc.cmdline
    return watch or "ncclpm.watch.debug_server" in proc.cmdline or "py-spy" in (proc.name, *args[:1])


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _uses_dir(ps: ModuleType, pid: int, root: str) -> bool:
    """Its working directory is under `root`, or it holds a file there open."""
    try:
        p = ps.Process(pid)
        if _inside(p.cwd(), root):
            return True
        return any(_inside(f.path, root) for f in p.open_files())
    except (ps.NoSuchProcess, ps.AccessDenied, ps.ZombieProcess, OSError):
        return False


class JobProcesses:
    """The job's processes on this host, refreshed as the job runs (torchrun restarts workers with new pids)."""

    def __init__(self, ps: ModuleType, jobdir: Path, pids: tuple[int, ...] = ()) -> None:
        self.ps = ps
        self.jobdir = str(jobdir.resolve())
        self.pids = pids
        self.procs: dict[int, Proc] = {}
        self.ranks: list[Rank] = []
        self.roots: list[int] = []
        self.seen_any = False
        self._cpu: dict[int, list[tuple[float, float]]] = {}  # pid -> (time, cpu seconds) samples
        self._handles: dict[int, Any] = {}

    # -- discovery ------------------------------------------------------------------------------------------
    def _find_roots(self) -> list[int]:
        mine = _own_family(self.ps)
        if self.pids:
            return [p for p in self.pids if p not in mine and self.ps.pid_exists(p)]
        roots = []
        for pid in self.ps.pids():
            if pid in mine or pid <= 1:
                continue
            if _uses_dir(self.ps, pid, self.jobdir):
                proc = _read(self.ps, pid)
                if proc is not None and not _is_watcher(proc):
                    roots.append(pid)
        return roots

    def _tree(self, roots: list[int]) -> dict[int, Proc]:
        found: dict[int, Proc] = {}
        for pid in roots:
            proc = _read(self.ps, pid)
            if proc is None:
                continue
            found[pid] = proc
            try:
                kids = self.ps.Process(pid).children(recursive=True)
            except (self.ps.NoSuchProcess, self.ps.AccessDenied, OSError):
                kids = []
            for kid in kids:
                if kid.pid not in found and (k := _read(self.ps, kid.pid)) is not None and not _is_watcher(k):
                    found[kid.pid] = k
        return found

    def _widen_to_launcher(self, roots: list[int]) -> list[int]:
        """`--pid` of a rank: watch its launcher's tree when the launcher's other children are ranks too."""
        out = list(roots)
        for pid in roots:
            proc = _read(self.ps, pid)
            if proc is None or proc.rank_var(RANK_VARS) is None:
                continue
            try:
                siblings = self.ps.Process(proc.ppid).children()
            except (self.ps.NoSuchProcess, self.ps.AccessDenied, OSError):
                continue
            ranked = [s for s in siblings if (sp := _read(self.ps, s.pid)) and sp.rank_var(RANK_VARS)]
            if len(ranked) > 1 and proc.ppid not in out:
                out.append(proc.ppid)
        return out

    def refresh(self) -> None:
        """Find the job's processes again (new workers after a restart, a job that just started)."""
        roots = self._find_roots()
        if self.pids:
            roots = self._widen_to_launcher(roots)
        self.roots = roots
        self.procs = self._tree(roots)
        self.ranks = classify(self.procs)
        if self.ranks:
            self.seen_any = True

    def drop_dead(self) -> None:
        """Forget the ranks that exited (cheap, every poll): the job ends when none is left."""
        self.ranks = [r for r in self.ranks if self.alive(r)]

    def alive(self, r: Rank) -> bool:
        try:
            p = self.ps.Process(r.pid)
            return p.create_time() == r.create_time and p.status() != self.ps.STATUS_ZOMBIE
        except (self.ps.NoSuchProcess, self.ps.AccessDenied, OSError):
            return False

    def environ(self, pid: int) -> dict[str, str]:
        proc = _read(self.ps, pid)
        return proc.env if proc is not None else {}

    # -- CPU ------------------------------------------------------------------------------------------------
    def sample_cpu(self, now: float, keep_s: float = 30.0) -> None:
        for r in self.ranks:
            try:
                handle = self._handles.get(r.pid)
                if handle is None or handle.create_time() != r.create_time:
                    handle = self._handles[r.pid] = self.ps.Process(r.pid)
                t = handle.cpu_times()
            except (self.ps.NoSuchProcess, self.ps.AccessDenied, OSError):
                continue
            samples = self._cpu.setdefault(r.pid, [])
            samples.append((now, t.user + t.system))
            while len(samples) > 2 and samples[1][0] <= now - keep_s:
                samples.pop(0)
        for pid in set(self._cpu) - {r.pid for r in self.ranks}:
            self._cpu.pop(pid, None)
            self._handles.pop(pid, None)

    def cpu_share(self, pid: int, window_s: float) -> float | None:
        """Share of one core the process used over about the last `window_s` seconds (None: not sampled yet)."""
        samples = self._cpu.get(pid, [])
        if len(samples) < 2:
            return None
        now, cpu = samples[-1]
        start = next((s for s in samples if s[0] >= now - window_s), samples[0])
        if start is samples[-1]:
            start = samples[-2]
        span = now - start[0]
        return (cpu - start[1]) / span if span > 0 else None

    def _runnable(self, pid: int) -> bool:
        """Running or waiting for a CPU: a process starved by a busy host uses little CPU but is not idle."""
        try:
            return self.ps.Process(pid).status() == self.ps.STATUS_RUNNING
        except (self.ps.NoSuchProcess, self.ps.AccessDenied, OSError):
            return False

    def idle_ranks(self, window_s: float) -> list[Rank]:
        """The ranks that use no CPU: below IDLE_CPU of a core over the window, and asleep now."""
        shares = {r.pid: self.cpu_share(r.pid, window_s) for r in self.ranks}
        return [
            r for r in self.ranks if (s := shares[r.pid]) is not None and s < IDLE_CPU and not self._runnable(r.pid)
        ]

    def snapshot(self, window_s: float) -> list[dict[str, Any]]:
        """The ranks as the manifest records them."""
        out = []
        for r in self.ranks:
            share = self.cpu_share(r.pid, window_s)
            out.append(
                {
                    "rank": r.rank,
                    "rank_from": r.rank_from,
                    "local_rank": r.local_rank,
                    "pid": r.pid,
                    "workers": r.workers,
                    "alive": self.alive(r),
                    "cpu_share": None if share is None else round(share, 3),
                    "cmdline": " ".join(r.cmdline)[:300],
                }
            )
        return out


def _ancestors(pid: int, procs: dict[int, Proc]) -> Iterable[Proc]:
    seen = {pid}
    cur = procs.get(pid)
    while cur is not None and cur.ppid in procs and cur.ppid not in seen:
        seen.add(cur.ppid)
        cur = procs[cur.ppid]
        yield cur


def _by_variable(procs: dict[int, Proc]) -> list[Rank]:
    """Ranks told by an environment variable: the topmost Python process of each rank value."""
    for var in RANK_VARS:
        marked = {pid: p for pid, p in procs.items() if p.python and not p.launcher and p.rank_var((var,)) is not None}
        if not marked:
            continue
        # a process whose descendants carry other values launched them (`export RANK=$SLURM_PROCID; torchrun`)
        launchers = {
            a.pid
            for pid, p in marked.items()
            for a in _ancestors(pid, procs)
            if a.pid in marked and a.rank_var((var,)) != p.rank_var((var,))
        }
        ranks = []
        for pid, p in sorted(marked.items()):
            value = p.rank_var((var,))
            if pid in launchers or any(
                a.pid in marked and a.pid not in launchers and a.rank_var((var,)) == value
                for a in _ancestors(pid, procs)
            ):
                continue  # a launcher, or a worker of a rank (DataLoader), dumped with it
            local = p.rank_var(LOCAL_VARS)
            ranks.append(
                Rank(pid, value[1] if value else None, var, local[1] if local else None, p.cmdline, p.create_time)
            )
        return ranks
    return []


def _by_tree(procs: dict[int, Proc]) -> list[Rank]:
    """No rank variable: the Python children of a Python launcher (mp.spawn), else the top Python processes."""
    python = {pid: p for pid, p in procs.items() if p.python and not any(h in " ".join(p.cmdline) for h in _HELPERS)}
    tops = [p for pid, p in python.items() if not any(a.pid in python for a in _ancestors(pid, procs))]
    ranks = []
    for top in sorted(tops, key=lambda p: p.pid):
        kids = [p for p in python.values() if p.ppid == top.pid]
        if kids:
            ranks += [Rank(k.pid, None, "launcher's child", None, k.cmdline, k.create_time) for k in kids]
        elif not top.launcher:  # a launcher whose workers do not exist yet is not a rank
            ranks.append(Rank(top.pid, None, "python process", None, top.cmdline, top.create_time))
    return ranks


def classify(procs: dict[int, Proc]) -> list[Rank]:
    ranks = _by_variable(procs) or _by_tree(procs)
    for r in ranks:
        r.workers = sorted(pid for pid in procs if any(a.pid == r.pid for a in _ancestors(pid, procs)))
    return sorted(ranks, key=lambda r: (r.rank is None, r.rank if r.rank is not None else 0, r.pid))
