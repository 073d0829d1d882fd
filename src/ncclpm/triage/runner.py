"""Run `triage_job` over many jobs: on the local cores (a process pool) or on a Ray cluster.

Both call `on_done(row)` as each job finishes (the CLI's progress bar) and return the rows in job order.
A worker process that dies (killed, out of memory) breaks a process pool. Workers report each job they start,
so the jobs running at that moment are known: they are re-run one by one in a process of their own (only the
job that kills its worker again gets an error row), and the jobs not started yet go on in a fresh pool.
Polars gets `POLARS_MAX_THREADS = cores // workers` threads per worker unless the variable is already set
(the pool's processes are spawned, never forked: polars must not be forked; Python spawns them as jobs are
submitted, so the variable is set only around the submissions). Jobs always run in worker processes, also with
one worker: a job that aborts its process (a Rust panic, the OOM killer) costs that job's row, never the run.

Ctrl-C: workers ignore SIGINT (the terminal sends it to every process of the group); the parent cancels the
jobs not started, kills the workers and raises `Interrupted` with the rows finished so far.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager, suppress
from typing import Any

from ncclpm.tables.schema import Category
from ncclpm.triage.jobs import JobRef
from ncclpm.triage.signature import signature
from ncclpm.triage.worker import empty_row, triage_job

Row = dict[str, Any]
OnDone = Callable[[Row], None]
MAX_ROUNDS = 8
TICK = 0.25  # s: the main thread wakes up this often, so a Ctrl-C that landed on a polars thread is seen


class Interrupted(Exception):
    """Ctrl-C during a run: `rows` are the jobs finished before it, in job order."""

    def __init__(self, rows: list[Row]) -> None:
        super().__init__(f"interrupted after {len(rows)} jobs")
        self.rows = rows


def _error_row(job: JobRef, message: str) -> Row:
    return empty_row(job.name) | {"category": str(Category.UNKNOWN), "error": message, "signature": signature(message)}


@contextmanager
def _env(name: str, value: str) -> Iterator[None]:
    """Set an environment variable for the processes spawned inside the block (unless the user set it)."""
    if name in os.environ:
        yield
        return
    os.environ[name] = value
    try:
        yield
    finally:
        os.environ.pop(name, None)


_started: Any = None  # in a pool worker: the queue it reports each job it starts to


def _init_worker(started: Any) -> None:
    global _started
    _started = started
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle: it kills the workers


def _triage_reporting(path: str, name: str, options: dict[str, Any]) -> Row:
    """`triage_job` in a pool worker, first telling the parent which job it starts (SimpleQueue.put writes
    straight to the pipe, so the report survives the worker being killed right after)."""
    if _started is not None:
        _started.put(path)
    return triage_job(path, name, **options)


@contextmanager
def _pool(workers: int, started: Any = None) -> Iterator[ProcessPoolExecutor]:
    """A spawned pool; on the way out because of an exception (Ctrl-C), pending jobs are cancelled and the
    workers killed instead of waiting for the queue to drain."""
    pool = ProcessPoolExecutor(
        max_workers=workers,
        mp_context=multiprocessing.get_context("spawn"),
        initializer=_init_worker,
        initargs=(started,),
    )
    try:
        yield pool
    except BaseException:
        processes = list((getattr(pool, "_processes", None) or {}).values())
        pool.shutdown(wait=False, cancel_futures=True)
        for p in processes:
            with suppress(OSError, ValueError):
                p.kill()
        raise
    pool.shutdown(wait=True)


def _alone(job: JobRef, options: dict[str, Any]) -> Row:
    """Re-run one job in its own process after a pool broke: its result, or why its worker died."""
    try:
        with _pool(1) as pool:
            fut = pool.submit(triage_job, job.path, job.name, **options)
            while not wait([fut], timeout=TICK).done:  # wake up now and then: see TICK
                pass
            return fut.result()
    except BrokenProcessPool:
        return _error_row(job, "the worker process died while reading this job (killed? out of memory?)")


def _round(
    jobs: Sequence[JobRef], workers: int, finish: Callable[[JobRef, Row], None], options: dict[str, Any]
) -> set[str]:
    """Run `jobs` on a fresh pool until all are done or the pool breaks. Returns the paths of the jobs that had
    started but not finished when it broke (the one that killed its worker is among them)."""
    started = multiprocessing.get_context("spawn").SimpleQueue()
    finished: set[str] = set()
    with _pool(workers, started) as pool:
        with _env("POLARS_MAX_THREADS", str(max(1, (os.cpu_count() or 1) // workers))):  # spawned on submit
            futures: dict[Future[Row], JobRef] = {
                pool.submit(_triage_reporting, j.path, j.name, options): j for j in jobs
            }
        pending = set(futures)
        while pending:
            done, pending = wait(pending, timeout=TICK, return_when=FIRST_COMPLETED)
            for fut in done:
                try:
                    row = fut.result()
                except BrokenProcessPool:
                    continue  # a worker died: every unfinished job of this pool fails like this
                finish(futures[fut], row)
                finished.add(futures[fut].path)
    suspects = set()
    while not started.empty():
        suspects.add(started.get())
    started.close()
    return suspects - finished


def run_local(
    jobs: Sequence[JobRef],
    workers: int | None = None,
    on_done: OnDone | None = None,
    options: dict[str, Any] | None = None,
) -> list[Row]:
    """Triage `jobs` on `workers` processes (default: every core), always in worker processes. `options`:
    keyword arguments of `triage_job` (select, ignore, patterns, reports).

    When a worker dies, the jobs that were running in the pool are re-run one by one in their own process (the
    one that kills it again gets an error row) and the jobs not started yet go to a fresh pool. Ctrl-C raises
    `Interrupted` with the rows finished so far.
    """
    workers = max(1, min(workers or os.cpu_count() or 1, len(jobs) or 1))
    options = options or {}
    done: dict[str, Row] = {}

    def finish(job: JobRef, row: Row) -> None:
        done[job.path] = row
        if on_done is not None:
            on_done(row)

    todo = list(jobs)
    try:
        for _ in range(MAX_ROUNDS):
            if not todo:
                break
            suspects = _round(todo, workers, finish, options)
            for job in todo:
                if job.path in suspects:
                    finish(job, _alone(job, options))
            todo = [j for j in todo if j.path not in done]
        for job in todo:  # pools kept breaking without a suspect: isolate everything left
            finish(job, _alone(job, options))
    except KeyboardInterrupt:
        raise Interrupted([done[j.path] for j in jobs if j.path in done]) from None
    return [done[j.path] for j in jobs]


def run_ray(
    jobs: Sequence[JobRef],
    address: str | None = "auto",
    on_done: OnDone | None = None,
    options: dict[str, Any] | None = None,
) -> list[Row]:
    """Triage `jobs` as Ray tasks: `address` "auto" (a running cluster), "local" (start one here), "ray://..."
    or host:port; a Ray already initialised by the caller is used as is. Workers read the jobs by path, so the
    paths must be reachable from every node (shared storage) and ncclpm installed there."""
    import ray

    started = not ray.is_initialized()
    if started:
        local = {"include_dashboard": False} if address in (None, "local") else {}
        ray.init(address=address, ignore_reinit_error=True, log_to_driver=False, **local)
    try:
        task = ray.remote(num_cpus=1, max_retries=1)(triage_job)
        pending = {task.remote(j.path, j.name, **(options or {})): j for j in jobs}
        done: dict[str, Row] = {}
        waiting = list(pending)
        try:
            _collect_ray(ray, pending, waiting, done, on_done)
        except KeyboardInterrupt:
            for ref in waiting:
                with suppress(Exception):
                    ray.cancel(ref, force=True)
            raise Interrupted([done[j.path] for j in jobs if j.path in done]) from None
        return [done[j.path] for j in jobs]
    finally:
        if started:
            ray.shutdown()


def _collect_ray(ray: Any, pending: dict, waiting: list, done: dict[str, Row], on_done: OnDone | None) -> None:
    """Wait for the Ray tasks one by one; `waiting` shrinks in place (what is left to cancel on Ctrl-C)."""
    while waiting:
        ready, rest = ray.wait(waiting, num_returns=1)
        waiting[:] = rest
        for ref in ready:
            job = pending[ref]
            try:
                row = ray.get(ref)
            except Exception as exc:  # a lost task or dead worker is that job's error row
                row = _error_row(job, f"ray task failed: {type(exc).__name__}: {exc}"[:400])
            done[job.path] = row
            if on_done is not None:
                on_done(row)
