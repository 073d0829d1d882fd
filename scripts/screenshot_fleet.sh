#!/usr/bin/env bash
# Triage every real case of the project (tests/fleet_corpus.py: test cases, sample logs, the shared corpus), write
# the fleet page and screenshot it in headless Chromium (Debian: apt-get install chromium).
#   scripts/screenshot_fleet.sh [OUT.png] [WIDTHxHEIGHT]
# Default: docs/fleet.png at 1240x2000. Needs no network; the page loads nothing.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:-$here/docs/fleet.png}"
size="${2:-1240x2000}"
browser="$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)"
[ -n "$browser" ] || { echo "no chromium found (apt-get install chromium)" >&2; exit 2; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
export PYTHONPATH="$here/src:$here${PYTHONPATH:+:$PYTHONPATH}"
python -m tests.fleet_corpus "$tmp/jobs" >&2
(cd "$tmp" && python -m ncclpm triage jobs -o fleet.html --reports reports --table table.parquet -q)
[ -z "${KEEP_TABLE:-}" ] || cp "$tmp/table.parquet" "$KEEP_TABLE"
"$browser" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking \
  --disable-component-update --disable-sync --hide-scrollbars --user-data-dir="$tmp/profile" \
  --screenshot="$out" --window-size="${size/x/,}" "file://$tmp/fleet.html" 2>/dev/null
echo "wrote $out" >&2
