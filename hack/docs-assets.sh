#!/usr/bin/env bash
# Puts the documentation site's third-party JavaScript into docs/assets/vendor/ (git-ignored), so
# the built site draws its diagrams and searches with no network: Mermaid (the diagrams; Material
# would otherwise load it from unpkg.com) and iframe-worker's shim (search from a file:// page;
# Material's offline plugin would otherwise load it from unpkg.com). Each is an npm package at a
# pinned version, fetched once from the npm registry into a cache outside the repository
# (`npm pack`, or curl where npm is missing) and checked against its pinned SHA-512 before it is
# unpacked. A second run finds the files and returns at once; `mkdocs build` fails with a line
# naming `make docs-assets` when they are missing.
set -euo pipefail

# name version sha512-of-the-tarball (hex; npm's dist.integrity decoded)
PACKAGES=(
  "mermaid 11.17.2 57a2b70bc101744b0f1595d228c25eea9a50384371b87011afd1af1d7e21878ee501b84c443f6a7f8a042bb2e869143150b31af34feab798073bbdda0a578106"
  "iframe-worker 1.0.4 ae879a688f8b8352c935f8290a3a117bff96cc48f2f7e674f0ba04beef393023db063c26faa5f3f00839534e651dae95d42cac6721b313448e900b52500e6aed"
)
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENDOR="$ROOT/docs/assets/vendor"
CACHE="${GPUSHARE_CACHE:-$HOME/.cache/gpushare}/npm"

log() { printf '[docs-assets] %s\n' "$*" >&2; }
fail() { log "FAILED: $*"; exit 1; }

# package -> the files the site uses: "path in the tarball:path under docs/assets/vendor"
files() {
  case "$1" in
    mermaid) echo "package/dist/mermaid.min.js:mermaid/mermaid.min.js package/LICENSE:mermaid/LICENSE" ;;
    iframe-worker) echo "package/shim/index.js:iframe-worker/shim.js package/package.json:iframe-worker/package.json" ;;
  esac
}

fetch() {  # name version sha512 -> the checked tarball's path on stdout
  local name="$1" version="$2" sum="$3" tgz="$CACHE/$1-$2.tgz"
  if [[ -f "$tgz" ]] && echo "$sum  $tgz" | sha512sum --check --status; then
    echo "$tgz"; return
  fi
  mkdir -p "$CACHE"
  rm -f "$tgz"
  log "fetching $name@$version from the npm registry"
  if command -v npm >/dev/null 2>&1; then
    (cd "$CACHE" && npm pack --silent "$name@$version" >/dev/null) || fail "npm pack $name@$version"
  elif command -v curl >/dev/null 2>&1; then
    curl -fsSL -o "$tgz" "https://registry.npmjs.org/$name/-/$name-$version.tgz" || fail "curl $name@$version"
  else
    fail "neither npm nor curl is on PATH to fetch $name@$version from registry.npmjs.org"
  fi
  echo "$sum  $tgz" | sha512sum --check --status \
    || { rm -f "$tgz"; fail "$name-$version.tgz does not have the pinned SHA-512 (removed)"; }
  echo "$tgz"
}

for entry in "${PACKAGES[@]}"; do
  read -r name version sum <<<"$entry"
  stamp="$VENDOR/$name/.version"
  if [[ -f "$stamp" && "$(cat "$stamp")" == "$version $sum" ]]; then
    log "$name $version present in docs/assets/vendor/$name"
    continue
  fi
  tgz="$(fetch "$name" "$version" "$sum")"
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  rm -rf "${VENDOR:?}/$name"
  mkdir -p "$VENDOR/$name"
  for pair in $(files "$name"); do
    from="${pair%%:*}" to="${pair#*:}"
    tar -xzf "$tgz" -C "$tmp" "$from" || fail "$name-$version.tgz has no $from"
    cp "$tmp/$from" "$VENDOR/$to"
  done
  echo "$version $sum" >"$stamp"
  log "$name $version unpacked into docs/assets/vendor/$name"
done
