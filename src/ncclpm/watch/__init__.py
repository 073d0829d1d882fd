"""`ncclpm watch`: a sidecar beside a running job that catches a hang while it happens.

It follows the job's logs with ncclpm's own line reader (`follow.py`, `lines.py`) and its processes (`procs.py`);
`detect.py` decides when the job hangs (a timeout line appears, a collective stays open past a share of its
timeout, or no rank logs for `--idle` seconds while the ranks sit idle); `collect.py` then takes every rank's
stacks and the host's context once per hang into `JOBDIR/ncclpm-watch/<UTC time>/` with a manifest
(`manifest.py`), and `report.py` diagnoses the job with them. `runner.py` ties it together; the CLI is thin.
It never harms the job: it reads, and sends a signal only where the user asks for one.
"""
