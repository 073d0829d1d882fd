"""NCCL's declared messages (parsers/nccl/): every WARN format of the pinned NCCL snapshot has an entry; every entry
reads the lines made from its own format, under every prefix era, alone and inside torch's `Last error:`; a log
holding one such line gets the entry's category (benign ones no failure); the cases that decide a reading by a
field's value or the file that printed it."""

from __future__ import annotations

import json
import re
from collections import defaultdict
from functools import cache
from pathlib import Path

import polars as pl
import pytest

from ncclpm.api import build, diagnose
from ncclpm.ingest.catalog import CatalogError, load_catalog
from ncclpm.ingest.text.nccl_messages import BENIGN, CASE_MARK, Message, reading
from ncclpm.model import Category
from tests import nccl_vocab_instances as nvi

PINNED_DATA = nvi.VOCAB / "data"
FALLBACK = Category.NETWORK_TRANSPORT  # WRAPPED's class, unhandled system error, with no message naming a cause


@cache
def vocabulary():  # type: ignore[no-untyped-def]
    return nvi.catalog().vocabulary()


def pinned_warn_ids() -> set[str]:
    prefixes = json.loads((PINNED_DATA / "nccl_prefixes.json").read_text())
    msgs, _ = nvi.extraction()
    return {i for i, m in msgs.items() if prefixes["pinned"] in m["tags"]}


def test_every_warn_format_of_the_pinned_snapshot_is_declared() -> None:
    """The coverage gate: a WARN format of the pinned NCCL (scripts/vocab/data) that no entry reads fails here;
    `python scripts/vocab/nccl_catalog.py --missing` prints draft entries to review and add."""
    declared = {m.id for m in vocabulary().messages}
    missing = sorted(pinned_warn_ids() - declared)
    assert missing == [], f"{len(missing)} WARN formats have no entry in parsers/nccl/: {missing[:10]}"


def test_every_extracted_warn_format_is_declared_with_its_format() -> None:
    msgs, _ = nvi.extraction()
    by_id = {m.id: m for m in vocabulary().messages}
    for mid, msg in msgs.items():
        assert mid in by_id, mid
        assert by_id[mid].format == msg["format"], mid


def test_entries_are_honest() -> None:
    """Benign entries never carry a failure's kind; a cause decisive alone is at least likely; supporting lines are
    at most likely; internal checks name no cause."""
    causes = {"nccl_fallback", "nccl_internal", "comm_aborted"}
    for m in vocabulary().messages:
        readings = [m.case_reading(None)] + [m.case_reading(i) for i in range(len(m.cases))]
        for r in readings:
            if r["category"] == BENIGN:
                assert r["kind"] == "nccl_fallback", m.id
            if r["kind"] == "nccl_fallback":
                assert r["category"] == BENIGN, m.id
            if r["category"] == Category.UNKNOWN:
                assert r["kind"] in causes, m.id
            elif r["category"] != BENIGN and r["kind"] not in ("peer_closed",):
                assert r["alone"] is not None, m.id
                assert r["alone"] >= 0.6 if r["strength"] == "decisive" else r["alone"] < 0.85, (m.id, r)


def read_events(events: pl.DataFrame) -> pl.DataFrame:
    """The events an entry of parsers/nccl/ produced."""
    ids = [m.id for m in vocabulary().messages]
    return events.filter(pl.col("event").str.split(CASE_MARK).list.first().is_in(ids))


# --- every entry reads its own lines -----------------------------------------------------------------------------


@cache
def all_instances() -> list[nvi.Instance]:
    out = []
    for m in vocabulary().messages:
        found = nvi.instances(m)
        assert found, f"{m.id}: no line to test it on (a hand entry needs an example)"
        out += found
    return out


def _expected(i: nvi.Instance, wrapped: bool = False) -> tuple[str, dict]:
    """The event id and reading the entry gives its own instance (the case its values select; `Last error:` says
    no file)."""
    hit = re.match(i.entry.regex, i.message)
    assert hit, (i.entry.id, i.message, i.entry.regex)
    case, r = i.entry.reading(hit.groupdict(), None if wrapped else i.where)
    return (i.entry.id if case is None else f"{i.entry.id}{CASE_MARK}{case}"), r


def _same_reading(a: dict, b: dict) -> bool:
    keys = ("category", "strength", "kind", "set")
    return all(a[k] == b[k] for k in keys)


