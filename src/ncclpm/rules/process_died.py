"""CR02 process-died-rank-unknown."""

from __future__ import annotations

from typing import ClassVar

import polars as pl

from ncclpm.analysis.crashes import EXPLAINED_KINDS, OWN_ERROR, fatal_exit
from ncclpm.analysis.victims import VICTIM_KINDS, same_line
from ncclpm.model import said
from ncclpm.rules._exits import BUS_ERROR, TEARDOWN, done_before_teardown, oom_killer_said
from ncclpm.rules.base import Finding, Fix, Rule, quotes, ranks_text
from ncclpm.tables import Tables
from ncclpm.tables.kinds import K
from ncclpm.tables.schema import Category
from ncclpm.util.signals import NATIVE_CRASHES, exit_signal


class ProcessDiedRankUnknown(Rule):
    """A process died of its own error, in an excerpt that names no rank: the lead is that process.

    ## What it detects
    One process's output - a pasted traceback, a console without `[rankN]:` prefixes - ending in an error of its
    own (an exception that is not a symptom of another rank, a CUDA failure, a fatal signal, the shell's `Killed`
    or `Bus error (core dumped)`, a launcher or srun reporting a fatal exit code: `task 5: Segmentation fault`),
    with no line of any rank waiting on another and no error of a named rank (a rank named only by a harmless
    line does not say which one died); or a host's kernel log saying it ended a process (the OOM killer) or that
    a process's GPU work faulted (application Xids 13/31/43). torch.multiprocessing.spawn's `-- Process N
    terminated with the following error:` above the traceback names the process (its local rank). When the job
    logged the end of its work first (`training done`, the final checkpoint), the report says so first: a crash at
    teardown, with the last step reached. When ranks did wait, such a death dated before the first of them gave
    up is who they waited for (DeepSpeed's launcher on one node reporting `exits with return code = -9`, a rank
    of another node timing out ten minutes later); a death after it is the teardown that followed. A death no date
    places (Ray's raylet reporting a worker's SYSTEM_ERROR exit) is placed by its file's order when it names another
    process than the waiting ranks' (its pid or its node): above the first waiting line, it is who they waited for.

    ## Why it matters
    Most pastes in issue threads are exactly this: the one traceback the reporter saw. Its error is what ended
    that process, and in a distributed job the others then wait for it; which rank it was is not in the text.
    Saying so is a lead; "nothing conclusive" would send the reader back to the logs they pasted.

    ## Example
    `Traceback (most recent call last): ... loss.backward()` / `RuntimeError: CUDA error: device-side assert
    triggered`, and nothing else.
    """

    id = "CR02"
    name = "process-died-rank-unknown"
    category = Category.RANK_CRASH
    base_confidence = 0.45
    explains = ("IN01",)
    FIXES: ClassVar[dict[str, Fix]] = {
        "fix_error": Fix(
            "Fix the error the process raised (the quoted line and the traceback above it); with `CUDA error` "
            "messages rerun with `CUDA_LAUNCH_BLOCKING=1` to see the real call site."
        ),
        "killed": Fix(
            "Check the host's kernel log (`dmesg -T | grep -i 'killed process'`): the OOM killer ends the largest "
            "process when host RAM runs out (checkpoint saves, DataLoader workers).",
            when="the process was killed (`Killed`, SIGKILL, exit -9 or 137)",
        ),
        "bus_error": BUS_ERROR,
        "teardown": TEARDOWN,
        "which_rank": Fix(
            "Keep each rank's output apart next time (`torchrun --log-dir DIR --tee 3`, or `--redirects 3`) so "
            "the report can name the rank."
        ),
    }

    def evidence(self, t: Tables) -> pl.DataFrame:
        # The launcher's `closing signal SIGTERM` to the other workers follows a failure: nobody waited there.
        waiting = t.events["victim"] & (t.events["kind"] != K.agent_signal)  # (Series: no query)
        # Ranks waited on someone: a process with no rank that died before the first of them gave up is who they
        # waited for (DeepSpeed's launcher on one node: `exits with return code = -9`; ranks of another node time
        # out ten minutes later); a death after it is the teardown that followed. One the dates cannot place is
        # placed by its file's order only when it is another process's (`_above_the_wait`).
        waited_until = t.events.filter(waiting)["ts"].min() if waiting.any() else None
        own_kinds = [  # srun's `task 5: Segmentation fault` / `Exited with exit code 1` is scheduler_task_exit
            *(K.exception, K.dataloader_reraise, K.crash_signal, K.cuda_error, K.nccl_fatal, K.oom_killer),
            *(K.xid_app, K.scheduler_task_exit, K.worker_lost, K.child_failed_report),
        ]
        ranked = t.kinds(*own_kinds, K.worker_exit)["rank"]
        if ranked.null_count() < ranked.len():
            return pl.DataFrame()  # a named rank's error (CR01 reads it): not one process's end
        ev = t.events.filter(pl.col("rank").is_null())
        # Lines another rule reads (an OOM, a store timeout, the agent's own SignalException) are not this one's.
        # A launcher's exception that reports the exit (accelerate's CalledProcessError) is read as that exit.
        taken = same_line(t.events, [*VICTIM_KINDS, *EXPLAINED_KINDS, K.agent_killed, K.agent_signal, K.worker_exit])
        # A framework's front process that reported a child's failure then ends itself (SGLang kills its own process
        # tree: the shell's `Killed`): the clean-up, not a kill from outside.
        if t.has_kinds(K.child_failed_report):  # (the parts a job lacks are left out: they take nothing away)
            reported = t.kinds(K.child_failed_report).group_by("source").agg(pl.col("line").min().alias("reported"))
            cleanup = (
                ev.filter(pl.col("kind") == K.crash_signal)
                .join(reported, on="source")
                .filter(pl.col("line") > pl.col("reported"))
                .select("source", "line")
            )
            taken = pl.concat([taken, cleanup]).unique()
        # a DistBackendError that states NCCL's result class (`NCCL error in: ..., unhandled system error`) is this
        # process's own NCCL call failing when it is all there is - not where the class blames the network or a
        # peer (NW01 reads those), nor where an NCCL WARN line says what failed (its own reading wins)
        rethrown = ev
        if not t.has_kinds(K.nccl_warn):
            own_nccl = same_line(
                ev.filter((pl.col("kind") == K.nccl_error) & pl.col("net_class").is_null()), [K.nccl_error]
            )
            if not own_nccl.is_empty():
                rethrown = ev.join(own_nccl, on=["source", "line"], how="anti")
        rethrown = rethrown.filter(pl.col("error_type").fill_null("").str.contains("DistBackendError"))
        own = ev.filter(pl.col("kind").is_in(own_kinds))
        if not taken.is_empty():
            own = own.join(taken, on=["source", "line"], how="anti")
        # the watchdog thread re-throwing a collective's failure: a symptom (CR01 reads it the same way); the
        # launcher's ChildFailedError only reports a worker's failure, whose own error is elsewhere
        if not rethrown.is_empty():
            own = own.join(rethrown.select("source", "line"), on=["source", "line"], how="anti")
        own = own.filter(~pl.col("error_type").fill_null("").str.contains("ChildFailedError"))
        ended = fatal_exit().fill_null(False) | (pl.col("exit_code") == OWN_ERROR)  # exit 1: an uncaught error
        exits = ev.filter((pl.col("kind") == K.worker_exit) & ended)
        found = pl.concat([own, exits], how="diagonal_relaxed").sort("source", "line")
        if waiting.any():
            dated = found.filter(pl.col("ts") < waited_until) if waited_until is not None else found.clear()
            undated = found.filter(pl.col("ts").is_null()) if waited_until is not None else found
            placed = _above_the_wait(t, undated, t.events.filter(waiting))
            return pl.concat([dated, placed], how="diagonal_relaxed").sort("source", "line")
        cut = self.facts.cut_tracebacks.filter(~pl.col("launcher") & pl.col("rank").is_null())
        if found.is_empty() and not cut.is_empty():
            # A traceback the paste cuts before its exception line: the process raised, the excerpt hides what.
            # Its innermost frame kept stands for it.
            return t.kinds(K.traceback_frame).join(
                cut.select("source", pl.col("end_line").alias("line")), on=["source", "line"]
            )
        if found.is_empty():
            # A launcher killing its other workers (DeepSpeed's `Killing subprocess N`, torchrun's closing signal)
            # does so only after one of them exited with an error, and nobody here waited on anyone: a worker died.
            return t.kinds(K.agent_signal).head(1)
        return found

    def assess(self, t: Tables, ev: pl.DataFrame) -> Finding | None:
        # The error itself beats the launcher's report of it; the last one is where the process ended.
        own = ev.filter(pl.col("kind") != K.worker_exit)
        last = _own_end(own if not own.is_empty() else ev)
        oom_killed = own.filter(pl.col("kind") == K.oom_killer)
        if not oom_killed.is_empty():  # the processes ended after an OOM kill (srun's `Killed` tasks) are clean-up
            last = oom_killed.tail(1).row(0, named=True)
        if last["kind"] == K.xid_app:  # a fault's first Xid is its cause: 43 and 45 follow a 13 or 31
            last = own.filter(pl.col("kind") == K.xid_app).row(0, named=True)
            last["text"] = last["text"][last["text"].find("NVRM:") :]  # the kernel's prefix says nothing here
        # the shell's `Killed`, a launcher's SIGKILL, exit -9 or 137 (a shell's or container's 128 + 9)
        oom = last["kind"] == K.oom_killer
        signal = last["signal"] or exit_signal(last["exit_code"])
        teardown = last["kind"] == K.agent_signal  # only the launcher ending the others: the death itself unseen
        cut = last["kind"] == K.traceback_frame  # a traceback cut before its exception line
        if teardown:
            signal = None
        # Ray's SYSTEM_ERROR exit: the worker was killed or crashed below Python (its memory monitor or the kernel's
        # OOM killer first, `ray stop --force`, a segfault) - no error of its own
        killed = oom or last["detail"] == "Killed" or signal == "SIGKILL" or last["error_type"] == "SYSTEM_ERROR"
        # What the process was doing when it died: the last progress or activity line above it in its file.
        doing = (
            t.kinds(K.progress, K.activity, K.progress_bar)
            .filter((pl.col("source") == last["source"]) & (pl.col("line") <= last["line"]))
            .tail(1)
        )
        # an activity's own words (`Loading checkpoint shards`), else the progress line as printed
        said_doing = pl.when(pl.col("kind") == K.activity).then(pl.coalesce("detail", "text")).otherwise("text")
        what = doing.select(said_doing).to_series() if not doing.is_empty() else None
        # (a tqdm bar's padding collapsed: `0%| | 12/5000 [01:12<8:21:03, 6.03s/it]`)
        during = f" during `{' '.join(what[0].split())[:100]}`" if what is not None else ""
        quoted = f"`{said(last['text'], t.line_prefix)}`"
        if last["kind"] == K.worker_exit:  # the launcher's line: what it says, not the command line it repeats
            quoted = _exit_said(last, signal)
        exited = ev.filter((pl.col("kind") == K.worker_exit) & pl.col("local_rank").is_not_null())
        if last["kind"] != K.worker_exit and not exited.is_empty():
            quoted += f"; the launcher: {_exit_said(exited.row(0, named=True), None)}"
        how = (
            f"died{during}: the launcher then ended the others ({quoted}), which it does only after a worker exits "
            "with an error"
            if teardown
            else f"raised an exception{during} whose line the excerpt cuts off; its traceback's last frame kept: "
            f"{quoted}"
            if cut
            else f"was killed by {oom_killer_said(last['killer'])}{during} ({quoted}: host memory, not GPU memory)"
            if oom
            else f"died with no error of its own{during} ({quoted}): Ray's SYSTEM_ERROR exit - killed from outside "
            "(host memory first) or crashed below Python"
            if last["error_type"] == "SYSTEM_ERROR"
            else f"was lost{during}: its parent reports it ({quoted}), and its own error is not in these lines"
            if last["kind"] in _REPORTS
            else f"was killed{during} ({quoted}; SIGKILL comes from outside it)"
            if killed
            else f"crashed with {signal}{during} ({quoted})"
            if signal in NATIVE_CRASHES
            else f"died of its own error{during} ({quoted})"
        )
        # torch.multiprocessing.spawn re-raised it under `-- Process N terminated with the following error:`
        spawned = (
            t.kinds(K.spawn_reraise)
            .filter((pl.col("source") == last["source"]) & (pl.col("line") < last["line"]))
            .tail(1)["local_rank"]
        )
        # the kernel's OOM kill and the launcher's report of a worker's exit name the same pid: that worker
        same_pid = exited.filter(pl.col("pid") == last["pid"]) if oom and last["pid"] is not None else exited.clear()
        # the launcher reports one worker's failure (torchrun's `failed (exitcode: -9) local_rank: 2 (pid: 1302)`):
        # the one process this excerpt saw die is that worker
        failed = exited.filter(fatal_exit().fill_null(False) | (pl.col("exit_code") == OWN_ERROR))
        lone = (
            failed.row(0, named=True)
            # (a death whose own line names another pid - the OOM killer's victim - is not that worker's)
            if failed["local_rank"].n_unique() == 1 and (last["pid"] is None or last["pid"] in failed["pid"])
            else None
        )
        who = (
            f"Process {spawned[0]} of torch.multiprocessing.spawn (local rank {spawned[0]})"
            if not spawned.is_empty() and spawned[0] is not None
            else f"Local rank {same_pid['local_rank'][0]} (pid {last['pid']})"
            if not same_pid.is_empty()
            else f"Local rank {lone['local_rank']}" + (f" (pid {lone['pid']})" if lone["pid"] is not None else "")
            if lone is not None
            else "A process"
        )
        rank = "its global rank" if who != "A process" else "which rank it was"
        who = "A worker process" if teardown else who
        rank = "which one or why" if teardown else rank
        # ranks that waited and gave up after this death (evidence() kept only deaths before them): its victims
        waiters = t.events.filter(t.events["victim"] & (t.events["kind"] != K.agent_signal))
        victims = sorted(waiters["rank"].drop_nulls().unique().to_list())
        then = (
            f"; {ranks_text(victims)} then timed out waiting"
            if victims
            else "; ranks then timed out waiting"
            if waiters.height
            else ""
        )
        if then and last["host"]:
            who = f"{who} on {last['host']}"
        # the work was done first (`training done` after the last step): a crash at shutdown, said first
        done = self.facts.finished_work if not teardown and not killed else None
        first = (
            f"{done_before_teardown(done, t.line_prefix, who[0].lower() + who[1:])} ({quoted})"
            if done is not None
            else f"{who} {how}"
        )
        return self.finding(
            confidence=self.base_confidence
            + (0.05 if not own.is_empty() and not teardown else 0.0)
            + (0.1 if not same_pid.is_empty() else 0.0)  # two lines of two programs agree on the process
            + (0.1 if then else 0.0),  # the others' wait, after it, is what its death leaves behind
            culprit_ranks=(),
            summary=f"{first}{then}; the excerpt does not say {rank}.",
            explanation=(
                "It died before any rank gave up waiting: the ranks that timed out were waiting for it (or for a "
                "rank its node lost with it)."
                if then
                else "No line shows a rank waiting on another, so this is where the process ended; in a "
                "distributed job the other ranks then wait for it until their timeout."
            )
            + (
                " A SIGKILL nobody sent by hand is most often the kernel's OOM killer (host memory)."
                if killed and not oom
                else " With no error of its own in the excerpt, a kill from outside is the first lead: the host's "
                "OOM killer when several processes load a model or data at once."
                if teardown
                else ""
            ),
            # the death first: the story tells it from there; then the wait it caused
            evidence=quotes(ev.tail(3)) + quotes(doing) + (quotes(waiters, 2) if then else ()),
            fixes=self.fixes(
                *(["teardown"] if done is not None else []),
                "killed" if killed or teardown else "fix_error",
                *(["bus_error"] if signal == "SIGBUS" else []),
                "which_rank",
            ),
            dont=(
                "Do not raise the collective timeout: the process is gone, waiting longer changes nothing."
                if then
                else "Do not raise the collective timeout or change NCCL settings: no collective failed.",
            ),
            verify=("After the fix the job passes the step where this process died.",),
            facts={"killed": killed, "after_work": done is not None, "victim_ranks": victims}
            | ({"hosts": [last["host"]]} if then and last["host"] else {}),
        )


