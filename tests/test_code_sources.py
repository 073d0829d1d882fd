"""Code in a job folder is not a log (issue 16): it is recognised by content, read for settings only, and never
yields an event, a traceback, a timeout or an error; the report says which files were read that way."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ncclpm.analysis import analyse
from ncclpm.analysis.timeout import configured_pg_timeout
from ncclpm.api import build, diagnose
from ncclpm.ingest.code.settings import load_readings, run_reading_examples
from ncclpm.render import render
from ncclpm.report.settings import settings_rows
from ncclpm.sources.code import code_language
from ncclpm.tables.schema import Category
from tests.shared import ABSENT, corpus

ROOT = Path(__file__).resolve().parents[1]
HEALTHY = ROOT / "tests" / "cases" / "code_snapshot__healthy_job" / "input"
CODE = [HEALTHY / "code_snapshot.log", HEALTHY / "code" / "retry.py", HEALTHY / "launch.sh"]
SAMPLES = sorted(p for p in (ROOT / "sample_logs").iterdir() if p.is_dir())
REAL = corpus("real-issues", "cases")
FAILURES = {str(c) for c in Category} - {"unknown", "symptom", "no_failure", "not_a_training_log"}

# Every kind of line a rule could take as evidence, as code and configs quote them.
LOG_LINES = [
    "[rank1]:[E204 16:42:57.121219129 ProcessGroupNCCL.cpp:688] [Rank 1] Watchdog caught collective operation "
    "timeout: WorkNCCL(SeqNum=6764, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600005 "
    "milliseconds before timing out.",
    "RuntimeError: nvmlDeviceGetHandleByIndex(0) failed: Unknown Error",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
    "gpu-a01:4242:4300 [0] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got completion from peer 10.0.0.2<59130> "
    "with status=12 opcode=0 len=0 vendor err 129 (Recv)",
    "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus.",
    "torch.distributed.elastic.multiprocessing.api: [ERROR] failed (exitcode: -9) local_rank: 1 (pid: 48213)",
    "RuntimeError: DataLoader worker (pid 1234) is killed by signal: Killed.",
]


def _code_snapshot(folder: Path) -> None:
    """Code and configs that quote every log line above - in docstrings, pattern lists, comments, shell
    `echo`/`grep`, YAML and JSON values, a notebook - plus the healthy case's real code."""
    folder.mkdir(parents=True, exist_ok=True)
    quoted = ",\n".join(f"    {json.dumps(line)}" for line in LOG_LINES)
    doc = "\n".join(f"    {line}" for line in LOG_LINES)
    (folder / "patterns.py").write_text(
        f'"""Known failures, as they show in the logs:\n\n{doc}\n"""\n\nimport re\n\nPATTERNS = [\n{quoted},\n]\n\n\n'
        "def matches(text: str) -> bool:\n    # e.g. 'Traceback (most recent call last):' then the error line\n"
        "    return any(p in text for p in PATTERNS)\n"
    )
    (folder / "watch.sh").write_text(
        "#!/bin/bash\nset -euo pipefail\n"
        + "".join(f"if grep -qF {json.dumps(line)} train.log; then echo 'retrying'; fi\n" for line in LOG_LINES)
    )
    (folder / "alerts.yaml").write_text(
        "alerts:\n  patterns:\n" + "".join(f"    - {json.dumps(line)}\n" for line in LOG_LINES) + "  notify: ops\n"
    )
    (folder / "alerts.json").write_text(json.dumps({"patterns": LOG_LINES, "notify": "ops"}, indent=2))
    cells = [{"cell_type": "code", "metadata": {}, "source": [f"print({json.dumps(line)})\n" for line in LOG_LINES]}]
    (folder / "debug.ipynb").write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4}, indent=1))
    for src in CODE:
        shutil.copy(src, folder / src.name)


