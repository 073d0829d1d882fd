"""Generate a folder of job archives for trying and timing `ncclpm triage`.

    python -m tests.synth.make_jobs OUT_DIR --n 200 [--seed 0] [--templates tests/cases]

Most jobs are copies of the case folders (`tests/cases/*/input`, and the `sample_logs/` jobs they point at) - real
failures of every category - packed as `.tar.gz`, `.tgz`, `.zip`, `.tar` or `.tar.zst`, under a per-job top
folder, with noise: launcher chatter prepended to the text logs (shifting every line number). 8% are two
failure modes no rule knows (a checksum error on a checkpoint shard, a Lustre lock error), written from scratch
with a random world size, failing rank, host names and numbers - they must come out of the summary as two
clusters. 4% are broken on purpose: a truncated `.tar.gz`, random bytes named `.tar.gz`, a zip bomb
(300 MB of zeros in 300 kB), an empty tar, a zip of binary junk. A few jobs are left as plain folders.
`OUT_DIR/expected.csv` lists every job with the category of its template ("unknown" for the novel modes, "error"
for the broken ones). Deterministic for a given seed.
"""

from __future__ import annotations

import argparse
import csv
import io
import random
import tarfile
import tomllib
import zipfile
from collections.abc import Iterator
from pathlib import Path

import zstandard

ROOT = Path(__file__).resolve().parents[2]
FORMATS = (".tar.gz", ".tgz", ".zip", ".tar", ".tar.zst")
TEXT_SUFFIXES = (".log", ".out", ".txt", ".stderr", ".stdout")
NOISE = (
    "wandb: Tracking run with wandb version 0.16.{n}",
    "INFO:root:Loaded config from /shared/configs/run{n}.yaml",
    "[launcher] job {n} starting on $(hostname) with {n} GPUs per node",
    "Using /home/user/.cache/torch_extensions/py311_cu121 as PyTorch extensions root...",
    "tokenizer: loaded vocabulary of {n} entries",
)


def templates(cases: Path) -> list[tuple[str, str, Path]]:
    """(name, expected category, input folder) for every case folder of a failure with a known cause (a case
    expecting `unknown` - a healthy job - would blur the clusters of the novel failure modes)."""
    out = []
    for spec_file in sorted(cases.glob("*/expected.toml")):
        spec = tomllib.loads(spec_file.read_text())
        if spec["category"] == "unknown":
            continue
        folder = ROOT / spec["input"] if "input" in spec else spec_file.parent / "input"
        if folder.is_dir():
            out.append((spec_file.parent.name, spec["category"], folder))
    return out


def _noisy(data: bytes, rng: random.Random) -> bytes:
    lines = [rng.choice(NOISE).format(n=rng.randint(1, 9999)) for _ in range(rng.randint(1, 6))]
    return ("\n".join(lines) + "\n").encode() + data


def _members(folder: Path, top: str, rng: random.Random) -> Iterator[tuple[str, bytes]]:
    for f in sorted(folder.rglob("*")):
        if f.is_file():
            data = f.read_bytes()
            if f.suffix in TEXT_SUFFIXES and f.name.startswith(("console", "slurm")):
                data = _noisy(data, rng)
            yield f"{top}/{f.relative_to(folder)}", data


def _novel(kind: str, rng: random.Random) -> dict[str, bytes]:
    """A failure no rule knows, with random ranks, hosts and numbers (same signature every time)."""
    world = rng.choice((2, 4, 8, 16))
    bad = rng.randrange(world)
    host = f"node{rng.randint(1, 400):03d}"
    lines = [
        f"[default{r}]:[2026-03-0{rng.randint(1, 9)}T10:0{r % 10}:00.000] rank{r} pid{4000 + r}: torch 2.6.0 "
        f"host={host} init_process_group(nccl) WORLD_SIZE={world}"
        for r in range(world)
    ]
    lines += [
        f"[default{r}]:[2026-03-01T10:10:00.000] rank{r} pid{4000 + r}: step {s} loss {rng.random():.4f}"
        for s in range(1, 4)
        for r in range(world)
    ]
    if kind == "checksum":
        msg = (
            f"FATAL: checkpoint shard {rng.randint(0, 63)} of 64 has checksum 0x{rng.getrandbits(32):08x}, "
            f"expected 0x{rng.getrandbits(32):08x} (/lustre/ckpt/run{rng.randint(1, 99)}/shard.pt)"
        )
    else:
        msg = (
            f"lustre: ldlm_cli_enqueue failed for /lustre/scratch/u{rng.randint(100, 999)}/data/part-"
            f"{rng.randint(0, 999):05d}.bin: rc = -108 (ESHUTDOWN) on {host}"
        )
    lines.append(f"[default{bad}]:[2026-03-01T10:12:00.000] rank{bad} pid{4000 + bad}: {msg}")
    return {"console.log": ("\n".join(lines) + "\n").encode()}


