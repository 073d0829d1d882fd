"""Re-run a training command when it fails with a known transient error."""

import subprocess
import sys
import time

# Messages that mean "the node or the network hiccuped, try again" (seen in past incidents).
TRANSIENT = [
    "nvmlDeviceGetHandleByIndex(0) failed: Unknown Error",
    "Watchdog caught collective operation timeout",
    "CUDA out of memory",
    "NCCL WARN NET/IB : Got completion from peer",
    "Connection reset by peer",
    "exitcode: -9",
]


def transient(stderr: str) -> bool:
    return any(msg in stderr for msg in TRANSIENT)


def main(argv: list[str]) -> int:
    for attempt in range(3):
        proc = subprocess.run(argv, capture_output=True, text=True)
        sys.stdout.write(proc.stdout)
        sys.stderr.write(proc.stderr)
        if proc.returncode == 0 or not transient(proc.stderr):
            return proc.returncode
        print(f"retry.py: transient failure, attempt {attempt + 1} of 3", file=sys.stderr)
        time.sleep(30)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
