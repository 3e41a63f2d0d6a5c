#!/usr/bin/env bash
# Builds the real node's own Go programs (realnode/) as static binaries into build/realnode/:
# gpushare-device-plugin (the device plugin, kubelet API v1beta1), pause (the sandbox image),
# workload (the test jobs' image), gpushare-node-reset (CRI cleanup), gpushare-nvidia-caps
# (NVIDIA's MIG capability minors in a mount namespace, for the plugin). Modules come from the Go
# module proxy (realnode/go.sum pins them); Go's build cache makes a second run take a second.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${GPUSHARE_REALNODE_BIN:-$REPO/build/realnode}"
command -v go >/dev/null || { echo "realnode-bins: Go is required (https://go.dev/dl); none found on PATH" >&2; exit 1; }
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}" CGO_ENABLED=0 GOFLAGS="${GOFLAGS:--trimpath}"
mkdir -p "$OUT"
cd "$REPO/realnode"
for pair in deviceplugin:gpushare-device-plugin pause:pause workload:workload nodereset:gpushare-node-reset nvcaps:gpushare-nvidia-caps; do
  go build -ldflags='-s -w' -o "$OUT/${pair#*:}" "./${pair%%:*}"
done
echo "realnode-bins: built in $OUT"