def test_the_healthy_job_with_a_code_snapshot_full_of_error_strings_is_not_a_failure() -> None:
    d = diagnose([HEALTHY])
    assert str(d.category) == "no_failure" and d.primary.rule == "OK01", d.summary
    assert not any(e.file.endswith((".py", ".log")) and "nvml" in e.text for f in d.findings for e in f.evidence)
    assert set(d.code_files) == {"code_snapshot.log", "launch.sh", "code/retry.py"}
    assert d.n_sources == 1, "console.log is the only evidence"


def test_a_folder_holding_only_code_is_not_diagnosed_from_it(tmp_path: Path) -> None:
    _code_snapshot(tmp_path / "job")
    t = build([tmp_path / "job"])
    for name in ("lines", "events", "tracebacks", "elastic", "ranks"):
        assert getattr(t, name).is_empty(), f"{name} taken from code"
    assert t.sources == () and len(t.code_sources) == 8
    d = diagnose([tmp_path / "job"])
    assert str(d.category) == "not_a_training_log" and not d.decisive
    assert any("no readable log" in w and "8 code files read for settings only" in w for w in d.warnings)


@pytest.mark.parametrize("sample", SAMPLES, ids=[s.name for s in SAMPLES])
def test_a_failed_job_keeps_its_verdict_when_code_sits_beside_its_logs(tmp_path: Path, sample: Path) -> None:
    job = tmp_path / sample.name
    shutil.copytree(sample, job)
    _code_snapshot(job / "code")
    alone, with_code = diagnose([sample]), diagnose([job])
    assert (with_code.category, with_code.culprit_ranks) == (alone.category, alone.culprit_ranks)
    # Code may add a setting fact (a timeout the code sets that is not the one in force, TS01), never lower it.
    assert with_code.confidence >= alone.confidence - 1e-9
    assert not [e for f in with_code.findings for e in f.evidence if e.file.startswith("code/")]
    assert len(with_code.code_files) >= 8 and with_code.n_sources == alone.n_sources


