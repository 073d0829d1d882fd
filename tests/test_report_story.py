"""Issue 11: reports an engineer would have written. One test (or a few) per point, read off the golden reports of
`sample_logs/` (tests/golden, kept current by test_golden.py) wherever the point shows there, so the suite stays
fast: 1 what happened, 2 why not the others, 3 connected facts, 4 hosts, 5 the action, 6 no repetition or noise,
8 the picture, 10 no HTML entity; the terminal layout (7) and the CLI (9) are in test_cli_strict.py."""

from __future__ import annotations

import json
import re
from datetime import datetime
from pathlib import Path

import pytest

from ncclpm.model import Action, Category, Finding, Moment, rank_span, said
from ncclpm.report.actions import BY_CATEGORY, BY_RULE, action_for, check
from ncclpm.report.story import _order

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "golden"
JOBS = sorted(p.stem for p in GOLDEN.glob("*.md"))


def md(job: str) -> str:
    return (GOLDEN / f"{job}.md").read_text(encoding="utf-8")


def record(job: str) -> dict:
    return json.loads((GOLDEN / f"{job}.json").read_text(encoding="utf-8"))


def section(text: str, title: str) -> str:
    return text.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]


# ------------------------------------------------------------------------------------------ 1. what happened


def test_what_happened_comes_first_with_times_durations_and_how_each_rank_ended() -> None:
    text = md("nccl_rank0_sample_generation")
    assert text.index("## What happened") < text.index("## Decisive evidence") < text.index("## Fixes")
    story = section(text, "What happened")
    assert "rank 0 (gpu-node-17, pid 877) last logged `Generating sample images...`" in story
    assert "**≈16:32:57** ranks 1–3 (gpu-node-17) entered ALLREDUCE #6764 (NumelIn=1, a barrier)" in story
    assert (
        "**16:42:57** the watchdogs of ranks 1–3 fired after 10 min: rank 0 had been away for at least 10 min" in story
    )
    assert 'rank 1 ended with SIGABRT (-6) (torchrun\'s "first observed failure": a waiting rank' in story
    assert "rank 0 ended with SIGTERM (-15)" in story


def test_a_mismatch_story_shows_the_one_collective_that_differs() -> None:
    story = section(md("nccl_mismatched_collectives"), "What happened")
    assert "ranks 0, 1, 3 entered ALLREDUCE #14863 (NumelIn=14845952)" in story
    assert "rank 2 entered ALLREDUCE #14863 (NumelIn=1, a barrier)" in story


def test_whole_second_stamps_sort_after_the_finer_ones_of_their_second() -> None:
    """torchrun's summary and error files stamp whole seconds: `08:32:33` means "within that second"."""
    fine = Moment(datetime(2026, 1, 1, 8, 32, 33, 878000), "fine")
    whole = Moment(datetime(2026, 1, 1, 8, 32, 33), "whole")
    undated = Moment(None, "after fine, in the order it was built")
    assert [m.text for m in _order([whole, fine, undated])] == ["fine", undated.text, "whole"]


def test_decisive_evidence_quotes_each_message_once() -> None:
    evidence = section(md("nccl_rank0_sample_generation"), "Decisive evidence")
    assert evidence.count("Watchdog caught collective operation timeout") == 1
    assert "slurm-48211.out:37 (rank 1) — ×3, also slurm-48211.out:38 (rank 2), slurm-48211.out:39 (rank 3)" in evidence
    copies = section(md("gloo_dataloader_timeout"), "Decisive evidence")
    assert copies.count("DataLoader timed out after 5 seconds") == 2, "console.log + the rank's own log: one quote"


def test_the_root_cause_section_does_not_quote_the_decisive_lines_again() -> None:
    for job in JOBS:
        d = record(job)
        shown = {(e["file"], e["line"]) for e in d["decisive_evidence"]}
        rest = section(md(job), "Root cause: " + d["findings"][0]["name"] + f" ({d['findings'][0]['rule']})")
        for file, line in shown:
            assert f"{file}:{line} " not in rest and f"{file}:{line}:" not in rest, (job, file, line)


