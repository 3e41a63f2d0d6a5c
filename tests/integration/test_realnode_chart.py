"""The shipped artifacts on a real node: the product's image and the Helm chart (issue 20).

The module's own control plane has one real node, ``realnode-0`` (``DevCluster(real_nodes=1)``).
The product's image is built without a Docker engine by ``hack/build-image-local.sh`` (cached in
~/.cache/gpushare/image; what the Dockerfile builds, on a debootstrapped Debian) and imported into
the node's containerd; ``charts/gpushare-operator`` is installed with helm, as docs/getting-started/install.md
says. Every pod of the release is a real container on the real node: the operator (2 replicas,
Kopf peering), which serves the webhook that the apiserver reaches through its Service (routed to
the pods' IPs), and the agent DaemonSet, whose pod-bound token the kubelet projected. Pods reach
the apiserver at the kubernetes Service's ClusterIP (a DNAT set up by the devcluster).

Marked ``realnode``: ``make test REAL_NODES=0`` deselects it; without root or cgroups it FAILS.
"""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from gpushare import constants as c
from gpushare.devcluster import BinariesMissing, ClusterInfo, DevCluster, DevClusterError, find_binaries
from gpushare.devcluster.realnode import RealNodeUnavailable, preflight

pytestmark = pytest.mark.realnode

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "gpushare-operator"
NODE = "realnode-0"
OTHER_NODE = "rn-chart-other"
NS = "gpushare-system"
RELEASE = "gpushare"
IMAGE_REPO = "localhost/gpushare-operator"
WAIT = 240.0


def _version() -> str:
    for line in (REPO / "pyproject.toml").read_text().splitlines():
        if line.startswith("version = "):
            return line.split('"')[1]
    raise AssertionError("no version in pyproject.toml")


