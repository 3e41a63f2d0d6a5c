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

command -v apt-get >/dev/null 2>&1 || fail "no apt-get on this machine"
if [[ "$(id -u)" -eq 0 ]]; then
  sudo=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  sudo=(sudo -n)
else
  fail "not root and no passwordless sudo to run apt-get"
fi
echo "chromium: not found; installing Debian's chromium package (about 100 MB, a minute or two)"
export DEBIAN_FRONTEND=noninteractive
install() { "${sudo[@]}" apt-get install -y -q --no-install-recommends chromium >/dev/null; }
install || { "${sudo[@]}" apt-get update -q >/dev/null && install; } || fail "apt-get install chromium failed"
command -v chromium >/dev/null 2>&1 || fail "the chromium package did not provide chromium"
echo "chromium: $(command -v chromium)"
