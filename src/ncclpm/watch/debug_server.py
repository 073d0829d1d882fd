"""Ask torch's debug server for the local ranks' stacks and flight-recorder entries.

`torch.distributed.debug.start_debug_server()` (torch >= 2.10) starts an HTTP worker server in every rank and
registers its address in the job's store under `debug_server/rank<N>`. This reads those addresses as the
server's own frontend does (a store client at MASTER_ADDR:MASTER_PORT: it only reads keys), then asks each rank
for `dump_traceback` (all threads' stacks, answered by the rank's C++ server thread even while its Python is
stuck) and `fr_trace_json` (its flight recorder). Writes `debug_server.stacks.txt` (`=== Rank N: addr ===`
sections, which the stack reader maps to ranks) and `fr_trace_rank<N>.json`.

Run by the watcher in a child process, so that importing torch costs the watcher nothing:

    python -m ncclpm.watch.debug_server --master HOST:PORT --ranks 0,1,2 --out DIR

Exit codes: 0 fetched (what, on stdout), 3 torch is not importable here, 4 the job started no debug server,
1 anything else (said on stdout).
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.error
import urllib.request
from datetime import timedelta
from pathlib import Path

TIMEOUT_S = 15.0
MAX_BYTES = 64 << 20


def _post(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=b"", method="POST"), timeout=TIMEOUT_S) as r:
            return r.status, r.read(MAX_BYTES).decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return exc.code, str(exc.reason)
    except (urllib.error.URLError, OSError) as exc:
        return 0, str(getattr(exc, "reason", exc))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="ncclpm.watch.debug_server")
    ap.add_argument("--master", required=True)
    ap.add_argument("--ranks", required=True)
    ap.add_argument("--out", required=True, type=Path)
    args = ap.parse_args(argv)
    host, _, port = args.master.rpartition(":")
    ranks = [int(r) for r in args.ranks.split(",") if r.strip().isdigit()]
    try:
        from torch.distributed import PrefixStore, TCPStore
    except ImportError as exc:
        print(f"not asked: torch is not importable by the watcher's Python ({sys.executable}): {exc}")
        return 3
    try:
        store = PrefixStore(
            "debug_server",
            TCPStore(host, int(port), is_master=False, timeout=timedelta(seconds=TIMEOUT_S), wait_for_workers=False),
        )
        present = [r for r in ranks if store.check([f"rank{r}"])]
        addrs = {r: store.get(f"rank{r}").decode() for r in present}
    except Exception as exc:  # the store is gone (the job ended) or unreachable
        print(f"the job's store at {host}:{port} could not be read: {type(exc).__name__}: {exc}")
        return 1
    if not present:
        print(f"the job started no debug server (no debug_server/rank<N> key in its store at {host}:{port})")
        return 4
    sections, frs, failed = [], [], []
    for r in present:
        code, text = _post(f"{addrs[r]}/handler/dump_traceback")
        sections.append(f"=== Rank {r}: {addrs[r]} ===\n" + (text if code == 200 else f"Error: {code} {text}"))
        if code != 200:
            failed.append(f"rank {r} stacks: {code} {text[:200]}")
        code, text = _post(f"{addrs[r]}/handler/fr_trace_json")
        if code == 200 and text.lstrip().startswith("{"):
            try:
                json.loads(text)
            except ValueError:
                failed.append(f"rank {r} flight recorder: not JSON")
            else:
                (args.out / f"fr_trace_rank{r}.json").write_text(text, encoding="utf-8")
                frs.append(r)
        else:
            failed.append(f"rank {r} flight recorder: {code} {text[:200]}")
    (args.out / "debug_server.stacks.txt").write_text("\n".join(sections) + "\n", encoding="utf-8")
    said = (
        f"stacks of ranks {', '.join(map(str, present))}; flight recorder of ranks {', '.join(map(str, frs)) or 'none'}"
    )
    print(said + (f" (failed: {'; '.join(failed)})" if failed else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
