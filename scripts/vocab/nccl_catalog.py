#!/usr/bin/env python3
"""Write parsers/nccl/<area>.toml: one declared entry per NCCL WARN format (issue 29), from the extraction
(data/nccl_messages.jsonl; with --legacy, also the formats only NCCL 2.3-2.17 printed, from an extraction run with
`nccl_extract.py --first-minor 3`), the draft classification's rules (nccl_classify.py) and the review
(nccl_review.py).

    python scripts/vocab/nccl_catalog.py --legacy /tmp/legacy/nccl_messages.jsonl   # write parsers/nccl/
    python scripts/vocab/nccl_catalog.py --missing    # print draft entries for formats no catalog entry declares

The catalog was written once with the first command and is maintained by hand since (parsers/nccl/README.md): for a
new NCCL release, rerun the extraction, then `--missing` prints draft entries to review and paste into their area's
file; the coverage test (tests/test_nccl_messages.py) names what is still undeclared.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tomllib
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
DATA = HERE / "data"
OUT = ROOT / "parsers" / "nccl"
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "src" / "ncclpm" / "ingest"))

import nccl_classify as draft  # noqa: E402
import nccl_review as review  # noqa: E402
import printf_regex as pr  # noqa: E402

AREAS: dict[str, tuple[str, str]] = {
    "net_ib": (
        "InfiniBand / RoCE transport",
        "NCCL's IB verbs transport (transport/net_ib*, misc/ibvwrap.cc, "
        "mlx5dv): completion errors, async events, verbs calls, NIC selection.",
    ),
    "net_socket": (
        "TCP sockets",
        "NCCL's socket layer (misc/socket.cc, os/linux.cc), its TCP transport "
        "(NET/Socket) and the Unix-domain sockets local processes exchange GPU memory handles over.",
    ),
    "bootstrap": (
        "Bootstrap",
        "How ranks find each other at communicator creation (bootstrap.cc): the root, "
        "the unique id, NCCL_COMM_ID, the out-of-band interface.",
    ),
    "proxy": (
        "Proxy threads",
        "The per-process proxy threads that drive network and shared-memory transfers "
        "and serve local peers (proxy.cc).",
    ),
    "shm": ("Shared memory", "The SHM transport and /dev/shm segments (transport/shm.cc, misc/shmutils.cc)."),
    "p2p": ("GPU peer-to-peer", "CUDA IPC and peer access between GPUs of one node (transport/p2p.cc)."),
    "nvls": ("NVLink SHARP, multi-node NVLink", "NVLS multicast buffers through the NVSwitch fabric, MNNVL/IMEX."),
    "collnet": ("CollNet (SHARP)", "In-network reductions through a CollNet plugin."),
    "gdr": ("GDRCopy", "The optional GDRCopy library NCCL may use for small copies."),
    "nvml": ("NVML", "NCCL's queries of the GPU driver's management library."),
    "cuda": (
        "CUDA",
        "CUDA calls inside NCCL: `Cuda failure` (what it means is the quoted CUDA error), the driver "
        "library, streams and graphs.",
    ),
    "alloc": ("Memory", "NCCL's own GPU and host allocations, buffer registration, the 2.30 memory manager."),
    "topology": ("Topology", "Topology detection, XML topology files, path and ring search (graph/)."),
    "init": ("Communicator set-up", "Creating, configuring and destroying communicators (init.cc, transport.cc)."),
    "api_usage": (
        "Calls NCCL rejects",
        "Argument and usage checks of NCCL's API (misc/argcheck.cc, enqueue.cc, group.cc).",
    ),
    "plugin": ("Plugins", "Net, tuner and profiler plugins (plugin/)."),
    "ras": ("RAS", "NCCL's RAS monitoring thread (ras/): only the `ncclras` status client depends on it."),
    "os": ("Operating system", "Threads, limits, affinity (os/, misc/)."),
    "gin_rma": (
        "Device API, GIN, RMA",
        "NCCL 2.28+'s device-initiated communication (GIN), one-sided RMA and symmetric-memory windows.",
    ),
    "misc": ("Other", "Internal utilities."),
}

DEFAULT_ALONE = {"decisive": 0.75, "supporting": 0.5}
KIND_OF_CATEGORY = {
    "network_transport": "network_error",
    "cuda_oom": "cuda_oom",
    "init_rendezvous": "bootstrap_error",
    "mismatched_collectives": "mismatch_detected",
    "rank_crash": "nccl_fatal",
    "unknown": "nccl_internal",
    "benign": "nccl_fallback",
}
SPECIFIC_KINDS = {
    "duplicate_gpu", "world_size_mismatch", "version_mismatch", "cuda_build_mismatch", "fd_exhaustion",
    "gpu_unavailable", "gpu_fabric_error", "gpu_not_visible", "p2p_error", "shm_error", "comm_aborted",
    "peer_closed", "gpu_hw_error", "cuda_error",
}  # fmt: skip


def minor(tag: str) -> str:
    return ".".join(tag.lstrip("v").split("-")[0].split(".")[:2])


def versions(msg: dict) -> str:
    first, last = minor(msg["first_tag"]), minor(msg["last_tag"])
    return first if first == last else f"{first}-{last}"


def field_list(msg: dict) -> list[str]:
    """One entry per conversion: the printf name where it has one, else "" (matched, not kept); the review's
    FIELDS correct the names at the conversions they match (the last ones for a pattern ending in `$`, else the
    conversions of the matched text, in order)."""
    names = [n or "" for n in pr.field_names(msg["format"], msg["args"])]
    convs = pr.conversions(msg["format"])
    for rx, fixed in review.FIELDS:
        m = re.search(rx, msg["format"])
        if not m:
            continue
        inside = [i for i, c in enumerate(convs) if m.start() <= c.start < m.end() and c.conv != "%"]
        for i, name in zip(inside[-len(fixed) :] if rx.endswith("$") else inside, fixed, strict=False):
            names[i] = name
        # a name given here is the only one of its kind in the format
        for i, n in enumerate(names):
            if n and n in fixed and i not in inside:
                names[i] = ""
        break
    return names


def _from_draft(msg: dict, area: str) -> dict:
    """The draft's reading of a format no review decision covers, remapped to the catalog's kinds."""
    c = draft.classify(msg, area)
    r = c["rule"]
    meaning = r.meaning.format(function=msg["function"] or "a macro-generated function")
    fmt = msg["format"]
    guess = c["basis"] == "area default"
    if r.category == "benign":
        return review.benign(meaning, r.fix)
    if (r.category == "rank_crash" and r.strength == "supporting") or (
        guess and r.category in ("rank_crash", "network_transport")
    ):
        return review.internal(meaning if not guess else draft._INTERNAL.format(function=msg["function"] or "?"))
    if r.category == "unknown":
        if re.search(r"symmetric registration check failed.*mismatch|segments but another rank|differs from rank", fmt):
            return {
                "category": "mismatched_collectives",
                "strength": "supporting",
                "alone": 0.6,
                "kind": "mismatch_detected",
                "incriminates": "nobody",
                "meaning": "Ranks registered different symmetric buffers or windows for the same collective "
                "(offsets, sizes or segments differ from rank 0's): the ranks' calls do not match.",
                "fix": "Register the same (symmetric) buffers on every rank, in the same order and sizes.",
            }
        if re.search(r"GIN Error|DOCA (?:Error|failure)|Error on GFD test", fmt):
            return review.net(
                "NCCL's GPU-initiated networking (GIN) reported an error from the network device.",
                "Check the NICs and links of this host; read the error before it.",
                "ib",
                0.5,
                strength="supporting",
            )
        if re.search(
            r"not supported|[Rr]equire|requested|invalid value|is disabled|No \w+-capable|not found|"
            r"does not support|[Ii]nvalid|must be|needs to be|not initialized|not connected|NULL|"
            r"not a member|not within|not in the valid|aligned|exceeds",
            fmt,
        ):
            return review.cfg(
                meaning
                if not guess
                else "The device API / GIN / RMA / symmetric memory was asked "
                "for something this communicator, system or plugin does not provide, or called "
                "with invalid arguments.",
                "Fix the calling code or the NCCL_GIN_* / NCCL_RMA_* settings the message names; "
                "check that every rank's NICs support GIN (DMA-BUF or nvidia-peermem).",
                alone=0.55,
                strength="supporting",
            )
        return review.internal(
            meaning if not guess else "An internal check of NCCL's device API, GIN or RMA path failed."
        )
    out = {
        "category": r.category,
        "strength": r.strength,
        "meaning": meaning,
        "fix": r.fix,
        "incriminates": r.incriminates,
    }
    if r.category == "config_version":
        out["kind"] = r.kind if r.kind in SPECIFIC_KINDS else "nccl_config"
    elif r.category == "shm_p2p_topology":
        out["kind"] = {"shm": "shm_error", "p2p": "p2p_error"}.get(area, "topology_error")
        if r.kind in SPECIFIC_KINDS:
            out["kind"] = r.kind
    elif r.category == "nvml_driver_failure":
        out["kind"] = r.kind if r.kind in SPECIFIC_KINDS else "nvml_error"
    elif r.category == "network_transport":
        out["kind"] = "network_error"
        out["set"] = {"net_class": "ib" if area in ("net_ib", "gdr") else "connect"}
    else:
        out["kind"] = r.kind if r.kind in SPECIFIC_KINDS else KIND_OF_CATEGORY[r.category]
    return out


def decide(msg: dict) -> dict:
    """The catalog entry of one WARN format."""
    area = draft.area_of(msg)
    fmt = msg["format"]
    base: dict = {}
    for rx, changes in review.REVIEW:
        if re.search(rx, fmt):
            base = dict(changes) if changes else _from_draft(msg, area)
            break
    area = base.pop("area", area)
    fields = field_list(msg)
    entry = {
        "id": msg["id"],
        "format": fmt,
        "fields": fields,
        "nccl": versions(msg),
        "meaning": base["meaning"],
        "category": base["category"],
        "strength": base["strength"],
    }
    alone = base.get("alone", DEFAULT_ALONE.get(base["strength"]))
    if alone is not None and base["category"] not in ("benign", "unknown"):
        entry["alone"] = alone
    entry["incriminates"] = base.get("incriminates", "this_rank")
    entry["kind"] = base.get("kind") or KIND_OF_CATEGORY.get(base["category"], "nccl_internal")
    if base.get("set"):
        entry["set"] = base["set"]
    entry["fix"] = base["fix"]
    cases = []
    cuda = [c for c in review.CUDA_ERRORS] if base.get("cuda_cases") else []
    cases += [c for c in cuda if c.get("first")]
    for case in base.get("cases", []):
        if "when_format" in case:  # a reading of this format only: folded in (or dropped) here
            if re.search(case["when_format"], fmt):
                for k, v in case.items():
                    if k not in ("when", "when_format"):
                        entry[k] = v
            continue
        cases.append(case)
    cases += [c for c in cuda if not c.get("first")]
    usable = []
    for case in cases:
        keys = set(case.get("when", {}))
        if keys and not keys & set(fields):
            continue  # keyed on a field this format does not print
        c = {k: v for k, v in case.items() if k not in ("first",)}
        c["when"] = {k: v for k, v in case.get("when", {}).items() if k in fields}
        if not c["when"]:
            c.pop("when")
        usable.append(c)
    if usable:
        entry["case"] = usable
    return {"area": area, "entry": entry}


def hand_entry(h: dict) -> dict:
    e = {k: v for k, v in h.items() if k not in ("area", "cases", "example")}
    e["alone"] = h.get("alone", DEFAULT_ALONE.get(h["strength"]))
    e.setdefault("incriminates", "this_rank")
    e["case"] = [
        c for c in h.get("cases", []) if not set(c.get("when", {})) - set(re.findall(r"\(\?P<(\w+)>", h["regex"]))
    ]
    if not e["case"]:
        e.pop("case")
    e["example"] = h["example"]
    return e


# --- TOML -------------------------------------------------------------------------------------------------------


def _q(v: object) -> str:
    if isinstance(v, str):
        if "'''" not in v and ("\\" in v or '"' in v) and "\n" not in v:
            return f"'''{v}'''"
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, list):
        return "[" + ", ".join(_q(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{k} = {_q(x)}" for k, x in v.items()) + " }"
    raise TypeError(v)


ORDER = (
    "id",
    "format",
    "regex",
    "key",
    "fields",
    "nccl",
    "meaning",
    "category",
    "strength",
    "alone",
    "incriminates",
    "kind",
    "set",
    "fix",
    "note",
)


def render_entry(e: dict) -> list[str]:
    out = ["", "[[message]]"]
    out += [f"{k} = {_q(e[k])}" for k in ORDER if k in e]
    for line in e.get("example", []):
        out += ["  [[message.example]]", f"  line = {_q(line)}"]
    for case in e.get("case", []):
        out.append("  [[message.case]]")
        for k in (
            "when",
            "when_file",
            "category",
            "strength",
            "alone",
            "kind",
            "set",
            "incriminates",
            "meaning",
            "fix",
        ):
            if k in case:
                out.append(f"  {k} = {_q(case[k])}")
    return out


HEADER = """\
# NCCL WARN messages - {title}. {about}
# One [[message]] per format NCCL prints (its source, 2.3 to {pinned}): what it means, which category it points to,
# how strong it is alone, whom it incriminates, the fix. Read by ncclpm/ingest/nccl_messages.py; the format and
# the fields are explained in parsers/nccl/README.md. Written from scripts/vocab (nccl_catalog.py), then reviewed and
# maintained by hand.

