#!/usr/bin/env bash
# Builds NVIDIA's MIG tools, nvidia-mig-parted (the CLI: apply, assert, export) and
# nvidia-mig-manager (the node agent), from github.com/NVIDIA/mig-parted at the version
# realnode/migparted/go.mod pins, into the cache outside the repository
# (~/.cache/gpushare/bin/mig-parted-<version>/), keyed by version. A second run finds the binaries
# and returns at once. NVIDIA's reconfigure-mig.sh (what the manager runs for each change) is
# copied beside them from the same module version, unmodified. They run over the project's own
# libnvidia-ml.so.1 (hack/build-fake-nvml.sh), inside the project's mount namespace
# (hack/mig-ns.sh) that lays out what they read besides NVML.
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
# shellcheck source=hack/go-commands.sh
. "$(dirname "${BASH_SOURCE[0]}")/go-commands.sh"

build_go_commands "$MIG_MODULE" "NVIDIA's mig-parted" "about 2.5 minutes on 2 cores with a cold build cache" ${1:+"$1"} -- nvidia-mig-parted nvidia-mig-manager

# The MIG manager's reconfigure script (NVIDIA's, unmodified: nvidia-mig-manager runs it for each
# change), from the same module version, beside the binaries.
if [ ! -f "$BIN/reconfigure-mig.sh" ]; then
  dir=$(cd "$MOD" && go mod download -json "$MIG_MODULE@$VERSION" | awk -F'"' '$2 == "Dir" {print $4}')
  install -m 0755 "$dir/deployments/container/reconfigure-mig.sh" "$BIN/reconfigure-mig.sh"
  log "reconfigure-mig.sh $VERSION ready in $BIN"
fi
