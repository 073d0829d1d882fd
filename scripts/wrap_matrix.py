"""Real failure excerpts x the wrappers real log collectors put around lines: does ncclpm read a wrapped log the way
it reads the bare one?

Each excerpt (a tests/cases fixture or a corpus case: a watchdog timeout across ranks, NCCL WARN + `Last error`, a
CUDA OOM traceback, a torchrun failure summary, a rendezvous timeout, multi-line tracebacks) is rewritten through
each wrapper - Kubernetes (`kubectl logs --prefix`, `--timestamps`, CRI files with partial `P` lines), Docker's
json-file, journald, `srun -l` (ranks started by srun, or one torchrun per node), Open MPI's `--tag-output` and
`--timestamp-output`, torchrun `--tee` and `--log-dir`, Ray, vLLM and SGLang prefixes, pdsh, CI timestamps, ANSI
colours, CRLF and a chat paste (fence, quote, re-wrapped at 80 columns) - and diagnosed. A cell compares with the
bare reading:

  C  category or culprit ranks differ          E  event kinds read differ (a line lost or misread)
  c  culprits differ under a wrapper that names each line's rank where the bare lines had none (judged by hand)
  R  an event's rank differs from the bare one, or a rank the wrapper gives is not taken where the bare had none
  H  the wrapper's host is not on an event that had none (or an event's own host was overwritten)
  T  an event lost its time, or a wrapper's full date is missing          B  tracebacks differ (count or type)
  n/a  the wrapper does not apply (a paste of several files; a launcher naming ranks over torchrun's own)

A wrapper's rank is each line's bare rank (what the process that printed it was: torch's `[Rank N]` on it, the
bare reading's); where neither says, the last one seen in the file, or its position. `srun -l` over torchrun
carries the NODE's task id (50 + the node here): it must not become a rank.

    python scripts/wrap_matrix.py [--only WRAPPER,...] [--cases NAME,...] [-v]
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import tempfile
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORPUS = Path("/work/shared/corpus/real-issues/cases")
CASES = ROOT / "tests" / "cases"

EXCERPTS = {
    "watchdog_6ranks": CORPUS / "d043",  # six ranks' watchdog timeouts in one paste
    "slow_rank_4ranks": CORPUS / "d006",  # rank 0 behind, others waiting
    "nccl_warn_two_pods": CORPUS / "d012",  # NCCL WARN, one file per pod
    "last_error_two_hosts": CASES / "excerpt_nccl_system_error_two_hosts",  # ncclSystemError + `Last error:`
    "ib_port_error": CASES / "excerpt_ib_port_error_one_host",  # torchrun --tee, NCCL WARN per host
    "cuda_oom": CASES / "excerpt_cuda_error_out_of_memory",  # OOM traceback
    "torchrun_summary": CORPUS / "d042",  # the elastic agent's failure summary
    "rdzv_timeout": CASES / "init_rendezvous_failure__torchrun_rdzv_timeout",  # rendezvous/store timeout
    "store_timeout": CORPUS / "d003",  # DistStoreError traceback
    "traceback_multiline": CORPUS / "d013",  # a long Python traceback
    "mismatch_two_files": CORPUS / "d009",  # a rank per file
}
SKIP = {"label.json", "expected.toml"}
BASE = datetime(2024, 5, 1, 12, 0, 0)


@dataclass(frozen=True)
class Ctx:
    """What the wrapper knows about a line: the file's position (node), the rank and host that printed it."""

    node: int
    rank: int
    local: int
    n: int  # the line's index in its file
    tee: bool = True  # the line has no torchrun `[defaultN]:` of its own


@dataclass(frozen=True)
class Wrapper:
    prefix: Callable[[Ctx], str] | None = None  # each line's prefix
    whole: Callable[[list[str], list[Ctx]], str] | None = None  # or the whole file rewritten
    rename: Callable[[str], str] | None = None
    rank: bool = False  # the prefix carries the line's global rank
    host: Callable[[Ctx], str] | None = None  # the host (pod, node) the prefix names
    full_ts: bool = False  # the prefix carries a full date
    stdin: bool = False  # pasted on stdin
    node_task: bool = False  # the prefix carries a node's task id (50 + node), which must not become a rank
    log_dir: bool = False  # torchrun --log-dir: each rank's lines in attempt_0/<rank>/stderr.log, the rest a console


