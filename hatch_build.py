"""Build hook: compile the optional C opcode scanner (`ncclpm/ingest/_frscan.c`).

No compiler, no Python headers, or any other failure: the wheel stays pure Python and `fr_scan.scan_py`
does the same work (slower). Editable installs get the module next to its source.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

SRC = Path("src/ncclpm/ingest/_frscan.c")


def _compile(root: Path, out: Path) -> bool:
    if os.environ.get("NCCLPM_PURE_PYTHON") or sys.platform == "win32":
        return False
    ldshared = (sysconfig.get_config_var("LDSHARED") or "cc -shared").split()
    flags = (sysconfig.get_config_var("CCSHARED") or "-fPIC").split()
    include = sysconfig.get_paths()["include"]
    cmd = [*ldshared, *flags, "-O2", "-I", include, str(root / SRC), "-o", str(out)]
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        print(f"ncclpm: C scanner not built ({exc}); using the pure-Python scanner", file=sys.stderr)
        return False
    if res.returncode != 0:
        print(f"ncclpm: C scanner not built; using the pure-Python scanner\n{res.stderr[-2000:]}", file=sys.stderr)
        return False
    return True


class CustomBuildHook(BuildHookInterface):
    def initialize(self, version: str, build_data: dict) -> None:
        root = Path(self.root)
        name = "_frscan" + (sysconfig.get_config_var("EXT_SUFFIX") or ".so")
        if version == "editable":
            _compile(root, root / SRC.parent / name)
            return
        out = Path(tempfile.mkdtemp(prefix="ncclpm-build-")) / name
        if _compile(root, out):
            build_data["pure_python"] = False
            build_data["infer_tag"] = True
            build_data["force_include"][str(out)] = f"ncclpm/ingest/{name}"
