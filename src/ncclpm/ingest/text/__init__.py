"""The text reader: logs and torchelastic error files -> lines, events, tracebacks, elastic, ranks and the NCCL
tables. `rawscan.py` is the Python reference of the C anchor matcher and line cutter `_textcut.c` (parity:
tests/test_rawscan_native.py)."""