def _above_the_wait(t: Tables, deaths: pl.DataFrame, waiters: pl.DataFrame) -> pl.DataFrame:
    """The deaths the dates cannot place that their file's order puts before the wait: printed above the first
    waiting line of a file where a rank waits, by a process none of the waiting lines is from - its pid or its host
    differs from every waiting line's (Ray's raylet naming the dead worker's pid, under its node's address). A
    waiting rank's own end always follows its wait, whatever order a collector delivers the lines in (Ray's driver
    may print the raylet's report of a worker's death before that worker's last lines), and a death that names no
    process (the shell's `Killed`) could be that rank's own: neither is placed."""
    if deaths.is_empty():
        return deaths
    first = waiters.group_by("source").agg(pl.col("line").min().alias("_first"))
    above = deaths.join(first, on="source").filter(pl.col("line") < pl.col("_first")).drop("_first")
    if above.is_empty():
        return above
    # the waiting lines' processes: the pid a line's envelope gives (Ray's `(Worker pid=P, ip=A)`) or its own
    pids = waiters.select("source", "line", "pid", "host").join(
        t.lines.select("source", "line", pl.col("pid").alias("_lpid")), on=["source", "line"], how="left"
    )
    waiter_pids = pl.coalesce("pid", "_lpid")
    known_pids = pids.select(waiter_pids.is_not_null().all()).item()
    their_pids = pids.select(waiter_pids).to_series().drop_nulls().unique().implode()
    known_hosts = bool(pids["host"].is_not_null().all())
    their_hosts = pids["host"].drop_nulls().unique().implode()
    other_pid = pl.lit(known_pids) & pl.col("pid").is_not_null() & ~pl.col("pid").is_in(their_pids)
    other_host = pl.lit(known_hosts) & pl.col("host").is_not_null() & ~pl.col("host").is_in(their_hosts)
    return above.filter(other_pid | other_host)