def _pack(members: list[tuple[str, bytes]], fmt: str) -> bytes:
    buf = io.BytesIO()
    if fmt == ".zip":
        with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
            for name, data in members:
                zf.writestr(zipfile.ZipInfo(name, date_time=(2024, 1, 1, 0, 0, 0)), data, zipfile.ZIP_DEFLATED)
        return buf.getvalue()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(data), 1_700_000_000
            tar.addfile(info, io.BytesIO(data))
    raw = buf.getvalue()
    if fmt in (".tar.gz", ".tgz"):
        import gzip

        return gzip.compress(raw, mtime=0)
    return zstandard.ZstdCompressor().compress(raw) if fmt == ".tar.zst" else raw


def _broken(kind: str, rng: random.Random, sample: list[tuple[str, bytes]]) -> tuple[str, bytes]:
    if kind == "truncated":
        return ".tar.gz", _pack(sample, ".tar.gz")[:120]  # an upload cut short
    if kind == "random":
        return ".tar.gz", rng.randbytes(50_000)
    if kind == "bomb":
        buf = io.BytesIO()
        with (
            zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as zf,
            zf.open("logs/rank0.log", "w", force_zip64=True) as fh,
        ):
            block = b"\0" * (1 << 20)
            for _ in range(300):
                fh.write(block)
        return ".zip", buf.getvalue()
    if kind == "empty":
        return ".tar", _pack([], ".tar")
    return ".zip", _pack([("junk/core.1234", rng.randbytes(20_000))], ".zip")


def make_jobs(out: Path, n: int, seed: int = 0, cases: Path = ROOT / "tests" / "cases") -> list[dict[str, str]]:
    """Write `n` jobs into `out` and return the manifest rows (also written to `out/expected.csv`)."""
    rng = random.Random(seed)
    pool = templates(cases)
    if not pool:
        raise SystemExit(f"no case folders under {cases} (use --templates)")
    out.mkdir(parents=True, exist_ok=True)
    broken = ["truncated", "random", "bomb", "empty", "junk"]
    manifest = []
    order = rng.sample(pool, len(pool))
    for i in range(n):
        name = f"job-{i:04d}"
        fmt = FORMATS[i % len(FORMATS)]
        if i % 25 == 7:  # 4% broken
            kind = broken[(i // 25) % len(broken)]
            fmt, data = _broken(kind, rng, list(_members(order[0][2], name, rng))[:3])
            expected, template = "error", f"broken:{kind}"
        elif i % 12 == 5:  # 8% novel failure modes
            kind = ("checksum", "lustre")[(i // 12) % 2]
            data = _pack([(f"{name}/{k}", v) for k, v in _novel(kind, rng).items()], fmt)
            expected, template = "unknown", f"novel:{kind}"
        else:
            template, expected, folder = order[i % len(order)]
            members = list(_members(folder, name, rng))
            if i % 33 == 20:  # a few plain folders among the archives
                for mname, mdata in members:
                    target = out / mname
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(mdata)
                manifest.append({"job": str(out / name), "expected": expected, "template": template})
                continue
            data = _pack(members, fmt)
        path = out / f"{name}{fmt}"
        path.write_bytes(data)
        manifest.append({"job": str(path), "expected": expected, "template": template})
    with (out / "expected.csv").open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=["job", "expected", "template"])
        w.writeheader()
        w.writerows(manifest)
    return manifest


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--templates", type=Path, default=ROOT / "tests" / "cases", help="folder of case folders")
    args = ap.parse_args(argv)
    rows = make_jobs(args.out, args.n, args.seed, args.templates)
    print(f"wrote {len(rows)} jobs to {args.out} (manifest: {args.out / 'expected.csv'})")


if __name__ == "__main__":
    main()
