"""The deployed operator (2 replicas, peering), its webhook behind the Service, and the agent.

Black box: kubectl against the cluster of $KUBECONFIG (``make e2e-kind``). The tests FAIL, never
skip, when there is no cluster. GPU nodes are the nodes labelled ``alibabacloud.com/nodepool-id``
np-cgpu and np-gpu-core (hack/e2e-kind/kind-config.yaml); the stand-in device plugin is
kube-system/gpushare-device-plugin-ds (hack/e2e-kind/device-plugin.yaml).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar, cast

import pytest

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
T = TypeVar("T")


class Kubectl:
    def __init__(self, binary: str) -> None:
        self.binary = binary

    def run(
        self, *args: str, check: bool = True, stdin: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        r = subprocess.run(
            [self.binary, *args], input=stdin, capture_output=True, text=True, timeout=120, check=False
        )
        if check and r.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({r.returncode}): {r.stderr.strip()}")
        return r

    def json(self, *args: str) -> Any:
        return json.loads(self.run(*args, "-o", "json").stdout)


def wait_for(check: Callable[[], T | None], what: str, timeout_s: float = 180.0) -> T:
    """Poll until ``check`` returns something truthy; fail naming ``what`` and the last value."""
    deadline = time.monotonic() + timeout_s
    last: object = None
    while True:
        try:
            value = check()
        except AssertionError as exc:
            value, last = None, exc
        else:
            last = value
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s:g}s waiting for {what}; last: {last!r}", pytrace=False)
        time.sleep(1.0)


@pytest.fixture(scope="session")
def kubectl() -> Kubectl:
    if not os.environ.get("KUBECONFIG"):
        pytest.fail("KUBECONFIG is not set: run the e2e suite with `make e2e-kind`", pytrace=False)
    binary = os.environ.get("KUBECTL", "kubectl")
    if shutil.which(binary) is None:
        pytest.fail(f"{binary} not found on PATH", pytrace=False)
    k = Kubectl(binary)
    r = k.run("get", "--raw", "/readyz", check=False)
    if r.returncode != 0:
        pytest.fail(f"the cluster of $KUBECONFIG is not reachable: {r.stderr.strip()}", pytrace=False)
    return k


POOL_FILES = [EXAMPLES / "pool-cgpu.yaml", EXAMPLES / "pool-gpu-core.yaml"]


def apply_pools(kubectl: Kubectl) -> None:
    kubectl.run("apply", *(arg for f in POOL_FILES for arg in ("-f", str(f))))


@pytest.fixture
def pools(kubectl: Kubectl) -> Iterator[list[str]]:
    """The names of the example pools cgpu and gpu-core (the test applies them with ``apply_pools``);
    deleted afterwards, their cleanup awaited."""
    names = ["cgpu", "gpu-core"]
    try:
        yield names
    finally:
        kubectl.run(
            "delete", "gsp", *names, "--ignore-not-found", "--wait=true", "--timeout=180s", check=False
        )


NS = "gpushare-system"
PLUGIN = ["-n", "kube-system", "get", "pods", "-l", "name=gpushare-device-plugin-ds"]
# nodepool -> labels the example pools put on its nodes (docs/concepts/ack-labels.md)
EXPECTED = {
    "np-cgpu": {
        "cgpu": "true",
        "cgpu.disable.isolation": "false",
        "ack.node.gpu.schedule": "cgpu",
        "ack.node.gpu.placement": "binpack",
        "gpushare.io/pool": "cgpu",
    },
    "np-gpu-core": {
        "cgpu": "true",
        "cgpu.disable.isolation": "false",
        "ack.node.gpu.schedule": "core_mem",
        "ack.node.gpu.placement": "binpack",
        "gpushare.io/pool": "gpu-core",
    },
}
MANAGED = (
    "cgpu",
    "cgpu.disable.isolation",
    "ack.node.gpu.schedule",
    "ack.node.gpu.placement",
    "gpushare.io/pool",
)


def _gpu_nodes(kubectl: Kubectl) -> dict[str, dict[str, str]]:
    nodes = kubectl.json("get", "nodes", "-l", "alibabacloud.com/nodepool-id in (np-cgpu,np-gpu-core)")
    return {n["metadata"]["name"]: n["metadata"].get("labels", {}) for n in nodes["items"]}


def _plugin_pods(kubectl: Kubectl) -> dict[str, str]:
    """node -> uid of its Ready device-plugin pod."""
    pods = kubectl.json(*PLUGIN)["items"]
    out = {}
    for p in pods:
        ready = any(
            c["type"] == "Ready" and c["status"] == "True" for c in p.get("status", {}).get("conditions", [])
        )
        if ready and not p["metadata"].get("deletionTimestamp"):
            out[p["spec"]["nodeName"]] = p["metadata"]["uid"]
    return out


def test_operator_runs_two_ready_replicas(kubectl: Kubectl) -> None:
    dep: Any = kubectl.json("-n", NS, "get", "deployment", "gpushare-operator")
    assert dep["spec"]["replicas"] == 2
    wait_for(
        lambda: (
            kubectl.json("-n", NS, "get", "deployment", "gpushare-operator")["status"].get("readyReplicas")
            == 2
        ),
        "2 ready operator replicas",
    )


def test_pools_label_nodes_and_restart_device_plugins_then_restore(
    kubectl: Kubectl, pools: list[str]
) -> None:
    nodes = _gpu_nodes(kubectl)
    assert {ls["alibabacloud.com/nodepool-id"] for ls in nodes.values()} == set(EXPECTED), nodes
    # (the checks return False, {} or the dict: cast to the dict they return once they pass)
    before = cast(
        "dict[str, str]",
        wait_for(
            lambda: (p := _plugin_pods(kubectl)) and all(n in p for n in nodes) and p,
            "a Ready device-plugin pod on every GPU node",
        ),
    )
    apply_pools(kubectl)
    kubectl.run("wait", "gsp", *pools, "--for=condition=Ready", "--timeout=240s")
    for name, labels in _gpu_nodes(kubectl).items():
        expected = EXPECTED[labels["alibabacloud.com/nodepool-id"]]
        assert {k: labels.get(k) for k in expected} == expected, (name, labels)
    after = cast(
        "dict[str, str]",
        wait_for(
            lambda: (p := _plugin_pods(kubectl)) and all(n in p and p[n] != before[n] for n in nodes) and p,
            "a new Ready device-plugin pod on every pool node",
        ),
    )
    assert all(after[n] != before[n] for n in nodes)

    kubectl.run("delete", "gsp", *pools, "--wait=true", "--timeout=180s")
    # Restore: the labels the nodes had before, except that a schedule label the node never had
    # becomes "default" (docs/concepts/ack-labels.md: deleting it would not bring back exclusive mode).
    wanted = {
        name: {k: labels.get(k, "default" if k == "ack.node.gpu.schedule" else None) for k in MANAGED}
        for name, labels in nodes.items()
    }

    def restored() -> dict[str, dict[str, str | None]] | None:
        now = {name: {k: labels.get(k) for k in MANAGED} for name, labels in _gpu_nodes(kubectl).items()}
        return now if now == wanted else None

    wait_for(restored, f"the nodes' labels restored after the pools were deleted: {wanted}")


def test_webhook_behind_the_service_rejects_33_percent_and_admits_the_seed_job(
    kubectl: Kubectl, pools: list[str]
) -> None:
    apply_pools(kubectl)
    kubectl.run("wait", "gsp", *pools, "--for=condition=Ready", "--timeout=240s")

    def rejected() -> str | None:
        r = kubectl.run(
            "apply", "--dry-run=server", "-f", str(EXAMPLES / "invalid" / "cuda-sample-33.yaml"), check=False
        )
        return r.stderr if r.returncode != 0 and "GS001-core-percentage-step" in r.stderr else None

    message = wait_for(rejected, "the webhook to reject the 33 % job")
    assert 'admission webhook "validate-jobs.gpushare.io" denied the request' in message
    ok = kubectl.run("apply", "--dry-run=server", "-f", str(EXAMPLES / "job-cuda-sample.yaml"))
    assert "job.batch/cuda-sample" in ok.stdout and "(server dry run)" in ok.stdout, ok.stdout


def test_agent_publishes_isolation_on_each_gpu_node(kubectl: Kubectl) -> None:
    # kind nodes have no NVIDIA driver: the agent reports the inventory as unknown but always
    # publishes the isolation state it read from /proc/modules.
    labelled = cast(
        "dict[str, dict[str, str]]",
        wait_for(
            lambda: (
                (ns := _gpu_nodes(kubectl))
                and all("gpushare.io/cgpu.isolation" in ls for ls in ns.values())
                and ns
            ),
            "gpushare.io/cgpu.isolation on every GPU node",
        ),
    )
    for name, labels in labelled.items():
        assert labels["gpushare.io/cgpu.isolation"] in ("active", "absent", "unknown"), (name, labels)
