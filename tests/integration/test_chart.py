"""The Helm chart on a real control plane: install, the operator under the chart's RBAC, upgrade,
uninstall.

One release goes through its life in file order: ``helm install`` (with device-plugin namespaces,
so the operator's pod deletes come from a namespaced Role) → ``helm upgrade`` keeps what the
operator wrote → the operator process (``gpushare run``, local, as the other integration tests run
it) authenticated with a TokenRequest token of the chart's ServiceAccount serves the webhook and
brings a pool to Ready → ``helm uninstall`` leaves nothing but the CRDs.

Own cluster (module scope): the chart's ValidatingWebhookConfiguration fails closed. The RBAC
``can-i`` matrix runs on the chart's objects in test_manifests.py (the ``deployed`` fixture).
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client

from gpushare import constants as c
from gpushare.devcluster import BinariesMissing, ClusterInfo, DevCluster, find_binaries, wait_for
from gpushare.devcluster.cluster import free_port, write_kubeconfig
from gpushare.devcluster.fakes import POOL_LABEL, create_gpu_nodes, ensure_device_plugin_daemonset
from gpushare.k8s.client import make_api_client

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "gpushare-operator"
NS = "gpushare-system"
RELEASE = "gpushare"
NODEPOOL = "np-helm"
OPERATOR_SA = f"system:serviceaccount:{NS}:gpushare-operator"


class Release:
    def __init__(self, info: ClusterInfo, helm_bin: str) -> None:
        self.info = info
        self.helm_bin = helm_bin
        self.env = {**os.environ, "KUBECONFIG": str(info.kubeconfig)}
        self.manifest: list[dict[str, Any]] = []
        self.installed: subprocess.CompletedProcess[str] | None = None

    def run(self, cmd: list[str], check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(cmd, env=self.env, capture_output=True, text=True, timeout=300)
        if check and proc.returncode != 0:
            pytest.fail(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
        return proc

    def helm(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.run([self.helm_bin, *args], check)

    def kubectl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.run(["kubectl", *args], check)

    def get_json(self, *args: str) -> dict[str, Any]:
        out: dict[str, Any] = json.loads(self.kubectl("get", *args, "-o", "json").stdout)
        return out


async def _prepare(info: ClusterInfo) -> None:
    async with await make_api_client(str(info.kubeconfig)) as api:
        await create_gpu_nodes(api, 3, prefix="h", pool_labels={POOL_LABEL: NODEPOOL})
        await ensure_device_plugin_daemonset(api)


@pytest.fixture(scope="module")
def release(helm_bin: str) -> Iterator[Release]:
    try:
        find_binaries()
    except BinariesMissing as exc:
        pytest.fail(str(exc), pytrace=False)
    dev = DevCluster()
    info = dev.start()
    try:
        asyncio.run(_prepare(info))
        rel = Release(info, helm_bin)
        # As docs/getting-started/install.md: the namespace first, with its Pod Security labels,
        # then the chart.
        rel.kubectl("create", "namespace", NS)
        rel.kubectl(
            "label", "namespace", NS, "pod-security.kubernetes.io/enforce=restricted",
            "pod-security.kubernetes.io/enforce-version=latest",
        )  # fmt: skip
        rel.installed = rel.helm(
            "install", RELEASE, str(CHART), "--namespace", NS,
            "--set", "devicePlugin.namespaces={kube-system}", "--wait", "--timeout", "180s",
        )  # fmt: skip
        rel.manifest = [
            d for d in yaml.safe_load_all(rel.helm("get", "manifest", RELEASE, "-n", NS).stdout) if d
        ]
        yield rel
    finally:
        dev.stop()


def _ref(obj: dict[str, Any]) -> list[str]:
    api = obj["apiVersion"]
    kind = f"{obj['kind']}.{api.split('/')[0]}" if "/" in api else obj["kind"]
    ns = obj["metadata"].get("namespace")
    return [kind, obj["metadata"]["name"], *(["-n", ns] if ns else [])]


def test_install_deploys_every_object_and_the_workloads_come_up(release: Release) -> None:
    status = json.loads(release.helm("status", RELEASE, "-n", NS, "-o", "json").stdout)
    assert status["info"]["status"] == "deployed"
    kinds = {d["kind"] for d in release.manifest}
    assert {
        "Deployment",
        "DaemonSet",
        "ValidatingWebhookConfiguration",
        "ClusterKopfPeering",
        "Secret",
    } <= kinds
    for obj in release.manifest:
        release.kubectl("get", *_ref(obj), "-o", "name")
    for crd in ("gpusharepools.gpushare.io", "clusterkopfpeerings.kopf.dev"):
        conds = release.get_json("crd", crd)["status"]["conditions"]
        assert {"type": "Established", "status": "True"}.items() <= next(
            x for x in conds if x["type"] == "Established"
        ).items()
    dep = release.get_json("deployment", "gpushare-operator", "-n", NS)
    assert dep["status"]["availableReplicas"] == 2  # helm install --wait waited for it
    ds = release.get_json("daemonset", "gpushare-agent", "-n", NS)
    assert ds["status"]["numberReady"] == ds["status"]["desiredNumberScheduled"] == 3


def test_upgrade_keeps_what_the_operator_wrote(release: Release) -> None:
    # What the operator writes in-cluster: the certificate Secret (replace, its own labels) and
    # caBundle on the webhooks (JSON patch). A `helm upgrade` must keep both.
    data = {
        k: base64.b64encode(v).decode()
        for k, v in {"tls.crt": b"crt", "tls.key": b"key", "ca.crt": b"ca"}.items()
    }
    secret = release.get_json("secret", "gpushare-webhook-tls", "-n", NS)
    # The placeholder: a throwaway self-signed certificate (no CA: the operator replaces it), so
    # that the apiserver has no "tls: failed to find any PEM data" warning for the install.
    assert set(secret["data"]) == {"tls.crt", "tls.key"}
    assert b"BEGIN CERTIFICATE" in base64.b64decode(secret["data"]["tls.crt"])
    assert release.installed is not None
    install_output = release.installed.stdout + release.installed.stderr
    assert "PEM data" not in install_output and "Warning" not in install_output, install_output
    secret = {
        "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls", "data": data,
        "metadata": {"name": "gpushare-webhook-tls", "namespace": NS,
                     "resourceVersion": secret["metadata"]["resourceVersion"],
                     "labels": {"app.kubernetes.io/name": "gpushare-operator",
                                "app.kubernetes.io/component": "webhook"}},
    }  # fmt: skip
    proc = subprocess.run(
        ["kubectl", "replace", "-f", "-"], input=json.dumps(secret), env=release.env,
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    bundle = base64.b64encode(b"-----BEGIN CERTIFICATE-----\nfake\n-----END CERTIFICATE-----\n").decode()
    hooks = release.get_json("validatingwebhookconfiguration", "gpushare-webhook")["webhooks"]
    ops = [
        {"op": "add", "path": f"/webhooks/{i}/clientConfig/caBundle", "value": bundle}
        for i in range(len(hooks))
    ]
    release.kubectl(
        "patch", "validatingwebhookconfiguration", "gpushare-webhook", "--type=json", "-p", json.dumps(ops)
    )

    release.helm(
        "upgrade", RELEASE, str(CHART), "--namespace", NS, "--reuse-values",
        "--set", "operator.replicas=3", "--wait", "--timeout", "180s",
    )  # fmt: skip
    assert release.get_json("secret", "gpushare-webhook-tls", "-n", NS)["data"] == data
    hooks = release.get_json("validatingwebhookconfiguration", "gpushare-webhook")["webhooks"]
    assert [h["clientConfig"].get("caBundle") for h in hooks] == [bundle] * len(hooks)
    assert release.get_json("deployment", "gpushare-operator", "-n", NS)["spec"]["replicas"] == 3
    history = json.loads(release.helm("history", RELEASE, "-n", NS, "-o", "json").stdout)
    assert [h["status"] for h in history] == ["superseded", "deployed"]


def _can_i(release: Release, verb: str, resource: str, ns: str) -> bool:
    out = release.kubectl("auth", "can-i", verb, resource, f"--as={OPERATOR_SA}", "-n", ns, check=False)
    assert out.stdout.strip() in ("yes", "no"), out.stderr
    return out.stdout.strip() == "yes"


def test_device_plugin_namespaces_confine_pod_deletes(release: Release) -> None:
    assert _can_i(release, "delete", "pods", "kube-system")
    assert not _can_i(release, "delete", "pods", "default")
    assert not _can_i(release, "delete", "pods", NS)
    assert _can_i(release, "list", "pods", "default")  # reads stay cluster-wide (watches)


def _sa_kubeconfig(release: Release, path: Path) -> Path:
    """A kubeconfig with a TokenRequest token of the chart's operator ServiceAccount."""
    token = release.kubectl(
        "create", "token", "gpushare-operator", "-n", NS, "--duration=3600s"
    ).stdout.strip()
    write_kubeconfig(path, release.info.server, release.info.ca_pem, token, name="gpushare-chart-sa")
    who = subprocess.run(
        ["kubectl", "--kubeconfig", str(path), "auth", "whoami",
         "-o", "jsonpath={.status.userInfo.username}"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert who.stdout == OPERATOR_SA, who.stderr
    return path


async def _pool_lifecycle(admin_kubeconfig: Path, webhook_port: int) -> dict[str, Any]:
    async with await make_api_client(str(admin_kubeconfig)) as api:
        adm = client.AdmissionregistrationV1Api(api)

        async def registered() -> bool:
            # The operator (local mode) has pointed the chart's webhooks at itself, with its CA.
            vwc = await adm.read_validating_webhook_configuration("gpushare-webhook")
            want = f"https://127.0.0.1:{webhook_port}/"
            return all((h.client_config.url or "").startswith(want) for h in vwc.webhooks)

        await wait_for(registered, what="the operator to register the webhook", timeout_s=60)
        custom = client.CustomObjectsApi(api)
        body = {
            "apiVersion": c.API_VERSION, "kind": c.KIND, "metadata": {"name": "helm-cgpu"},
            "spec": {"nodeSelector": {"matchLabels": {POOL_LABEL: NODEPOOL}}, "memoryIsolation": True,
                     "computeAllocation": False},
        }  # fmt: skip
        await custom.create_cluster_custom_object(c.GROUP, c.VERSION, c.PLURAL, body)

        async def ready() -> dict[str, Any] | None:
            pool: dict[str, Any] = await custom.get_cluster_custom_object(
                c.GROUP, c.VERSION, c.PLURAL, "helm-cgpu"
            )
            conds = {x["type"]: x for x in pool.get("status", {}).get("conditions", [])}
            return pool if conds.get("Ready", {}).get("status") == "True" else None

        pool = await wait_for(ready, what="GPUSharePool helm-cgpu Ready=True", timeout_s=120)
        core = client.CoreV1Api(api)
        nodes = (await core.list_node(label_selector=f"{POOL_LABEL}={NODEPOOL}")).items
        assert {n.metadata.labels.get("cgpu") for n in nodes} == {"true"}
        await custom.delete_cluster_custom_object(c.GROUP, c.VERSION, c.PLURAL, "helm-cgpu")

        async def gone() -> bool:
            items = (await custom.list_cluster_custom_object(c.GROUP, c.VERSION, c.PLURAL))["items"]
            return not any(i["metadata"]["name"] == "helm-cgpu" for i in items)

        await wait_for(gone, what="GPUSharePool helm-cgpu finalized and deleted", timeout_s=120)
        return pool


def test_operator_with_the_chart_service_account_brings_a_pool_to_ready(
    release: Release, tmp_path: Path
) -> None:
    kubeconfig = _sa_kubeconfig(release, tmp_path / "sa-kubeconfig")
    log_path = tmp_path / "operator.log"
    metrics_port, webhook_port = free_port(), free_port()
    cmd = [
        sys.executable, "-m", "gpushare", "run", "--kubeconfig", str(kubeconfig),
        "--metrics-port", str(metrics_port), "--log-format", "json",
        "--peering=gpushare-operator", "--namespace-for-events=default",  # as the chart's Deployment
        # The webhook as in the chart's Deployment (its Secret, its configuration), but served
        # here: the apiserver cannot reach the (kwok) pods behind the chart's Service.
        "--webhook", "--webhook-local", f"--webhook-port={webhook_port}", f"--webhook-namespace={NS}",
        "--webhook-secret=gpushare-webhook-tls", "--webhook-configuration=gpushare-webhook",
        f"--webhook-cert-dir={tmp_path / 'certs'}",
    ]  # fmt: skip
    with log_path.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    try:
        pool = asyncio.run(_pool_lifecycle(release.info.kubeconfig, webhook_port))
        assert pool["status"]["conditions"]
        # The webhook answers under the chart's RBAC: a GPU pod without a pool selector is refused
        # by it (GS007, a stateful rule only the webhook has; as shipped, failurePolicy Fail, the
        # chart has no Pods policy, so the webhook alone judges pods).
        limits = {"aliyun.com/gpu-mem": "4"}
        ctr = {"name": "bad-gpu", "image": "registry.invalid/x:1", "resources": {"limits": limits}}
        bad = release.kubectl(
            "run", "bad-gpu", "--image=registry.invalid/x:1", "--restart=Never", "--dry-run=server",
            "--overrides", json.dumps({"spec": {"containers": [ctr]}}), check=False,
        )  # fmt: skip
        assert bad.returncode != 0
        assert 'admission webhook "validate-pods.gpushare.io" denied the request' in bad.stderr, bad.stderr
        assert "GS007-pool-target-missing" in bad.stderr, bad.stderr
        # The operator wrote its certificate into the chart's Secret (the placeholder is gone).
        secret = release.get_json("secret", "gpushare-webhook-tls", "-n", NS)
        assert b"BEGIN CERTIFICATE" in base64.b64decode(secret["data"]["tls.crt"])
        assert proc.poll() is None, log_path.read_text()[-3000:]
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    # "403" alone also occurs inside UIDs and resourceVersions; an RBAC denial reads "(403)" / "Forbidden".
    denial = re.compile(r"Forbidden|forbidden:|\(403\)|\b(?:status|code)[=: ]+403\b")
    forbidden = [line for line in log_path.read_text().splitlines() if denial.search(line)]
    assert not forbidden, "the operator hit RBAC denials:\n" + "\n".join(forbidden[:10])


def test_uninstall_leaves_nothing_but_the_crds(release: Release) -> None:
    release.helm("uninstall", RELEASE, "--namespace", NS, "--wait", "--timeout", "180s")
    left = []
    for obj in release.manifest:
        got = release.kubectl("get", *_ref(obj), "-o", "name", "--ignore-not-found")
        if got.stdout.strip():
            left.append(got.stdout.strip())
    assert not left, f"left after helm uninstall: {left}"
    # Nothing else of gpushare anywhere (the operator's own writes included), pods too.
    deadline = time.monotonic() + 120
    while True:
        out = release.kubectl(
            "get", "all,configmaps,secrets,serviceaccounts,roles,rolebindings,clusterroles,"
            "clusterrolebindings,validatingwebhookconfigurations,clusterkopfpeerings", "-A", "-o", "name",
            "-l", "app.kubernetes.io/name in (gpushare-operator,gpushare-agent)",
        ).stdout.split()  # fmt: skip
        if not out or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert out == [], f"gpushare objects left after helm uninstall: {out}"
    secrets = release.kubectl("get", "secrets", "-n", NS, "-o", "name").stdout.split()
    assert "secret/gpushare-webhook-tls" not in secrets
    # Helm never deletes crds/: the pools' CRD and the peering CRD stay, with the custom objects.
    for crd in ("gpusharepools.gpushare.io", "clusterkopfpeerings.kopf.dev"):
        release.kubectl("get", "crd", crd, "-o", "name")
