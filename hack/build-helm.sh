#!/usr/bin/env bash
# Builds the `helm` CLI from the Go module proxy into a cache outside the
# repository, keyed by version (like hack/build-control-plane.sh does for the
# control plane). A second run finds the binary and returns at once.
#
#   bash hack/build-helm.sh               # build or reuse, log where it is
#   bash hack/build-helm.sh --print-bin   # same, then print the binary's path on stdout
#   bash hack/build-helm.sh --print-bin --no-build   # print the path, or fail (exit 1) if not built
set -euo pipefail

HELM_VERSION="${HELM_VERSION:-v3.21.4}"
CACHE="${GPUSHARE_CACHE:-$HOME/.cache/gpushare}"
BIN="${GPUSHARE_HELM_BIN:-$CACHE/bin/helm-$HELM_VERSION}"
export GOFLAGS="${GOFLAGS:--trimpath}"
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"
export CGO_ENABLED=0

log() { printf '[build-helm] %s\n' "$*" >&2; }
# How to use the binary (make helm): the tests find it themselves; a shell needs it on PATH.
usage() {
  log "use it: export PATH=\"$BIN:\$PATH\"   (then: helm version; or run $BIN/helm directly)"
}

if [ -x "$BIN/helm" ]; then
  log "helm present in $BIN"
  [ "${1:-}" = "--print-bin" ] && echo "$BIN/helm"
  [ "${1:-}" = "--print-bin" ] || usage
  exit 0
fi

if [ "${2:-}" = "--no-build" ]; then
  log "helm $HELM_VERSION is not built ($BIN/helm missing): run 'make helm'"
  exit 1
fi

command -v go >/dev/null || { log "Go is required (https://go.dev/dl); none found on PATH"; exit 1; }
mkdir -p "$BIN"
tmp="$BIN/.partial"
rm -rf "$tmp"; mkdir -p "$tmp"
# helm's own Makefile stamps its version and the Kubernetes version it assumes offline
# (`helm template`, `helm lint`: from its client-go v0.Y.Z, i.e. 1.Y) with -X; `go install`
# alone leaves both at the source defaults (Kubernetes v1.20, which fails kubeVersion checks).
gomod=$(go mod download -json "helm.sh/helm/v3@$HELM_VERSION" | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')
k8s_minor=$(awk '$1 == "k8s.io/client-go" {split($2, v, "."); print v[2]; exit}' "$gomod")
[ -n "$k8s_minor" ] || { log "cannot find k8s.io/client-go in helm's go.mod ($gomod)"; exit 1; }
V=helm.sh/helm/v3/internal/version
LD="-s -w -X $V.version=$HELM_VERSION -X $V.gitTreeState=clean"
for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
  LD="$LD -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=$k8s_minor"
done
log "compiling helm $HELM_VERSION (Kubernetes 1.$k8s_minor) from the Go module proxy (cold: a few minutes on 2 cores)"
GOBIN="$tmp" go install -ldflags="$LD" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
mv "$tmp/helm" "$BIN/helm"
rmdir "$tmp"
"$BIN/helm" version --short >&2
[ "${1:-}" = "--print-bin" ] && echo "$BIN/helm"
log "helm ready in $BIN"
usage
