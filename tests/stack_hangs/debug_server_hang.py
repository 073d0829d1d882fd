"""hang_train.py with torch's debug server running on every rank (torch.distributed.debug, torch >= 2.10).

Rank 0's frontend writes `stacks_<ts>.txt` (every rank's faulthandler dump under `=== Rank N: <addr> ===`) and
`pyspy_dump_<ts>.txt` (py-spy text per rank) into HANG_OUT/debug every HANG_DEBUG_INTERVAL_S seconds. Needs
`requests` (or aiohttp) and py-spy in the environment that runs the job.
"""

import os
import sys

from torch.distributed.debug import start_debug_server

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hang_train

if __name__ == "__main__":
    start_debug_server(
        port=int(os.environ.get("HANG_DEBUG_PORT", "25999")),
        dump_dir=os.path.join(os.environ["HANG_OUT"], "debug"),
        dump_interval=float(os.environ.get("HANG_DEBUG_INTERVAL_S", "5")),
    )
    hang_train.main()