# ------------------------------------------------------------------------------------ 2. why not the others


def test_rivals_and_suspects_lose_on_evidence_never_on_numbers() -> None:
    seen = 0
    for job in JOBS:
        d = record(job)
        for why in [r["why_not"] for r in d["rivals"]] + [r["why_not"] for r in d["ruled_out"]]:
            seen += 1
            assert not re.search(r"\b0\.\d\d\b|\b(?:possible|likely|conclusive)\b", why), (job, why)
    assert seen >= 10
    why = section(md("nccl_rank0_sample_generation"), "Why not the others")
    assert "**Not `dataloader_hang`** (DL01): no rank logged a DataLoader error" in why
    # rank 0's last line of all, in time order: it went on from `Generating sample images...` (line 35)
    assert "rank 0's last line is `DDIM sampling: 10 steps, 16 prompts, guidance 5.0` (slurm-48211.out:36)" in why
    assert "**Not `timeout_too_short`** (TO01): not every rank joined the collective: rank 0 never entered it" in why
    assert "every rank ended after the first timeout fired (16:42:57)" in why
    gloo = section(md("gloo_rank0_slow_work"), "Why not the others")
    assert "**Not `timeout_too_short`** (TS01): the timeout is short, but rank 0 never entered the collective" in gloo


# ------------------------------------------------------------------------------------------ 3. connected facts


def test_settings_and_transports_are_tied_to_the_verdict() -> None:
    facts = section(md("nccl_allgather_timeout_4gpu"), "Connected facts")
    assert "`NCCL_TIMEOUT=300` (run_mvb.sh:3) is read by nothing; the same number, Timeout(ms)=300000" in facts
    assert "`NCCL_P2P_DISABLE=1` (run_mvb.sh:7) was in effect, and the channels show it" in facts
    assert "via SHM/direct/direct" in facts and "419,430,400 elements (1.6 GiB in fp32)" in facts
    assert (
        "`TORCH_NCCL_TRACE_BUFFER_SIZE=1000` (run_mvb.sh:8) records collectives, but no flight-recorder dump" in facts
    )


def test_a_dataloader_timeout_not_below_the_process_group_timeout_is_noticed() -> None:
    facts = section(md("nccl_dataloader_fd_exhaustion"), "Connected facts")
    assert "The DataLoader timeout (10 min, fired on rank 1 at rank1.log:29) is not below the process-group" in facts


def test_a_watchdog_that_noticed_minutes_late_is_said_to_be_held_up(tmp_path: Path) -> None:
    from ncclpm.api import diagnose

    line = (
        "[rank1]:[E1122 10:40:00.000000000 ProcessGroupNCCL.cpp:688] [Rank 1] Watchdog caught collective operation "
        "timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for {ran} "
        "milliseconds before timing out."
    )
    late, on_time = tmp_path / "late.log", tmp_path / "on_time.log"
    late.write_text(line.format(ran=2_400_017) + "\n")
    on_time.write_text(line.format(ran=600_093) + "\n")
    facts = " ".join(diagnose([late]).connected)
    assert "Rank 1's watchdog reported `ran for 2400017 milliseconds`" in facts and "30 min late" in facts
    assert "held up" not in " ".join(diagnose([on_time]).connected)


def test_fixes_take_the_jobs_own_values_into_account() -> None:
    gloo_dl = section(md("gloo_dataloader_timeout"), "Fixes")
    assert "timeout=120" not in gloo_dl, "its DataLoader already has a 5 s timeout, and it fired"
    assert "Next time it hangs, find the slow read" in gloo_dl, "the job is over: advice about a live one is for later"
    assert "TORCH_NCCL_TRACE_BUFFER_SIZE" in section(md("nccl_rank0_sample_generation"), "Fixes"), "no dumps there"
    assert "TORCH_NCCL_TRACE_BUFFER_SIZE" not in section(md("gloo_rank0_slow_work"), "Fixes"), "it has dumps"
    allgather = section(md("nccl_allgather_timeout_4gpu"), "Fixes")
    assert "Remove `NCCL_IB_DISABLE=1` (run_mvb.sh:6) and `NCCL_P2P_DISABLE=1` (run_mvb.sh:7)" in allgather
    assert "Run with `NCCL_DEBUG=INFO`" not in allgather, "its NCCL INFO log was read"


