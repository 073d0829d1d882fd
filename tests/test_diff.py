"""`ncclpm diff GOOD BAD`: every output format from the command line, escaping of what the logs bring, the JSON
contract, the command's inputs and exit codes, and the NCCL-choice facts (transport, network, interface)."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from click.testing import CliRunner

from ncclpm.api import diff
from ncclpm.cli import main
from ncclpm.render.diff import render_diff
from ncclpm.util.durations import coarse_duration, seconds_of

PAIRS = Path(__file__).resolve().parent / "diff_cases"
IFNAME = PAIRS / "ifname"
NO_CHANGE = PAIRS / "no_change"
HOSTILE = "<script>x</script>\x1b[31m&<!channel>"


def _run(*args: str, stdin: str | None = None):
    return CliRunner().invoke(main, list(args), input=stdin)


def test_json_has_the_ranked_differences_with_evidence_from_both_runs() -> None:
    res = _run("diff", str(IFNAME / "good"), str(IFNAME / "bad"), "-f", "json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["schema_version"] == 1 and doc["kind"] == "ncclpm.diff"
    first = doc["differences"][0]
    assert {"what", "good", "bad", "relevance", "evidence", "why"} <= first.keys()
    assert (first["what"], first["good"], first["bad"], first["relevance"]) == (
        "GLOO_SOCKET_IFNAME",
        "lo",
        "ib0",
        "high",
    )
    assert "GLOO_SOCKET_IFNAME=lo" in first["evidence"]["good"]["text"]
    assert "GLOO_SOCKET_IFNAME=ib0" in first["evidence"]["bad"]["text"]
    assert "ib0" in first["evidence"]["failure"]["text"], "the line of BAD's failure that names the new value"
    levels = [d["relevance"] for d in doc["differences"]]
    assert levels == sorted(levels, key=["high", "medium", "low", "none"].index), "ranked by relevance"
    assert doc["bad"]["category"] != "unknown" and doc["bad"]["decisive_evidence"]
    assert doc["linked"] == ["GLOO_SOCKET_IFNAME"]


@pytest.fixture(scope="module")
def ifname_report():
    return diff([IFNAME / "good"], [IFNAME / "bad"])


@pytest.fixture(scope="module")
def no_change_report():
    return diff([NO_CHANGE / "good"], [NO_CHANGE / "bad"])


@pytest.mark.parametrize("fmt", ["md", "text", "html", "slack", "slack-json"])
def test_every_format_names_the_change_and_the_verdict(fmt: str, ifname_report) -> None:
    out = render_diff(ifname_report, fmt)
    assert "GLOO_SOCKET_IFNAME" in out and "ib0" in out and "network_transport" in out
    if fmt == "slack-json":
        payload = json.loads(out)
        assert payload["text"] and all(len(b.get("text", {}).get("text", "")) <= 3000 for b in payload["blocks"])
    if fmt == "slack":
        assert len(out) <= 3000
    if fmt == "html":
        assert out.startswith("<!DOCTYPE html>") and "Content-Security-Policy" in out and "<script" not in out


@pytest.mark.parametrize("fmt", ["md", "text", "html", "slack", "json"])
def test_no_change_pair_says_nothing_relevant_in_every_format(fmt: str, no_change_report) -> None:
    text = " ".join(render_diff(no_change_report, fmt).split())
    assert (
        "No difference between GOOD and BAD bears on it" in text or "No difference between the runs can explain" in text
    )


@pytest.fixture(scope="module")
def hostile_pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """GOOD and BAD whose changed setting's value carries markup, a terminal escape and Slack control text."""
    root = tmp_path_factory.mktemp("hostile")
    for side, value in (("good", "eth0"), ("bad", HOSTILE.replace(" ", ""))):
        (root / side).mkdir()
        (root / side / "run.meta").write_text(f"env: NCCL_SOCKET_IFNAME={value} GLOO_SOCKET_IFNAME=lo\n")
        (root / side / "train.log").write_text("[rank0]: step 1 loss 0.5\n[rank1]: step 1 loss 0.5\n")
    return root / "good", root / "bad"


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []

    def handle_starttag(self, tag: str, attrs: list) -> None:
        self.tags.append(tag)


def test_log_text_is_escaped_in_every_format(hostile_pair: tuple[Path, Path]) -> None:
    good, bad = hostile_pair
    report = diff([good], [bad])
    outs = {fmt: render_diff(report, fmt) for fmt in ("html", "text", "slack", "md", "json")}
    assert "NCCL_SOCKET_IFNAME" in outs["text"]
    parser = _Tags()
    parser.feed(outs["html"])
    assert "script" not in parser.tags and "&lt;script&gt;" in outs["html"]
    assert "\x1b" not in outs["text"] and "\x1b" not in outs["slack"], "no terminal escape reaches a terminal"
    assert "<!channel>" not in outs["slack"] and "&lt;!channel&gt;" in outs["slack"]
    outside_code = re.sub(r"`[^`\n]*`", "", outs["md"])
    assert "<script>" not in outside_code, "log text outside code spans is entity-escaped"
    # the value as read: colour codes are presentation and are stripped at ingest (other escapes are kept and
    # escaped by each renderer: tests/test_output_injection.py)
    assert json.loads(outs["json"])["differences"][0]["bad"] == HOSTILE.replace("\x1b[31m", "")


