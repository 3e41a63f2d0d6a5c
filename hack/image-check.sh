#!/usr/bin/env bash
# make image-check: build the image and run it.
#
#  1. Engine: uses the running Docker engine; starts `dockerd` (default flags) in the background
#     when it is installed but not running (root only; log in ~/.cache/gpushare/image/dockerd.log).
#     With neither, it prints "image-check: skipped, no engine ..." and exits 0: nothing was
#     built or run, that is NOT a pass (only a full run ends with "image-check: PASSED").
#  2. Base image: the Dockerfile's default (the official python image) when it is present or can
#     be pulled; otherwise (no registry reachable) a local one: `debootstrap` a minimal Debian 12
#     (bookworm: python3.11, python3-venv) once into ~/.cache/gpushare/image and `docker import`
#     it. The host's extra CA certificates (/usr/local/share/ca-certificates) go into that base so
#     that pip in the build reaches PyPI behind a TLS-intercepting egress proxy.
#  3. `docker build` the Dockerfile with that base (--build-arg PYTHON_IMAGE), host network.
#  4. Runs `gpushare --version` and `gpushare check` on examples/ inside the image.
#  5. Starts the local control plane (python -m gpushare.devcluster up), runs the operator
#     container with host networking against it, applies examples/pool-cgpu.yaml and waits until
#     the pool is Ready; then stops both.
#
# Environment: IMAGE (default gpushare-operator:<version from pyproject.toml>), BASE=auto|official|local
# (default auto), PYTHON_IMAGE (force a base image), VENV (default .venv), GPUSHARE_CACHE,
# DEBIAN_MIRROR (default http://deb.debian.org/debian), IMAGE_CHECK_TIMEOUT (seconds, default 180).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
CACHE="${GPUSHARE_CACHE:-$HOME/.cache/gpushare}"
IMG_CACHE="$CACHE/image"
VENV="${VENV:-$REPO/.venv}"
SUITE=bookworm
LOCAL_BASE="gpushare-base:debian-$SUITE-python3"
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
TIMEOUT="${IMAGE_CHECK_TIMEOUT:-180}"
STATE="$REPO/.image-check"

skip() { echo "image-check: skipped, no engine ($*); nothing was built or run"; exit 0; }
die() { echo "image-check: FAILED: $*" >&2; exit 1; }
say() { echo; echo "# $*"; }

