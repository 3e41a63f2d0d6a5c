#!/usr/bin/env bash
# Builds kube-apiserver, kube-controller-manager, kube-scheduler, etcd and kwok
# from the Go module proxy into a cache outside the repository, keyed by version.
# A second run finds the binaries and returns in well under a second.
#
# How: k8s.io/kubernetes cannot be `go install`ed (its go.mod has replace
# directives for the staging modules). We make a throw-away wrapper module that
# requires k8s.io/kubernetes and replaces every staging module (each
# `k8s.io/<name> v0.0.0` line of the release's own go.mod) with its published
# v0.Y.Z. etcd's server module has the same problem and gets the same wrapper.
set -euo pipefail

K8S_VERSION="${K8S_VERSION:-v1.34.4}"
ETCD_VERSION="${ETCD_VERSION:-v3.6.16}"
KWOK_VERSION="${KWOK_VERSION:-v0.7.0}"
CACHE="${GPUSHARE_CACHE:-$HOME/.cache/gpushare}"
BIN="${GPUSHARE_BIN:-$CACHE/bin/k8s-$K8S_VERSION-etcd-$ETCD_VERSION-kwok-$KWOK_VERSION}"
export GOFLAGS="${GOFLAGS:--trimpath}"
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"
export CGO_ENABLED=0

log() { printf '[build-control-plane] %s\n' "$*" >&2; }
# shellcheck source=hack/go-progress.sh
. "$(dirname "${BASH_SOURCE[0]}")/go-progress.sh"

# build WHAT OUT TAGS LDFLAGS PKG...: `go build` with a progress line every 30 s (hack/go-progress.sh).
build() {
  local what=$1 out=$2 tags=$3 ld=$4 total
  shift 4
  total=$(go list -deps -tags="$tags" "$@" | wc -l)
  log "compiling $what: $total packages (cold, on 2 cores: $(estimate "$what"); a line every 30 s)"
  go build -v -tags="$tags" -ldflags="$ld" -o "$out" "$@" 2>&1 >/dev/null | go_progress "$what" "$total"
}

# What a cold build takes on the 2-core development machine (docs/development.md: all five in
# 12 min 45 s, most of it the three Kubernetes binaries).
estimate() {
  case $1 in
    kube*) echo "about 10-20 minutes" ;;
    *) echo "about 1-3 minutes" ;;
  esac
}

need() {
  for b in kube-apiserver kube-controller-manager kube-scheduler etcd kwok; do
    [ -x "$BIN/$b" ] || return 0
  done
  return 1
}

if ! need; then
  [ "${1:-}" = "--print-bin" ] && echo "$BIN"
  log "binaries present in $BIN"
  exit 0
fi

command -v go >/dev/null || { log "Go is required (https://go.dev/dl); none found on PATH"; exit 1; }
avail_kb=$(df -Pk "$HOME" | awk 'NR==2 {print $4}')
if [ "${avail_kb:-0}" -lt $((8 * 1024 * 1024)) ]; then
  log "need about 8 GiB free under $HOME for the Go build cache; only $((avail_kb / 1024)) MiB free"
  exit 1
fi
mkdir -p "$BIN" "$CACHE/src"

minor=$(echo "$K8S_VERSION" | cut -d. -f2)
staging_version="v0.${K8S_VERSION#v1.}"

if [ ! -x "$BIN/kube-apiserver" ] || [ ! -x "$BIN/kube-controller-manager" ] || [ ! -x "$BIN/kube-scheduler" ]; then
  src="$CACHE/src/kube-$K8S_VERSION"
  rm -rf "$src"; mkdir -p "$src"; cd "$src"
  go mod init local.build/kubebins >/dev/null 2>&1
  gomod=$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')
  goline=$(awk '$1 == "go" {print $2; exit}' "$gomod")
  godebug=$(awk '$1 == "godebug" {print $2; exit}' "$gomod")
  go mod edit -go="$goline"
  [ -n "$godebug" ] && go mod edit -godebug="$godebug"
  n=0
  for m in $(awk '$1 ~ /^k8s\.io\// && $2 == "v0.0.0" {print $1}' "$gomod" | sort -u); do
    go mod edit -replace="$m=$m@$staging_version"; n=$((n + 1))
  done
  log "replaced $n staging modules with $staging_version (from k8s.io/kubernetes@$K8S_VERSION go.mod)"
  log "downloading the modules of kube-apiserver, kube-controller-manager, kube-scheduler (cold: a few minutes; go names each one)"
  go get -tool "k8s.io/kubernetes/cmd/kube-apiserver@$K8S_VERSION" \
    "k8s.io/kubernetes/cmd/kube-controller-manager@$K8S_VERSION" \
    "k8s.io/kubernetes/cmd/kube-scheduler@$K8S_VERSION" >&2
  V=k8s.io/component-base/version; C=k8s.io/client-go/pkg/version
  LD="-s -w -X $V.gitVersion=$K8S_VERSION -X $V.gitMajor=1 -X $V.gitMinor=$minor -X $V.gitTreeState=clean -X $V.buildDate=1970-01-01T00:00:00Z -X $C.gitVersion=$K8S_VERSION -X $C.gitMajor=1 -X $C.gitMinor=$minor"
  build "kube-apiserver, kube-controller-manager, kube-scheduler $K8S_VERSION" "$BIN/" selinux,notest,grpcnotrace "$LD" \
    k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-scheduler
fi

if [ ! -x "$BIN/etcd" ]; then
  src="$CACHE/src/etcd-$ETCD_VERSION"
  rm -rf "$src"; mkdir -p "$src"; cd "$src"
  go mod init local.build/etcdbin >/dev/null 2>&1
  log "downloading the modules of etcd $ETCD_VERSION"
  go get -tool "go.etcd.io/etcd/server/v3@$ETCD_VERSION" >&2
  build "etcd $ETCD_VERSION" "$BIN/etcd" "" "-s -w" go.etcd.io/etcd/server/v3
fi

if [ ! -x "$BIN/kwok" ]; then
  src="$CACHE/src/kwok-$KWOK_VERSION"
  rm -rf "$src"; mkdir -p "$src"; cd "$src"
  go mod init local.build/kwokbin >/dev/null 2>&1
  log "downloading the modules of kwok $KWOK_VERSION"
  go get -tool "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION" >&2
  build "kwok $KWOK_VERSION" "$BIN/kwok" "" "-s -w" sigs.k8s.io/kwok/cmd/kwok
fi

"$BIN/kube-apiserver" --version >&2
"$BIN/etcd" --version | sed -n 1p >&2  # sed reads it all: `head` may exit first (SIGPIPE, 141 under pipefail)
[ "${1:-}" = "--print-bin" ] && echo "$BIN"
log "binaries ready in $BIN"
