"""Generators used only by tests and benchmarks (not shipped): synthetic flight-recorder dumps and folders of
job archives for triage."""
