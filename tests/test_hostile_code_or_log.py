"""Hostile and unlucky input, round three (issue 27), part 2: code or log is decided on the whole file, not its head.

A training log that begins with its printed configuration - `print(OmegaConf.to_yaml(cfg))` (Hydra, Lightning),
`json.dumps(cfg, indent=2)`, a `pprint`ed dict, an argparse `Namespace`, a 412-line `env` dump - read as a code
file: its failure was never read and `diagnose` said "nothing readable" (exit 2). A file with lines only a job
prints (`sources/code.py:_JOB_LINE`) is a log, whatever it begins with; code that quotes such lines (in strings,
comments, indented block scalars) stays code. Each test with a printed config failed before.
"""

from __future__ import annotations

import json
import pprint
import random
from pathlib import Path

import pytest
from click.testing import CliRunner

from ncclpm.api import diagnose
from ncclpm.cli import main
from ncclpm.sources.discover import SourceKind, collect

ROOT = Path(__file__).resolve().parents[1]
CASES = ROOT / "tests" / "cases"
# real failures: a CUDA OOM under torchrun (rank-prefixed lines) and the same traceback as a single process prints it
RANKED = (CASES / "excerpt_cuda_error_out_of_memory" / "input" / "train.log").read_text()
PLAIN = "\n".join(line.removeprefix("[rank1]: ") for line in RANKED.splitlines() if line.startswith("[rank1]: "))


def _hydra_yaml(rng: random.Random, lines: int) -> str:
    """What `OmegaConf.to_yaml(cfg)` prints for a Hydra config: nested keys, lists, interpolations, nulls."""
    out: list[str] = []
    section = 0
    while len(out) < lines:
        out.append(f"{rng.choice(['model', 'data', 'trainer', 'optim', 'callbacks', 'logger'])}_{section}:")
        for key in range(rng.randint(2, 10)):
            value = rng.choice(["true", "null", "adamw", "${model.dim}", "'???'", "0.0003", "bf16-mixed", "[1, 2]"])
            out.append(f"  key_{key}: {value}")
            if rng.random() < 0.3:
                out.append(f"  list_{key}:")
                out += [f"  - _target_: torch.nn.Linear{i}" for i in range(rng.randint(1, 4))]
        section += 1
    return "\n".join(out[:lines]) + "\n"


def _config(rng: random.Random) -> dict:
    return {
        f"section_{i}": {f"key_{j}": rng.choice([rng.random(), "adamw", None, True, [1, 2, 3]]) for j in range(10)}
        for i in range(45)
    }


def _printed(kind: str, rng: random.Random) -> str:
    if kind == "yaml":
        return _hydra_yaml(rng, 420)
    if kind == "json":
        return json.dumps(_config(rng), indent=2) + "\n"
    if kind == "pprint":
        return pprint.pformat(_config(rng), width=70) + "\n"
    if kind == "namespace":
        args = ", ".join(f"arg_{i}={rng.choice([rng.random(), 'cosine', None, True])!r}" for i in range(300))
        return f"Namespace({args})\n"
    if kind == "env":
        values = ["/usr/local/cuda/bin:/usr/bin", "1", "node001", "x86_64", "/opt/conda", "en_US.UTF-8", "4471201"]
        return "".join(f"VAR_{i}={rng.choice(values)}\n" for i in range(412))
    raise AssertionError(kind)


KINDS = ["yaml", "json", "pprint", "namespace", "env"]


@pytest.mark.parametrize("failure", ["ranked", "plain"])
@pytest.mark.parametrize("kind", KINDS)
def test_a_log_that_starts_with_a_printed_config_is_read_as_a_log(tmp_path: Path, kind: str, failure: str) -> None:
    rng = random.Random(hash((kind, failure)) & 0xFFFF)
    log = tmp_path / "train.log"
    log.write_text(_printed(kind, rng) + (RANKED if failure == "ranked" else PLAIN))
    assert [s.kind for s in collect([log]).sources] == [SourceKind.TEXT]
    d = diagnose([log])
    assert str(d.category) == "cuda_oom", (d.category, d.warnings)
    result = CliRunner().invoke(main, ["diagnose", str(log), "-f", "json"])
    assert result.exit_code == 0, result.output


