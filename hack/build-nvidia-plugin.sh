#!/usr/bin/env bash
# Builds NVIDIA's device plugin, its config-manager and GPU Feature Discovery
# (github.com/NVIDIA/k8s-device-plugin, the version realnode/nvidia/go.mod pins) from the Go module
# proxy into the cache outside the repository (~/.cache/gpushare/bin/nvidia-device-plugin-<version>/),
# keyed by version. A second run finds the binaries and returns at once; a cache that lacks one of
# them (made before it was added here) gets only what is missing. The real node runs them over the
# project's own libnvidia-ml.so.1 (hack/build-fake-nvml.sh), as NVIDIA's Helm chart deploys them.
#
# `go install <pkg>@<version>` is refused here (it reads the module's version list, which the proxy
# refuses), so realnode/nvidia is a module of the project's own whose `tool` lines name the three
# commands; go.sum pins every module. cgo is needed (the plugin dlopens NVML; no NVML at link time).
#
#   hack/build-nvidia-plugin.sh              build if missing
#   hack/build-nvidia-plugin.sh --print-bin  ... then print the folder that holds the three binaries
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MOD="$REPO/realnode/nvidia"
PLUGIN_MODULE=github.com/NVIDIA/k8s-device-plugin
VERSION=$(awk -v m="$PLUGIN_MODULE" '$1 == m {print $2; exit}' "$MOD/go.mod")
CACHE="${GPUSHARE_CACHE:-$HOME/.cache/gpushare}"
BIN="${GPUSHARE_NVIDIA_PLUGIN_BIN:-$CACHE/bin/nvidia-device-plugin-$VERSION}"
export GOFLAGS="${GOFLAGS:--trimpath}" GOTOOLCHAIN="${GOTOOLCHAIN:-local}" CGO_ENABLED=1

log() { printf '[build-nvidia-plugin] %s\n' "$*" >&2; }
# shellcheck source=hack/go-progress.sh
. "$(dirname "${BASH_SOURCE[0]}")/go-progress.sh"

[ -n "$VERSION" ] || { log "no $PLUGIN_MODULE line in $MOD/go.mod"; exit 1; }
COMMANDS=(nvidia-device-plugin config-manager gpu-feature-discovery)
missing=()
for cmd in "${COMMANDS[@]}"; do [ -x "$BIN/$cmd" ] || missing+=("$cmd"); done
if [ ${#missing[@]} -eq 0 ]; then
  log "${COMMANDS[*]} $VERSION present in $BIN"
  [ "${1:-}" = "--print-bin" ] && echo "$BIN"
  exit 0
fi
command -v go >/dev/null || { log "Go is required to build NVIDIA's device plugin (https://go.dev/dl); none found on PATH"; exit 1; }
command -v "${CC:-gcc}" >/dev/null || { log "a C compiler (gcc) is required: the plugin is built with cgo"; exit 1; }
cd "$MOD"
log "downloading the modules of $PLUGIN_MODULE $VERSION (cold: about a minute)"
go mod download
pkgs=()
for cmd in "${missing[@]}"; do pkgs+=("$PLUGIN_MODULE/cmd/$cmd"); done
total=$(go list -deps "${pkgs[@]}" | wc -l)
log "compiling ${missing[*]} $VERSION: $total packages (about 2 minutes per command on 2 cores with a cold build cache)"
mkdir -p "$BIN.tmp"
go build -v -ldflags='-s -w' -o "$BIN.tmp/" "${pkgs[@]}" 2>&1 >/dev/null | go_progress "${missing[*]} $VERSION" "$total"
mkdir -p "$BIN"
for cmd in "${missing[@]}"; do mv "$BIN.tmp/$cmd" "$BIN/"; done
rmdir "$BIN.tmp"
go version -m "$BIN/${missing[0]}" | awk '$1 == "mod" || $1 == "path"' >&2
[ "${1:-}" = "--print-bin" ] && echo "$BIN"
log "${COMMANDS[*]} ready in $BIN"
