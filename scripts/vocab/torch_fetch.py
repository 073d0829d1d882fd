"""Stage 1 of the torch extraction: download each pinned torch wheel, keep what the extraction reads, delete the wheel.

Kept per version, under CACHE/torch-X.Y.Z/: the Python sources the extraction reads (py/), the `.rodata` strings of
every shared library of torch/lib (rodata/<lib>.json.gz: [offset, text] in file order) and meta.json (the wheel's
name, size and sha256). A version already in the cache is not downloaded again.
"""

from __future__ import annotations

import gzip
import json
import shutil
import tempfile
import zipfile
from pathlib import Path

from elfstrings import rodata, strings
from wheels import pip_download, sha256

# Every minor version's last patch release on PyPI (checked with `pip index versions torch`).
TORCH_VERSIONS = (
    "2.0.1", "2.1.2", "2.2.2", "2.3.1", "2.4.1", "2.5.1", "2.6.0", "2.7.1",
    "2.8.0", "2.9.1", "2.10.0", "2.11.0", "2.12.1", "2.13.0", "2.14.1", "2.15.0",
)  # fmt: skip
# PyPI's Linux x86_64 wheels are the CUDA builds (libtorch_cuda.so holds ProcessGroupNCCL); older releases are tagged
# manylinux1/manylinux2014. pip picks the one that exists.
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux2014_x86_64", "manylinux1_x86_64")
PYTHON_VERSION = "3.11"

# Python sources read by the extraction (prefixes of paths inside the wheel).
PY_KEEP = ("torch/distributed/", "torch/utils/data/", "torch/multiprocessing/", "torch/cuda/", "torch/_utils.py")


def _is_library(name: str) -> bool:
    base = name.rsplit("/", 1)[-1]
    return (name.startswith("torch/lib/") and ".so" in base) or (name.startswith("torch/_C") and base.endswith(".so"))


def fetch(version: str, cache: Path, downloads: Path) -> Path:
    """CACHE/torch-VERSION, filled from the wheel (downloaded, read, then deleted) unless already there."""
    out = cache / f"torch-{version}"
    if (out / "meta.json").exists():
        return out
    wheel = pip_download(f"torch=={version}", downloads, PLATFORMS, PYTHON_VERSION)
    meta = {"version": version, "wheel": wheel.name, "size": wheel.stat().st_size, "sha256": sha256(wheel)}
    partial = cache / f".torch-{version}.partial"
    shutil.rmtree(partial, ignore_errors=True)
    (partial / "rodata").mkdir(parents=True)
    libraries = {}
    with zipfile.ZipFile(wheel) as z:
        for info in sorted(z.infolist(), key=lambda i: i.filename):
            name = info.filename
            if name.endswith(".py") and name.startswith(PY_KEEP):
                target = partial / "py" / name
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(z.read(info))
            elif _is_library(name):
                with tempfile.NamedTemporaryFile(dir=downloads, suffix=".so") as tmp:
                    with z.open(info) as src:
                        shutil.copyfileobj(src, tmp, 1 << 22)
                    tmp.flush()
                    found = strings(rodata(Path(tmp.name)))
                base = name.rsplit("/", 1)[-1]
                libraries[base] = len(found)
                with gzip.open(partial / "rodata" / f"{base}.json.gz", "wt", encoding="ascii") as f:
                    json.dump(found, f, separators=(",", ":"))
    meta["libraries"] = libraries
    (partial / "meta.json").write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")
    wheel.unlink()
    shutil.rmtree(out, ignore_errors=True)
    partial.rename(out)
    return out
