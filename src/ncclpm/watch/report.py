"""After a collection: diagnose the job with what was collected, write `report.md` and `report.json` into the
collection folder, and send the Slack message to a webhook when asked.

The job is read as `ncclpm diagnose JOBDIR` reads it, except the watcher's other collections: an older
collection's stacks are another moment of the job, and its reports are ncclpm's own words, not evidence.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ncclpm.model import Diagnosis

POST_TIMEOUT_S = 15.0


def job_paths(jobdir: Path, out_root: Path, folder: Path) -> list[Path]:
    """JOBDIR's entries without the watcher's output folder, then this collection's files (not its manifest)."""
    root = out_root.resolve()
    collected = [p for p in sorted(folder.iterdir()) if p.name != "manifest.json" and not p.name.startswith(".")]
    if not root.is_relative_to(jobdir.resolve()):
        return [jobdir, *collected]
    keep = []
    for entry in sorted(jobdir.iterdir()):
        resolved = entry.resolve()
        if resolved == root or root.is_relative_to(resolved):
            if resolved != root:  # the output folder is deeper inside this one: its other entries still count
                keep += [e for e in sorted(entry.iterdir()) if not root.is_relative_to(e.resolve())]
            continue
        keep.append(entry)
    return [*keep, *collected]


def diagnose(jobdir: Path, out_root: Path, folder: Path) -> Diagnosis:
    from ncclpm.api import diagnose as run

    return run(job_paths(jobdir, out_root, folder), name=jobdir.name)


def write_reports(d: Diagnosis, folder: Path) -> str:
    """report.md and report.json in `folder`; returns the short text report."""
    from ncclpm.render import render

    (folder / "report.md").write_text(render(d, "md"), encoding="utf-8")
    (folder / "report.json").write_text(render(d, "json"), encoding="utf-8")
    return render(d, "text", width=100)


def post(d: Diagnosis, url: str) -> str:
    """Send the Slack message (`-f slack-json`) to a webhook; returns what happened, in words."""
    from ncclpm.render import render

    if not url.startswith(("http://", "https://")):
        return f"not sent: {url!r} is not an http(s) URL"
    body = render(d, "slack-json").encode("utf-8")
    json.loads(body)  # (a bug would be ours: never send a broken body)
    req = urllib.request.Request(url, data=body, method="POST", headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=POST_TIMEOUT_S) as resp:
            return f"sent: HTTP {resp.status}"
    except urllib.error.HTTPError as exc:
        return f"not sent: HTTP {exc.code} {exc.reason}"
    except (urllib.error.URLError, OSError) as exc:
        return f"not sent: {getattr(exc, 'reason', exc)}"
