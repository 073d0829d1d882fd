"""Settings lint: environment settings found in launch scripts, env dumps and NCCL's own echo, and what each does.

Facts come from ../shared/FORMATS.md §9 (who reads which variable in torch 2.13 / NCCL 2.29-2.30).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ncclpm.api import build, diagnose
from ncclpm.render import render
from ncclpm.report.settings import verdict

CASE = Path(__file__).resolve().parent / "cases" / "issue4_settings_do_nothing" / "input"


@pytest.fixture(scope="module")
def case_settings() -> dict[str, dict]:
    return {s["var"]: s for s in diagnose([CASE]).settings}


def test_nccl_timeout_in_the_launch_script_is_read_by_nothing(case_settings) -> None:
    s = case_settings["NCCL_TIMEOUT"]
    assert (s["value"], s["severity"]) == ("1800", "error")
    assert s["file"] == "launch.sh" and s["line"] == 6
    assert "does nothing" in s["verdict"] and "init_process_group(timeout" in s["verdict"]
    assert "Timeout(ms)=600000" in s["verdict"], "the job's own timeout lines show the setting changed nothing"


def test_p2p_disable_masks_faults_at_a_cost(case_settings) -> None:
    s = case_settings["NCCL_P2P_DISABLE"]
    assert (s["value"], s["severity"]) == ("1", "warn")
    assert "masks faults" in s["verdict"]
    assert (s["file"], s["line"]) == ("launch.sh", 7), "where it is set, not NCCL's echo of it in train.log"


def test_misspelt_flight_recorder_size_is_flagged_with_the_real_name(case_settings) -> None:
    s = case_settings["TORCH_NCCL_TRACE_BUFER_SIZE"]
    assert s["severity"] == "error" and "`TORCH_NCCL_TRACE_BUFFER_SIZE`" in s["verdict"]


def test_deprecated_alias_names_its_replacement(case_settings) -> None:
    s = case_settings["NCCL_ASYNC_ERROR_HANDLING"]
    assert s["severity"] == "warn" and "`TORCH_NCCL_ASYNC_ERROR_HANDLING`" in s["verdict"]


def test_a_disable_switch_set_to_0_is_not_called_a_mask(case_settings) -> None:
    s = case_settings["NCCL_IB_DISABLE"]  # `NCCL_IB_DISABLE=0 torchrun ...`, echoed by NCCL as `... to 0.`
    assert s["value"] == "0" and s["severity"] == "info" and "masks" not in s["verdict"]


def test_the_worst_settings_come_first(case_settings) -> None:
    order = {"error": 0, "warn": 1, "info": 2}
    ranks = [order[s["severity"]] for s in case_settings.values()]
    assert ranks == sorted(ranks)


def test_markdown_report_has_the_settings_section_with_file_and_line() -> None:
    md = render(diagnose([CASE]), "md")
    section = md.split("## Settings found in the job", 1)[1].split("\n## ", 1)[0]
    assert "`NCCL_TIMEOUT`" in section and "launch.sh:6" in section
    assert "`NCCL_P2P_DISABLE`" in section


@pytest.mark.parametrize(
    ("var", "value", "severity", "words"),
    [
        ("NCCL_TIMEOUT", "1800", "error", "does nothing"),
        ("NCCL_TRACE_BUFFER_SIZE", "2000", "error", "TORCH_NCCL_TRACE_BUFFER_SIZE"),
        ("TORCH_NCCL_TIMEOUT", "3600", "error", "does nothing"),
        ("TORCH_FR_TIMEOUT", "60", "error", "does nothing"),
        ("NCCL_BLOCKING_WAIT", "1", "warn", "TORCH_NCCL_BLOCKING_WAIT"),
        ("NCCL_DESYNC_DEBUG", "1", "warn", "TORCH_NCCL_DESYNC_DEBUG"),
        ("NCCL_ENABLE_TIMING", "1", "warn", "TORCH_NCCL_ENABLE_TIMING"),
        ("NCCL_IB_DISABLE", "1", "warn", "masks faults"),
        ("NCCL_SHM_DISABLE", "1", "warn", "masks faults"),
        ("NCCL_P2P_DISABLE", "0", "info", "default"),
        ("NCCL_SOCKET_IFNAM", "eth0", "error", "NCCL_SOCKET_IFNAME"),
        ("NCCL_IB_TIMOUT", "22", "error", "NCCL_IB_TIMEOUT"),
        ("TORCH_NCCL_ASYNC_ERROR_HANDLNG", "1", "error", "TORCH_NCCL_ASYNC_ERROR_HANDLING"),
    ],
)
def test_verdicts_follow_who_reads_what(var: str, value: str, severity: str, words: str) -> None:
    text, sev = verdict(var, value)
    assert sev == severity and words in text


@pytest.mark.parametrize("var", ["NCCL_SOCKET_IFNAME", "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC", "NCCL_IB_HCA"])
def test_variables_that_are_read_are_not_flagged(var: str) -> None:
    assert verdict(var, "x")[1] == "info"


def test_an_unrelated_variable_gets_no_verdict() -> None:
    assert verdict("NCCL_TESTS_SPLIT_MASK", "0x7") == ("", "info")


@pytest.mark.parametrize(
    ("text", "var", "value"),
    [
        ("export NCCL_TIMEOUT=1800\n", "NCCL_TIMEOUT", "1800"),
        ("export NCCL_SOCKET_IFNAME='ib0'\n", "NCCL_SOCKET_IFNAME", "ib0"),
        ("NCCL_P2P_DISABLE=1 torchrun --nproc_per_node=8 train.py\n", "NCCL_P2P_DISABLE", "1"),
        ("NCCL_BLOCKING_WAIT=1\n", "NCCL_BLOCKING_WAIT", "1"),
        ("docker run --gpus all \\\n  -e NCCL_IB_DISABLE=1 \\\n  img torchrun train.py\n", "NCCL_IB_DISABLE", "1"),
        ("gpu01:20311:20311 [0] NCCL INFO NCCL_IB_DISABLE set by environment to 1.\n", "NCCL_IB_DISABLE", "1"),
        ('os.environ["TORCH_NCCL_BLOCKING_WAIT"] = "1"\n', "TORCH_NCCL_BLOCKING_WAIT", "1"),
    ],
)
def test_each_way_a_setting_shows_up_in_a_job_folder_is_read(tmp_path, text: str, var: str, value: str) -> None:
    python = text.startswith("os.environ")  # Python is read as Python, not as a shell script
    (tmp_path / ("train.py" if python else "job.sh")).write_text(("import os\n" if python else "#!/bin/bash\n") + text)
    settings = build([tmp_path]).extra["settings"]
    row = settings.filter(settings["var"] == var)
    assert row["value"].to_list() == [value]


def test_prose_that_merely_names_a_variable_is_not_a_setting(tmp_path) -> None:
    (tmp_path / "rank1.log").write_text(
        "[rank1]:[E204 16:42:57.130533012 ProcessGroupNCCL.cpp:728] Stack trace of the failed collective not found, "
        "potentially because FlightRecorder is disabled. You can enable it by setting TORCH_NCCL_TRACE_BUFFER_SIZE "
        "to a non-zero value.\n"
    )
    assert build([tmp_path]).extra["settings"].is_empty()
