"""Build hook: record the shipped TOML catalogs' parse (`ncclpm/_toml_snapshot.bin`, read by
`ncclpm.util.resources.read_toml` while each file's hash still matches) and the report templates' compiled code
(`ncclpm/_templates_snapshot.bin`, `ncclpm.render.template_code`), and compile the optional C modules: the opcode
scanner (`ncclpm/ingest/flight_recorder/_frscan.c`), the dump decoder (`ncclpm/ingest/flight_recorder/_frdecode.c`)
and the text path's anchor matcher and line cutter (`ncclpm/ingest/text/_textcut.c`), each beside the Python
reference it speeds up.

No compiler, no Python headers, or any other failure: that module is left out and the Python code does the same
work (slower: `fr_scan.scan_py`, the restricted unpickler in `fr_decode`, the regex and `rawscan.cut_rows`).
Editable installs get the modules next to their sources.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

SOURCES = (
    Path("src/ncclpm/ingest/flight_recorder/_frscan.c"),
    Path("src/ncclpm/ingest/flight_recorder/_frdecode.c"),
    Path("src/ncclpm/ingest/text/_textcut.c"),
)


def _compile(root: Path, src: Path, out: Path) -> bool:
    if os.environ.get("NCCLPM_PURE_PYTHON") or sys.platform == "win32":
        return False
    ldshared = (sysconfig.get_config_var("LDSHARED") or "cc -shared").split()
    flags = (sysconfig.get_config_var("CCSHARED") or "-fPIC").split()
    include = sysconfig.get_paths()["include"]
    cmd = [*ldshared, *flags, "-O2", "-I", include, str(root / src), "-o", str(out)]
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        print(f"ncclpm: {src.name} not built ({exc}); using the pure-Python code", file=sys.stderr)
        return False
    if res.returncode != 0:
        print(f"ncclpm: {src.name} not built; using the pure-Python code\n{res.stderr[-2000:]}", file=sys.stderr)
        return False
    return True


def _module(root: Path, name: str, path: str) -> Any:
    """A module of the package loaded by path (the package itself is not importable in the build env)."""
    spec = importlib.util.spec_from_file_location(name, root / path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _write_snapshots(root: Path, folder: Path) -> list[str]:
    """`ncclpm.util.resources.write_toml_snapshot` and `ncclpm.render.template_code.write_template_snapshot` into
    `folder`; returns the files written. A failure leaves that snapshot out: the catalogs are then parsed, the
    templates compiled, at each run."""
    written = []
    for name, path, function, source in (
        ("_toml_snapshot.bin", "src/ncclpm/util/resources.py", "write_toml_snapshot", "parsers"),
        ("_templates_snapshot.bin", "src/ncclpm/render/template_code.py", "write_template_snapshot", "templates"),
    ):
        try:
            module = _module(root, f"_ncclpm_{function}", path)
            getattr(module, function)(root / source, folder / name)
            written.append(name)
        except Exception as exc:  # a build must not fail for a start-up speed-up
            print(f"ncclpm: {name} not written ({exc}); done at each run instead", file=sys.stderr)
    return written


class CustomBuildHook(BuildHookInterface):
    def initialize(self, version: str, build_data: dict) -> None:
        root = Path(self.root)
        tmp = None
        if version == "editable":
            _write_snapshots(root, root / "src/ncclpm")
        else:
            tmp = Path(tempfile.mkdtemp(prefix="ncclpm-build-"))
            for name in _write_snapshots(root, tmp):
                build_data["force_include"][str(tmp / name)] = f"ncclpm/{name}"
        for src in SOURCES:
            name = src.stem + (sysconfig.get_config_var("EXT_SUFFIX") or ".so")
            if version == "editable":
                _compile(root, src, root / src.parent / name)
                continue
            tmp = tmp or Path(tempfile.mkdtemp(prefix="ncclpm-build-"))
            if _compile(root, src, tmp / name):
                build_data["pure_python"] = False
                build_data["infer_tag"] = True
                build_data["force_include"][str(tmp / name)] = str(src.parent / name).removeprefix("src/")
