"""The analysis stage: every fact derived across sources, worked out once per job from the tables ingest built,
before the rules run - flight-recorder matching (`fr_match.py`), the merged stack tree (`stack_tree.py`), who waited
on whom (`victims.py`), who failed on their own and how each process ended (`crashes.py`), a peer that went away
(`peers.py`), store waits (`stores.py`), what each rank was busy with (`busy.py`), the timeout in force and where
it comes from (`timeout.py`), facts about the job as a whole (`job.py`) and the settings lint (`settings.py`).
`analyse(t)` gives the typed `Analysis` the rules, the report and `ncclpm diff` read. Ingest reads and parses; this
stage judges nothing either: the rules do."""

from __future__ import annotations

from ncclpm.analysis.facts import Analysis, analyse

__all__ = ["Analysis", "analyse"]