@dataclass
class Release:
    info: ClusterInfo
    dev: DevCluster
    helm_bin: str
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "KUBECONFIG": str(self.info.kubeconfig)}

    def run(
        self, cmd: list[str], check: bool = True, stdin: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(cmd, env=self.env, input=stdin, capture_output=True, text=True, timeout=420)
        if check and proc.returncode != 0:
            pytest.fail(
                f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
                f"\n{self.diagnose()}",
                pytrace=False,
            )
        return proc

    def kubectl(
        self, *args: str, check: bool = True, stdin: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        return self.run(["kubectl", *args], check, stdin)

    def get_json(self, *args: str) -> Any:
        return json.loads(self.kubectl("get", *args, "-o", "json").stdout)

    def pods(self, component: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.get_json(
            "pods", "-n", NS, "-l", f"app.kubernetes.io/component={component}"
        )["items"]
        return items

    def diagnose(self) -> str:
        out = subprocess.run(
            ["kubectl", "get", "pods", "-A", "-o", "wide"], env=self.env, capture_output=True, text=True,
            timeout=60, check=False,
        )  # fmt: skip
        ev = subprocess.run(
            ["kubectl", "get", "events", "-n", NS, "--sort-by=.lastTimestamp"], env=self.env,
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        logs = ""
        for prev in ("--previous", ""):
            res = subprocess.run(
                ["kubectl", "logs", "-n", NS, "-l", "app.kubernetes.io/component=operator", "--prefix",
                 "--all-containers", "--tail=15", *([prev] if prev else [])],
                env=self.env, capture_output=True, text=True, timeout=60, check=False,
            )  # fmt: skip
            logs += f"--- operator logs {prev} ---\n{res.stdout[-4000:]}{res.stderr[-500:]}\n"
        return f"--- pods ---\n{out.stdout}{out.stderr}\n--- events in {NS} ---\n{ev.stdout[-3000:]}\n{logs}"


def _ready(pod: dict[str, Any]) -> bool:
    conds = {x["type"]: x["status"] for x in (pod.get("status") or {}).get("conditions") or []}
    return conds.get("Ready") == "True"


def _wait(pred: Callable[[], bool], what: str, rel: Release, timeout_s: float = WAIT) -> None:
    deadline = time.monotonic() + timeout_s
    while not pred():
        if time.monotonic() > deadline:
            pytest.fail(
                f"timed out after {timeout_s:.0f}s waiting for {what}\n{rel.diagnose()}", pytrace=False
            )
        time.sleep(1)


def _eventually(pred: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not pred():
        if time.monotonic() > deadline:
            return False
        time.sleep(1)
    return True


@pytest.fixture(scope="module")
def release(helm_bin: str) -> Iterator[Release]:
    try:
        find_binaries()
        preflight(1)
    except (BinariesMissing, RealNodeUnavailable) as exc:
        pytest.fail(f"real-node tier cannot run: {exc}", pytrace=False)
    started = time.monotonic()
    built = subprocess.run(
        ["bash", str(REPO / "hack/build-image-local.sh")], capture_output=True, text=True, timeout=1200
    )
    if built.returncode != 0:
        pytest.fail(f"hack/build-image-local.sh failed:\n{built.stderr[-3000:]}", pytrace=False)
    archive = Path(built.stdout.strip().splitlines()[-1])
    image_s = time.monotonic() - started
    dev = DevCluster(real_nodes=1)
    try:
        info = dev.start()
        dev.import_image(archive)
    except DevClusterError as exc:
        dev.stop(failed=True)
        pytest.fail(f"control plane with a real node did not start: {exc}", pytrace=False)
    rel = Release(info, dev, helm_bin, timings={"image": image_s})
    ok = False
    try:
        # As docs/getting-started/install.md: the namespace with its Pod Security labels, then the chart.
        rel.kubectl("create", "namespace", NS)
        rel.kubectl(
            "label", "namespace", NS, "pod-security.kubernetes.io/enforce=restricted",
            "pod-security.kubernetes.io/enforce-version=latest",
        )  # fmt: skip
        # The agent's DaemonSet runs where gpushare=true (a GPU node); a second Node (no kubelet)
        # for the agent to try to write.
        rel.kubectl("label", "node", NODE, "gpushare=true")
        rel.kubectl("create", "-f", "-", stdin=json.dumps(
            {"apiVersion": "v1", "kind": "Node", "metadata": {"name": OTHER_NODE}}
        ))  # fmt: skip
        t0 = time.monotonic()
        rel.run([
            helm_bin, "install", RELEASE, str(CHART), "--namespace", NS,
            "--set", f"image.repository={IMAGE_REPO}", "--set", f"image.tag={_version()}",
            "--wait", "--timeout", "300s",
        ])  # fmt: skip
        rel.timings["install"] = time.monotonic() - t0
        print(f"\nrealnode chart: image {image_s:.0f}s, helm install --wait {rel.timings['install']:.0f}s")
        ok = True
        yield rel
    finally:
        dev.stop(failed=not ok)


def test_operator_and_webhook_pods_ready_with_leader_election(release: Release) -> None:
    # helm --wait lets a Deployment through with replicas - maxUnavailable pods ready: wait for both.
    _wait(lambda: sum(map(_ready, release.pods("operator"))) == 2, "both operator pods Ready", release)
    ops = release.pods("operator")
    assert len(ops) == 2, [p["metadata"]["name"] for p in ops]
    for pod in ops:
        assert pod["spec"]["nodeName"] == NODE
        assert not pod["spec"].get("hostNetwork")
        assert pod["status"]["podIP"].startswith("10.88.0."), pod["status"]
        assert _ready(pod), pod["status"]
    names = sorted(p["metadata"]["name"] for p in ops)

    # Kopf peering: both replicas are peers of the chart's ClusterKopfPeering (POD_ID = pod name).
    def peers() -> bool:
        status = release.get_json("clusterkopfpeering", "gpushare-operator").get("status") or {}
        return sorted(status) == names

    _wait(peers, f"both replicas {names} in the peering", release)

    # Mandatory peering: each replica starts paused, and Kopf resumes the one that sees no live peer
    # of a higher priority; a replica that sees one later pauses again.
    def active(name: str) -> bool:
        log = release.kubectl("logs", "-n", NS, name, "-c", "operator", check=False).stdout
        return log.rfind("Resuming operations") > log.rfind("Pausing operations")

    def one_leader() -> bool:
        status = release.get_json("clusterkopfpeering", "gpushare-operator").get("status") or {}
        if sorted(status) != names:
            return False
        highest = max(names, key=lambda n: int(status[n]["priority"]))
        return [n for n in names if active(n)] == [highest]

    if not _eventually(one_leader, WAIT):
        status = release.get_json("clusterkopfpeering", "gpushare-operator").get("status")
        lines = {
            n: [
                ln[:300]
                for ln in release.kubectl(
                    "logs", "-n", NS, n, "-c", "operator", check=False
                ).stdout.splitlines()
                if "operations" in ln or "peer" in ln.lower() or "priority" in ln
            ]
            for n in names
        }
        pytest.fail(f"not one leader (the highest priority): peering {status}; logs {lines}", pytrace=False)
    # The webhook's Service has both pods as ready endpoints (what the apiserver dials).
    slices = release.get_json("endpointslices", "-n", NS, "-l", "kubernetes.io/service-name=gpushare-webhook")
    ready = sorted(
        ep["addresses"][0]
        for s in slices["items"]
        for ep in s.get("endpoints") or []
        if (ep.get("conditions") or {}).get("ready")
    )
    assert ready == sorted(p["status"]["podIP"] for p in ops), slices


def _dry_run_pod(release: Release, name: str, limits: dict[str, str]) -> subprocess.CompletedProcess[str]:
    ctr = {"name": name, "image": "registry.invalid/x:1", "resources": {"limits": limits}}
    return release.kubectl(
        "run", name, "-n", "default", "--image=registry.invalid/x:1", "--restart=Never", "--dry-run=server",
        "--overrides", json.dumps({"spec": {"containers": [ctr]}}), check=False,
    )  # fmt: skip


def test_a_33_percent_pod_is_denied_by_the_webhook_through_its_service(release: Release) -> None:
    limits = {"aliyun.com/gpu-mem": "2", "aliyun.com/gpu-core.percentage": "33"}
    # As shipped (failurePolicy Fail), the chart has no ValidatingAdmissionPolicy for Pods: a GPU pod
    # is judged once, by the webhook. The apiserver calls the gpushare-webhook Service, routed to an
    # operator pod's IP on the real node.
    out = release.kubectl("get", "validatingadmissionpolicies", "-o", "name").stdout.split()
    policies = [name.rpartition("/")[2] for name in out]
    assert "gpushare-stateless-rules.gpushare.io" in policies, policies
    assert "gpushare-stateless-rules-pods.gpushare.io" not in policies, policies

    def denied_by_webhook() -> bool:
        res = _dry_run_pod(release, "core-33", limits)
        return res.returncode != 0 and 'admission webhook "validate-pods.gpushare.io" denied' in res.stderr

    _wait(denied_by_webhook, "the webhook to deny the 33 % pod", release, timeout_s=60)
    res = _dry_run_pod(release, "core-33", limits)
    assert "GS001-core-percentage-step" in res.stderr, res.stderr
    # A stateful rule only the webhook has: a GPU pod with no pool target.
    res = _dry_run_pod(release, "no-pool", {"aliyun.com/gpu-mem": "4"})
    assert 'admission webhook "validate-pods.gpushare.io" denied the request' in res.stderr, res.stderr
    assert "GS007-pool-target-missing" in res.stderr, res.stderr


def _agent_token(release: Release, pod: dict[str, Any]) -> str:
    """The ServiceAccount token the kubelet projected into the agent pod (read on the host)."""
    uid = str(pod["metadata"]["uid"])
    vols = release.dev.kubelet_root(NODE) / "pods" / uid / "volumes/kubernetes.io~projected"
    tokens = sorted(vols.glob("kube-api-access-*/token"))
    assert tokens, f"no projected token under {vols}"
    return tokens[0].read_text().strip()


def _patch_node(release: Release, token: str, node: str, annotations: dict[str, str]) -> tuple[int, str]:
    body = json.dumps({"metadata": {"annotations": annotations}}).encode()
    req = urllib.request.Request(
        f"{release.info.server}/api/v1/nodes/{node}", data=body, method="PATCH",
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/merge-patch+json"},
    )  # fmt: skip
    ctx = ssl.create_default_context(cafile=str(release.info.ca_path))
    try:
        with urllib.request.urlopen(req, timeout=10, context=ctx) as resp:
            return int(resp.status), resp.read().decode()
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read().decode()


def test_the_agent_publishes_its_nodes_inventory_and_may_not_write_another_node(release: Release) -> None:
    agents = release.pods("agent")
    assert [p["spec"]["nodeName"] for p in agents] == [NODE], agents
    agent = agents[0]
    assert _ready(agent) or agent["status"]["phase"] == "Running", agent["status"]

    def published() -> bool:
        node = release.get_json("node", NODE)
        return c.ANNOTATION_INVENTORY in (node["metadata"].get("annotations") or {})

    _wait(published, f"the agent to publish {c.ANNOTATION_INVENTORY} on {NODE}", release)
    inventory = json.loads(release.get_json("node", NODE)["metadata"]["annotations"][c.ANNOTATION_INVENTORY])
    # No NVIDIA driver here (the image has the real NVML binding, never the tests' stand-in): the
    # agent publishes what it found, state unknown with NVML's reason, instead of inventing GPUs.
    assert inventory["state"] == "unknown", inventory
    assert "NVML" in inventory["error"], inventory
    other = release.get_json("node", OTHER_NODE)["metadata"].get("annotations") or {}
    assert c.ANNOTATION_INVENTORY not in other

    # The same token the agent uses, as the kubelet projected it (bound to the pod, so to the node).
    token = _agent_token(release, agent)
    code, body = _patch_node(release, token, OTHER_NODE, {c.ANNOTATION_INVENTORY: "{}"})
    assert code == 403, body
    assert f"the gpushare agent on node {NODE} may not modify node {OTHER_NODE}" in body, body
    assert "gpushare-agent-node-restriction" in body, body
    # Its own node, the annotation it owns: allowed.
    code, body = _patch_node(release, token, NODE, {c.ANNOTATION_INVENTORY: json.dumps(inventory)})
    assert code == 200, body
