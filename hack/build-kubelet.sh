#!/usr/bin/env bash
# Builds kubelet v1.34.x from the Go module proxy into the cache outside the repository that
# hack/build-control-plane.sh uses (~/.cache/gpushare), keyed by version. A second run finds the
# binary and returns at once. The real-node tier of the tests runs it (`make kubelet`).
#
# How: the same throw-away wrapper module as build-control-plane.sh (k8s.io/kubernetes cannot be
# `go install`ed: its go.mod replaces the staging modules); each `k8s.io/<name> v0.0.0` line of the
# release's go.mod is replaced by the published v0.Y.Z. Kept in its own wrapper so its module graph
# cannot move the control plane's. Pinned to 1.34: on this kind of host (cgroup v1, containerd 1.6)
# later kubelets refuse cgroup v1 by default and drop the cgroup-driver fallback containerd 1.6 needs.
#
#   hack/build-kubelet.sh              build if missing
#   hack/build-kubelet.sh --print-bin  ... then print the folder that holds kubelet
set -euo pipefail

K8S_VERSION="${K8S_VERSION:-v1.34.4}"
CACHE="${GPUSHARE_CACHE:-$HOME/.cache/gpushare}"
BIN="${GPUSHARE_KUBELET_BIN:-$CACHE/bin/kubelet-$K8S_VERSION}"
export GOFLAGS="${GOFLAGS:--trimpath}"
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"
export CGO_ENABLED=0

log() { printf '[build-kubelet] %s\n' "$*" >&2; }
# shellcheck source=hack/go-progress.sh
. "$(dirname "${BASH_SOURCE[0]}")/go-progress.sh"

if [ -x "$BIN/kubelet" ]; then
  log "kubelet present in $BIN"
  [ "${1:-}" = "--print-bin" ] && echo "$BIN"
  exit 0
fi

command -v go >/dev/null || { log "kubelet: Go is required to build it (https://go.dev/dl); none found on PATH"; exit 1; }
mkdir -p "$BIN" "$CACHE/src"
minor=$(echo "$K8S_VERSION" | cut -d. -f2)
staging_version="v0.${K8S_VERSION#v1.}"

src="$CACHE/src/kubelet-$K8S_VERSION"
rm -rf "$src"; mkdir -p "$src"; cd "$src"
go mod init local.build/kubeletbin >/dev/null 2>&1
gomod=$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')
go mod edit -go="$(awk '$1 == "go" {print $2; exit}' "$gomod")"
godebug=$(awk '$1 == "godebug" {print $2; exit}' "$gomod")
[ -n "$godebug" ] && go mod edit -godebug="$godebug"
n=0
for m in $(awk '$1 ~ /^k8s\.io\// && $2 == "v0.0.0" {print $1}' "$gomod" | sort -u); do
  go mod edit -replace="$m=$m@$staging_version"; n=$((n + 1))
done
log "replaced $n staging modules with $staging_version"
log "downloading the modules of kubelet $K8S_VERSION (cold: a few minutes; go names each one)"
go get -tool "k8s.io/kubernetes/cmd/kubelet@$K8S_VERSION" >&2
V=k8s.io/component-base/version; C=k8s.io/client-go/pkg/version
LD="-s -w -X $V.gitVersion=$K8S_VERSION -X $V.gitMajor=1 -X $V.gitMinor=$minor -X $V.gitTreeState=clean -X $V.buildDate=1970-01-01T00:00:00Z -X $C.gitVersion=$K8S_VERSION -X $C.gitMajor=1 -X $C.gitMinor=$minor"
TAGS=selinux,notest,grpcnotrace
total=$(go list -deps -tags="$TAGS" k8s.io/kubernetes/cmd/kubelet | wc -l)
log "compiling kubelet $K8S_VERSION: $total packages (about 5 minutes on 2 cores beside the control-plane build, sharing its Go caches; a line every 30 s with the time left at that pace)"
go build -v -tags="$TAGS" -ldflags="$LD" -o "$BIN/kubelet.tmp" k8s.io/kubernetes/cmd/kubelet 2>&1 >/dev/null \
  | go_progress "kubelet $K8S_VERSION" "$total"
mv "$BIN/kubelet.tmp" "$BIN/kubelet"
"$BIN/kubelet" --version >&2
[ "${1:-}" = "--print-bin" ] && echo "$BIN"
log "kubelet ready in $BIN"
