#!/usr/bin/env bash
# Make promtool available for `make test` and `make monitoring-check` (the alert rules, their unit
# tests and the dashboard queries are checked with it): $PROMTOOL, else promtool on PATH, else
# Debian's `prometheus` package (it ships promtool) installed with apt-get as root or with
# passwordless sudo. Anything else: say so clearly and fail; nothing is skipped silently.
set -euo pipefail

if [[ -n "${PROMTOOL:-}" ]]; then
  [[ -x "$PROMTOOL" ]] && { echo "promtool: $PROMTOOL"; exit 0; }
  echo "promtool: PROMTOOL=$PROMTOOL is not an executable file" >&2
  exit 1
fi
if command -v promtool >/dev/null 2>&1; then
  echo "promtool: $(command -v promtool)"
  exit 0
fi

fail() {
  echo "promtool: NOT FOUND — $*. The alert rules and dashboard queries in manifests/monitoring" >&2
  echo "  cannot be checked. Install it (Debian/Ubuntu: apt-get install prometheus; or a promtool binary" >&2
  echo "  from a Prometheus release) and put it on PATH, or set PROMTOOL=/path/to/promtool." >&2
  exit 1
}

source "$(dirname "$0")/apt.sh"
echo "promtool: not found; installing Debian's prometheus package (ships promtool)"
apt_install prometheus
command -v promtool >/dev/null 2>&1 || fail "the prometheus package did not provide promtool"
echo "promtool: $(command -v promtool)"