def _read(texts: list[str], tmp_path: Path) -> dict[int, list[tuple[str, str]]]:
    """Each text as its own file of one job, built once: the message events (event, kind) of each file."""
    paths = []
    for n, text in enumerate(texts):
        p = tmp_path / f"i{n:05d}.log"
        p.write_text(text + ("" if text.endswith("\n") else "\n"), encoding="utf-8")
        paths.append(p)
    events = read_events(build(paths).events)
    out: dict[int, list[tuple[str, str]]] = defaultdict(list)
    for source, event, kind in events.select("source", "event", "kind").iter_rows():
        out[int(Path(source).stem[1:])].append((event, kind))
    return out


@pytest.mark.parametrize("form", ["line", "wrapped"])
def test_every_entry_reads_the_lines_of_its_own_format(form: str, tmp_path: Path) -> None:
    """Every instance (each entry, each prefix era; `wrapped`: its message as torch's `Last error:`) is read by its
    own entry - or, where two formats print the same text, by one giving the same reading."""
    instances = all_instances() if form == "line" else list({i.message: i for i in all_instances()}.values())
    texts = [i.line if form == "line" else nvi.wrapped(i.message) for i in instances]
    got = _read(texts, tmp_path)
    by_id = {m.id: m for m in vocabulary().messages}
    wrong = []
    for n, i in enumerate(instances):
        event, want = _expected(i, wrapped=form == "wrapped")
        events = got.get(n, [])
        if len(events) != 1:
            wrong.append((i.era, i.line, events))
            continue
        ev = events[0][0]
        if ev != event:
            other = by_id[ev.partition(CASE_MARK)[0]]
            r = reading(ev) if other.origin.startswith("nccl/") else None
            if r is None or not _same_reading(r, want):
                wrong.append((i.era, i.line, ev, event))
    assert wrong == [], f"{len(wrong)} lines misread, e.g. {wrong[:5]}"


# --- a lone line gets the entry's category -------------------------------------------------------------------------


# the fields of a message event a rule reads besides its kind and attributes (who is named, sizes compared)
RULES_READ = {"peer", "subject_rank", "expected", "count", "numel_in", "numel_out", "local_rank"}


def _signature(i: nvi.Instance) -> tuple:
    """What the rules can read of an instance's event: instances alike give the same verdict."""
    _, r = _expected(i)
    hit = re.match(i.entry.regex, i.message)
    filled = tuple(sorted(col for g, col in i.entry.columns.items() if hit and hit.group(g) and col in RULES_READ))
    return (r["kind"], r["category"], r["strength"], r["alone"], tuple(sorted(r["set"].items())), filled)


@cache
def verdict_groups() -> dict[tuple, list[nvi.Instance]]:
    groups: dict[tuple, list[nvi.Instance]] = defaultdict(list)
    for i in all_instances():
        groups[_signature(i)].append(i)
    return groups


def _verdict_ok(category: str, want: str) -> bool:
    if want == BENIGN:  # no failure verdict: nothing failed as far as this line says
        return category in (Category.UNKNOWN, Category.NO_FAILURE)
    return category == want


def test_a_log_of_one_warn_line_gets_the_entry_category() -> None:
    """One diagnosis per distinct reading (kind, category, strength, attributes, fields filled: the rules read
    nothing else), on the newest era's line of its first entry: every entry of the group declares that category."""
    wrong = []
    for sig, group in verdict_groups().items():
        i = group[-1]
        d = diagnose(stdin_bytes=(i.line + "\n").encode())
        if not _verdict_ok(d.category, sig[1]) or d.category == Category.NOT_A_TRAINING_LOG:
            wrong.append((sig[:3], i.line, str(d.category), d.primary.rule))
    assert wrong == []


def message_wins_mismatches(wrap, fallback: str, always_named: tuple[str, ...] = ("peer_closed",)) -> list:  # type: ignore[no-untyped-def]
    """Each distinct reading of NCCL's messages inside `wrap(message)`: a message naming a cause must give its
    category, one that names none the class's `fallback`, never above a lead; the readings that do not. A line of
    a kind in `always_named` names its cause however weak (a local process gone names a crash)."""
    wrong = []
    for sig, group in verdict_groups().items():
        i = group[-1]
        d = diagnose(stdin_bytes=wrap(i.message).encode())
        kind, category, _strength, alone = sig[:4]
        names_cause = category not in (BENIGN, Category.UNKNOWN) and ((alone or 0) >= 0.5 or kind in always_named)
        want = category if names_cause else fallback
        if d.category != want:
            wrong.append((sig[:4], i.message, str(d.category), d.primary.rule, round(d.confidence, 2)))
        if not names_cause and d.confidence >= 0.6:
            wrong.append((sig[:4], "the class alone is a lead, not likely", d.confidence))
    return wrong


