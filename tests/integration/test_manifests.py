"""manifests/ on a real control plane: apply, workloads come up, RBAC is least privilege.

Uses its own cluster (module scope): the shipped ValidatingWebhookConfiguration fails closed
for pods, and no operator serves it here, so it must not leak into the shared session cluster.
The tests taking ``deployed`` (objects exist, Pod Security, the RBAC matrix) run twice: on
manifests/ applied with kubectl, and on the Helm chart (charts/gpushare-operator, default values)
installed with ``helm install`` into a second cluster.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client

from gpushare import __version__
from gpushare.devcluster import ClusterInfo, DevCluster, create_gpu_nodes, wait_for
from gpushare.devcluster.fakes import POOL_LABEL
from gpushare.k8s.client import make_api_client

REPO = Path(__file__).resolve().parents[2]
MANIFESTS = REPO / "manifests"
NS = "gpushare-system"
OPERATOR = f"system:serviceaccount:{NS}:gpushare-operator"
AGENT = f"system:serviceaccount:{NS}:gpushare-agent"


def kubectl(info: ClusterInfo, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KUBECONFIG": str(info.kubeconfig)}
    proc = subprocess.run(["kubectl", *args], env=env, capture_output=True, text=True, timeout=120)
    if check and proc.returncode != 0:
        pytest.fail(f"kubectl {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


def rendered() -> list[dict[str, Any]]:
    out = subprocess.run(
        ["kubectl", "kustomize", str(MANIFESTS)], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    return [d for d in yaml.safe_load_all(out) if d]


async def _nodes(info: ClusterInfo) -> None:
    async with await make_api_client(str(info.kubeconfig)) as api:
        await create_gpu_nodes(api, 3, prefix="m", pool_labels={POOL_LABEL: "np-m"})


@pytest.fixture(scope="module")
def installed(cluster: ClusterInfo) -> Iterator[ClusterInfo]:
    # ``cluster`` makes a missing control plane fail with its message; this test needs its own.
    dev = DevCluster()
    info = dev.start()
    try:
        asyncio.run(_nodes(info))
        kubectl(info, "apply", "--server-side", "-k", str(MANIFESTS / "crd"))
        kubectl(
            info, "wait", "--for=condition=Established", "--timeout=60s",
            "crd/gpusharepools.gpushare.io", "crd/clusterkopfpeerings.kopf.dev",
        )  # fmt: skip
        kubectl(info, "apply", "--server-side", "-k", str(MANIFESTS))
        yield info
    finally:
        dev.stop()


@pytest.fixture(scope="module")
def installed_chart(cluster: ClusterInfo, helm_bin: str) -> Iterator[ClusterInfo]:
    """The chart with default values, installed as docs/getting-started/install.md says."""
    dev = DevCluster()
    info = dev.start()
    try:
        asyncio.run(_nodes(info))
        kubectl(info, "create", "namespace", NS)
        kubectl(
            info, "label", "namespace", NS, "pod-security.kubernetes.io/enforce=restricted",
            "pod-security.kubernetes.io/enforce-version=latest",
        )  # fmt: skip
        env = {**os.environ, "KUBECONFIG": str(info.kubeconfig)}
        chart = REPO / "charts" / "gpushare-operator"
        proc = subprocess.run(
            [helm_bin, "install", "gpushare", str(chart), "--namespace", NS, "--wait", "--timeout", "180s"],
            env=env, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        if proc.returncode != 0:
            pytest.fail(f"helm install failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
        yield info
    finally:
        dev.stop()


@pytest.fixture(scope="module", params=["manifests", "chart"])
def deployed(request: pytest.FixtureRequest) -> ClusterInfo:
    info: ClusterInfo = request.getfixturevalue(
        "installed" if request.param == "manifests" else "installed_chart"
    )
    return info


def test_every_rendered_object_exists_after_apply(deployed: ClusterInfo) -> None:
    installed = deployed
    for obj in rendered():
        kind, name = obj["kind"], obj["metadata"]["name"]
        ns = obj["metadata"].get("namespace")
        args = [
            "get",
            f"{kind}.{obj['apiVersion'].split('/')[0]}" if "/" in obj["apiVersion"] else kind,
            name,
        ]
        if ns:
            args += ["-n", ns]
        kubectl(installed, *args, "-o", "name")


def test_reapply_is_a_no_op_and_client_side_apply_works(installed: ClusterInfo) -> None:
    again = kubectl(installed, "apply", "--server-side", "-k", str(MANIFESTS))
    assert "error" not in again.stderr.lower()
    diff = kubectl(installed, "diff", "--server-side", "-k", str(MANIFESTS), check=False)
    assert diff.returncode == 0, f"server-side diff after apply is not empty:\n{diff.stdout}"
    # A plain (client-side) apply of the same manifests works on top, as an upgrade path would.
    plain = kubectl(installed, "apply", "-k", str(MANIFESTS))
    assert "deployment.apps/gpushare-operator" in plain.stdout


async def test_operator_and_agent_pods_run_and_pdb_allows_one_disruption(installed: ClusterInfo) -> None:
    async with await make_api_client(str(installed.kubeconfig)) as api:
        apps = client.AppsV1Api(api)
        policy = client.PolicyV1Api(api)

        async def deployment_available() -> Any:
            d = await apps.read_namespaced_deployment("gpushare-operator", NS)
            return d if (d.status.available_replicas or 0) == 2 else None

        dep = await wait_for(deployment_available, what="gpushare-operator 2/2 available", timeout_s=60)
        tmpl = dep.spec.template.spec
        operator, webhook = tmpl.containers  # the reconciler and the webhook, a process each
        assert operator.command == ["gpushare", "run"]
        assert "--peering=gpushare-operator" in operator.args
        assert {p.container_port for p in operator.ports} == {8080, 8081}
        assert webhook.command == ["gpushare", "webhook"]
        assert {p.container_port for p in webhook.ports} == {9443, 8082, 8083}

        async def agents_ready() -> bool:
            ds = await apps.read_namespaced_daemon_set("gpushare-agent", NS)
            s = ds.status
            return s.desired_number_scheduled >= 3 and s.number_ready == s.desired_number_scheduled

        await wait_for(agents_ready, what="gpushare-agent on every GPU node", timeout_s=60)

        async def pdb_ready() -> Any:
            p = await policy.read_namespaced_pod_disruption_budget("gpushare-operator", NS)
            return p if p.status.current_healthy == 2 else None

        pdb = await wait_for(pdb_ready, what="PDB to see 2 healthy replicas", timeout_s=60)
        assert pdb.status.disruptions_allowed == 1


def test_pod_security_restricted_is_enforced_and_satisfied(deployed: ClusterInfo) -> None:
    installed = deployed
    ns = kubectl(installed, "get", "ns", NS, "-o", "yaml").stdout
    assert "pod-security.kubernetes.io/enforce: restricted" in ns
    bad = kubectl(
        installed, "-n", NS, "run", "priv", "--image=registry.invalid/x:1", "--dry-run=server",
        "--overrides", '{"spec":{"containers":[{"name":"priv","image":"registry.invalid/x:1",'
        '"securityContext":{"privileged":true}}]}}',
        check=False,
    )  # fmt: skip
    assert bad.returncode != 0
    assert "violates PodSecurity" in bad.stderr


def test_containers_are_hardened() -> None:
    for obj in rendered():
        if obj["kind"] not in ("Deployment", "DaemonSet"):
            continue
        spec = obj["spec"]["template"]["spec"]
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert spec["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
        for ctr in spec["containers"]:
            sc = ctr["securityContext"]
            assert sc["allowPrivilegeEscalation"] is False
            assert sc["readOnlyRootFilesystem"] is True
            assert sc["capabilities"]["drop"] == ["ALL"]
            assert ctr["resources"]["requests"]
            assert ctr["image"] == f"gpushare-operator:{__version__}"


CAN = [
    # operator: exactly what it needs
    (OPERATOR, "patch", "nodes", None),
    (OPERATOR, "list", "nodes", None),
    (OPERATOR, "watch", "pods", None),
    (OPERATOR, "delete", "pods", "kube-system"),
    (OPERATOR, "create", "pods:eviction", "team-a"),
    (OPERATOR, "patch", "gpusharepools.gpushare.io", None),
    (OPERATOR, "patch", "gpusharepools.gpushare.io:status", None),
    (OPERATOR, "update", "gpusharepools.gpushare.io:finalizers", None),
    (OPERATOR, "patch", "clusterkopfpeerings.kopf.dev", None),
    (OPERATOR, "create", "events", "default"),
    (OPERATOR, "get", "secrets/gpushare-webhook-tls", NS),
    (OPERATOR, "update", "secrets/gpushare-webhook-tls", NS),
    (OPERATOR, "patch", "validatingwebhookconfigurations/gpushare-webhook", None),
    (OPERATOR, "list", "pods", "team-a"),
    # agent (its Node writes are confined further by a ValidatingAdmissionPolicy: test_least_privilege.py)
    (AGENT, "get", "nodes", None),
    (AGENT, "patch", "nodes", None),
]

CANNOT = [
    (OPERATOR, "get", "secrets", "kube-system"),
    (OPERATOR, "list", "secrets", "default"),
    (OPERATOR, "list", "secrets", NS),
    (OPERATOR, "get", "secrets/other", NS),
    (OPERATOR, "create", "pods", "default"),
    (OPERATOR, "create", "pods", NS),
    (OPERATOR, "create", "pods:exec", "default"),
    (OPERATOR, "update", "nodes:status", None),
    (OPERATOR, "update", "gpusharepools.gpushare.io", None),
    (OPERATOR, "update", "pods", "default"),
    (OPERATOR, "delete", "nodes", None),
    (OPERATOR, "create", "nodes", None),
    (OPERATOR, "delete", "gpusharepools.gpushare.io", None),
    (OPERATOR, "create", "gpusharepools.gpushare.io", None),
    (OPERATOR, "patch", "deployments.apps", "default"),
    (OPERATOR, "delete", "daemonsets.apps", "kube-system"),
    (OPERATOR, "patch", "validatingwebhookconfigurations/other", None),
    (OPERATOR, "create", "validatingwebhookconfigurations", None),
    (OPERATOR, "create", "clusterrolebindings.rbac.authorization.k8s.io", None),
    (OPERATOR, "get", "configmaps", "kube-system"),
    # pod deletes only in the device-plugin namespaces (manifests/operator/device-plugin-rbac.yaml)
    (OPERATOR, "delete", "pods", "default"),
    (OPERATOR, "delete", "pods", "team-a"),
    (OPERATOR, "delete", "pods", NS),
    (OPERATOR, "deletecollection", "pods", "kube-system"),
    (OPERATOR, "get", "pods", "kube-system"),
    (OPERATOR, "create", "events", NS),
    (OPERATOR, "patch", "events", "default"),
    (OPERATOR, "list", "namespaces", None),
    (OPERATOR, "get", "gpusharepools.gpushare.io", None),
    (AGENT, "delete", "nodes", None),
    (AGENT, "list", "nodes", None),
    (AGENT, "watch", "nodes", None),
    (AGENT, "patch", "nodes:status", None),
    (AGENT, "update", "nodes", None),
    (AGENT, "get", "pods", "default"),
    (AGENT, "create", "pods:eviction", "default"),
    (AGENT, "get", "secrets", NS),
    (AGENT, "patch", "gpusharepools.gpushare.io", None),
]


def _can_i(info: ClusterInfo, who: str, verb: str, resource: str, ns: str | None) -> bool:
    # "res/name" asks about one object; "res:sub" about a subresource.
    resource, _, sub = resource.partition(":")
    args = ["auth", "can-i", verb, resource, f"--as={who}"]
    args += [f"--subresource={sub}"] if sub else []
    args += ["-n", ns] if ns else []
    out = kubectl(info, *args, check=False)
    assert out.stdout.strip() in ("yes", "no"), out.stderr
    return out.stdout.strip() == "yes"


@pytest.mark.parametrize(("who", "verb", "resource", "ns"), CAN, ids=lambda v: str(v).split(":")[-1])
def test_rbac_allows(deployed: ClusterInfo, who: str, verb: str, resource: str, ns: str | None) -> None:
    assert _can_i(deployed, who, verb, resource, ns), f"{who} should be able to {verb} {resource} in {ns}"


@pytest.mark.parametrize(("who", "verb", "resource", "ns"), CANNOT, ids=lambda v: str(v).split(":")[-1])
def test_rbac_denies(deployed: ClusterInfo, who: str, verb: str, resource: str, ns: str | None) -> None:
    assert not _can_i(deployed, who, verb, resource, ns), f"{who} must not {verb} {resource} in {ns}"
