#!/usr/bin/env bash
# make e2e-kind: build the image, create a kind cluster, deploy manifests/ and run tests/e2e there.
#
# Needs a running Docker engine and kind on PATH. Without them it prints
#   e2e-kind: SKIPPED — ... ; nothing was tested
# and exits 0: that is NOT a pass, nothing ran (see docs/getting-started/demo.md).
#
# Environment: E2E_CLUSTER (kind cluster name, default gpushare-e2e), E2E_KEEP=1 (keep the cluster
# afterwards), IMAGE (default gpushare-operator:<version in pyproject.toml>, the tag manifests/kustomization.yaml uses),
# VENV (default .venv), KUBECTL (default kubectl), E2E_TIMEOUT (seconds per wait, default 300).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
CLUSTER="${E2E_CLUSTER:-gpushare-e2e}"
VERSION=""  # the one version, from pyproject.toml (bash only: the tests run this with a bare PATH)
while IFS= read -r line; do
  if [[ $line =~ ^version\ =\ \"([^\"]+)\"$ ]]; then VERSION="${BASH_REMATCH[1]}"; break; fi
done < pyproject.toml
IMAGE="${IMAGE:-gpushare-operator:$VERSION}"
VENV="${VENV:-$REPO/.venv}"
KUBECTL="${KUBECTL:-kubectl}"
TIMEOUT="${E2E_TIMEOUT:-300}"
STATE="$REPO/.e2e-kind"

skip() { echo "e2e-kind: SKIPPED — $*; nothing was tested"; exit 0; }
die() { echo "e2e-kind: FAILED: $*" >&2; exit 1; }
say() { echo; echo "# $*"; }

command -v docker >/dev/null 2>&1 || skip "no Docker engine (docker not found on PATH)"
docker info >/dev/null 2>&1 || skip "no Docker engine (docker info failed)"
command -v kind >/dev/null 2>&1 || skip "kind not found on PATH (https://kind.sigs.k8s.io)"
command -v "$KUBECTL" >/dev/null 2>&1 || die "$KUBECTL not found on PATH"
[[ -x "$VENV/bin/pytest" ]] || die "$VENV/bin/pytest not found: run 'make setup'"

mkdir -p "$STATE"
export KUBECONFIG="$STATE/kubeconfig"

cleanup() {
  local rc=$?
  if ((rc != 0)); then
    echo "e2e-kind: collecting logs into $STATE/logs" >&2
    mkdir -p "$STATE/logs"
    "$KUBECTL" -n gpushare-system get pods -o wide >"$STATE/logs/pods.txt" 2>&1 || true
    "$KUBECTL" -n gpushare-system logs deploy/gpushare-operator --all-containers --tail=500 \
      >"$STATE/logs/operator.log" 2>&1 || true
    "$KUBECTL" get events -A --sort-by=.lastTimestamp >"$STATE/logs/events.txt" 2>&1 || true
  fi
  if [[ "${E2E_KEEP:-}" == 1 ]]; then
    echo "e2e-kind: kept cluster $CLUSTER; export KUBECONFIG=$KUBECONFIG; delete: kind delete cluster --name $CLUSTER"
  else
    kind delete cluster --name "$CLUSTER" >/dev/null 2>&1 || true
  fi
  exit "$rc"
}

say "Build the image $IMAGE (Dockerfile at the repo root)"
docker build -t "$IMAGE" .

say "Create the kind cluster $CLUSTER (1 control plane, 2 workers labelled as GPU nodes of np-cgpu and np-gpu-core)"
kind delete cluster --name "$CLUSTER" >/dev/null 2>&1 || true
trap cleanup EXIT
kind create cluster --name "$CLUSTER" --config hack/e2e-kind/kind-config.yaml --kubeconfig "$KUBECONFIG" --wait 180s

say "Load the image into the kind nodes"
kind load docker-image "$IMAGE" --name "$CLUSTER"

# What ACK's plugin would advertise once restarted in each pool's mode (no plugin simulator on kind):
# the operator reports a node Ready only when its allocatable matches its pool's mode.
say "Advertise fake GPU capacity on the workers (np-cgpu: gpu-mem 16, gpu-count 1; np-gpu-core: also gpu-core.percentage 100)"
for node in $("$KUBECTL" get nodes -l alibabacloud.com/nodepool-id=np-cgpu -o name); do
  "$KUBECTL" patch "$node" --subresource=status --type=merge -p \
    '{"status":{"capacity":{"aliyun.com/gpu-mem":"16","aliyun.com/gpu-count":"1","aliyun.com/gpu-core.percentage":"0"}}}'
done
for node in $("$KUBECTL" get nodes -l alibabacloud.com/nodepool-id=np-gpu-core -o name); do
  "$KUBECTL" patch "$node" --subresource=status --type=merge -p \
    '{"status":{"capacity":{"aliyun.com/gpu-mem":"16","aliyun.com/gpu-count":"1","aliyun.com/gpu-core.percentage":"100"}}}'
done

say "Install the stand-in gpushare device plugin DaemonSet"
"$KUBECTL" apply -f hack/e2e-kind/device-plugin.yaml
"$KUBECTL" -n kube-system rollout status ds/gpushare-device-plugin-ds --timeout="${TIMEOUT}s"

say "Deploy manifests/ (CRDs first, then everything else), as docs/getting-started/install.md says"
[[ -f manifests/kustomization.yaml ]] || die "manifests/kustomization.yaml is missing: the manifests are not ready"
"$KUBECTL" apply --server-side -k manifests/crd
"$KUBECTL" wait --for=condition=Established --timeout=60s \
  crd/gpusharepools.gpushare.io crd/clusterkopfpeerings.kopf.dev
"$KUBECTL" apply --server-side -k manifests
"$KUBECTL" -n gpushare-system rollout status deploy/gpushare-operator --timeout="${TIMEOUT}s"

say "Run the end-to-end suite (tests/e2e, marker e2e) against the kind cluster"
GPUSHARE_E2E=1 "$VENV/bin/pytest" tests/e2e -m e2e -p no:cacheprovider -v
echo "e2e-kind: PASSED"