[area]
name = "{name}"
title = "{title}"
"""


def write(entries: list[dict], pinned: str) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    by_area: dict[str, list[dict]] = {}
    for d in entries:
        by_area.setdefault(d["area"], []).append(d["entry"])
    for area, items in by_area.items():
        title, about = AREAS[area]
        lines = [HEADER.format(title=title, about=about, pinned=pinned, name=area).rstrip("\n")]
        for e in sorted(items, key=lambda e: (e.get("format", e.get("key", "")).lower(), e["id"])):
            lines += render_entry(e)
        (OUT / f"{area}.toml").write_text("\n".join(lines) + "\n", encoding="utf-8")


def declared_ids() -> set[str]:
    ids = set()
    for path in OUT.glob("*.toml"):
        ids |= {m["id"] for m in tomllib.loads(path.read_text(encoding="utf-8")).get("message", [])}
    return ids


def load(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--legacy", type=Path, help="an extraction from 2.3 on (nccl_extract.py --first-minor 3)")
    ap.add_argument("--missing", action="store_true", help="print draft entries for undeclared formats")
    ns = ap.parse_args(argv)
    messages = [m for m in load(DATA / "nccl_messages.jsonl") if m["level"] == "WARN"]
    pinned = json.loads((DATA / "nccl_prefixes.json").read_text(encoding="utf-8"))["pinned"]
    if ns.legacy:
        older = {m["id"]: m for m in load(ns.legacy) if m["level"] == "WARN"}
        for m in messages:  # a format older than 2.18: its first tag is the older extraction's
            if m["id"] in older:
                m["first_tag"] = older[m["id"]]["first_tag"]
        known = {m["id"] for m in messages}
        messages += [m for i, m in older.items() if i not in known]
    if ns.missing:
        have = declared_ids()
        for m in messages:
            if m["id"] not in have:
                d = decide(m)
                print(f"# area {d['area']}\n" + "\n".join(render_entry(d["entry"])))
        return 0
    hand = [{"area": h["area"], "entry": hand_entry(h)} for h in review.HAND]
    write([decide(m) for m in messages] + hand, minor(pinned))
    return 0


if __name__ == "__main__":
    sys.exit(main())