def test_the_message_wins_over_its_wrapper() -> None:
    """Inside torch's `DistBackendError ... Last error: <message>`: a message naming a cause gives its category
    (not `rank_crash` from the traceback); one that names none (an internal check, a benign warning, a line too
    weak alone) leaves the class's reading (ncclSystemError: the network, possible)."""
    assert message_wins_mismatches(nvi.wrapped, FALLBACK) == []


# --- readings decided by a field's value or by where NCCL printed it ---------------------------------------------


@pytest.mark.parametrize(
    ("line", "category", "kind"),
    [
        # the quoted CUDA error decides `Cuda failure`
        ("node1:1:1 [0] include/alloc.h:228 NCCL WARN Cuda failure 2 'out of memory'", "cuda_oom", "cuda_oom"),
        (
            "node1:1:1 [0] transport/p2p.cc:275 NCCL WARN Cuda failure 'operation not supported'",
            "shm_p2p_topology",
            "p2p_error",
        ),
        ("node1:1:1 [0] transport/p2p.cc:275 NCCL WARN Cuda failure 2 'out of memory'", "cuda_oom", "cuda_oom"),
        (
            "node1:1:1 [0] transport/nvls.cc:165 NCCL WARN Cuda failure 'invalid argument'",
            "nvml_driver_failure",
            "gpu_fabric_error",
        ),
        (
            "node1:1:1 [0] init.cc:1 NCCL WARN Cuda failure 802 'system not yet initialized'",
            "nvml_driver_failure",
            "gpu_fabric_error",
        ),
        (
            "node1:1:1 [0] init.cc:1 NCCL WARN Cuda failure 'CUDA driver version is insufficient for CUDA runtime "
            "version'",
            "config_version",
            "cuda_build_mismatch",
        ),
        (
            "node1:1:1 [0] enqueue.cc:1 NCCL WARN Cuda failure 'an illegal memory access was encountered'",
            "rank_crash",
            "cuda_error",
        ),
        ("node1:1:1 [0] enqueue.cc:1 NCCL WARN Cuda failure 'invalid argument'", "unknown", "nccl_internal"),
        # the errno decides a socket or verbs call
        (
            "node1:1:1 [0] misc/socket.cc:1 NCCL WARN Call to bind failed : Cannot assign requested address",
            "network_transport",
            "network_error",
        ),
        (
            "[2025-08-22 17:44:36] node02:6801:6839 [1] ras/client_support.cc:159 NCCL WARN Call to bind failed: Address "
            "already in use",
            "benign",
            "nccl_fallback",
        ),
        (
            "node1:1:1 [0] misc/socket.cc:1 NCCL WARN Call to socket failed: Too many open files",
            "config_version",
            "fd_exhaustion",
        ),
        (
            "node1:1:1 [0] misc/ibvwrap.cc:278 NCCL WARN Call to ibv_reg_mr_iova2 failed with error Cannot allocate "
            "memory",
            "config_version",
            "nccl_config",
        ),
        (
            "node1:1:1 [0] misc/ibvwrap.cc:1 NCCL WARN Call to ibv_modify_qp failed with error Connection timed out "
            "errno 110",
            "network_transport",
            "network_error",
        ),
        (
            "node1:1:1 [0] transport/net_ib.cc:1 NCCL WARN NET/IB : mlx5_0:1 Got async event : GID table change",
            "benign",
            "nccl_fallback",
        ),
        (
            "node1:1:1 [0] transport/net_ib.cc:1 NCCL WARN NET/IB : mlx5_0:1 Got async event : local work queue "
            "catastrophic error",
            "network_transport",
            "network_error",
        ),
        (
            "node1:1:1 [0] misc/nvmlwrap.cc:187 NCCL WARN nvmlDeviceGetHandleByPciBusId() failed: Not Found",
            "shm_p2p_topology",
            "gpu_not_visible",
        ),
        (
            "node1:1:1 [0] misc/nvmlwrap.cc:187 NCCL WARN nvmlDeviceGetHandleByPciBusId() failed: Unknown Error",
            "nvml_driver_failure",
            "nvml_error",
        ),
        # wordings of other releases and plugins
        (
            "node00:3171:3171 [0] include/socket.h:311 WARN Socket creation failed : Address family not supported by "
            "protocol",
            "network_transport",
            "network_error",
        ),
        (
            "node1:1:1 [0] transport/net.cc:1 NCCL WARN NET/IBext_v8 : Got completion from peer 10.0.0.2<41524> with "
            "status=IBV_WC_RETRY_EXC_ERR(12) opcode=IBV_WC_SEND(0)",
            "network_transport",
            "network_error",
        ),
        (
            "node1:1:1 [0] init.cc:1247 NCCL WARN Mismatched collective detected, please check your collective calls "
            "at and around rank 11. You can use NCCL_DEBUG=INFO and NCCL_DEBUG_SUBSYS=COLL to see the collective logs",
            "mismatched_collectives",
            "mismatch_detected",
        ),
        (
            "[2026-10-07 04:16:41] node5:71:90 [0] misc/socket.cc:1 (ncclSocketConnect) NCCL WARN ncclSocketConnect: "
            "socket is invalid",
            "unknown",
            "nccl_internal",
        ),
    ],
)
def test_readings_decided_by_a_field_or_the_file(line: str, category: str, kind: str) -> None:
    t = build(stdin_bytes=(line + "\n").encode())
    read = read_events(t.events)
    assert read["kind"].to_list() == [kind], read.select("event", "kind").rows()
    assert reading(read["event"][0])["category"] == category
    d = diagnose(stdin_bytes=(line + "\n").encode())
    assert _verdict_ok(d.category, category)