def test_a_printed_config_in_a_gzipped_log_or_an_archive_member_too(tmp_path: Path) -> None:
    import gzip
    import tarfile

    text = (_printed("yaml", random.Random(5)) + PLAIN).encode()
    (tmp_path / "train.log.gz").write_bytes(gzip.compress(text))
    with tarfile.open(tmp_path / "job.tar", "w") as tf:
        info = tarfile.TarInfo("job/stdout")
        info.size = len(text)
        import io

        tf.addfile(info, io.BytesIO(text))
    for path in (tmp_path / "train.log.gz", tmp_path / "job.tar"):
        assert [s.kind for s in collect([path]).sources] == [SourceKind.TEXT], path


def test_a_file_larger_than_any_code_is_a_log(tmp_path: Path) -> None:
    big = tmp_path / "dump.yaml.log"
    with big.open("w") as fh:
        fh.write("config:\n  a: 1\n  b: 2\n  c: 3\n")
        fh.write("  key: value\n" * (33 * 1024**2 // 13))
    assert [s.kind for s in collect([big]).sources] == [SourceKind.TEXT]


# ------------------------------------------------------------------------------------------ code stays code

QUOTING_CODE = {
    "retry.py": '''"""Retry wrapper.

Example of what it catches:
Traceback (most recent call last):
  File "train.py", line 3, in <module>
[rank0]: torch.OutOfMemoryError: CUDA out of memory.
"""
import subprocess
PATTERNS = ["CUDA out of memory", "NCCL WARN"]
def run():
    return subprocess.run(["torchrun", "train.py"])
''',
    "job.yaml": """apiVersion: batch/v1
kind: Job
spec:
  template:
    spec:
      containers:
      - name: trainer
        command:
        - bash
        - -c
        - |
          torchrun train.py
          # expected on failure:
          [rank0]: Traceback (most recent call last):
          [rank0]:   File "train.py", line 3, in <module>
""",
    "run.sh": """#!/bin/bash
set -e
if grep -q "Traceback (most recent call last):" log.txt; then
  echo "[rank0]: failed"
fi
torchrun --nproc_per_node=8 train.py
""",
    "config.json": json.dumps({"note": 'Traceback (most recent call last):\n  File "x", line 1, in f', "lr": 1e-4}),
}


@pytest.mark.parametrize("name", sorted(QUOTING_CODE))
def test_code_that_quotes_a_job_line_stays_code(tmp_path: Path, name: str) -> None:
    (tmp_path / name).write_text(QUOTING_CODE[name])
    assert [s.kind for s in collect([tmp_path / name]).sources] == [SourceKind.CODE]


@pytest.mark.parametrize("kind", KINDS)
def test_a_printed_config_then_one_bare_exception_line_is_a_log(tmp_path: Path, kind: str) -> None:
    """A program that printed its config and died with one exception line and no traceback (a CUDA error raised at
    exit, a wrapper re-raising it): the exception line is the job's, so the file is a log (it was read as code)."""
    log = tmp_path / "train.log"
    log.write_text(
        _printed(kind, random.Random(7)) + "RuntimeError: CUDA error: an illegal memory access was encountered\n"
    )
    assert [s.kind for s in collect([log]).sources] == [SourceKind.TEXT]
    assert str(diagnose([log]).category) == "rank_crash"


def test_a_config_whose_last_key_names_an_exception_stays_code(tmp_path: Path) -> None:
    config = tmp_path / "retry.yaml"
    config.write_text(
        "retry:\n  attempts: 3\n" + "".join(f"  key_{i}: {i}\n" for i in range(420)) + "ValueError: skip\n"
    )
    assert [s.kind for s in collect([config]).sources] == [SourceKind.CODE]
