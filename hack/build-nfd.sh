#!/usr/bin/env bash
# Builds Node Feature Discovery's nfd-master and nfd-worker (sigs.k8s.io/node-feature-discovery, the
# version realnode/nfd/go.mod pins) from the Go module proxy into the cache outside the repository
# (~/.cache/gpushare/bin/node-feature-discovery-<version>/), keyed by version, with NFD's CRDs
# (NodeFeature, NodeFeatureRule, NodeFeatureGroup) copied from the same module beside them. A second
# run finds them and returns at once. The real node runs nfd-master, which turns the NodeFeature
# objects of NVIDIA's GPU Feature Discovery into node labels (gpushare.devcluster.nfd).
#
# NFD's own go.mod has `replace` lines (Kubernetes' staging modules pinned to one version, and its
# api/nfd module from a local folder), which a module that requires it does not inherit. So
# realnode/nfd is a module of the project's own that copies them (api/nfd from the published
# module of the same version), whose `tool` lines name the two commands; go.sum pins every module.
# Static build (no cgo).
#
#   hack/build-nfd.sh              build if missing
#   hack/build-nfd.sh --print-bin  ... then print the folder that holds the binaries and the CRDs
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MOD="$REPO/realnode/nfd"
NFD_MODULE=sigs.k8s.io/node-feature-discovery
VERSION=$(awk -v m="$NFD_MODULE" '$1 == m {print $2; exit}' "$MOD/go.mod")
CACHE="${GPUSHARE_CACHE:-$HOME/.cache/gpushare}"
BIN="${GPUSHARE_NFD_BIN:-$CACHE/bin/node-feature-discovery-$VERSION}"
CRDS=nfd-api-crds.yaml
export GOFLAGS="${GOFLAGS:--trimpath}" GOTOOLCHAIN="${GOTOOLCHAIN:-local}" CGO_ENABLED=0

log() { printf '[build-nfd] %s\n' "$*" >&2; }
# shellcheck source=hack/go-progress.sh
. "$(dirname "${BASH_SOURCE[0]}")/go-progress.sh"

[ -n "$VERSION" ] || { log "no $NFD_MODULE line in $MOD/go.mod"; exit 1; }
if [ -x "$BIN/nfd-master" ] && [ -x "$BIN/nfd-worker" ] && [ -f "$BIN/$CRDS" ]; then
  log "nfd-master, nfd-worker and $CRDS $VERSION present in $BIN"
  [ "${1:-}" = "--print-bin" ] && echo "$BIN"
  exit 0
fi
command -v go >/dev/null || { log "Go is required to build Node Feature Discovery (https://go.dev/dl); none found on PATH"; exit 1; }
cd "$MOD"
log "downloading the modules of $NFD_MODULE $VERSION (cold: about a minute)"
go mod download
pkgs=("$NFD_MODULE/cmd/nfd-master" "$NFD_MODULE/cmd/nfd-worker")
total=$(go list -deps "${pkgs[@]}" | wc -l)
log "compiling nfd-master and nfd-worker $VERSION: $total packages (minutes on 2 cores with a cold build cache)"
mkdir -p "$BIN.tmp"
go build -v -ldflags="-s -w -X $NFD_MODULE/pkg/version.version=$VERSION" -o "$BIN.tmp/" "${pkgs[@]}" 2>&1 >/dev/null |
  go_progress "nfd-master and nfd-worker $VERSION" "$total"
src=$(go list -m -f '{{.Dir}}' "$NFD_MODULE")
cp "$src/deployment/base/nfd-crds/$CRDS" "$BIN.tmp/$CRDS"
chmod 0644 "$BIN.tmp/$CRDS"
mkdir -p "$BIN"
mv "$BIN.tmp/nfd-master" "$BIN.tmp/nfd-worker" "$BIN.tmp/$CRDS" "$BIN/"
rmdir "$BIN.tmp"
go version -m "$BIN/nfd-master" | awk '$1 == "mod" || $1 == "path"' >&2
[ "${1:-}" = "--print-bin" ] && echo "$BIN"
log "nfd-master, nfd-worker and $CRDS ready in $BIN"
