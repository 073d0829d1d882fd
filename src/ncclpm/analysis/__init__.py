"""The analysis stage: cross-rank verdicts computed from the tables ingest built (flight-recorder matching), before
the rules run. Ingest reads and parses; it does not judge."""

from __future__ import annotations

from dataclasses import replace

from ncclpm.tables import Tables


def analysed(t: Tables) -> Tables:
    """`t` with its flight-recorder dumps matched across ranks (`fr_analysis`); unchanged when there are none or
    when that was done already."""
    if t.fr_analysis is not None or t.fr is None or t.fr.compact.is_empty():
        return t
    from ncclpm.analysis.fr_match import analyze_fr

    return replace(t, fr_analysis=analyze_fr(t.fr))
