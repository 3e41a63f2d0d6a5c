#!/usr/bin/env bash
# Builds NVIDIA's MIG tools, nvidia-mig-parted (the CLI: apply, assert, export) and
# nvidia-mig-manager (the node agent), from github.com/NVIDIA/mig-parted at the version
# realnode/migparted/go.mod pins, into the cache outside the repository
# (~/.cache/gpushare/bin/mig-parted-<version>/), keyed by version. A second run finds the binaries
# and returns at once. They run over the project's own libnvidia-ml.so.1 (hack/build-fake-nvml.sh),
# inside the project's mount namespace (hack/mig-parted-ns.sh) that lays out what they read
# besides NVML.
#
# realnode/migparted is a module of its own (not realnode/nvidia): mig-parted pins an older
# go-nvml and go-nvlib than the device plugin, and sharing a module would raise them. The proxy
# serves only some versions of mig-parted (v0.10.0 here). cgo is needed (go-nvml dlopens NVML).
#
#   hack/build-mig-parted.sh              build if missing
#   hack/build-mig-parted.sh --print-bin  ... then print the folder that holds the two binaries
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MOD="$REPO/realnode/migparted"
MIG_MODULE=github.com/NVIDIA/mig-parted
VERSION=$(awk -v m="$MIG_MODULE" '$1 == m {print $2; exit}' "$MOD/go.mod")
CACHE="${GPUSHARE_CACHE:-$HOME/.cache/gpushare}"
BIN="${GPUSHARE_MIG_PARTED_BIN:-$CACHE/bin/mig-parted-$VERSION}"
export GOFLAGS="${GOFLAGS:--trimpath}" GOTOOLCHAIN="${GOTOOLCHAIN:-local}" CGO_ENABLED=1

log() { printf '[build-mig-parted] %s\n' "$*" >&2; }
# shellcheck source=hack/go-progress.sh
. "$(dirname "${BASH_SOURCE[0]}")/go-progress.sh"

[ -n "$VERSION" ] || { log "no $MIG_MODULE line in $MOD/go.mod"; exit 1; }
COMMANDS=(nvidia-mig-parted nvidia-mig-manager)
missing=()
for cmd in "${COMMANDS[@]}"; do [ -x "$BIN/$cmd" ] || missing+=("$cmd"); done
if [ ${#missing[@]} -eq 0 ]; then
  log "${COMMANDS[*]} $VERSION present in $BIN"
  [ "${1:-}" = "--print-bin" ] && echo "$BIN"
  exit 0
fi
command -v go >/dev/null || { log "Go is required to build NVIDIA's mig-parted (https://go.dev/dl); none found on PATH"; exit 1; }
command -v "${CC:-gcc}" >/dev/null || { log "a C compiler (gcc) is required: mig-parted is built with cgo"; exit 1; }
cd "$MOD"
log "downloading the modules of $MIG_MODULE $VERSION"
go mod download
pkgs=()
for cmd in "${missing[@]}"; do pkgs+=("$MIG_MODULE/cmd/$cmd"); done
total=$(go list -deps "${pkgs[@]}" | wc -l)
log "compiling ${missing[*]} $VERSION: $total packages (about 2.5 minutes on 2 cores with a cold build cache)"
mkdir -p "$BIN.tmp"
go build -v -ldflags='-s -w' -o "$BIN.tmp/" "${pkgs[@]}" 2>&1 >/dev/null | go_progress "${missing[*]} $VERSION" "$total"
mkdir -p "$BIN"
for cmd in "${missing[@]}"; do mv "$BIN.tmp/$cmd" "$BIN/"; done
rmdir "$BIN.tmp"
go version -m "$BIN/${missing[0]}" | awk '$1 == "mod" || $1 == "path"' >&2
[ "${1:-}" = "--print-bin" ] && echo "$BIN"
log "${COMMANDS[*]} ready in $BIN"
