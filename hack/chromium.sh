#!/usr/bin/env bash
# Make headless Chromium available for the documentation site's browser test
# (tests/integration/test_docs_site.py, in `make test`): $CHROMIUM, else chromium on PATH, else
# Debian's `chromium` package installed with apt-get as root or with passwordless sudo (as
# hack/promtool.sh installs promtool). The test drives Chromium over its own DevTools protocol,
# so no WebDriver (chromium-driver) is needed; Playwright's browser download is not used (it
# needs a host other than a package registry). Anything else: say so clearly and fail; the test
# fails too, it never skips.
set -euo pipefail

fail() {
  echo "chromium: NOT FOUND — $*. The documentation site cannot be checked in a browser." >&2
  echo "  Install it (Debian/Ubuntu: apt-get install chromium) and put chromium on PATH, or set" >&2
  echo "  CHROMIUM=/path/to/chromium." >&2
  exit 1
}

if [[ -n "${CHROMIUM:-}" ]]; then
  [[ -x "$CHROMIUM" ]] && { echo "chromium: $CHROMIUM"; exit 0; }
  fail "CHROMIUM=$CHROMIUM is not an executable file"
fi
if command -v chromium >/dev/null 2>&1; then
  echo "chromium: $(command -v chromium)"
  exit 0
fi

source "$(dirname "$0")/apt.sh"
echo "chromium: not found; installing Debian's chromium package (about 100 MB, a minute or two)"
apt_install chromium
command -v chromium >/dev/null 2>&1 || fail "the chromium package did not provide chromium"
echo "chromium: $(command -v chromium)"
