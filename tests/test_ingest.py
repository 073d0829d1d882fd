"""Engine internals: rank resolution, timestamps, progress bars, tracebacks, torchrun summaries."""

from __future__ import annotations

from datetime import datetime

import polars as pl

from ncclpm.api import catalog
from ncclpm.ingest.text.extract import extract_events, parse_lines
from ncclpm.ingest.text.multiline import parse_elastic_summaries, rank_summary_blocks, stitch_tracebacks


def _parse(lines: list[str], source: str = "job.log") -> pl.DataFrame:
    kept = pl.DataFrame({"source": [source] * len(lines), "line": list(range(1, len(lines) + 1)), "raw": lines})
    return parse_lines(kept, catalog())


def test_torchrun_local_rank_maps_to_the_global_rank_seen_on_the_same_stream() -> None:
    parsed = _parse(
        [
            "[default1]:[rank9]:[E1122 08:00:00.1 ProcessGroupNCCL.cpp:1] [Rank 9] Watchdog caught collective operation timeout: x",
            "[default1]:Saving checkpoint to /ckpt",
        ]
    )
    assert parsed["rank"].to_list() == [9, 9]


def test_rank_from_torchrun_log_dir_layout_and_file_names() -> None:
    a = _parse(["RuntimeError: boom"], "run_x/attempt_0/3/stderr.log")
    b = _parse(["RuntimeError: boom"], "logs/rank_12.out")
    assert a["rank"].to_list() == [3] and b["rank"].to_list() == [12]


def test_pg_tag_rank_is_global_only_for_the_default_group() -> None:
    parsed = _parse(
        [
            "[PG ID 0 PG GUID 0(default_pg) Rank 5]  failure detected by watchdog at work sequence id: 1 PG status: last enqueued work: 1, last completed work: -1",
            "[PG ID 3 PG GUID 7(TP) Rank 1]  failure detected by watchdog at work sequence id: 1 PG status: last enqueued work: 1, last completed work: -1",
        ],
        "console.txt",
    )
    assert parsed["rank"].to_list() == [5, None]


def test_glog_time_without_year_takes_the_year_of_dated_lines() -> None:
    parsed = _parse(
        [
            "[2025-02-04 16:00:00] node1:1:1 [0] misc/socket.cc:1 NCCL WARN x",
            "[rank1]:[E204 16:42:57.129219129 ProcessGroupNCCL.cpp:688] [Rank 1] Watchdog caught collective operation timeout: y",
        ]
    )
    assert parsed["ts"][1] == datetime(2025, 2, 4, 16, 42, 57)


def test_colour_codes_of_a_terminal_capture_are_not_part_of_the_line() -> None:
    """loguru/rich colour the time and the level, exactly where the envelope must match."""
    parsed = _parse(
        [
            "\x1b[32m2024-05-01 10:00:01.123\x1b[0m | \x1b[31mERROR\x1b[0m | __main__:train:42 - "
            "[Rank 1] Watchdog caught collective operation timeout: x",
        ]
    )
    row = parsed.row(0, named=True)
    assert (row["ts"], row["level"], row["rank"]) == (datetime(2024, 5, 1, 10, 0, 1, 123000), "E", 1)
    assert "\x1b" not in row["raw"] and row["message"].startswith("[Rank 1] Watchdog")


def test_progress_bar_segments_glued_with_carriage_returns_are_each_read(tmp_path) -> None:
    from ncclpm.api import build

    log = tmp_path / "train.log"
    log.write_bytes(
        b" 10%|#   | 10/100 [00:10<01:30, 1.00it/s]\r 11%|#   | 11/100 [00:11<01:29, 1.00it/s]"
        b"[rank2]: RuntimeError: CUDA error: an illegal memory access was encountered\n"
    )
    t = build([log])
    err = t.events.filter(pl.col("kind") == "cuda_error")
    assert err["rank"].to_list() == [2] and err["line"].to_list() == [1]


def test_traceback_is_stitched_per_rank_even_when_interleaved() -> None:
    parsed = _parse(
        [
            "[rank1]: Traceback (most recent call last):",
            "[rank2]: Traceback (most recent call last):",
            '[rank1]:   File "/w/train.py", line 40, in body',
            '[rank2]:   File "/w/train.py", line 99, in save_checkpoint',
            "[rank2]: OSError: disk full",
            "[rank1]: RuntimeError: Timed out waiting 10000ms for recv operation to complete",
        ]
    )
    tb = stitch_tracebacks(parsed).sort("rank")
    assert tb["rank"].to_list() == [1, 2]
    assert tb["frames"].to_list() == [["body (train.py:40)"], ["save_checkpoint (train.py:99)"]]
    assert tb["error_type"].to_list() == ["RuntimeError", "OSError"]


def test_torchrun_root_cause_block_is_parsed() -> None:
    parsed = _parse(
        [
            "Failures:",
            "  time      : 2026-11-22_08:24:17",
            "  host      : node3",
            "  rank      : 0 (local_rank: 0)",
            "  exitcode  : -15 (pid: 26197)  (SIGTERM)",
            "  error_file: <N/A>",
            "  traceback : Signal 15 (SIGTERM) received by PID 26197",
            "Root Cause (first observed failure):",
            "  time      : 2026-11-22_08:24:16",
            "  host      : node3",
            "  rank      : 1 (local_rank: 1)",
            "  exitcode  : 1 (pid: 26198) ",
            "  error_file: /x/error.json",
            "  traceback : Traceback (most recent call last):",
            "  RuntimeError: Timed out waiting 10000ms",
        ]
    )
    el = parse_elastic_summaries(parsed).sort("rank")
    assert el.select("rank", "exit_code", "signal", "root_cause").rows() == [
        (0, -15, "SIGTERM", False),
        (1, 1, None, True),
    ]
    assert el["detail"][1] == "RuntimeError: Timed out waiting 10000ms"


