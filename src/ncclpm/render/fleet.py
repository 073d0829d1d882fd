"""The fleet page (`ncclpm triage ... -o fleet.html`): one self-contained page from `triage.fleet.fleet_context`,
rendered by `templates/fleet.html`.

Self-contained: inline CSS and SVG, nothing loaded from anywhere (a Content-Security-Policy forbids it). Every
value from the input (job names, hosts, signatures, log lines) goes through Jinja autoescape. The content is all
there without JavaScript; one small inline script sorts and filters the job table, allowed by its hash in the
policy, so a script that a log line managed to put into the page would still not run.
"""

from __future__ import annotations

import base64
import hashlib
from datetime import datetime
from typing import Any

from markupsafe import Markup

from ncclpm import __version__
from ncclpm.model import Category
from ncclpm.render.jinja import environment
from ncclpm.util.durations import human_duration

# One colour per category, stable from page to page (the unknown kinds last, grey).
PALETTE = {
    str(c): colour
    for c, colour in (
        (Category.RANK_CRASH, "#d1495b"),
        (Category.NETWORK_TRANSPORT, "#1f6fb2"),
        (Category.NVML_DRIVER_FAILURE, "#8e3b9e"),
        (Category.CUDA_OOM, "#e07b00"),
        (Category.SLOW_RANK_WORK, "#2a9d8f"),
        (Category.DATALOADER_HANG, "#b08900"),
        (Category.MISMATCHED_COLLECTIVES, "#6a4c93"),
        (Category.TIMEOUT_TOO_SHORT, "#4d908e"),
        (Category.SHM_P2P_TOPOLOGY, "#c05299"),
        (Category.INIT_RENDEZVOUS, "#5c7cfa"),
        (Category.CONFIG_VERSION, "#7a5c3e"),
        (Category.SYMPTOM, "#9aa5ae"),
        (Category.UNKNOWN, "#6b7785"),
        (Category.NO_FAILURE, "#43aa8b"),
        (Category.NOT_A_TRAINING_LOG, "#b8c1c9"),
    )
}
EXTRA_COLOURS = ("#577590", "#f3722c", "#90be6d", "#f94144", "#277da1")

SVG_W, SVG_H = 960, 250
STEP_NAMES = {"10m": "10 minutes", "1h": "hour", "6h": "6 hours", "1d": "day", "1w": "week", "1mo": "month",
              "3mo": "quarter", "1y": "year"}  # fmt: skip
PLOT_X, PLOT_TOP, PLOT_BOTTOM = 44, 14, 200


def colour(category: str) -> str:
    if category in PALETTE:
        return PALETTE[category]
    return EXTRA_COLOURS[int(hashlib.sha1(category.encode()).hexdigest(), 16) % len(EXTRA_COLOURS)]


def _nice_max(n: int) -> int:
    for step in (1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000):
        if n <= step * 4:
            return step * 4 if n > step * 2 else max(step * 2, 1) if n > step else max(step, 1)
    return n


def timeline_svg(t: dict[str, Any]) -> dict[str, Any] | None:
    """Positions of the stacked bars (one per time bucket, a segment per category), the y axis and the labels."""
    buckets = t["buckets"]
    if not buckets:
        return None
    top = max(sum(b["counts"].values()) for b in buckets)
    ymax = _nice_max(top)
    plot_w = SVG_W - PLOT_X - 34  # room for the last label
    slot = plot_w / len(buckets)
    bar_w = max(min(slot * 0.78, 40), 1.5)
    scale = (PLOT_BOTTOM - PLOT_TOP) / ymax
    bars = []
    for i, b in enumerate(buckets):
        x = PLOT_X + i * slot + (slot - bar_w) / 2
        y = PLOT_BOTTOM
        segments = []
        for cat, n in sorted(b["counts"].items(), key=lambda kv: (-kv[1], kv[0])):
            h = n * scale
            y -= h
            segments.append({"y": round(y, 1), "h": round(h, 1), "colour": colour(cat), "category": cat, "n": n})
        total = sum(b["counts"].values())
        bars.append({"x": round(x, 1), "w": round(bar_w, 1), "label": b["label"], "n": total, "segments": segments})
    every = max(1, round(len(buckets) / 8))
    labels = [
        {"x": round(PLOT_X + i * slot + slot / 2, 1), "text": b["label"]}
        for i, b in enumerate(buckets)
        if i % every == 0 or (i == len(buckets) - 1 and (len(buckets) - 1) % every > every / 2)
    ]
    yticks = [{"y": round(PLOT_BOTTOM - v * scale, 1), "v": v} for v in range(0, ymax + 1, max(1, ymax // 4))]
    categories = sorted({c for b in buckets for c in b["counts"]})
    return {
        "w": SVG_W,
        "h": SVG_H,
        "plot_x": PLOT_X,
        "plot_r": PLOT_X + plot_w,
        "bottom": PLOT_BOTTOM,
        "bars": bars,
        "labels": labels,
        "yticks": yticks,
        "legend": [{"category": c, "colour": colour(c)} for c in categories],
    }


def _when(value: Any) -> str:
    return value.strftime("%Y-%m-%d %H:%M") if isinstance(value, datetime) else ""


SORT_SCRIPT = """
(function () {
  var table = document.getElementById('jobs'), box = document.getElementById('jobfilter');
  if (!table) return;
  var body = table.tBodies[0];
  box.hidden = false;
  box.addEventListener('input', function () {
    var q = box.value.toLowerCase();
    Array.prototype.forEach.call(body.rows, function (r) {
      r.hidden = q !== '' && r.textContent.toLowerCase().indexOf(q) < 0;
    });
  });
  Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th, col) {
    th.classList.add('sortable');
    th.addEventListener('click', function () {
      var down = th.getAttribute('aria-sort') !== 'descending';
      Array.prototype.forEach.call(table.tHead.rows[0].cells, function (c) { c.removeAttribute('aria-sort'); });
      th.setAttribute('aria-sort', down ? 'descending' : 'ascending');
      var rows = Array.prototype.slice.call(body.rows);
      rows.sort(function (a, b) {
        var x = a.cells[col].getAttribute('data-v') || a.cells[col].textContent.trim();
        var y = b.cells[col].getAttribute('data-v') || b.cells[col].textContent.trim();
        var nx = parseFloat(x), ny = parseFloat(y);
        var c = (!isNaN(nx) && !isNaN(ny)) ? nx - ny : x.localeCompare(y);
        return down ? -c : c;
      });
      rows.forEach(function (r) { body.appendChild(r); });
    });
  });
})();
"""


def script_hash(script: str) -> str:
    return "sha256-" + base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode("ascii")


def render_fleet(context: dict[str, Any]) -> str:
    """The page, from `triage.fleet.fleet_context(...)`."""
    return (
        environment()
        .get_template("fleet.html")
        .render(
            **context,
            svg=timeline_svg(context["timeline"]),
            recent_svg=timeline_svg(context["recent"]) if context.get("recent") else None,
            colour=colour,
            when=_when,
            version=__version__,
            step_names=STEP_NAMES,
            duration=lambda s: "" if s is None else human_duration(s),
            script=Markup(SORT_SCRIPT),  # our own constant: printed as is, so that its hash matches
            script_hash=script_hash(SORT_SCRIPT),
        )
    )