def _exit_said(row: dict, signal: str | None) -> str:
    """A launcher's report of a worker's exit, in words: `local rank 1 exited with code -11 (SIGSEGV)`."""
    signal = signal or row["signal"] or exit_signal(row["exit_code"])
    who = f"local rank {row['local_rank']}" if row["local_rank"] is not None else "a worker"
    if row["exit_code"] is None:
        return f"{who} died with {signal}"
    return f"{who} exited with code {row['exit_code']}" + (f" = {signal}" if signal else "")


# A parent's report that a worker or child process died (vLLM's `Worker proc ... died unexpectedly`, `Engine core
# initialization failed. See root cause above`, Ray's `The actor died unexpectedly`): printed after the death.
_REPORTS = (K.worker_lost, K.child_failed_report)


def _own_end(own: pl.DataFrame) -> dict:
    """Where the process ended: its own error printed before the first report of its loss, when there is one (the
    report, and what its parent raised after it, follow the death); the first parent's report when there are only
    reports (vLLM's and SGLang's parents each report their child's failure after it: the first is nearest the child,
    and vLLM's quotes its error); else the last line, as printed (Ray's exit type follows its ActorDiedError)."""
    reports = same_line(own, list(_REPORTS))
    first_report = own.join(reports, on=["source", "line"], how="semi").head(1)
    if not first_report.is_empty():
        at = first_report.row(0, named=True)
        mine = own.join(reports, on=["source", "line"], how="anti")
        before = mine.filter((pl.col("source") != at["source"]) | (pl.col("line") < at["line"]))
        if not before.is_empty():
            return before.tail(1).row(0, named=True)
        chain = own.filter(pl.col("kind") == K.child_failed_report)
        if mine.is_empty() and not chain.is_empty():
            return chain.row(0, named=True)
    return own.tail(1).row(0, named=True)
