"""List the distributed/communication messages of programs that run torch.distributed and NCCL outside training
scripts: vLLM, SGLang, verl, OpenRLHF, and Ray (the runtime the RL trainers and vLLM's multi-node mode use).

    python scripts/vocab/frameworks_extract.py [--cache DIR] [--out DIR]

For each package, the latest release and one about a year older (pinned below) are downloaded from PyPI with pip,
their Python sources read with `ast` (pyscan.py: nothing is run) and the wheel deleted. Kept: every message of the
package's distributed/executor/worker code (DIST_PATHS), and messages elsewhere that name the distributed stack
(KEYWORDS); `info`/`debug` lines only when they name it. Model definitions, parsers and kernels (SKIP_PATHS) are not
read. Output: data/frameworks_messages.jsonl, sorted.
NeMo-RL is not read: its only PyPI release (nemo-rl 0.0.0) is an empty placeholder.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import shutil
import sys
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import pyscan
from wheels import pip_download, sha256

HERE = Path(__file__).resolve().parent
DEFAULT_CACHE = Path.home() / ".cache" / "ncclpm-vocab"

# (package, [older, latest]) as on PyPI in November 2026; the older one is the release of about a year before.
PINS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("vllm", ("0.11.2", "0.33.0")),
    ("sglang", ("0.5.5.post3", "0.5.23")),
    ("verl", ("0.6.1", "0.9.1")),
    ("openrlhf", ("0.9.0", "0.11.2")),
    ("ray", ("2.52.0", "2.60.0")),
)
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_34_x86_64", "manylinux2014_x86_64", "manylinux1_x86_64")
PYTHON_VERSION = "3.11"

# Code whose every message is kept (path prefixes inside the wheel).
DIST_PATHS: dict[str, tuple[str, ...]] = {
    "vllm": (
        "vllm/distributed/",
        "vllm/executor/",
        "vllm/v1/executor/",
        "vllm/worker/",
        "vllm/v1/worker/",
        "vllm/v1/engine/core",
        "vllm/v1/engine/utils.py",
        "vllm/logger.py",
        "vllm/logging_utils/",
        "vllm/env_override.py",
        "vllm/utils/system_utils.py",
        "vllm/ray/",
    ),
    "sglang": (
        "sglang/srt/distributed/",
        "sglang/srt/managers/scheduler.py",
        "sglang/srt/managers/tp_worker",
        "sglang/srt/managers/data_parallel_controller.py",
        "sglang/srt/model_executor/model_runner.py",
        "sglang/srt/entrypoints/engine.py",
        "sglang/srt/utils/common.py",
        "sglang/srt/utils.py",
        "sglang/srt/weight_sync/",
    ),
    "verl": ("verl/utils/distributed.py", "verl/single_controller/", "verl/workers/rollout/", "verl/utils/device.py"),
    "openrlhf": ("openrlhf/trainer/ray/", "openrlhf/utils/distributed_util.py", "openrlhf/utils/logging_utils.py"),
    "ray": (
        "ray/util/collective/",
        "ray/train/torch/",
        "ray/experimental/channel/nccl_group.py",
        "ray/experimental/channel/torch_tensor_accelerator_channel.py",
        "ray/_private/ray_logging/",
        "ray/_private/log_monitor.py",
        "ray/_private/worker.py",  # how a worker's lines are prefixed on the driver: print_worker_logs
        "ray/exceptions.py",
    ),
}
# Packages of which only DIST_PATHS is read (Ray is large; the rest is not about a job's communication).
ONLY_DIST_PATHS = {"ray"}

KEYWORDS = re.compile(
    r"NCCL|\bnccl|[Aa]ll[-_ ]?[Rr]educe|all_gather|allgather|collective|[Pp]rocess ?[Gg]roup|init_process_group|"
    r"rendezvous|[Tt]imed? ?out|timeout|[Ww]atchdog|[Hh]eartbeat|weight[s]? (?:sync|update|broadcast)|update_weight|"
    r"broadcast|barrier|world[_ ]size|\brank\b|TCPStore|\bstore\b|communicator|\bP2P\b|\bp2p\b|NVLink|\bIPC\b|"
    r"shared memory|\bshm\b|CUDA error|out of memory|\bOOM\b|\bdied\b|\bdead\b|unresponsive|\bhang|\bhung\b|"
    r"MASTER_ADDR|MASTER_PORT|placement group|torch\.distributed|\bgloo\b|pynccl|custom_all_reduce|symm_mem"
)
# Code that is not about running distributed (model definitions, parsers, kernels): not read.
SKIP_PATHS = re.compile(
    r"/(?:models|tool_parsers|reasoning|multimodal|benchmarks|tests?|kernels|jit_kernel)/|_pb2\.py$"
)
_DATA_DIR = re.compile(r"^[^/]+\.data/(?:purelib|platlib)/")
KEEP_CALLS = {"exception", "log", "warn", "print", "constant"}


def component(package: str, rel: str) -> str:
    parts = rel.removesuffix(".py").split("/")
    parts = [p for p in parts if p != "__init__"]
    return ".".join(parts[:3]) if len(parts) > 2 else ".".join(parts)


def _keep(package: str, rel: str, message: pyscan.Message) -> bool:
    in_dist = rel.startswith(DIST_PATHS.get(package, ()))
    named = bool(KEYWORDS.search(message.template))
    if message.call not in KEEP_CALLS:
        return False
    if message.call == "constant":
        return in_dist or named
    if message.severity in {"info", "debug", "print"}:
        return named
    return in_dist or named


def fetch(package: str, version: str, cache: Path, downloads: Path) -> Path:
    out = cache / f"{package}-{version}"
    if (out / "meta.json").exists():
        return out
    wheel = pip_download(f"{package}=={version}", downloads, PLATFORMS, PYTHON_VERSION)
    partial = cache / f".{package}-{version}.partial"
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    with zipfile.ZipFile(wheel) as z:
        for member in sorted(z.namelist()):
            name = _DATA_DIR.sub("", member)  # some wheels (OpenRLHF) put the package under NAME.data/purelib/
            if not name.endswith(".py") or not name.startswith(package + "/"):
                continue
            if package in ONLY_DIST_PATHS and not name.startswith(DIST_PATHS[package]):
                continue
            target = partial / "py" / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(z.read(member))
    meta = {"package": package, "version": version, "wheel": wheel.name, "size": wheel.stat().st_size}
    meta["sha256"] = sha256(wheel)
    (partial / "meta.json").write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")
    wheel.unlink()
    shutil.rmtree(out, ignore_errors=True)
    partial.rename(out)
    return out


def collect(package: str, version: str, version_dir: Path, into: dict) -> int:
    root = version_dir / "py"
    count = 0
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        in_dist = rel.startswith(DIST_PATHS.get(package, ()))
        if not in_dist and SKIP_PATHS.search(rel):
            continue
        try:
            source = path.read_text(encoding="utf-8")
            if not in_dist and not KEYWORDS.search(source):
                continue
            found = pyscan.scan(source)
        except (SyntaxError, UnicodeDecodeError) as e:
            print(f"{package} {version}: {rel}: not parsed ({e})", file=sys.stderr)
            continue
        for m in found:
            if not _keep(package, rel, m):
                continue
            count += 1
            key = (package, component(package, rel), m.call, m.template)
            rec = into.setdefault(key, {})
            rec.setdefault(version, set()).add((rel, m.function, m.line, m.severity, m.exception))
    return count


def records(collected: dict) -> list[dict]:
    pins = dict(PINS)
    rows = []
    for (package, comp, call, template), seen in collected.items():
        versions = [v for v in pins[package] if v in seen]
        sites = sorted(seen[versions[-1]])
        digest = hashlib.sha1(f"{call}\0{template}".encode()).hexdigest()[:10]
        row: dict = {"id": f"{package}:{comp}:{digest}", "package": package, "component": comp}
        row |= {"template": template, "call": call, "versions": versions}
        row["severity"] = sorted({s[3] for s in sites})
        exceptions = sorted({s[4] for s in sites if s[4]})
        if exceptions:
            row["exception"] = exceptions
        row["sites"] = [f"{rel}:{line} ({function})" for rel, function, line, _, _ in sites]
        rows.append(row)
    rows.sort(key=lambda r: (r["package"], r["component"], r["template"], r["call"], r["id"]))
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    ap.add_argument("--out", type=Path, default=HERE / "data")
    args = ap.parse_args(argv)
    downloads = args.cache / "downloads"
    collected: dict = {}
    wheels = []
    for package, versions in PINS:
        for version in versions:
            version_dir = fetch(package, version, args.cache, downloads)
            meta = json.loads((version_dir / "meta.json").read_text())
            wheels.append({k: meta[k] for k in ("package", "version", "wheel", "size", "sha256")})
            n = collect(package, version, version_dir, collected)
            print(f"{package} {version}: {n} messages kept", file=sys.stderr)
    rows = records(collected)
    args.out.mkdir(parents=True, exist_ok=True)
    with open(args.out / "frameworks_messages.jsonl", "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, sort_keys=True, ensure_ascii=False) + "\n")
    (args.out / "frameworks_wheels.json").write_text(json.dumps(wheels, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
