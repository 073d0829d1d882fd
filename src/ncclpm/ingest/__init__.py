"""Ingest: a `Job`'s sources -> the `Tables` (`build.py`), by reader - `text/` (logs, error files), `flight_recorder/`
(dumps), `stacks/` (stack dumps), `code/` (code and configs, for settings only) - with the catalog machinery they
share (`catalog.py`, `envelopes.py`, `readings.py`, `unwrap.py`, `bounds.py`). Facts, never verdicts."""
