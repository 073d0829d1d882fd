"""The flight-recorder reader: pickle or JSON dumps -> `ncclpm.tables.fr.FRLoad` (`load.py`). `scan.py` and
`decode.py` are the Python references of the C opcode scanner `_frscan.c` and decoder `_frdecode.c` (parity:
tests/test_fr_native.py)."""