def ts(c: Ctx) -> datetime:
    return BASE + timedelta(seconds=c.n, microseconds=123456)


def iso_nano(c: Ctx) -> str:
    return ts(c).strftime("%Y-%m-%dT%H:%M:%S.%f") + "789Z"


def _cri(lines: list[str], ctxs: list[Ctx]) -> str:
    """containerd's CRI log: a line the runtime read in pieces is written as `P` records, the last one `F`."""
    out = []
    for line, c in zip(lines, ctxs, strict=True):
        stamp = iso_nano(c)
        if len(line) > 60:
            cut = len(line) // 2
            out.append(f"{stamp} stderr P {line[:cut]}")
            line = line[cut:]
        out.append(f"{stamp} stderr F {line}")
    return "\n".join(out) + "\n"


def _docker(lines: list[str], ctxs: list[Ctx]) -> str:
    """Docker's json-file driver: one JSON object per write; a line over 16 KiB (here: a long one) is split, only the
    last piece ending in a newline."""
    out = []
    for line, c in zip(lines, ctxs, strict=True):
        pieces = [line[: len(line) // 2], line[len(line) // 2 :]] if len(line) > 60 else [line]
        for i, piece in enumerate(pieces):
            text = piece + ("\n" if i == len(pieces) - 1 else "")
            out.append(json.dumps({"log": text, "stream": "stderr", "time": iso_nano(c)}, separators=(",", ":")))
    return "\n".join(out) + "\n"


def _chat(lines: list[str], ctxs: list[Ctx]) -> str:
    """A log pasted into a chat or an issue: a quoted Markdown fence, the lines re-wrapped at 80 columns."""
    out = ["> Here is the log:", "> ```"]
    for line in lines:
        while len(line) > 78:
            out.append("> " + line[:78])
            line = line[78:]
        out.append("> " + line)
    out.append("> ```")
    return "\n".join(out) + "\n"


_FILE = re.compile(r'(\s*File )"([^"]+)", line (\d+), in (.+)$')
_EXC = re.compile(r"((?:\w+\.)*\w*(?:Error|Exception|Interrupt|Exit)): (.*)$")


def _ansi(lines: list[str], ctxs: list[Ctx]) -> str:
    """A terminal's colours copied with the text: Python 3.13's coloured tracebacks (the file, line and function
    magenta, the exception's type bold), and a colouring log handler's colour around every other line."""
    out = []
    for line in lines:
        if m := _FILE.search(line):
            where = f'\x1b[35m"{m[2]}"\x1b[0m, line \x1b[35m{m[3]}\x1b[0m'
            out.append(f"{line[: m.start()]}{m[1]}{where}, in \x1b[35m{m[4]}\x1b[0m")
        elif m := _EXC.search(line):
            out.append(f"{line[: m.start()]}\x1b[1;35m{m[1]}\x1b[0m: \x1b[35m{m[2]}\x1b[0m")
        else:
            out.append(f"\x1b[0;31m{line}\x1b[0m" if line else line)
    return "\n".join(out) + "\n"


def _crlf(lines: list[str], ctxs: list[Ctx]) -> str:
    return "".join(line + "\r\n" for line in lines)


def _ctime(c: Ctx) -> str:
    return ts(c).strftime("%a %b %e %H:%M:%S %Y")


WRAPPERS: dict[str, Wrapper] = {
    "bare": Wrapper(prefix=lambda c: ""),
    "kubectl_prefix": Wrapper(
        prefix=lambda c: f"[pod/train-worker-{c.node}/pytorch] ", host=lambda c: f"train-worker-{c.node}"
    ),
    "kubectl_timestamps": Wrapper(prefix=lambda c: iso_nano(c) + " ", full_ts=True),
    "kubectl_prefix_ts": Wrapper(
        prefix=lambda c: f"[pod/train-worker-{c.node}/pytorch] {iso_nano(c)} ",
        host=lambda c: f"train-worker-{c.node}",
        full_ts=True,
    ),
    "cri_partial": Wrapper(whole=_cri, full_ts=True),
    "docker_json": Wrapper(whole=_docker, rename=lambda name: Path(name).stem + "-json.log", full_ts=True),
    "journald": Wrapper(
        prefix=lambda c: ts(c).strftime("%b %d %H:%M:%S") + f" gpu-node-{c.node} python[{4100 + c.local}]: ",
        host=lambda c: f"gpu-node-{c.node}",
    ),
    "journald_iso": Wrapper(
        prefix=lambda c: ts(c).strftime("%Y-%m-%dT%H:%M:%S+0000") + f" gpu-node-{c.node} python[{4100 + c.local}]: ",
        host=lambda c: f"gpu-node-{c.node}",
        full_ts=True,
    ),
    "srun_l": Wrapper(prefix=lambda c: f"{c.rank}: ", rank=True),
    "srun_l_padded": Wrapper(prefix=lambda c: f"{c.rank:>2}: ", rank=True),
    # one torchrun per node: srun's task id (here 50 + the node) is the node's, never a rank
    "srun_l_torchrun": Wrapper(
        prefix=lambda c: f"{50 + c.node}: " + (f"[default{c.local}]:" if c.tee else ""), node_task=True
    ),
    "mpirun_tag": Wrapper(prefix=lambda c: f"[1,{c.rank}]<stderr>:", rank=True),
    "mpirun_tag_ts": Wrapper(prefix=lambda c: f"{_ctime(c)}[1,{c.rank}]<stderr>:", rank=True),
    "mpirun_ts_only": Wrapper(prefix=lambda c: f"{_ctime(c)}<stderr>:"),
    "torchrun_tee": Wrapper(prefix=lambda c: f"[default{c.rank}]:" if c.tee else "", rank=True),
    "torchrun_log_dir": Wrapper(prefix=lambda c: "", log_dir=True),
    "ray_actor": Wrapper(
        prefix=lambda c: f"(RayTrainWorker pid={4100 + c.rank}, ip=10.0.0.{c.node + 1}) ",
        host=lambda c: f"10.0.0.{c.node + 1}",
    ),
    "ray_pid": Wrapper(prefix=lambda c: f"(pid={4100 + c.rank}) "),
    "vllm_rank": Wrapper(prefix=lambda c: f"(VllmWorker rank={c.rank} pid={4100 + c.rank}) ", rank=True),
    "vllm_tp": Wrapper(prefix=lambda c: f"(Worker_TP{c.rank} pid={4100 + c.rank}) ", rank=True),
    "vllm_engine": Wrapper(prefix=lambda c: f"(EngineCore_DP0 pid={4100 + c.node}) "),
    "sglang_tp": Wrapper(
        prefix=lambda c: "[" + ts(c).strftime("%Y-%m-%d %H:%M:%S") + f" TP{c.rank}] ", rank=True, full_ts=True
    ),
    "pdsh_ip": Wrapper(prefix=lambda c: f"10.0.0.{c.node + 1}: ", host=lambda c: f"10.0.0.{c.node + 1}"),
    "gha_ts": Wrapper(prefix=lambda c: ts(c).strftime("%Y-%m-%dT%H:%M:%S.%f") + "0Z ", full_ts=True),
    "jenkins_ts": Wrapper(prefix=lambda c: "[" + ts(c).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z] ", full_ts=True),
    "ansi": Wrapper(whole=_ansi),
    "crlf": Wrapper(whole=_crlf),
    "chat_paste": Wrapper(whole=_chat, stdin=True),
}


def _is_log(path: Path) -> bool:
    if path.name in SKIP or path.suffix in {".pkl", ".json", ".gz", ".bin"} or "fr" in path.parts[-3:-1]:
        return False
    try:
        path.read_text(encoding="utf-8")
    except (UnicodeDecodeError, OSError):
        return False
    return True


def _inputs(case: Path) -> Path:
    return case / "input" if (case / "input").is_dir() else case


def _line_ranks(tables, src: Path, root: Path) -> dict[str, dict[int, tuple[int | None, int | None]]]:
    """(rank, local rank) of each kept line in the bare reading, by file name relative to the job."""
    out: dict[str, dict[int, tuple[int | None, int | None]]] = {}
    for row in tables.lines.select("source", "line", "rank", "rank_local").iter_rows(named=True):
        out.setdefault(row["source"], {})[row["line"]] = (row["rank"], row["rank_local"])
    return out


_SAID_RANK = re.compile(r"\[(?:PG \d+ )?Rank (\d+)\]|^\[rank(\d+)\]:")


def _contexts(lines: list[str], node: int, known: dict[int, tuple[int | None, int | None]]) -> list[Ctx]:
    ranks = {n: r for n, (r, local) in known.items() if r is not None and not local}
    default = Counter(ranks.values()).most_common(1)[0][0] if ranks else node
    out, last = [], default
    for i in range(len(lines)):
        said = _SAID_RANK.search(lines[i])  # torch's own word for the rank that printed the line
        last = int(said[1] or said[2]) if said else ranks.get(i + 1, last)
        out.append(Ctx(node=node, rank=last, local=last % 8, n=i, tee=not lines[i].startswith("[default")))
    return out


def _source_key(tables_sources: dict, rel: str) -> dict:
    for name, rows in tables_sources.items():
        if name == rel or name.endswith("/" + rel) or rel.endswith(name):
            return rows
    return {}


def _split_by_rank(lines: list[str], ctxs: list[Ctx], attempt: Path, console: Path) -> None:
    """torchrun --log-dir (one node): what a rank printed goes to attempt_0/<local rank>/stderr.log, the agent's own
    lines (and the ones no rank is known to have printed) stay on the console."""
    files: dict[Path, list[str]] = {}
    traceback: Path | None = None  # a traceback goes whole to the rank that printed it
    for line, c in zip(lines, ctxs, strict=True):
        if traceback is not None and line[:1].isspace():
            files[traceback].append(line)
            continue
        own = attempt / str(c.rank) / "stderr.log"
        if traceback is not None:  # its exception line
            files[traceback].append(line)
            traceback = None
            continue
        if line.lstrip().startswith("Traceback (most recent call last)"):
            traceback = own
        path = own if traceback is not None or _SAID_RANK.search(line) else console
        files.setdefault(path, []).append(line)
    for path, body in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(body) + "\n", encoding="utf-8")


def write_wrapped(case: Path, wrapper: Wrapper, dst: Path, bare_lines: dict) -> bytes | None:
    """The case's files rewritten through `wrapper` under `dst` (or, for a paste, the text for stdin)."""
    src = _inputs(case)
    logs = sorted(p for p in src.rglob("*") if p.is_file() and p.name not in SKIP)
    pasted = []
    for node, p in enumerate(q for q in logs if _is_log(q)):
        rel = str(p.relative_to(src))
        text = p.read_text(encoding="utf-8")
        lines = text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        ctxs = _contexts(lines, node, _source_key(bare_lines, rel))
        if wrapper.whole is not None:
            body = wrapper.whole(lines, ctxs)
        else:
            body = "".join(
                (wrapper.prefix(c) if line else "") + line + "\n" for line, c in zip(lines, ctxs, strict=True)
            )
        if wrapper.stdin:
            pasted.append(body)
            continue
        if wrapper.log_dir:
            _split_by_rank(lines, ctxs, dst / f"{Path(rel).stem}_logs" / "run_x1" / "attempt_0", dst / rel)
            continue
        out = dst / (str(Path(rel).with_name(wrapper.rename(p.name))) if wrapper.rename else rel)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(body, encoding="utf-8", newline="")
    for p in logs:
        if not _is_log(p) and not wrapper.stdin:
            out = dst / p.relative_to(src)
            out.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(p, out)
    return "".join(pasted).encode() if wrapper.stdin else None


def reading(tables) -> dict:
    from ncclpm.engine import diagnose_tables

    d = diagnose_tables(tables, (), ())
    ev = tables.events.sort("source", "line")
    return {
        "category": d.category.value if hasattr(d.category, "value") else str(d.category),
        "culprits": tuple(d.culprit_ranks),
        "kinds": Counter(ev["event"].to_list()),
        "ranks": Counter(zip(ev["event"].to_list(), ev["rank"].to_list(), strict=True)),
        "hosts": Counter(zip(ev["event"].to_list(), ev["host"].to_list(), strict=True)),
        "ts": Counter(zip(ev["event"].to_list(), ev["ts"].is_not_null().to_list(), strict=True)),
        "events": ev.select("event", "rank", "host", "ts").rows(),
        "tracebacks": Counter(tables.tracebacks["error_type"].to_list()),
    }


def compare(bare: dict, got: dict, wrapper: Wrapper, expect_hosts: set[str]) -> str:
    marks = []
    if bare["category"] != got["category"]:
        marks.append("C")
    elif bare["culprits"] != got["culprits"]:
        # a wrapper naming each line's rank may name culprits the bare lines could not: `c`, judged by hand
        marks.append("c" if wrapper.rank or wrapper.node_task or wrapper.log_dir else "C")
    if bare["kinds"] != got["kinds"]:
        marks.append("E")
    if bare["kinds"] == got["kinds"]:
        pairs = list(zip(sorted(bare["events"], key=str), sorted(got["events"], key=str), strict=False))
        by_kind_b = sorted((e[0], e[1] if e[1] is not None else -1) for e in bare["events"])
        by_kind_g = sorted((e[0], e[1] if e[1] is not None else -1) for e in got["events"])
        bare_ranked = Counter((e[0], e[1]) for e in bare["events"] if e[1] is not None)
        got_ranked = Counter((e[0], e[1]) for e in got["events"] if e[1] is not None)
        if wrapper.node_task:
            if any(e[1] is not None and e[1] >= 50 for e in got["events"]) or bare_ranked - got_ranked:
                marks.append("R")
        elif wrapper.log_dir:
            if bare_ranked - got_ranked:
                marks.append("R")
        elif wrapper.rank:
            if bare_ranked - got_ranked or any(e[1] is None for e in got["events"]):
                marks.append("R")
        elif by_kind_b != by_kind_g:
            marks.append("R")
        bare_hosts = Counter(e[2] for e in bare["events"] if e[2] is not None)
        got_hosts = Counter(e[2] for e in got["events"] if e[2] is not None)
        if bare_hosts - got_hosts or (
            wrapper.host is not None
            and any(e[2] is None or e[2] not in expect_hosts | set(bare_hosts) for e in got["events"])
        ):
            marks.append("H")
        bare_ts = sum(e[3] is not None for e in bare["events"])
        got_ts = sum(e[3] is not None for e in got["events"])
        if got_ts < bare_ts or (wrapper.full_ts and got_ts < len(got["events"])):
            marks.append("T")
        del pairs
    if bare["tracebacks"] != got["tracebacks"]:
        marks.append("B")
    return "".join(marks) or "ok"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default="", help="wrappers, comma-separated")
    ap.add_argument("--cases", default="", help="excerpts, comma-separated")
    ap.add_argument("-v", "--verbose", action="store_true", help="print what differs")
    args = ap.parse_args()
    from ncclpm.api import build

    wrappers = {k: v for k, v in WRAPPERS.items() if k != "bare" and (not args.only or k in args.only.split(","))}
    excerpts = {k: v for k, v in EXCERPTS.items() if not args.cases or k in args.cases.split(",")}
    width = max(map(len, excerpts))
    print(" " * width, *(k[:12].ljust(12) for k in wrappers))
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name, case in excerpts.items():
            bare_tables = build([_inputs(case)])
            bare_lines: dict = {}
            for row in bare_tables.lines.select("source", "line", "rank", "rank_local").iter_rows(named=True):
                bare_lines.setdefault(row["source"], {})[row["line"]] = (row["rank"], row["rank_local"])
            bare = reading(bare_tables)
            cells, notes = [], []
            files = [p for p in _inputs(case).rglob("*") if p.is_file() and p.name not in SKIP and _is_log(p)]
            teed = any(re.search(r"(?m)^\[default\d+\]:", p.read_text(encoding="utf-8")) for p in files)
            for wname, wrapper in wrappers.items():
                if wrapper.stdin and len(files) > 1:  # one paste is one file
                    cells.append("n/a")
                    continue
                if wrapper.rank and teed:  # torchrun started these ranks: a launcher naming ranks did not
                    cells.append("n/a")
                    continue
                dst = Path(tmp) / name / wname
                data = write_wrapped(case, wrapper, dst, bare_lines)
                tables = build(stdin_bytes=data) if wrapper.stdin else build([dst])
                got = reading(tables)
                hosts = set()
                if wrapper.host is not None:
                    hosts = {wrapper.host(Ctx(node=i, rank=0, local=0, n=0)) for i in range(64)}
                cell = compare(bare, got, wrapper, hosts)
                failures += cell != "ok"
                cells.append(cell)
                if args.verbose and cell != "ok":
                    notes.append(
                        f"  {wname}: {cell}\n    bare {bare['category']} {bare['culprits']} {_short(bare)}"
                        f"\n    got  {got['category']} {got['culprits']} {_short(got)}"
                    )
            print(name.ljust(width), *(c.ljust(12) for c in cells))
            for n in notes:
                print(n)
    print(f"{failures} cells differ from the bare reading")
    return 0


def _short(r: dict) -> str:
    return f"events={sorted(r['events'], key=str)} tb={dict(r['tracebacks'])}"


if __name__ == "__main__":
    sys.exit(main())
