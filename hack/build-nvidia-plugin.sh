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
# shellcheck source=hack/go-commands.sh
. "$(dirname "${BASH_SOURCE[0]}")/go-commands.sh"

build_go_commands "$PLUGIN_MODULE" "NVIDIA's device plugin" "about 2 minutes per command on 2 cores with a cold build cache" ${1:+"$1"} -- nvidia-device-plugin config-manager gpu-feature-discovery