def test_arguments_and_exit_codes(tmp_path: Path) -> None:
    assert _run("diff", str(IFNAME / "good")).exit_code == 2, "one run is not a diff"
    empty = tmp_path / "empty"
    empty.mkdir()
    res = _run("diff", str(IFNAME / "good"), str(empty))
    assert res.exit_code == 2 and "nothing readable in BAD" in res.stderr
    out = tmp_path / "d.md"
    assert _run("diff", str(IFNAME / "good"), str(IFNAME / "bad"), "-o", str(out)).exit_code == 0
    assert out.read_text().startswith("# ncclpm diff")
    assert _run("diff", str(IFNAME / "good"), str(IFNAME / "bad"), "-o", str(out)).exit_code == 2, "no overwrite"


def test_sides_from_files_and_stdin() -> None:
    good = IFNAME / "good"
    bad_files = [str(p) for p in (IFNAME / "bad").rglob("*") if p.is_file()]
    args = ["diff", "-g", str(good)]
    for f in bad_files:
        args += ["-b", f]
    res = _run(*args, "-f", "json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["differences"][0]["what"] == "GLOO_SOCKET_IFNAME"
    pasted = (IFNAME / "bad" / "run.meta").read_text() + (IFNAME / "bad" / "console.log").read_text()
    res = _run("diff", str(good), "-", "-f", "json", stdin=pasted)
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["differences"][0]["what"] == "GLOO_SOCKET_IFNAME"


NCCL_RUN = """\
{h0}:100:100 [0] NCCL INFO NCCL version 2.21.5+cuda12.4
{h0}:100:100 [0] NCCL INFO Bootstrap : Using {ifname}:10.0.0.1<0>
{h0}:100:110 [0] NCCL INFO NET/{net} : Using [0]{dev} ; OOB {ifname}:10.0.0.1<0>
{h0}:100:110 [0] NCCL INFO Using network {net}
{h0}:100:110 [0] NCCL INFO comm 0x11 rank 0 nranks 2 cudaDev 0 busId 1000 - Init COMPLETE
{h0}:100:110 [0] NCCL INFO Channel 00/0 : 0[1000] -> 1[1000] [send] via NET/{net}/0{gdr}
{h1}:200:200 [0] NCCL INFO Bootstrap : Using {ifname}:10.0.0.2<0>
{h1}:200:210 [0] NCCL INFO comm 0x22 rank 1 nranks 2 cudaDev 0 busId 1000 - Init COMPLETE
{h1}:200:210 [0] NCCL INFO Channel 00/0 : 1[1000] -> 0[1000] [send] via NET/{net}/0{gdr}
"""
NCCL_FAIL = """\
node2:200:230 [0] misc/socket.cc:50 NCCL WARN socketProgress: Connection closed by remote peer node1<45882>
node2:200:230 [0] NCCL INFO transport/net_socket.cc:474 -> 6
[rank1]:[E1122 10:00:00.000000000 ProcessGroupNCCL.cpp:688] [Rank 1] Watchdog caught collective operation timeout: \
WorkNCCL(SeqNum=12, OpType=ALLREDUCE, NumelIn=1024, NumelOut=1024, Timeout(ms)=600000) ran for 600021 milliseconds \
before timing out.
"""


def test_nccl_choices_rank_first_for_a_network_failure(tmp_path: Path) -> None:
    """Synthetic NCCL INFO lines (formats of FORMATS.md section 8): GOOD on IB, BAD fell back to sockets on docker0
    and then failed in the socket transport."""
    good, bad = tmp_path / "good", tmp_path / "bad"
    good.mkdir(), bad.mkdir()
    ib = {"h0": "node1", "h1": "node2", "net": "IB", "dev": "mlx5_0:1/IB", "ifname": "ib0", "gdr": "/GDRDMA"}
    sock = {**ib, "net": "Socket", "dev": "docker0:172.17.0.1<0>", "ifname": "docker0", "gdr": ""}
    (good / "nccl.log").write_text(NCCL_RUN.format(**ib))
    (bad / "nccl.log").write_text(NCCL_RUN.format(**sock) + NCCL_FAIL)
    report = diff([good], [bad])
    assert report.bad.category == "network_transport", report.bad.summary
    top = {d.what: d for d in report.differences if d.relevance == "high"}
    assert {"NCCL network", "NCCL bootstrap interface", "NCCL transports"} <= set(top), [
        (d.what, d.relevance) for d in report.differences
    ]
    transport = top.get("NCCL transport 0 -> 1") or next(d for d in report.differences if "->" in d.what)
    assert transport.good == "NET/IB/0/GDRDMA" and transport.bad == "NET/Socket/0"
    assert "NCCL transport 1 -> 0" in transport.also, "the same change on other rank pairs is folded into one"
    assert ("NCCL version", "2.21.5") in report.same


def test_one_sided_facts_claim_nothing(tmp_path: Path) -> None:
    """A version only BAD's logs print is no known change; a variable BAD's env dump has and GOOD's (same file)
    lacks was not set in GOOD."""
    good, bad = tmp_path / "good", tmp_path / "bad"
    good.mkdir(), bad.mkdir()
    (good / "run.meta").write_text("env: TORCH_DISTRIBUTED_DEBUG=OFF\n")
    (bad / "run.meta").write_text("env: TORCH_DISTRIBUTED_DEBUG=OFF NCCL_IB_DISABLE=1\n")
    (good / "train.log").write_text("[rank0]: step 1\n")
    (bad / "train.log").write_text("[rank0]: PyTorch version: 2.6.0\n[rank0]: step 1\n")
    report = diff([good], [bad])
    by_what = {d.what: d for d in report.differences}
    assert by_what["torch version"].relevance == "none" and by_what["torch version"].good is None
    assert by_what["NCCL_IB_DISABLE"].good == "not set" and by_what["NCCL_IB_DISABLE"].relevance != "none"


CASES = Path(__file__).resolve().parent / "cases"


def test_two_failed_runs_are_no_before_and_after() -> None:
    """GOOD failed too, and no setting shows in both runs: the headline says both, and claims no comparison of
    settings that were never there ("the 0 settings ... are the same")."""
    report = diff(
        [CASES / "excerpt_megatron_world_not_divisible" / "input"],
        [CASES / "excerpt_vllm_heads_not_divisible_by_tp" / "input"],
    )
    assert report.compared == 0
    assert "GOOD failed too (`config_version`), so the runs are not a before and after" in report.headline
    assert "there was nothing to compare" in report.headline
    assert "the 0 settings" not in report.headline and "look at what happened only in BAD" not in report.headline


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("10.0s", 10),
        ("1800", 1800),
        ("30 min", 1800),
        ("timedelta(minutes=30)", 1800),
        ("datetime.timedelta(hours=1)", 3600),
    ],
)
def test_durations(text: str, seconds: float) -> None:
    assert seconds_of(text) == seconds
    assert seconds_of(coarse_duration(seconds)) == seconds


