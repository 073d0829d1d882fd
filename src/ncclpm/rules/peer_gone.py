"""CR03 peer-process-gone."""

from __future__ import annotations

from typing import ClassVar

import polars as pl

from ncclpm.model import said
from ncclpm.rules.base import Finding, Fix, Rule, quotes, ranks_text
from ncclpm.tables import Tables
from ncclpm.tables.kinds import K
from ncclpm.tables.schema import Category


class PeerProcessGone(Rule):
    """A survivor's view only: a peer closed its connection in the middle of a collective - it died.

    ## What it detects
    gloo's `Connection closed by peer [ADDR]:PORT` (torch 2.x adds "This is typically caused by a remote worker
    crashing") or `Read error ...: Connection reset by peer` raised by a collective, the c10d store's connection
    dropping under a rank that waited in it (`failed to recv, got 0 bytes`, torch >= 2.2 `Failed to recv, got 0 bytes.
    Connection was likely closed. Did the remote server shutdown or crash?`; `retrieving ncclUniqueId from [0] ...
    got error: Connection reset by peer` names the rank waited for), with no collective timeout before it and no
    other rank's own error in the files. A non-root rank's monitored-barrier failure whose original exception is
    that closed connection (`received errors while waiting for send/recv from rank 0` ... `Connection closed by
    peer`) names the root as the process that went away.

    ## Why it matters
    A process that exits - a crash, a kill by the OOM killer, `sys.exit` on one rank - closes its sockets, and
    every peer blocked in a collective with it fails at once with this error. The paste is the survivor's; the
    reason is in the log of the process that went away. When every rank of the job but one lost the connection,
    that one is named.

    ## Example
    `dist.all_reduce(x)` / `RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed
    by peer [127.0.0.1]:7370. This is typically caused by a remote worker crashing.`
    """

    id = "CR03"
    name = "peer-process-gone"
    category = Category.RANK_CRASH
    base_confidence = 0.4
    explains = ("IN01",)
    FIXES: ClassVar[dict[str, Fix]] = {
        "peer_log": Fix(
            "Read the output of the process at the peer's address (its traceback, `Killed`, a segfault), and the "
            "host's kernel log there (`dmesg -T | grep -i 'killed process'`): the reason it exited is there."
        ),
        "per_rank": Fix(
            "Keep every rank's output next time (`torchrun --log-dir DIR --tee 3`) so the rank that died first "
            "is in the files."
        ),
    }

    def evidence(self, t: Tables) -> pl.DataFrame:
        return t.kinds(K.peer_closed) if self.facts.peer_left else pl.DataFrame()  # (CR01 silences it: EXPLAINS)

    def assess(self, t: Tables, ev: pl.DataFrame) -> Finding | None:
        first = ev.sort("ts", "line", nulls_last=True).row(0, named=True)
        survivors = sorted(set(ev["rank"].drop_nulls().to_list()))
        # every rank but one lost the connection: that one went away (two processes: the other one)
        others = self.facts.known_ranks - set(survivors)
        gone = tuple(others) if survivors and len(others) == 1 else ()
        barrier = self.facts.barrier_lost_peer["subject_rank"].drop_nulls().unique().to_list()
        if not gone and len(barrier) == 1:  # the monitored barrier named whom it waited for: its root
            gone = (int(barrier[0]),)
        if not gone and first["subject_rank"] is not None:  # the line names whom it waited for (the NCCL id)
            gone = (int(first["subject_rank"]),)
        last = self.facts.last_lines.filter(pl.col("rank").is_in(list(gone)) & pl.col("last_line").is_not_null())
        errors = t.ranks.filter(pl.col("rank").is_in(list(gone)))["first_error"]
        silent = not last.is_empty() and errors.is_null().all()  # its log is here and shows no error
        named = str(first["peer"] or "")
        peer = f" of rank {named}" if named.isdigit() else f" at {named}" if named else ""  # NCCL names some by rank
        if first["local_rank"] is not None:  # NCCL's service thread names a process of its own node
            peer = f" of local rank {first['local_rank']}" + (f" on {first['host']}" if first["host"] else "")
        store = first["net_class"] == "store"  # the connection lost was the c10d store's, not a collective's
        if store and not gone:
            peer = f" hosting the c10d store{peer} (rank 0's, or torchrun's agent on the first node)"
        who = ranks_text(gone) if gone else f"the process{peer}"
        seen_by = ranks_text(survivors) if survivors else "this process"
        during = f"while {seen_by} waited in the c10d store" if store else "in the middle of a collective"
        return self.finding(
            confidence=self.base_confidence + (0.1 if gone else 0.0),  # why it went away is still not known
            culprit_ranks=gone,
            summary=f"{who[:1].upper()}{who[1:]} went away {during}: {seen_by} lost "
            f"{'its' if len(survivors) < 2 else 'their'} connection to it (`{said(first['text'], t.line_prefix)}`)"
            + (f"; it last logged `{said(last['last_line'][0], t.line_prefix, 80)}`" if not last.is_empty() else "")
            + (
                "; its own output ends without an error: it was killed (SIGKILL - the OOM killer most often)."
                if silent
                else "; its own output has the reason (a crash, or a kill by the OOM killer)."
            ),
            explanation="A closed or reset connection during a collective is what a peer's exit looks like from "
            "the other side; no collective timed out first, so the peer did not leave because of a hang.",
            evidence=quotes(ev, 3),
            fixes=self.fixes("peer_log", *([] if gone else ["per_rank"])),
            dont=("Do not raise the collective timeout or change network settings: the peer process was gone.",),
            verify=("The peer's own log ends with its error at the time this connection closed.",),
        )