def test_a_log_with_a_pasted_traceback_is_still_a_log(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text(
        "I launched it on two nodes and rank 1 printed this:\n"
        "Traceback (most recent call last):\n"
        '  File "/workspace/train.py", line 41, in <module>\n'
        "    main()\n"
        '  File "/workspace/train.py", line 12, in main\n'
        '    dist.init_process_group("nccl", timeout=timedelta(seconds=60))\n'
        '  File "/opt/conda/lib/python3.10/site-packages/torch/distributed/c10d_logger.py", line 79, in wrapper\n'
        "    return func(*args, **kwargs)\n"
        "torch.distributed.DistStoreError: Timed out after 61 seconds waiting for clients. 1/2 clients joined.\n"
    )
    t = build([log])
    assert t.sources == ("train.log",) and t.code_sources == ()
    assert not t.tracebacks.is_empty()
    assert str(diagnose([log]).category) == "init_rendezvous"


def test_a_log_named_like_code_is_a_log_and_code_named_like_a_log_is_code(tmp_path: Path) -> None:
    sample = ROOT / "sample_logs" / "nccl_nvml_unknown_error"
    shutil.copy(sample / "deepspeed_train.log", tmp_path / "job.py.log")
    shutil.copy(HEALTHY / "code" / "retry.py", tmp_path / "train.log")
    d = diagnose([tmp_path])
    assert d.code_files == ("train.log",) and d.n_sources == 1
    assert str(d.category) == "nvml_driver_failure"
    assert {e.file for e in d.primary.evidence} == {"job.py.log"}


@pytest.mark.parametrize(
    ("name", "text", "lang"),
    [
        ("train.py", "import torch\n\nx = 1\n", "python"),
        ("notes.txt", "dataset = dataset.map(\n    fn,\n    batched=True,\n)\n", "python"),
        ("rank0.log", "[rank0]: epoch 1 loss 0.5\n[rank0]: training done\n", None),
        ("dump.txt", 'Thread 0x7F (idle): "MainThread"\n    wait (threading.py:302)\n    get (queue.py:170)\n', None),
        (
            "node1.log",
            "terminate called after throwing an instance of 'x'\n  what():  boom\nAborted (core dumped)\n",
            None,
        ),
        (
            "out.log",
            "Parallelism: rank=4, ep_size=2\nCreating model stage 1 of 2\nParallelism: rank=5, ep_size=2\n",
            None,
        ),
        ("README.md", "# Job\n\n```python\nimport os\nimport torch\ndef f():\n    pass\n```\nIt hung.\n", None),
        ("events.json", '{"ts": 1, "msg": "a"}\n{"ts": 2, "msg": "b"}\n', None),
        ("ds_config.json", '{"train_batch_size": 32, "zero_optimization": {"stage": 2}}\n', "json"),
        ("run.ipynb", json.dumps({"cells": [], "nbformat": 4}), "notebook"),
        ("build.txt", "FROM nvcr.io/nvidia/pytorch:24.01-py3\nENV NCCL_DEBUG=INFO\nRUN pip install x\n", "dockerfile"),
        ("job.env", "HOME=/home/ml\nNCCL_DEBUG=INFO\nNCCL_P2P_DISABLE=1\n", "shell"),
        ("submit", "#!/bin/bash\n#SBATCH --nodes=2\nsrun python train.py\n", "shell"),
        (
            "cfg.txt",
            "compute_environment: LOCAL_MACHINE\ndeepspeed_config:\n  zero_stage: 2\nnum_processes: 8\n",
            "yaml",
        ),
        ("train.yaml", "model:\n  name: llama\n", "yaml"),
        (  # pdsh's host tag on every line of a torchrun summary: a log, not YAML keys
            "pasted.txt",
            "worker-7: Root Cause (first observed failure):\nworker-7: [0]:\nworker-7:   time      : 2026-11-22_08:37:56\n"
            "worker-7:   host      : worker-7\nworker-7:   rank      : 3 (local_rank: 3)\n"
            "worker-7:   exitcode  : 1 (pid: 32121)\nworker-7:   traceback : Traceback (most recent call last):\n"
            'worker-7:     File "/w/crash.py", line 32, in body\nworker-7:   RuntimeError: loss is NaN\nworker-7: \n',
            None,
        ),
        (  # many hyphenated keys, each once: still YAML
            "cfg.txt",
            "train-batch-size: 8\nlearning-rate: 1e-4\nwarmup-steps: 100\nzero-stage: 2\nmodel-name: llama-3\n"
            "optimizer:\n  type: adamw\n",
            "yaml",
        ),
        ("cfg.toml", '[env]\nNCCL_DEBUG = "INFO"\n', "toml"),
        (
            "run.log",
            "[INFO|training_args.py:1234] 2024-01-01 10:00:00 >> TrainingArguments(\n_n_gpu=1,\nddp_timeout=1800,\n"
            "adafactor=False,\n)\n[rank0]: Traceback (most recent call last):\n[rank0]: RuntimeError: boom\n",
            None,
        ),
    ],
)
def test_code_and_config_are_recognised_by_content(name: str, text: str, lang: str | None) -> None:
    assert code_language(name, text.encode()) == lang


def test_a_long_python_file_cut_by_the_head_is_still_python() -> None:
    body = "".join(f"def f{i}(x):\n    '''Doc {i}.'''\n    return x + {i}\n\n\n" for i in range(4000))
    head = body.encode()[:65536]
    assert code_language("snapshot.log", head, truncated=True) == "python"


def test_every_reading_example_and_counterexample_holds() -> None:
    readings, _ = load_readings()
    assert readings and all(r.examples for r in readings)
    assert run_reading_examples() == []


def test_settings_from_a_multi_line_call_carry_the_line_of_the_value(tmp_path: Path) -> None:
    (tmp_path / "distributed.py").write_text(
        "import datetime\nimport torch.distributed as dist\n\n\ndef init(opt):\n"
        "    dist.init_process_group(\n        backend='nccl',\n        init_method='env://',\n"
        "        timeout=datetime.timedelta(seconds=60),\n    )\n    torch.cuda.set_device(opt.local_rank)\n"
    )
    t = build([tmp_path])
    assert configured_pg_timeout(t).as_dict() == {
        "seconds": 60.0,
        "value": "datetime.timedelta(seconds=60)",
        "name": "init_process_group(timeout=)",
        "file": "distributed.py",
        "line": 9,
    }
    assert "absent" not in t.extra["code_settings"]["value"].to_list()


def test_a_snippet_copied_from_a_terminal_is_read_re_joined(tmp_path: Path) -> None:
    """A hard wrap cut the setting mid-name (`timede` + `lta(...)`); the fact is read and quoted at its line."""
    line = "accelerator = Accelerator(kwargs_handlers=[InitProcessGroupKwargs(timeout=timedelta(seconds=6 * 1800))])"
    (tmp_path / "train.py").write_text("import os\n" + line[:80] + "\n" + line[80:] + "\n")
    got = configured_pg_timeout(build([tmp_path]))
    assert got is not None and got.seconds == 10800.0 and got.line == 2


def test_a_timeout_that_differs_from_the_one_in_force_is_flagged(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(
        "from datetime import timedelta\nfrom accelerate import Accelerator, InitProcessGroupKwargs\n"
        "accelerator = Accelerator(kwargs_handlers=[InitProcessGroupKwargs(timeout=timedelta(hours=3))])\n"
    )
    shutil.copy(ROOT / "sample_logs" / "nccl_rank0_sample_generation" / "slurm-48211.out", tmp_path)
    rows = {s["var"]: s for s in diagnose([tmp_path]).settings}
    row = rows["InitProcessGroupKwargs(timeout=)"]
    assert (row["file"], row["line"], row["severity"]) == ("train.py", 3, "warn")
    assert (
        "3 h" in row["verdict"]
        and "Timeout(ms)=600000" in row["verdict"]
        and "not the timeout in force" in row["verdict"]
    )


def test_every_report_format_says_what_was_read_for_settings_only() -> None:
    d = diagnose([HEALTHY])
    assert "3 code files read for settings only" in render(d, "md")
    assert "3 code files read for settings only" in render(d, "html")
    assert sorted(json.loads(render(d, "json"))["code_files"]) == sorted(d.code_files)


def test_a_code_file_name_is_escaped_in_the_reports(tmp_path: Path) -> None:
    (tmp_path / "<img src=x onerror=alert(1)>.py").write_text("import os\nos.environ['NCCL_DEBUG'] = 'INFO'\n")
    (tmp_path / "rank0.log").write_text("[rank0]: training done\n")
    d = diagnose([tmp_path])
    assert d.code_files and d.settings[0]["file"].startswith("<img")
    assert "<img" not in render(d, "md").replace("\\<", "") and "<img" not in render(d, "html")  # `\\<` shows `<`


REAL_SNIPPETS = [
    ("d027", "distributed_py_snippet.txt", "python"),
    ("d052", "code_snippet.txt", "python"),
    ("d054", "code_snippet.txt", "python"),
    ("d047", "launch_cmd.txt", "shell"),
]


@pytest.mark.skipif(not REAL.is_dir(), reason=f"{ABSENT} (real-issues)")
@pytest.mark.parametrize(("case", "name", "lang"), REAL_SNIPPETS, ids=[c for c, _, _ in REAL_SNIPPETS])
def test_real_code_snippets_are_code_and_only_improve_the_verdict(case: str, name: str, lang: str) -> None:
    """Code is never evidence, but its settings may decide: d052's code raises a timeout the logs show was never
    applied (the thread's resolution). With the code the answer is never further from the label."""
    import json

    folder = REAL / case
    assert code_language(name, (folder / name).read_bytes()) == lang
    label = json.loads((folder / "label.json").read_text())
    logs = [p for p in sorted(folder.iterdir()) if p.name not in (name, "label.json")]
    alone, both = diagnose(logs), diagnose([*logs, folder / name])

    def score(d) -> float:
        return 1.0 if d.category == label["category"] else 0.5 if d.category in label["secondary"] else 0.0

    assert score(both) >= score(alone)
    if both.category == alone.category:
        assert both.confidence >= alone.confidence - 1e-9  # a setting the code confirms may only strengthen it
    assert both.code_files == (name,) and not [e for e in both.decisive if e.file == name]


@pytest.mark.skipif(not REAL.is_dir(), reason=f"{ABSENT} (real-issues)")
def test_the_real_60_s_timeout_is_read_with_its_line_and_matches_the_logs() -> None:
    folder = REAL / "d027"
    t = build([folder / "train.log", folder / "distributed_py_snippet.txt"])
    assert configured_pg_timeout(t).as_dict() == {
        "seconds": 60.0,
        "value": "timedelta(seconds=60)",
        "name": "init_process_group(timeout=)",
        "file": "distributed_py_snippet.txt",
        "line": 6,
    }
    row = next(r for r in settings_rows(analyse(t)) if r["var"] == "init_process_group(timeout=)")
    assert "60 s" in row["verdict"] and "Timeout(ms)=60000 is this setting" in row["verdict"]


@pytest.mark.skipif(not REAL.is_dir(), reason=f"{ABSENT} (real-issues)")
def test_the_real_3_h_timeout_is_not_the_one_in_force() -> None:
    folder = REAL / "d052"
    settings = settings_rows(analyse(build([folder / "train.log", folder / "code_snippet.txt"])))
    row = next(r for r in settings if r["var"] == "InitProcessGroupKwargs(timeout=)")
    assert row["severity"] == "warn" and "3 h" in row["verdict"] and "Timeout(ms)=1800000" in row["verdict"]


@pytest.mark.skipif(not REAL.is_dir(), reason=f"{ABSENT} (real-issues)")
def test_the_real_launch_command_gives_its_launcher_arguments() -> None:
    code = build([REAL / "d047" / "launch_cmd.txt"]).extra["code_settings"]
    args = dict(zip(code["name"].to_list(), code["value"].to_list(), strict=True))
    assert args["colossalai run --nproc_per_node"] == "3"
    assert args["colossalai run --master_addr"] == "GPU03"
    assert args["colossalai run --host"] == "GPU03,GPU01"


@pytest.mark.parametrize(
    ("sample", "rule"), [("nccl_allgather_timeout_4gpu", "TO01"), ("nccl_rank0_sample_generation", "ST01")]
)
def test_rules_say_where_the_timeout_in_force_was_set(tmp_path: Path, sample: str, rule: str) -> None:
    job = tmp_path / sample
    shutil.copytree(ROOT / "sample_logs" / sample, job)
    timeout_ms = diagnose([job]).failing_collective["timeout_ms"]
    dist = job / "dist.py"
    dist.write_text(
        f"import datetime\nimport torch.distributed as dist\n\nTIMEOUT = datetime.timedelta(seconds={timeout_ms // 1000})\n"
        "dist.init_process_group('nccl', timeout=TIMEOUT)\n"
    )
    d = diagnose([job])
    assert d.primary.rule == rule and "set by `init_process_group(timeout=)` = `TIMEOUT` at dist.py:5" in d.summary
    dist.write_text(
        "import datetime\nimport torch.distributed as dist\n\n"
        "dist.init_process_group('nccl', timeout=datetime.timedelta(hours=2))\n"
    )
    d = diagnose([job])
    # A timeout the code raises but the logs show was not in force: TS01 says so (ST01 names the busy rank first).
    assert d.primary.rule in (rule, "TS01") and "2 h" in d.summary and "never reached" in d.summary


def test_control_characters_in_code_never_reach_a_report(tmp_path: Path) -> None:
    (tmp_path / "t.py").write_text(
        'import os\nos.environ["NCCL_DEBUG"] = "\x1b[31mINFO\x07"\n'
        "dist.init_process_group('nccl', timeout=timedelta(seconds=x\x1b[2J))\n"
    )
    code = build([tmp_path]).extra["code_settings"]
    assert not any(any(ch in str(v) for ch in "\x1b\x07") for row in code.iter_rows() for v in row)
    md = render(diagnose([tmp_path]), "md")
    assert "\x1b" not in md and "\x07" not in md and "INFO" in md


def test_a_notebook_is_read_cell_by_cell_with_file_lines(tmp_path: Path) -> None:
    cells = [
        {"cell_type": "markdown", "metadata": {}, "source": ["Run with `init_process_group(timeout=timedelta(1))`"]},
        {"cell_type": "code", "metadata": {}, "outputs": [], "source": ["%env NCCL_DEBUG=INFO\n", "import os\n"]},
        {
            "cell_type": "code",
            "metadata": {},
            "outputs": [{"output_type": "stream", "name": "stderr", "text": [LOG_LINES[0]]}],
            "source": ["dist.init_process_group(\n", "    'nccl',\n", "    timeout=timedelta(minutes=45),\n", ")\n"],
        },
        {"cell_type": "code", "metadata": {}, "source": ["!torchrun --nproc_per_node=4 train.py"]},
    ]
    nb = tmp_path / "debug.ipynb"
    nb.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}, indent=1))
    t = build([tmp_path])
    assert t.code_sources == ("debug.ipynb",) and t.events.is_empty(), "cell outputs are not evidence either"
    facts = {r["name"]: r for r in t.extra["code_settings"].iter_rows(named=True)}
    lines = nb.read_text().splitlines()
    timeout = facts["init_process_group(timeout=)"]
    assert timeout["number"] == 2700.0 and "timeout=timedelta(minutes=45)" in lines[timeout["line"] - 1]
    assert facts["NCCL_DEBUG"]["value"] == "INFO" and "%env NCCL_DEBUG" in lines[facts["NCCL_DEBUG"]["line"] - 1]
    assert facts["torchrun --nproc_per_node"]["value"] == "4"


