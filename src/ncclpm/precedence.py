"""Which root cause wins when several rules fire - declared in one place.

The engine orders root-cause findings by confidence band (conclusive > likely > possible), then by the position
of their rule in `PRECEDENCE` (earlier wins), then by confidence. A rule that explains how the others came about
comes before them; a reading inferred from absence (a silent rank) or from the whole job timing out comes after
every rule that quotes a failure. Every registered rule is listed exactly once (checked at import); `ncclpm
rules` prints this order with the reasons.

Who silences whom is declared here too (`EXPLAINS`): when the first rule fires, the second's finding is dropped as
if it had not fired, because the first already explains what the second infers. The engine applies it (evaluating
a silencer even when it was not selected); no rule checks another's conclusion.
"""

from __future__ import annotations

PRECEDENCE: tuple[tuple[str, str], ...] = (
    ("NA01", "the input is not a distributed job's log: no cause of a job's failure applies to it"),
    ("CV02", "a build that does not fit the node fails at its first GPU call: what NVML or a rank says next follows"),
    ("NV01", "a broken GPU driver makes everything on its node fail: NCCL errors, crashes, timeouts"),
    ("OM01", "an out-of-memory error is the exact reason its rank died"),
    ("OM02", "a serving engine that stopped on its own memory check says why: its front process's exit follows"),
    ("FR01", "the dumps prove which collective differed, and at which sequence number"),
    ("CF01", "ranks set up wrong (two on one GPU, launcher and script disagree) fail the same way every time"),
    (
        "CF05",
        "a framework asked for more GPUs than the cluster has never started its workers: what follows is a consequence",
    ),
    ("SL02", "a request the scheduler refused started nothing: whatever the launcher printed after it follows"),
    ("CF06", "a parallel layout the framework refused at start-up stops every rank the same way: its crash follows"),
    ("CF02", "nodes launched with different world sizes never form one communicator: what follows is a consequence"),
    ("CF03", "NCCL rejected the call itself (invalid usage): a setup mistake, whatever failed after it"),
    (
        "CF04",
        "torch refused how the program uses it (DDP's reducer, tensors a backend cannot take): the code's setting",
    ),
    ("MC01", "ranks issuing different collectives is a program bug no infrastructure fix touches"),
    ("MC03", "ranks that built different models are refused by DDP before any collective: every rank's stop follows"),
    ("SH01", "a /dev/shm or peer-to-peer failure breaks the communicator before any collective"),
    ("SH02", "a benchmark's wrong values are corrupted data: nothing else failed, so no other rule has a lead"),
    ("SK01", "the stacks show where the odd rank really was, down to the user's line"),
    ("DL01", "a DataLoader failure is why its rank stopped issuing collectives"),
    ("CV01", "mixed NCCL/torch versions break the wire protocol: what follows is a consequence"),
    ("CV03", "a segfault inside NCCL's own threads follows the NCCL build: the crash rules below only see a crash"),
    ("RZ01", "the group never formed: nothing ran yet"),
    ("NW01", "a rank that raised a network error died of the network (NW01 demotes itself when a peer died first)"),
    (
        "NC01",
        "NCCL's result class alone (an internal check, a failed CUDA call): its meaning beats 'a rank crashed'",
    ),
    ("CR01", "a rank that died first, for a reason no rule above names"),
    (
        "MC02",
        "the code issues a collective on some ranks only and nothing failed: read from the code, so only a lead",
    ),
    ("ST01", "a rank silent while the others waited: inferred from absence, below every rule that quotes a failure"),
    ("ST02", "a rank still running when the others failed together: the launcher's exits are all it has"),
    ("WT01", "ranks waited in the store for a rank still busy elsewhere: the store wait is the only trace"),
    ("MP01", "ranks failed inside a main_process_first section: the main process's work is the only candidate"),
    ("ST03", "a process's work had run as long as the timeout when another failed: the timing names the busy one"),
    ("TS01", "a timeout of seconds, or not the one the code sets: below every rule that names a rank's reason"),
    ("FR02", "the dumps name the rank that stopped, but not why"),
    ("SL01", "the scheduler ended the job: above only the all-ranks-timed-out reading"),
    ("EX01", "the launcher was killed from outside while no rank had failed: the sender is outside the job"),
    ("CR02", "one process's excerpt ending in its own error, no rank named: the lead when nothing above fired"),
    ("CR03", "a survivor saw a peer's connection close mid-collective: the peer's own reason is not in the files"),
    ("TO01", "every rank joined and waited together: what remains when no rank is to blame"),
    ("OK01", "the job finished and nothing failed: only when no rule found any failure at all"),
    ("OK02", "the only warnings are notices the stack recovers from: only when nothing failed at all"),
    ("CT01", "the symptom itself: never a root cause"),
    ("IN01", "the fallback: runs only when nothing else found a cause"),
)

RANK: dict[str, int] = {rule: i for i, (rule, _) in enumerate(PRECEDENCE)}

# (explains, silenced, why): when the first fires, the second is not a finding of this job.
EXPLAINS: tuple[tuple[str, str, str], ...] = (
    ("CR01", "ST01", "a rank that died explains why the others waited: one silent rank proves nothing then"),
    ("CR03", "ST01", "a peer seen going away explains why the others waited: one silent rank proves nothing then"),
    ("CR01", "CR03", "a rank's own error says why its peer went away: the survivors' view adds nothing"),
    ("CR01", "CR02", "the rank named as dying first is that process: reading it as one of no known rank adds nothing"),
    ("CV03", "CR01", "a crash inside NCCL's own code says why that rank died: the generic reading adds nothing"),
    ("CV03", "CR02", "a crash inside NCCL's own code says why that process died: the generic reading adds nothing"),
    ("ST03", "CR02", "another process's work outlasting the timeout is why this one's wait failed: its error is that"),
    ("MP01", "CR02", "the main process's work outlasting the timeout is why a waiting rank failed: its error is that"),
    *(
        ("NA01", rule, "the input is not a distributed job's log: its own errors are leads about the host, not a cause")
        for rule in ("CR02", "NV01", "OM01", "CV02", "DL01", "OK01", "OK02")
    ),
)


def silencers(rule_id: str) -> tuple[str, ...]:
    """The rules whose finding silences `rule_id`'s."""
    return tuple(first for first, second, _ in EXPLAINS if second == rule_id)


def check(rule_ids: set[str]) -> list[str]:
    """Problems with the table against the registered rule ids (empty when it lists each exactly once)."""
    listed = [r for r, _ in PRECEDENCE]
    problems = [f"{r} is listed twice" for r in sorted({r for r in listed if listed.count(r) > 1})]
    problems += [f"{r} is not a registered rule" for r in sorted(set(listed) - rule_ids)]
    problems += [f"{r} is missing (every rule must have a place)" for r in sorted(rule_ids - set(listed))]
    problems += [
        f"EXPLAINS names {r}, not a registered rule" for r in sorted({r for e in EXPLAINS for r in e[:2]} - rule_ids)
    ]
    problems += [
        f"{a} explains {b} and {b} explains {a}" for a, b, _ in EXPLAINS if (b, a) in {e[:2] for e in EXPLAINS}
    ]
    return problems