# ------------------------------------------------------------------------------------------------ 4. hosts


def test_hosts_pids_and_gpus_wherever_the_logs_show_them() -> None:
    d = record("nccl_rank0_sample_generation")
    assert d["culprit_hosts"] == ["gpu-node-17"], "torchrun's failure summary names the host"
    assert [(r["host"], r["pid"]) for r in d["ranks"]] == [("gpu-node-17", p) for p in (877, 878, 879, 880)]
    assert "culprit rank 0 on gpu-node-17" in md("nccl_rank0_sample_generation").split("\n## ")[0]
    table = section(md("nccl_allgather_timeout_4gpu"), "Per-rank view")
    assert "| 2 | gpu01 | 20313 | cuda:2 | waiting |" in table
    slack = (GOLDEN / "nccl_nvml_unknown_error.slack.txt").read_text(encoding="utf-8")
    assert "*Action:* `exclude_node` *gpu-a07*" in slack and "rank 1 on gpu-a07" in slack


def test_glog_stamps_take_the_year_of_the_job() -> None:
    d = record("nccl_rank0_sample_generation")
    stamps = [r["first_error_ts"] for r in d["ranks"] if r["first_error_ts"]]
    assert stamps and all(s.startswith("2025-02-04") for s in stamps), "never 1970"


# ---------------------------------------------------------------------------------------------- 5. the action


def test_every_category_has_an_action_declared_in_one_place() -> None:
    assert check() == []
    assert set(BY_CATEGORY) >= {str(c) for c in Category}
    assert {"no_failure", "not_a_training_log"} <= set(BY_CATEGORY), "mapped before those categories land"


def _finding(rule: str, category: Category, **facts: object) -> Finding:
    return Finding(rule, rule, category, 0.9, (), "", "", (), facts=dict(facts))


@pytest.mark.parametrize(
    ("rule", "category", "facts", "action"),
    [
        ("NV01", Category.NVML_DRIVER_FAILURE, {"hosts": ["gpu-c02"]}, Action.EXCLUDE_NODE),
        ("NW01", Category.NETWORK_TRANSPORT, {"hosts": ["gpu-a03"], "classes": ["ib"]}, Action.EXCLUDE_NODE),
        ("NW01", Category.NETWORK_TRANSPORT, {"hosts": ["a", "b"], "classes": ["interface"]}, Action.FIX_CONFIG),
        ("NW01", Category.NETWORK_TRANSPORT, {"hosts": ["a", "b"], "classes": ["ib"]}, Action.RESTART),
        ("TS01", Category.TIMEOUT_TOO_SHORT, {}, Action.RAISE_TIMEOUT),
        ("CF01", Category.CONFIG_VERSION, {}, Action.FIX_CONFIG),
        ("EX01", Category.RANK_CRASH, {}, Action.RESTART),
        ("CR01", Category.RANK_CRASH, {}, Action.FIX_CODE),
        ("IN01", Category.UNKNOWN, {}, Action.COLLECT_MORE),
        ("IN01", Category.NOT_A_TRAINING_LOG, {}, Action.COLLECT_MORE),
    ],
)
def test_a_rule_that_knows_better_overrides_the_category(rule, category, facts, action) -> None:
    assert action_for(_finding(rule, category, **facts))[0] == action
    assert rule in BY_RULE or category in BY_CATEGORY


def test_the_action_is_in_the_heading_json_and_slack() -> None:
    for job in JOBS:
        d = record(job)
        assert d["action"] in {str(a) for a in Action} and d["action_reason"]
        assert f"**Action: `{d['action']}`**" in md(job).splitlines()[3]
        assert f"*Action:* `{d['action']}`" in (GOLDEN / f"{job}.slack.txt").read_text(encoding="utf-8")
    assert record("nccl_allgather_timeout_4gpu")["action"] == "raise_timeout"
    assert record("nccl_nvml_unknown_error")["action"] == "exclude_node"