def test_dataloader_settings_where_logged() -> None:
    """Two real corpus runs (tests/cases): the same job with DataLoader(timeout=5) and with timeout=0, where rank 1's
    dataset blocks; BAD (no timeout) hangs in the DataLoader and its peer times out (ncclpm calls that a slow rank)."""
    cases = Path(__file__).resolve().parent / "cases"
    report = diff(
        [cases / "dataloader_hang__dl_timeout" / "input"], [cases / "dataloader_hang__no_dl_timeout" / "input"]
    )
    first = report.differences[0]
    assert (first.what, first.good, first.bad) == ("DataLoader timeout", "5", "0")
    assert first.relevance in ("high", "medium"), (report.bad.category, first.why)
    assert "DataLoader(num_workers=2, batch_size=8, timeout=0)" in first.bad_evidence.text


CODE = """\
import datetime
import torch.distributed as dist

dist.init_process_group("nccl", timeout=datetime.timedelta(minutes={minutes}))
"""
WATCHDOG = (
    "[rank1]:[E1122 10:00:00.000000000 ProcessGroupNCCL.cpp:688] [Rank 1] Watchdog caught collective operation "
    "timeout: WorkNCCL(SeqNum=12, OpType=ALLREDUCE, NumelIn=1024, NumelOut=1024, Timeout(ms)=60000) ran for 60021 "
    "milliseconds before timing out.\n"
)


def test_settings_read_from_the_code_of_each_run(tmp_path: Path) -> None:
    """The code files of each run (read for settings only) give the process-group timeout when no log states it."""
    good, bad = tmp_path / "good", tmp_path / "bad"
    for side, minutes, log in (
        (good, 30, "[rank0]: step 1\n[rank1]: step 1\n"),
        (bad, 1, "[rank0]: step 1\n" + WATCHDOG),
    ):
        side.mkdir()
        (side / "train.py").write_text(CODE.format(minutes=minutes))
        (side / "train.log").write_text(log)
    report = diff([good], [bad])
    first = report.differences[0]
    assert (first.what, first.good, first.bad, first.relevance, first.linked) == (
        "process-group timeout",
        "30 min",
        "1 min",
        "high",
        True,
    )
    assert first.good_evidence.file == "train.py" and "minutes=30" in first.good_evidence.text
    assert ("process-group backend", "nccl") in report.same


def test_the_command_lists_every_diff_format() -> None:
    """The CLI spells the formats out (so `--help` imports no renderer): the list must be the renderers'."""
    from ncclpm.cli import DIFF_FORMATS
    from ncclpm.render.diff import DIFF_RENDERERS

    assert tuple(sorted(DIFF_RENDERERS)) == DIFF_FORMATS
