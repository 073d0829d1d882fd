"""Turn flight-recorder rows into quotable evidence (dump file + record id + what the entry says)."""

from __future__ import annotations

import polars as pl

from ncclpm.rules.base import Evidence
from ncclpm.tables import Tables

MAX_FRAMES = 4


def _fmt_frames(frames: list[dict] | None) -> str:
    if not frames:
        return ""
    shown = [f"{f['name']} ({str(f['filename']).rsplit('/', 1)[-1]}:{f['line']})" for f in frames[:MAX_FRAMES]]
    return " < ".join(shown)


def entry_text(r: dict) -> str:
    """A dump entry as the dump holds it: its own field names and values (a dump has no line of text to quote), its
    frames innermost first."""
    name = r.get("profiling_name") or r.get("op")
    text = (
        f"entry {r.get('record_id')}: profiling_name={name!r} collective_seq_id={r['collective_seq_id']} "
        f"process_group={(r['group_key'], r['pg_desc'])!r} input_sizes={r['input_sizes']} "
        f"input_dtypes={r['input_dtypes']} state={r['state']!r}"
        + (f" retired={r['retired']}" if r["retired"] is not None else "")
    )
    frames = _fmt_frames(r["frames"])
    return f"{text} frames={frames}" if frames else text


def entry_evidence(t: Tables, keys: pl.DataFrame, limit: int = 6) -> tuple[Evidence, ...]:
    """Evidence for FR entries identified by (rank, group_key, collective_seq_id) rows of `keys`."""
    if t.fr is None or keys.is_empty():
        return ()
    on = keys.select("rank", pl.col("group_key").cast(pl.Categorical), "collective_seq_id").unique()
    # the ranks' and seqs' rows first (masks), then the join: a join over the whole table hashed every entry (46 MB at
    # 256 ranks x 2000 entries); in the table's row order, as the join on it gave them
    seqs = on["collective_seq_id"].implode()
    near = t.fr.compact.filter(pl.col("rank").is_in(on["rank"].implode()) & pl.col("collective_seq_id").is_in(seqs))
    e = near.join(on, on=["rank", "group_key", "collective_seq_id"], maintain_order="left")
    out = []
    for r in t.fr.expand(e.sort("collective_seq_id", "rank").head(limit)).iter_rows(named=True):
        out.append(Evidence(r["source"], None, entry_text(r), r["rank"]))
    return tuple(out)


def last_entry_evidence(t: Tables, ranks: list[int], limit: int = 4) -> tuple[Evidence, ...]:
    """The last recorded entry of each rank (what it did last, and from where)."""
    if t.fr is None:
        return ()
    last = (
        t.fr.compact.filter(pl.col("rank").is_in(ranks))
        .sort("time_created_ns", "record_id")
        .group_by("rank", maintain_order=True)
        .last()
    )
    return entry_evidence(t, last, limit)


TORCH_FILES = ("distributed_c10d.py", "c10d_logger.py", "/torch/")


def _call_site(frames: list[dict] | None) -> str | None:
    """The innermost frame outside torch: where the user's code issued the collective."""
    for f in frames or []:
        if not any(m in str(f["filename"]) for m in TORCH_FILES):
            return f"{str(f['filename']).rsplit('/', 1)[-1]}:{f['line']}"
    return None


def changed_call_sites(t: Tables, group: str, seq: int, ranks: list[int], history: int = 8) -> dict[int, str]:
    """Ranks whose collective #seq came from another line of code than their previous collectives in the group.

    In a 1-vs-1 mismatch no vote can decide, but the rank that took a different code path at that step is
    usually the one that diverged (`if rank == 1: all_reduce(other_tensor)`). Returns {rank: "old -> new"};
    empty when frames are missing or every rank (or none) changed.
    """
    if t.fr is None:
        return {}
    e = t.fr.expand(
        t.fr.compact.filter(
            (pl.col("group_key") == group)
            & pl.col("rank").is_in(ranks)
            & pl.col("collective_seq_id").is_between(seq - history, seq)
        )
    )
    changed: dict[int, str] = {}
    for rank in ranks:
        mine = e.filter(pl.col("rank") == rank).sort("collective_seq_id")
        sites = [
            (s, _call_site(f))
            for s, f in zip(mine["collective_seq_id"].to_list(), mine["frames"].to_list(), strict=True)
        ]
        now = next((c for s, c in sites if s == seq), None)
        before = [c for s, c in sites if s < seq and c is not None]
        if now is None or not before:
            return {}  # without stacks for every rank the comparison is not fair
        usual = max(set(before), key=before.count)
        if now != usual:
            changed[rank] = f"{usual} -> {now}"
    return changed if 0 < len(changed) < len(ranks) else {}