def test_comment_stripping_is_linear_and_respects_quotes() -> None:
    from ncclpm.ingest.code.statements import strip_comment

    assert strip_comment("export NCCL_DEBUG=INFO  # was WARN") == "export NCCL_DEBUG=INFO  "
    assert strip_comment("echo '# not a comment' # a comment") == "echo '# not a comment' "
    assert strip_comment('NCCL_IB_HCA="mlx5_0#1"') == 'NCCL_IB_HCA="mlx5_0#1"'
    hostile = "x " + "# " * 100_000 + "'"  # quadratic for a regex with a look-ahead at every `#`
    assert strip_comment(hostile) == "x "


@pytest.mark.parametrize(
    ("name", "data"),
    [
        ("deep.json", b"[" * 60_000),
        ("deep.ipynb", b'{"cells": ' + b"[" * 60_000),
        ("cells.ipynb", b'{"cells": [{"cell_type": "code", "source": 5}, 7], "nbformat": 4}'),
        ("nested.py", b"x = " + b"(" * 5_000 + b"\n"),
        ("long.sh", b"#!/bin/bash\nexport NCCL_DEBUG=" + b"# " * 50_000 + b"'\n"),
        ("big.yaml", b"a:\n  b: 1\n" + b"- " * 40_000),
    ],
)
def test_hostile_code_files_are_read_or_named_never_crash(tmp_path: Path, name: str, data: bytes) -> None:
    (tmp_path / name).write_bytes(data)
    (tmp_path / "rank0.log").write_text("[rank0]: training done\n")
    d = diagnose([tmp_path])  # broken JSON is not a config: read as text, harmlessly
    assert d.n_sources + len(d.code_files) == 2 and str(d.category) not in FAILURES