def test_a_summary_cut_above_its_header_still_gives_its_entries_and_their_ranks() -> None:
    """The last screen of a console: an entry's block starts without `Failures:` above it; the exception
    indented under an entry is that entry's rank's, the lines after the summary are nobody's."""
    parsed = _parse(
        [
            "  RuntimeError: Connection closed by peer [127.0.0.1]:22217",  # the end of a block cut above
            "[1]:",
            "  time      : 2026-11-22_08:37:56",
            "  host      : localhost",
            "  rank      : 3 (local_rank: 3)",
            "  exitcode  : 1 (pid: 32121) ",
            "  traceback : Traceback (most recent call last):",
            '    File "/w/crash.py", line 32, in body',
            "  RuntimeError: loss is NaN at step 4",
            "RuntimeError: printed after the summary",
        ]
    )
    el = parse_elastic_summaries(parsed)
    assert el.select("rank", "exit_code", "root_cause").rows() == [(3, 1, False)]
    ranked = rank_summary_blocks(parsed, el)
    assert ranked["rank"].to_list() == [None, None, None, 3, 3, 3, 3, 3, 3, None]
    events = extract_events(ranked, catalog())
    exc = events.filter(pl.col("kind") == "exception").select("line", "rank", "detail").rows()
    assert (9, 3, "loss is NaN at step 4") in exc


def test_a_rank_seen_on_two_hosts_equally_often_gets_the_same_one_every_time(tmp_path) -> None:
    from ncclpm.api import build

    log = tmp_path / "tie.log"
    log.write_text(
        "[rank3]:zeta-1:123:456 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>\n"
        "[rank3]:alpha-2:124:457 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.2<0>\n"
        "[rank3]: RuntimeError: boom\n"
    )
    assert {build([log]).ranks["host"][0] for _ in range(12)} == {"alpha-2"}


def test_events_keep_the_raw_line_for_quoting() -> None:
    line = "[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."
    events = extract_events(_parse([line]), catalog())
    oom = events.filter(pl.col("kind") == "cuda_oom")
    assert oom["text"].to_list() == [line] and oom["detail"].to_list() == ["2.00 GiB"]


_DS_SPAWN = "[2025-06-11 14:02:03,11{r}] [INFO] [launch.py:256:main] process 4021{r} spawned with command: ['/usr/bin/python3', '-u', 'train.py', '--local_rank={r}']"


def _deepspeed_job(tmp_path, world: int) -> pl.DataFrame:
    from ncclpm.api import build

    log = tmp_path / "ds.log"
    log.write_text(
        "\n".join(
            [f"[2025-06-11 14:02:03,115] [INFO] [launch.py:164:main] dist_world_size={world}"]
            + [_DS_SPAWN.format(r=r) for r in range(2)]
            + [
                "gpu-a07:40211:40211 [1] misc/nvmlwrap.cc:183 NCCL WARN nvmlDeviceGetHandleByIndex(0) failed: Unknown Error",
                "[2025-06-11 14:02:41,431] [INFO] [launch.py:319:sigkill_handler] Killing subprocess 40210",
            ]
        )
        + "\n"
    )
    return build([log]).events


def test_a_deepspeed_child_s_nccl_lines_get_the_rank_its_launcher_gave_its_pid(tmp_path) -> None:
    events = _deepspeed_job(tmp_path, world=2)
    warn = events.filter(pl.col("kind") == "nvml_error")
    assert warn["rank"].to_list() == [1]
    # the launcher's line naming a pid is not that process's own line
    assert events.filter(pl.col("kind") == "agent_signal")["rank"].to_list() == [None]


def test_a_local_rank_is_no_rank_when_the_world_is_larger_than_the_node(tmp_path) -> None:
    events = _deepspeed_job(tmp_path, world=8)  # one node of four: local rank 1 is not global rank 1
    assert events.filter(pl.col("kind") == "nvml_error")["rank"].to_list() == [None]


def test_a_rank_s_first_error_is_the_nccl_message_not_torch_s_wrapper_of_it(tmp_path) -> None:
    from ncclpm.api import build

    log = tmp_path / "rank1.log"
    log.write_text(
        "[rank1]: Traceback (most recent call last):\n"
        '[rank1]:   File "/w/train.py", line 88, in setup\n'
        "[rank1]:     dist.barrier()\n"
        "[rank1]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:317, unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5\n"
        "[rank1]: ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error. \n"
        "[rank1]: Last error:\n"
        "[rank1]: nvmlDeviceGetHandleByIndex(0) failed: Unknown Error\n"
    )
    ranks = build([log]).ranks
    assert ranks["first_error_ref"].to_list() == ["rank1.log:7"]
    assert ranks["first_error"][0].endswith("nvmlDeviceGetHandleByIndex(0) failed: Unknown Error")


def test_a_wrapper_that_wraps_nothing_read_is_the_first_error(tmp_path) -> None:
    from ncclpm.api import build

    log = tmp_path / "rank1.log"
    log.write_text(
        "[rank1]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:317, unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5\n"
        "[rank1]: ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error. \n"
    )
    assert build([log]).ranks["first_error_ref"].to_list() == ["rank1.log:1"]