# ------------------------------------------------------------------------------------- 6. no repetition, no noise


def test_internals_only_with_verbose() -> None:
    from ncclpm.api import diagnose
    from ncclpm.render import render

    for job in JOBS:
        assert "not evaluated" not in md(job), job
    d = diagnose([ROOT / "sample_logs" / "nccl_rank0_sample_generation"])
    assert "not evaluated: FR01" in render(d, "md", verbose=True) and "not evaluated" not in render(d, "md")


def test_tables_fit_a_terminal_and_long_text_goes_below() -> None:
    for job in JOBS:
        rows = [line for line in section(md(job), "Per-rank view").splitlines() if line.startswith("|")]
        assert rows and max(map(len, rows)) <= 120, (job, max(rows, key=len))
    below = section(md("nccl_rank0_sample_generation"), "Per-rank view")
    assert "- ranks 1–3, first error: `Watchdog caught collective operation timeout:" in below


def test_a_mismatch_keeps_the_one_differing_field_in_the_rank_view() -> None:
    table = section(md("nccl_mismatched_collectives"), "Per-rank view")
    assert "| 2 | culprit | ALLREDUCE #14863, NumelIn=1 |" in table
    assert (
        "- rank 2, first error: `Watchdog caught collective operation timeout: WorkNCCL(SeqNum=14863, OpType=ALLREDUCE, NumelIn=1,"
        in table
    )


def test_quotes_in_prose_are_cut_at_a_word_never_mid_word() -> None:
    assert said("[rank1]: RuntimeError: DataLoader timed out after 5 seconds; dumping flight recorder", limit=40) == (
        "RuntimeError: DataLoader timed out …"
    )
    assert "; dum)" not in md("gloo_dataloader_timeout")


def test_rank_spans_read_like_a_person_wrote_them() -> None:
    assert rank_span([1, 2, 3]) == "ranks 1–3" and rank_span([0]) == "rank 0" and rank_span([0, 1]) == "ranks 0, 1"
    assert rank_span(range(1024)) == "ranks 0–1023 (1024)"
    for job in JOBS:
        assert "at least 1 ranks" not in md(job) and not re.search(r"Ranks [\d, ]+ was\b", md(job))


# --------------------------------------------------------------------------------------------- 8. the picture


def test_the_picture_draws_the_culprits_busy_span_and_labels_gloo_timeouts_as_timeouts() -> None:
    html = (GOLDEN / "gloo_rank0_slow_work.html").read_text(encoding="utf-8")
    assert '<rect class="busy"' in html and "busy from 08:24:06 for 10 s until the others timed out" in html
    assert "watchdog" not in html.split('<svg class="timeline"', 1)[1].split("</svg>", 1)[0].lower(), "gloo has none"
    nccl = (GOLDEN / "nccl_rank0_sample_generation.html").read_text(encoding="utf-8")
    assert "first watchdog timeout" in nccl


def test_the_picture_writes_what_differs_on_a_mismatched_rank() -> None:
    html = (GOLDEN / "nccl_mismatched_collectives.html").read_text(encoding="utf-8")
    assert "NumelIn=1, the others NumelIn=14845952" in html


def test_the_picture_puts_a_whole_second_error_after_a_finer_line_of_its_second() -> None:
    d = record("gloo_dataloader_timeout")
    rank1 = next(r for r in d["ranks"] if r["rank"] == 1)
    assert rank1["first_error_ts"] == "2026-11-22 08:32:33.878000", "the log's stamp, not error.json's whole second"


# ----------------------------------------------------------------------------------------- 10. no entities


ENTITY = re.compile(r"&(?:#\d+|#x[0-9a-fA-F]+|[a-zA-Z][a-zA-Z0-9]*);")


