"""Download one released wheel from PyPI with pip and hand back its path (shared by the torch and framework scripts).

pip is run with no configuration file and no extra index or local wheel folder, so what it downloads is what PyPI
serves for the pinned version, on any machine (a site's pip.conf may cap or shadow versions).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

INDEX = "https://pypi.org/simple"


def pip_download(requirement: str, dest: Path, platforms: tuple[str, ...] = (), python_version: str = "") -> Path:
    """`pip download --no-deps` of one pinned requirement into `dest`; the one wheel it saved."""
    dest.mkdir(parents=True, exist_ok=True)
    before = set(dest.iterdir())
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--index-url", INDEX]
    cmd += ["--disable-pip-version-check", "--progress-bar", "off", "-d", str(dest)]
    for platform in platforms:
        cmd += ["--platform", platform]
    if python_version:
        cmd += ["--python-version", python_version, "--implementation", "cp"]
    cmd.append(requirement)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env["PIP_CONFIG_FILE"] = os.devnull  # no site cap (constraints), no local index or wheel folder
    env["PIP_DEFAULT_TIMEOUT"] = "180"
    cert = os.environ.get("PIP_CERT")
    if cert:
        env["PIP_CERT"] = cert
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
    new = sorted(p for p in dest.iterdir() if p not in before and p.suffix == ".whl")
    if not new:  # already there from an earlier run
        name = requirement.split("==")[0].replace("-", "_").lower()
        version = requirement.split("==")[1]
        new = sorted(p for p in dest.glob("*.whl") if p.name.lower().startswith(f"{name}-{version}-"))
    if len(new) != 1:
        raise RuntimeError(f"pip download {requirement}: expected one wheel, found {[p.name for p in new]}")
    return new[0]


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
