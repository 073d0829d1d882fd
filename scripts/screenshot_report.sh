#!/usr/bin/env bash
# Render a job's HTML report and screenshot it in headless Chromium (Debian: apt-get install chromium).
#   scripts/screenshot_report.sh JOB_PATH [OUT.png] [WIDTHxHEIGHT]
# Default: an 8-rank Xid 79 job -> docs/report.png at 1100x1400. Needs no network; the page has no scripts.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
job="${1:-$here/tests/cases/issue4_xid79_kernlog/input}"
out="${2:-$here/docs/report.png}"
size="${3:-1100x1400}"
browser="$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)"
[ -n "$browser" ] || { echo "no chromium found (apt-get install chromium)" >&2; exit 2; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
name="$(realpath --relative-to="$here" "$job")"
case "$name" in ../*) name="$job" ;; esac
PYTHONPATH="$here/src${PYTHONPATH:+:$PYTHONPATH}" python -m ncclpm diagnose "$job" --name "$name" -f html \
  -o "$tmp/report.html" --force 2>/dev/null
"$browser" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking \
  --disable-component-update --disable-sync --hide-scrollbars --user-data-dir="$tmp/profile" \
  --screenshot="$out" --window-size="${size/x/,}" "file://$tmp/report.html" 2>/dev/null
echo "wrote $out" >&2
