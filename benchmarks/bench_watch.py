"""How long from a hang to a report with `ncclpm watch`: real torchrun jobs (torch CPU + gloo, 3 ranks,
tests/watch_jobs/hang_job.py) whose rank 1 blocks, the watcher started beside each job once its ranks run.

    python benchmarks/bench_watch.py [--runs 3] [--json OUT]

Scenarios (each `--runs` times, interleaved):
  idle      rank 1 waits on a lock a stalled thread holds; caught by silence (`--idle 10`)
  open      rank 1 spins in a loop; DETAIL logging shows its peers' all_reduce open past 10% of the 120 s timeout
  timeout   rank 1 sleeps in a slow checkpoint save; caught by the gloo timeout line (10 s timeout, `--idle 1000`)
  debug     as idle, with torch's debug server started by the job (the watcher asks it too; needs `tabulate`)
  steady    no hang: a healthy job logging for ~40 s; the watcher follows it to its end and collects nothing
For each: the hang's start (rank 1's last line before it blocks, as the job timed it), the watcher's detection
(`started_utc` of the manifest), the collection (`seconds`), the diagnosis, and hang -> report in total; the share
of ranks whose stacks were taken; the watcher's own CPU (share of one core over its run) and peak RSS; the load
average. Needs torch and the watch extra.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
JOB = ROOT / "tests" / "watch_jobs" / "hang_job.py"
SCENARIOS = {
    "idle": ({"WATCH_MODE": "lock"}, ["--idle", "10"], "updating shared state"),
    "open": (
        {"WATCH_MODE": "busy", "TORCH_DISTRIBUTED_DEBUG": "DETAIL", "TORCH_CPP_LOG_LEVEL": "INFO"},
        ["--idle", "1000", "--open-share", "0.1"],
        "refining the schedule",
    ),
    "timeout": ({"WATCH_MODE": "save", "WATCH_PG_TIMEOUT_S": "10"}, ["--idle", "1000"], "saving checkpoint"),
    "debug": ({"WATCH_MODE": "lock", "WATCH_DEBUG_PORT": "0"}, ["--idle", "10"], "updating shared state"),
    # no hang: a healthy job logging 3 lines per step for ~40 s; the watcher's own CPU and memory while it follows
    "steady": ({"WATCH_MODE": "healthy", "WATCH_STEPS": "800"}, ["--idle", "60"], ""),
}
_STAMP = re.compile(r"\[(\d{4}-\d\d-\d\dT[\d:.]+)\] rank1: (.*)")


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _kill_tree(pid: int) -> None:
    import psutil

    try:
        family = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return
    for p in family:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.send_signal(signal.SIGKILL)
    psutil.wait_procs(family, timeout=30)


def _watch(jobdir: Path, args: list[str], once: bool) -> tuple[subprocess.CompletedProcess, float, float, float]:
    """Run the watcher to its end, sampling its own CPU time and memory (its helpers - py-spy, nvidia-smi, the
    debug-server asker - are other processes): (result, CPU seconds, peak RSS in MB, seconds it ran)."""
    import psutil

    cmd = [sys.executable, "-m", "ncclpm", "watch", str(jobdir), "--poll", "0.5", *args, *(["--once"] if once else [])]
    t0 = time.monotonic()
    w = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    me = psutil.Process(w.pid)
    cpu = rss = 0.0
    while w.poll() is None:
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            t = me.cpu_times()
            cpu = t.user + t.system
            rss = max(rss, me.memory_info().rss / 2**20)
        time.sleep(0.2)
    out, err = w.communicate()
    return subprocess.CompletedProcess(cmd, w.returncode, out, err), cpu, rss, time.monotonic() - t0


def run_one(name: str, work: Path) -> dict:
    env_extra, args, marker = SCENARIOS[name]
    jobdir = work / f"{name}-{time.time_ns()}"
    jobdir.mkdir(parents=True)
    env = {
        **os.environ,
        "WATCH_RANK": "1",
        "WATCH_PG_TIMEOUT_S": "120",
        "WATCH_OUT": str(jobdir),
        "OMP_NUM_THREADS": "1",
        **env_extra,
    }
    if env.get("WATCH_DEBUG_PORT") == "0":
        env["WATCH_DEBUG_PORT"] = str(_free_port())
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=3",
        "--log-dir",
        str(jobdir / "torchrun_logs"),
        "--tee",
        "3",
        str(JOB),
    ]
    console = jobdir / "console.log"
    with console.open("wb") as out:
        job = subprocess.Popen(cmd, cwd=jobdir, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while console.read_text(errors="replace").count(": step 1 loss") < 3:
            if time.monotonic() > deadline or job.poll() is not None:
                return {"scenario": name, "error": "the job did not start"}
            time.sleep(0.1)
        w, cpu_s, rss_mb, watched_s = _watch(jobdir, args, once=name != "steady")
        usage = {
            "watcher_cpu_s": round(cpu_s, 2),
            "watcher_cpu_share": round(cpu_s / watched_s, 3) if watched_s else None,
            "watcher_peak_rss_mb": round(rss_mb, 1),
        }
        if name == "steady":
            collected = (jobdir / "ncclpm-watch").exists()
            return {
                "scenario": name,
                "reason": "collected!" if collected else "nothing",
                "watched_s": round(watched_s, 1),
                **usage,
                "load": os.getloadavg()[0],
            }
        folders = list((jobdir / "ncclpm-watch").glob("*/manifest.json"))
        if w.returncode != 0 or not folders:
            return {"scenario": name, "error": f"watch exit {w.returncode}: {w.stderr[-400:]}"}
        m = json.loads(folders[0].read_text())
        onset = next(
            (
                datetime.fromisoformat(ts)
                for ts, msg in _STAMP.findall(console.read_text(errors="replace"))
                if marker in msg
            ),
            None,
        )
        detected = datetime.fromisoformat(m["started_utc"]).astimezone().replace(tzinfo=None)
        diag = next((s.get("seconds") for s in m["steps"] if s["name"] == "diagnosis"), None)
        spy = [s for s in m["steps"] if s["name"] == "pyspy"]
        detect_s = (detected - onset).total_seconds() if onset else None
        return {
            "scenario": name,
            "reason": m["trigger"]["reason"],
            "detect_s": detect_s,
            "collect_s": m.get("seconds"),
            "diagnose_s": diag,
            "detected_to_report_s": m.get("hang_to_report_s"),
            "hang_to_report_s": (detect_s + m["hang_to_report_s"])
            if detect_s is not None and "hang_to_report_s" in m
            else None,
            "stacks": f"{sum(s['status'] == 'ok' for s in spy)}/{len(spy)}",
            **usage,
            "load": os.getloadavg()[0],
        }
    finally:
        _kill_tree(job.pid)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--scenarios", default=",".join(SCENARIOS))
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    names = [s for s in args.scenarios.split(",") if s]
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench_watch_") as tmp:
        for i in range(args.runs):
            for name in names:  # interleaved: a load spike hits every scenario alike
                row = run_one(name, Path(tmp))
                rows.append(row)
                print(f"run {i + 1} {json.dumps(row)}", flush=True)
    head = f"{'scenario':<9} {'reading':<16} {'detect':>8} {'collect':>8} {'diagnose':>9} {'hang->report':>13}"
    print(f"\n{head} stacks  cpu(watcher)  rss MB  load")
    for name in names:
        ok = [r for r in rows if r["scenario"] == name and "error" not in r]
        if not ok:
            print(f"{name:<9} (every run failed)")
            continue

        def med(key: str, ok: list[dict] = ok) -> str:
            vals = [r[key] for r in ok if r.get(key) is not None]
            return f"{statistics.median(vals):.2f}" if vals else "-"

        print(
            f"{name:<9} {ok[0]['reason']:<16} {med('detect_s'):>8} {med('collect_s'):>8} {med('diagnose_s'):>9} "
            f"{med('hang_to_report_s'):>13} {ok[0].get('stacks', '-'):>6}  {med('watcher_cpu_share'):>12}  "
            f"{med('watcher_peak_rss_mb'):>6}  {med('load')}"
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