def test_the_line_after_last_error_is_kept_and_read() -> None:
    text = nvi.wrapped("Proxy Call to rank 0 failed (Connect)")
    t = build(stdin_bytes=text.encode())
    assert "Proxy Call to rank 0 failed (Connect)" in t.lines["message"].to_list()
    assert t.events.filter(pl.col("kind") == "network_error")["peer"].to_list() == ["0"]
    one_line = "RuntimeError: NCCL error: unhandled system error, NCCL version 2.14.3 Last error: Proxy Call to rank 2 "
    one_line += "failed (Connect)\n"
    assert build(stdin_bytes=one_line.encode()).events.filter(pl.col("kind") == "network_error")["peer"].to_list() == [
        "2"
    ]


def test_a_malformed_entry_is_refused_with_the_file_and_the_entry(tmp_path: Path) -> None:
    (tmp_path / "nccl").mkdir()
    (tmp_path / "nccl" / "mine.toml").write_text(
        '[[message]]\nid = "x.one"\nformat = "Boom %s"\nfields = ["peer"]\nnccl = "2.30"\nmeaning = "m"\n'
        'category = "network_transport"\nstrength = "decisive"\nalone = 0.7\nkind = "network_eror"\nfix = "f"\n',
        encoding="utf-8",
    )
    with pytest.raises(CatalogError, match=r"nccl/mine.toml: message 'x.one'.*network_eror"):
        load_catalog((tmp_path,)).vocabulary()


def test_messages_of_every_area_have_an_entry_per_format_and_a_readable_file() -> None:
    by_area: dict[str, list[Message]] = defaultdict(list)
    for m in vocabulary().messages:
        by_area[m.area].append(m)
        assert m.origin == f"nccl/{m.area}.toml", m.id
    assert {"net_ib", "net_socket", "shm", "p2p", "nvls", "proxy", "bootstrap", "init", "alloc", "topology", "ras",
            "plugin", "cuda"} <= set(by_area)  # fmt: skip


def _vocabulary_doc():  # type: ignore[no-untyped-def]
    return nvi.vocabulary_doc()


def test_vocabulary_doc_is_fresh_and_shows_the_goal_met() -> None:
    """docs/VOCABULARY.md is generated (`python scripts/regenerate.py`): at least 90% of the pinned NCCL's WARN
    formats read or declared benign, and per area what is read, benign, out of scope."""
    doc = _vocabulary_doc()
    section = doc.nccl()
    total = section.total("total")
    covered = section.total("cause") + section.total("no_cause") + section.total("benign")
    assert total == len(pinned_warn_ids()) and covered / total >= doc.GOAL
    assert doc.DOC.read_text(encoding="utf-8") == doc.generate(), "docs/VOCABULARY.md is stale: run regenerate.py"