command -v docker >/dev/null 2>&1 || skip "docker not found on PATH"
if ! docker info >/dev/null 2>&1; then
  command -v dockerd >/dev/null 2>&1 || skip "docker info failed and no dockerd to start"
  [[ "$(id -u)" == 0 ]] || skip "docker info failed; dockerd can only be started as root"
  mkdir -p "$IMG_CACHE"
  say "Start dockerd (default flags) in the background; log: $IMG_CACHE/dockerd.log"
  nohup dockerd >"$IMG_CACHE/dockerd.log" 2>&1 &
  for _ in $(seq 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
  docker info >/dev/null 2>&1 || die "dockerd did not come up in 60s; see $IMG_CACHE/dockerd.log"
fi
# Docker's CLI builds with BuildKit only through the buildx plugin; without it, the classic builder.
docker buildx version >/dev/null 2>&1 || export DOCKER_BUILDKIT=0
[[ -x "$VENV/bin/python" ]] || die "$VENV/bin/python not found: run 'make setup'"
"$VENV/bin/python" -c 'from gpushare.devcluster import find_binaries; find_binaries()' >/dev/null 2>&1 \
  || die "control-plane binaries missing: run 'make control-plane'"
VERSION="$(sed -n 's/^version = "\(.*\)"$/\1/p' pyproject.toml | head -1)"
IMAGE="${IMAGE:-gpushare-operator:$VERSION}"
OFFICIAL="$(sed -n 's/^ARG PYTHON_IMAGE=//p' Dockerfile | head -1)"

build_local_base() {
  local tar="$IMG_CACHE/debian-$SUITE-python3.tar" root="$IMG_CACHE/rootfs.partial"
  if [[ ! -s "$tar" ]]; then
    if ! command -v debootstrap >/dev/null 2>&1 && [[ "$(id -u)" -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
      say "debootstrap not found: installing Debian's debootstrap package"
      DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap >/dev/null \
        || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap >/dev/null; } \
        || true
    fi
    command -v debootstrap >/dev/null 2>&1 || die "debootstrap not found (apt-get install -y debootstrap)"
    say "debootstrap a minimal Debian $SUITE with python3 into $root (once; cached as $tar)"
    rm -rf "$root"
    debootstrap --variant=minbase --include=python3,python3-venv,python-is-python3,ca-certificates \
      "$SUITE" "$root" "$MIRROR"
    if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
      cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/"
      chroot "$root" update-ca-certificates >/dev/null
    fi
    rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/var/cache/apt/archives/*.deb
    tar --numeric-owner -C "$root" -cf "$tar.partial" .
    mv "$tar.partial" "$tar"
    rm -rf "$root"
  fi
  say "docker import $tar as $LOCAL_BASE"
  docker import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt' \
    --change 'CMD ["python3"]' \
    "$tar" "$LOCAL_BASE" >/dev/null
}

base="${PYTHON_IMAGE:-}"
if [[ -z "$base" ]]; then
  case "${BASE:-auto}" in
    official) base="$OFFICIAL" ;;
    local) docker image inspect "$LOCAL_BASE" >/dev/null 2>&1 || build_local_base; base="$LOCAL_BASE" ;;
    auto)
      if docker image inspect "$OFFICIAL" >/dev/null 2>&1 || timeout 60 docker pull -q "$OFFICIAL" >/dev/null 2>&1; then
        base="$OFFICIAL"
      else
        echo "image-check: $OFFICIAL cannot be pulled (no registry reachable): using a local Debian base"
        docker image inspect "$LOCAL_BASE" >/dev/null 2>&1 || build_local_base
        base="$LOCAL_BASE"
      fi ;;
    *) die "BASE=${BASE}: expected auto, official or local" ;;
  esac
fi

say "docker build -t $IMAGE --build-arg PYTHON_IMAGE=$base (host network for pip)"
started=$SECONDS
docker build --network host --build-arg "PYTHON_IMAGE=$base" -t "$IMAGE" .
echo "image-check: built $IMAGE in $((SECONDS - started))s, $(docker image inspect -f '{{.Size}}' "$IMAGE" | awk '{printf "%.0f MB", $1/1e6}')"

say "gpushare --version inside the image"
got="$(docker run --rm "$IMAGE" --version)"
echo "$got"
[[ "$got" == "gpushare $VERSION" ]] || die "--version printed '$got', expected 'gpushare $VERSION'"
[[ "$(docker run --rm --entrypoint id "$IMAGE" -u)" == 65532 ]] || die "the image does not run as uid 65532"

say "gpushare check on examples/ inside the image (valid: exit 0; invalid/: exit 1)"
docker run --rm -v "$REPO/examples:/examples:ro" "$IMAGE" check --offline -f /examples/ \
  || die "gpushare check -f examples/ failed in the image"
set +e
docker run --rm -v "$REPO/examples:/examples:ro" "$IMAGE" check --offline -f /examples/invalid/cuda-sample-33.yaml
rc=$?
set -e
[[ $rc == 1 ]] || die "gpushare check on examples/invalid/cuda-sample-33.yaml exited $rc, expected 1 (denied)"

say "The operator container against the local control plane (host network)"
mkdir -p "$STATE"
ctr="gpushare-image-check-$$"
cleanup() {
  local rc=$?
  if ((rc != 0)) && docker inspect "$ctr" >/dev/null 2>&1; then
    echo "image-check: operator log (last 40 lines):" >&2
    docker logs --tail 40 "$ctr" >&2 2>&1 || true
  fi
  docker rm -f "$ctr" >/dev/null 2>&1 || true
  "$VENV/bin/python" -m gpushare.devcluster down --dir "$STATE/cluster" >/dev/null 2>&1 || true
  exit "$rc"
}
trap cleanup EXIT
"$VENV/bin/python" -m gpushare.devcluster up --dir "$STATE/cluster" --nodes 2 --pools 1 >/dev/null
kubeconfig="$STATE/cluster/kubeconfig"
install -m 0644 "$kubeconfig" "$STATE/kubeconfig"   # readable by the image's uid 65532
metrics_port="$("$VENV/bin/python" -c 'from gpushare.devcluster.cluster import free_port; print(free_port())')"
docker run -d --name "$ctr" --network host -v "$STATE/kubeconfig:/kube/config:ro" "$IMAGE" \
  run --kubeconfig /kube/config --metrics-port "$metrics_port" --log-format json >/dev/null
export KUBECONFIG="$kubeconfig"
sed 's/np-cgpu/np-a/' examples/pool-cgpu.yaml | kubectl apply -f - >/dev/null
started=$SECONDS
kubectl wait --for=condition=Ready --timeout="${TIMEOUT}s" gpusharepool/cgpu \
  || die "pool cgpu did not become Ready in ${TIMEOUT}s"
echo "image-check: pool cgpu Ready $((SECONDS - started))s after apply (operator in the container)"
kubectl get gpusharepool cgpu
[[ "$(docker inspect -f '{{.State.Running}}' "$ctr")" == true ]] || die "the operator container stopped"
kubectl delete gpusharepool cgpu --wait --timeout=60s >/dev/null || die "pool cgpu was not finalized"
echo "image-check: PASSED ($IMAGE on $base)"
