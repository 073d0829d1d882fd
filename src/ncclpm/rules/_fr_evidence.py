"""Turn flight-recorder rows into quotable evidence (dump file + record id + what the entry says)."""

from __future__ import annotations

import polars as pl

from ncclpm.ingest.tables import Tables
from ncclpm.rules.base import Evidence

MAX_FRAMES = 4


def _fmt_frames(frames: list[dict] | None) -> str:
    if not frames:
        return ""
    shown = [f"{f['name']} ({str(f['filename']).rsplit('/', 1)[-1]}:{f['line']})" for f in frames[:MAX_FRAMES]]
    return " < ".join(shown)


def entry_evidence(t: Tables, keys: pl.DataFrame, limit: int = 6) -> tuple[Evidence, ...]:
    """Evidence for FR entries identified by (rank, group_key, collective_seq_id) rows of `keys`."""
    if t.fr is None or keys.is_empty():
        return ()
    e = t.fr.entries.join(keys.select("rank", "group_key", "collective_seq_id").unique(),
                          on=["rank", "group_key", "collective_seq_id"])
    out = []
    for r in e.sort("collective_seq_id", "rank").head(limit).iter_rows(named=True):
        text = (f"rank {r['rank']}: {r['op']} #{r['collective_seq_id']} of {r['pg_desc'] or r['group_key']} "
                f"in={r['input_sizes']} {r['input_dtypes']} state={r['state']}"
                + (f" retired={r['retired']}" if r["retired"] is not None else ""))
        frames = _fmt_frames(r["frames"])
        out.append(Evidence(r["source"], None, f"{text}; stack: {frames}" if frames else text, r["rank"]))
    return tuple(out)


def last_entry_evidence(t: Tables, ranks: list[int], limit: int = 4) -> tuple[Evidence, ...]:
    """The last recorded entry of each rank (what it did last, and from where)."""
    if t.fr is None:
        return ()
    last = (t.fr.entries.filter(pl.col("rank").is_in(ranks)).sort("time_created_ns", "record_id")
            .group_by("rank", maintain_order=True).last())
    return entry_evidence(t, last, limit)