@pytest.mark.parametrize("ext", ["md", "txt"])
def test_no_html_entity_in_markdown_or_text(ext: str) -> None:
    for path in sorted(GOLDEN.glob(f"*.{ext}")):
        if path.name.endswith(".slack.txt"):
            continue  # Slack asks for &amp; &lt; &gt;
        hits = ENTITY.findall(path.read_text(encoding="utf-8"))
        assert not hits, (path.name, hits[:5])
    assert len(list(GOLDEN.glob(f"*.{ext}"))) >= len(JOBS)


@pytest.mark.parametrize("placed", [False, True], ids=["peer-host-unknown", "peer-on-the-same-node"])
def test_a_peer_named_by_its_rank_is_never_read_as_a_host(tmp_path: Path, placed: bool) -> None:
    """NCCL's `Proxy Call to rank 2 failed (Connect)` names a rank (its `peer` field holds `2`): the summary said
    "NCCL's connection between 2 and node1 failed", as if `2` were a host. Its host is the one the logs place that
    rank on (a proxy is a local rank's: the same node here), else none."""
    from ncclpm.api import diagnose

    init = [
        f"node1:{pid}:{pid} [{r}] NCCL INFO comm 0x5{r} rank {r} nranks 4 cudaDev {r} nvmlDev {r} busId {r}000 "
        "commId 0x1234 - Init COMPLETE"
        for r, pid in ((0, 201), (2, 203))
    ]
    warns = [
        "node1:201:260 [0] proxy.cc:1424 NCCL WARN [Proxy Service 2] Failed to execute operation Connect from rank 2, "
        "retcode 3",
        "node1:201:255 [0] proxy.cc:1064 NCCL WARN Proxy Call to rank 2 failed (Connect)",
    ]
    log = tmp_path / "node1.log"
    log.write_text("\n".join((init if placed else []) + warns) + "\n")
    d = diagnose([log])
    assert d.category == Category.NETWORK_TRANSPORT
    assert "between 2 " not in d.summary and " and 2 " not in d.summary, d.summary
    assert "node1" in d.summary, d.summary


def test_a_timeout_line_with_no_rank_is_said_to_be_a_wait_in_a_collective(tmp_path: Path) -> None:
    """gloo's `Timed out waiting 1800000ms for recv operation to complete` under a bare traceback (no `[rankN]:`):
    no cause, but the report says a process waited in a collective for its timeout and quotes the line - it said
    "a process cut off from another (a peer gone or not answering)"."""
    from ncclpm.api import diagnose

    log = tmp_path / "train.log"
    log.write_text(
        "Traceback (most recent call last):\n"
        '  File "train.py", line 40, in <module>\n'
        "    dist.barrier()\n"
        "RuntimeError: [../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 1800000ms "
        "for recv operation to complete\n"
    )
    d = diagnose([log])
    assert d.category == Category.UNKNOWN
    assert "waited in a collective for 0:30:00 and timed out" in d.summary, d.summary
    assert any("Timed out waiting 1800000ms" in e.text for e in d.primary.evidence)


@pytest.mark.parametrize(
    ("done", "said", "band"),
    [
        ("Training complete. Saving final model to /ckpt/final.pt", "a process said so", "likely"),
        (
            "INFO:torch.distributed.elastic.agent.server.api:[default] worker group successfully finished. Waiting "
            "300 seconds for other agents to finish.",
            "the launcher said so",
            "conclusive",
        ),
    ],
    ids=["a-process-own-words", "torchrun-agent"],
)
def test_who_said_a_job_finished_is_told_as_the_line_says_it(tmp_path: Path, done: str, said: str, band: str) -> None:
    """A script's unranked `Training complete` speaks for one process, not for the launcher and all its workers: it
    was told 'the launcher said so' at 0.85."""
    from ncclpm.api import diagnose

    log = tmp_path / "train.log"
    log.write_text("epoch 0 step 100 loss 2.31\nepoch 1 step 300 loss 1.80\n" + done + "\n")
    d = diagnose([log])
    assert d.category == Category.NO_FAILURE and said in d.summary, d.summary
    assert (d.confidence >= 0.85) is (band == "conclusive"), d.confidence
