"""The admission webhook, called over TLS by the real kube-apiserver.

A Kopf operator with only the webhook's handlers (``gpushare.webhook.registration.register`` on a
fresh registry) runs in a background thread for this module, in local mode: the
ValidatingWebhookConfiguration points at https://127.0.0.1:<port>/<handler-id> and its caBundle
comes from the CA in the operator's Secret. Requests go through the apiserver (mostly
server-side dry runs, which also call validating webhooks) with a plain synchronous client.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import json
import secrets
import shutil
import socket
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import kopf
import pytest
import yaml
from cryptography import x509
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from kubernetes_asyncio import client

from gpushare import metrics
from gpushare.admission import is_denied
from gpushare.admission.gate import gate_of
from gpushare.admission.webhook_config import TARGETS, TARGETS_BY_ID, WebhookSettings, build_configuration
from gpushare.api.v1alpha1 import parse_pool
from gpushare.cli.check import build_context, check_objects
from gpushare.devcluster import ClusterInfo
from gpushare.k8s import webhook_api
from gpushare.k8s.client import make_api_client
from gpushare.webhook import lifecycle
from gpushare.webhook import tls as certs
from gpushare.webhook.gate import ensure_nvidia_gate
from gpushare.webhook.options import WebhookOptions
from gpushare.webhook.registration import register
from support.kube import Kube, collection_path

REPO = Path(__file__).resolve().parents[2]
EX = REPO / "examples"
MEM = "aliyun.com/gpu-mem"
CORE = "aliyun.com/gpu-core.percentage"
SUFFIX = secrets.token_hex(3)
OPERATOR_NS = f"gpushare-system-{SUFFIX}"
CONFIG_NAME = f"gpushare-webhook-test-{SUFFIX}"
SECRET = "gpushare-webhook-tls"
#: Minimal CRDs (written here, schema-less) for the workload kinds the webhook is shown on.
WORKLOAD_CRDS = Path(__file__).parent / "crds" / "workload-kinds.yaml"


def install_workload_crds(kube: Kube, crds: list[dict[str, Any]] | None = None) -> None:
    """Create the CRDs (idempotent) and wait until each is Established and served."""
    for crd in crds if crds is not None else yaml.safe_load_all(WORKLOAD_CRDS.read_text()):
        r = kube.request("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
        assert r.status in (201, 409), r.body
        name, group = crd["metadata"]["name"], crd["spec"]["group"]
        version, plural = crd["spec"]["versions"][0]["name"], crd["spec"]["names"]["plural"]
        deadline = time.monotonic() + 60
        while True:
            got = kube.request("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
            status = got.body.get("status") or {}  # conditions are null until the apiserver sets them
            conditions = {c["type"]: c["status"] for c in status.get("conditions") or []}
            served = kube.request("GET", f"/apis/{group}/{version}/{plural}")
            if conditions.get("Established") == "True" and served.status == 200:
                break
            assert time.monotonic() < deadline, f"CRD {name} not served: {conditions} {served.status}"
            time.sleep(0.5)


def load(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((EX / name).read_text()) if d]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class Webhook:
    kube: Kube
    namespace: str
    options: WebhookOptions
    pools: list[dict[str, Any]]
    nodes: list[dict[str, Any]]


def _bad_pod(ns: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"probe-{secrets.token_hex(3)}", "namespace": ns},
        "spec": {
            "nodeSelector": {"ack.node.gpu.schedule": "core_mem"},
            "containers": [{"name": "c", "image": "x", "resources": {"limits": {MEM: "2", CORE: "33"}}}],
        },
    }


def _node(name: str, nodepool: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"alibabacloud.com/nodepool-id": nodepool, "kubernetes.io/hostname": name},
        },
    }


@pytest.fixture(scope="module")
def webhook(cluster: ClusterInfo, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Webhook]:
    kube = Kube(cluster)
    install_workload_crds(kube)  # before the operator starts: Kopf finds webhook resources at startup
    test_ns = f"wh-{SUFFIX}"
    for ns in (OPERATOR_NS, test_ns):
        r = kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}, dry_run=False)
        assert r.status == 201, r.body
    pools = [
        d for f in ("pool-cgpu.yaml", "pool-cgpu-no-isolation.yaml", "pool-gpu-core.yaml") for d in load(f)
    ]
    nodes = [_node(f"wh-{SUFFIX}-{np}", np) for np in ("np-cgpu", "np-gpu-core")]
    for obj in [*pools, *nodes]:
        r = kube.create(obj, dry_run=False)
        if r.status == 409:  # left over by an earlier test: start from the example as written
            kube.delete(obj)
            deadline = time.monotonic() + 30
            while r.status == 409 and time.monotonic() < deadline:
                time.sleep(0.5)
                r = kube.create(obj, dry_run=False)
        assert r.status == 201, r.body

    options = WebhookOptions(
        addr="127.0.0.1",
        port=free_port(),
        local=True,
        host="127.0.0.1",
        namespace=OPERATOR_NS,
        configuration=CONFIG_NAME,
        cert_dir=tmp_path_factory.mktemp("webhook-certs"),
        kubeconfig=str(cluster.kubeconfig),
        renew_check_seconds=1.0,
        file_check_interval=1.0,
    )
    registry = kopf.OperatorRegistry()
    register(registry, options)

    @kopf.on.login(registry=registry)
    def login(**_: Any) -> kopf.ConnectionInfo:
        return kopf.ConnectionInfo(server=cluster.server, ca_path=str(cluster.ca_path), token=cluster.token)

    op_settings = kopf.OperatorSettings()
    op_settings.watching.server_timeout = 10
    op_settings.posting.enabled = False
    stop = threading.Event()
    errors: list[BaseException] = []

    def run() -> None:
        try:
            asyncio.run(
                kopf.operator(
                    registry=registry, settings=op_settings, clusterwide=True, standalone=True, stop_flag=stop
                )
            )
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=run, name="webhook-operator", daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 90
        while True:  # until the apiserver really calls the webhook (configuration propagation)
            r = kube.create(_bad_pod(test_ns))
            if (
                r.status == 422
                and "GS001-core-percentage-step" in r.message
                and "admission webhook" in r.message
            ):
                break  # (a ValidatingAdmissionPolicy left by another module would deny it too)
            assert not errors, errors
            assert time.monotonic() < deadline, f"webhook never answered: {r.status} {r.message}"
            time.sleep(0.5)
        yield Webhook(kube, test_ns, options, pools, nodes)
    finally:
        stop.set()
        thread.join(timeout=30)
        kube.request(
            "DELETE", f"/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/{CONFIG_NAME}"
        )
        for obj in [*pools, *nodes]:
            kube.delete(obj)
        for ns in (OPERATOR_NS, test_ns):
            kube.request("DELETE", f"/api/v1/namespaces/{ns}")
    assert not errors, errors


def _admission_count(kind: str, decision: str, rule: str) -> float:
    value = metrics.REGISTRY.get_sample_value(
        "gpushare_admission_requests_total", {"kind": kind, "decision": decision, "rule": rule}
    )
    return value or 0.0


# --- the configuration ---------------------------------------------------------------------------


def test_configuration_is_shipped_shape_with_ca_bundle(webhook: Webhook) -> None:
    r = webhook.kube.request(
        "GET", f"/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/{CONFIG_NAME}"
    )
    assert r.status == 200
    hooks = {h["name"]: h for h in r.body["webhooks"]}
    # One webhook per kind of the workload-kinds table (kinds the cluster lacks are harmless), plus pools.
    assert set(hooks) == {f"{t.handler_id}.gpushare.io" for t in TARGETS}
    assert {f"validate-{k}.gpushare.io" for k in ("pods", "jobs", "cronjobs", "gpusharepools")} <= set(hooks)
    assert {
        "validate-pytorchjobs-kubeflow-org.gpushare.io",
        "validate-workflows-argoproj-io.gpushare.io",
    } <= set(hooks)
    secret = webhook.kube.request("GET", f"/api/v1/namespaces/{OPERATOR_NS}/secrets/{SECRET}")
    ca_bundle = secret.body["data"]["ca-bundle.crt"]
    for name, hook in hooks.items():
        assert hook["clientConfig"]["caBundle"] == ca_bundle
        assert hook["clientConfig"]["url"] == f"https://127.0.0.1:{webhook.options.port}/{name.split('.')[0]}"
        assert hook["timeoutSeconds"] <= 5
        assert hook["failurePolicy"] == ("Ignore" if name == "validate-gpusharepools.gpushare.io" else "Fail")
        assert hook["sideEffects"] == "None"
    for name, hook in hooks.items():
        if name == "validate-gpusharepools.gpushare.io":
            assert "matchConditions" not in hook  # pools are always sent
        else:
            (condition,) = hook["matchConditions"]
            assert condition["name"] == "asks-for-gpu-sharing" and "aliyun.com/gpu" in condition["expression"]
    pods = hooks["validate-pods.gpushare.io"]
    assert pods["rules"][0]["operations"] == ["CREATE"]
    excluded = pods["namespaceSelector"]["matchExpressions"][0]
    assert excluded["operator"] == "NotIn" and set(excluded["values"]) == {"kube-system", OPERATOR_NS}
    assert pods["objectSelector"]["matchExpressions"][0] == {
        "key": "gpushare.io/webhook",
        "operator": "NotIn",
        "values": ["ignore"],
    }


# --- the seed scenarios through the apiserver ------------------------------------------------------


def test_cuda_sample_is_admitted(webhook: Webhook) -> None:
    (job,) = load("job-cuda-sample.yaml")
    r = webhook.kube.create(job, webhook.namespace, dry_run=False)
    assert r.status == 201, r.message
    assert r.warnings == []
    webhook.kube.delete(job, webhook.namespace)


@pytest.mark.parametrize(
    ("example", "rule", "fix"),
    [
        pytest.param("invalid/cuda-sample-33.yaml", "GS001-core-percentage-step", "use 30 or 35", id="33"),
        pytest.param("invalid/cuda-sample-0.yaml", "GS002-core-percentage-range", "use 5", id="0"),
        pytest.param("invalid/cuda-sample-105.yaml", "GS002-core-percentage-range", "at most 100", id="105"),
        pytest.param(
            "invalid/cuda-sample-core-without-mem.yaml", "GS003-core-without-mem", "add", id="no-mem"
        ),
    ],
)
def test_invalid_cuda_samples_are_denied_with_the_rule_message(
    webhook: Webhook, example: str, rule: str, fix: str
) -> None:
    (job,) = load(example)
    before = _admission_count("Job", "denied", rule)
    r = webhook.kube.create(job, webhook.namespace, dry_run=False)
    assert r.status == 422
    name = job["metadata"]["name"]
    assert r.message.startswith('admission webhook "validate-jobs.gpushare.io" denied the request: ')
    assert f"Job/{webhook.namespace}/{name}" in r.message and rule in r.message and fix in r.message
    assert _admission_count("Job", "denied", rule) == before + 1


def test_memory_only_workloads_on_the_core_pool_are_denied_before_any_pod_exists(webhook: Webhook) -> None:
    docs = load("invalid/memory-only-on-gpu-core.yaml")
    assert [d["kind"] for d in docs] == ["Job", "Deployment", "CronJob"]
    for obj in docs:
        r = webhook.kube.create(obj, webhook.namespace, dry_run=False)
        plural = {"Job": "jobs", "Deployment": "deployments", "CronJob": "cronjobs"}[obj["kind"]]
        assert r.status == 403, (obj["kind"], r.message)
        assert f'"validate-{plural}.gpushare.io" denied' in r.message
        assert "GS009-pool-kind-mismatch" in r.message and "pool gpu-core" in r.message
    pods = webhook.kube.request("GET", f"/api/v1/namespaces/{webhook.namespace}/pods")
    assert [
        p["metadata"]["name"] for p in pods.body["items"] if p["metadata"]["name"].startswith("memory-only")
    ] == []
    for plural, prefix in (
        ("jobs", "/apis/batch/v1"),
        ("deployments", "/apis/apps/v1"),
        ("cronjobs", "/apis/batch/v1"),
    ):
        listed = webhook.kube.request("GET", f"{prefix}/namespaces/{webhook.namespace}/{plural}")
        assert [
            i["metadata"]["name"]
            for i in listed.body["items"]
            if i["metadata"]["name"].startswith("memory-only")
        ] == []


def test_gpu_pod_without_node_selector_is_denied(webhook: Webhook) -> None:
    pod = _bad_pod(webhook.namespace)
    pod["spec"] = {"containers": [{"name": "c", "image": "x", "resources": {"limits": {MEM: "3"}}}]}
    r = webhook.kube.create(pod)
    assert r.status == 403 and "GS007-pool-target-missing" in r.message


def _pod_in(
    ns: str, limits: dict[str, str], labels: dict[str, str] | None = None, **spec: Any
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": f"never-{secrets.token_hex(3)}", "namespace": ns, "labels": labels or {}}
    containers = [{"name": "c", "image": "x", "resources": {"limits": limits}}]
    body = {"nodeSelector": {"gpushare.io/pool": "cgpu"}, "containers": containers, **spec}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": body}


def test_requests_that_can_never_run_are_denied_naming_the_rule_and_the_fix(webhook: Webhook) -> None:
    """More GPUs than any node of the pool has (GS016, once the node advertises its count), a pod
    bound by hand (GS017), GPU sharing and whole GPUs in one container (GS018)."""
    ns = webhook.namespace
    node = next(n["metadata"]["name"] for n in webhook.nodes if n["metadata"]["name"].endswith("np-cgpu"))
    eight = _pod_in(ns, {MEM: "16"}, {"aliyun.com/gpu-count": "8"})
    status = {"status": {"allocatable": {"aliyun.com/gpu-count": "4", MEM: "60"}}}
    r = webhook.kube.request(
        "PATCH", f"/api/v1/nodes/{node}/status", status, content_type="application/merge-patch+json"
    )
    assert r.status == 200, r.message
    try:
        deadline = time.monotonic() + 30
        while (r := webhook.kube.create(eight)).status == 201:  # until the webhook's context has the node
            assert time.monotonic() < deadline, "the webhook never saw the node's GPU count"
            time.sleep(0.2)
        assert r.status == 403 and "GS016-gpu-count-exceeds-node" in r.message, r.message
        assert "asks for 8 GPUs of one node, but no node of pool cgpu has more than 4 GPUs" in r.message
        four = _pod_in(ns, {MEM: "16"}, {"aliyun.com/gpu-count": "4"})
        assert webhook.kube.create(four).status == 201
    finally:
        gone = {"status": {"allocatable": {"aliyun.com/gpu-count": None, MEM: None}}}
        webhook.kube.request(
            "PATCH", f"/api/v1/nodes/{node}/status", gone, content_type="application/merge-patch+json"
        )
    r = webhook.kube.create(_pod_in(ns, {MEM: "2"}, nodeName=node))
    assert r.status == 422 and "GS017-node-name-set" in r.message, r.message
    assert f"kubernetes.io/hostname: {node} to the nodeSelector" in r.message
    r = webhook.kube.create(_pod_in(ns, {MEM: "2", "nvidia.com/gpu": "1"}))
    assert r.status == 422 and "GS018-shared-and-whole-gpu" in r.message, r.message


def test_no_isolation_pod_is_admitted_with_a_warning_the_client_sees(webhook: Webhook) -> None:
    (job,) = load("job-cgpu-test-no-isolation.yaml")
    r = webhook.kube.create(job, webhook.namespace)
    assert r.status == 201, r.message
    assert len(r.warnings) == 1
    assert "GS010-no-isolation-sizing" in r.warnings[0] and "ALIYUN_COM_GPU_MEM_CONTAINER" in r.warnings[0]


def test_update_to_an_invalid_template_is_denied(webhook: Webhook) -> None:
    deployment = copy.deepcopy(load("invalid/memory-only-on-gpu-core.yaml")[1])
    deployment["metadata"]["name"] = "valid-then-invalid"
    deployment["spec"]["template"]["spec"]["nodeSelector"] = {"gpushare.io/pool": "cgpu"}
    r = webhook.kube.create(deployment, webhook.namespace, dry_run=False)
    assert r.status == 201, r.message
    path = f"/apis/apps/v1/namespaces/{webhook.namespace}/deployments/valid-then-invalid"
    patch = [
        {
            "op": "add",
            "path": "/spec/template/spec/containers/0/resources/limits/aliyun.com~1gpu-core.percentage",
            "value": "12",
        }
    ]
    r = webhook.kube.request("PATCH", path, patch, content_type="application/json-patch+json")
    assert r.status == 422 and "GS001-core-percentage-step" in r.message and "use 10 or 15" in r.message
    assert '"validate-deployments.gpushare.io" denied' in r.message
    webhook.kube.request("DELETE", path)


def test_overlapping_pool_is_denied_naming_nodes(webhook: Webhook) -> None:
    (pool,) = load("invalid/pool-overlap.yaml")
    pool["metadata"]["name"] = f"wide-{SUFFIX}"
    r = webhook.kube.create(pool)
    assert r.status == 403, r.message
    assert '"validate-gpusharepools.gpushare.io" denied' in r.message
    assert f"wh-{SUFFIX}-np-cgpu that belong to GPUSharePool cgpu" in r.message
    assert f"wh-{SUFFIX}-np-gpu-core that belong to GPUSharePool gpu-core" in r.message


def test_kube_system_and_opted_out_pods_are_never_sent(webhook: Webhook) -> None:
    before = sum(
        _admission_count("Pod", d, r)
        for d in ("allowed", "denied", "warned")
        for r in ("none", "GS001-core-percentage-step", "GS007-pool-target-missing")
    )
    r = webhook.kube.create(_bad_pod("kube-system"))
    assert r.status == 201, r.message
    r = webhook.kube.create(_bad_pod(OPERATOR_NS))
    assert r.status == 201, r.message
    opted_out = _bad_pod(webhook.namespace)
    opted_out["metadata"]["labels"] = {"gpushare.io/webhook": "ignore"}
    r = webhook.kube.create(opted_out)
    assert r.status == 201, r.message
    after = sum(
        _admission_count("Pod", d, r)
        for d in ("allowed", "denied", "warned")
        for r in ("none", "GS001-core-percentage-step", "GS007-pool-target-missing")
    )
    assert after == before


def test_non_gpu_pods_are_never_sent_but_gpu_count_labelled_ones_are(webhook: Webhook) -> None:
    before = _admission_count("Pod", "allowed", "none")
    pod = _bad_pod(webhook.namespace)
    pod["spec"] = {"containers": [{"name": "c", "image": "x", "resources": {"limits": {"cpu": "1"}}}]}
    r = webhook.kube.create(pod)
    assert r.status == 201
    assert _admission_count("Pod", "allowed", "none") == before  # matchConditions: not sent at all
    pod["metadata"]["labels"] = {"aliyun.com/gpu-count": "2"}  # ACK multi-GPU sharing: sent
    r = webhook.kube.create(pod)
    assert r.status == 201
    assert _admission_count("Pod", "allowed", "none") == before + 1


# --- malformed reviews straight to the webhook ----------------------------------------------------


def _post_webhook(webhook: Webhook, path: str, payload: bytes) -> tuple[int, Any]:
    ctx = ssl.create_default_context(cafile=str(webhook.options.cert_dir / "ca.crt"))
    req = urllib.request.Request(
        f"https://127.0.0.1:{webhook.options.port}/{path}", data=payload, method="POST",
        headers={"Content-Type": "application/json"},
    )  # fmt: skip
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, json.loads(exc.read() or b"null")


def _review(obj: Any, *, uid: str = "u-1", resource: Any = None, **extra: Any) -> dict[str, Any]:
    request: dict[str, Any] = {
        "uid": uid,
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": resource or {"group": "", "version": "v1", "resource": "pods"},
        "operation": "CREATE",
        "userInfo": {"username": "test"},
        "object": obj,
    }
    request.update(extra)
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


@pytest.mark.parametrize(
    ("payload", "status", "code"),
    [
        pytest.param(b"not json", 400, None, id="not-json"),
        pytest.param(b"[]", 400, None, id="array"),
        pytest.param(b'{"kind": "AdmissionReview"}', 400, None, id="no-request"),
        pytest.param(
            b'{"kind": "AdmissionReview", "request": {"uid": "u-1", "object": '
            + b"[" * 1300
            + b"]" * 1300
            + b"}}",
            400,
            None,
            id="nested-1300",
        ),
        pytest.param(b"{" + b'"a":{' * 80_000 + b"}" * 80_001, 400, None, id="nested-80000"),
        pytest.param(b"{" + b'"a":{' * 100_000 + b"}" * 100_001, 413, None, id="nested-100000-over-the-cap"),
        pytest.param(b'{"x": "' + b"a" * (2 * 1024 * 1024) + b'"}', 413, None, id="over-1MiB"),
        pytest.param(json.dumps(_review({}, uid="")).encode(), 400, None, id="no-uid"),
        pytest.param(json.dumps(_review("a string")).encode(), 200, 400, id="object-not-a-map"),
        pytest.param(json.dumps(_review({}, userInfo=None)).encode(), 200, 400, id="no-userinfo"),
        pytest.param(
            json.dumps(_review({}, resource={"group": "x", "version": "v1", "resource": "widgets"})).encode(),
            200,
            400,
            id="unknown-resource",
        ),
        pytest.param(
            json.dumps(
                _review(
                    {
                        "kind": "Pod",
                        "metadata": {"name": "p"},
                        "spec": {"containers": [{"name": "c", "resources": {"limits": {MEM: {"x": 1}}}}]},
                    }
                )
            ).encode(),
            200,
            422,
            id="quantity-is-a-map",
        ),
    ],
)
def test_malformed_reviews_get_4xx_never_5xx(
    webhook: Webhook, payload: bytes, status: int, code: int | None
) -> None:
    got_status, body = _post_webhook(webhook, "validate-pods", payload)
    assert got_status == status, body
    if code is not None:
        assert body["response"]["allowed"] is False
        assert body["response"]["status"]["code"] == code
        assert body["response"]["uid"] == "u-1"


# --- hypothesis: through the apiserver, the webhook agrees with `gpushare check` ------------------

LABELS = {
    "gpushare.io/pool": ["cgpu", "cgpu-no-isolation", "gpu-core", "typo"],
    "cgpu": ["true"],
    "cgpu.disable.isolation": ["true", "false"],
    "ack.node.gpu.schedule": ["cgpu", "share", "core_mem", "default"],
    "alibabacloud.com/nodepool-id": ["np-cgpu", "np-gpu-core", "np-other"],
}


@st.composite
def pods(draw: st.DrawFn) -> dict[str, Any]:
    containers = []
    for i in range(draw(st.integers(1, 2))):
        limits: dict[str, str] = {}
        if draw(st.booleans()):
            limits[MEM] = str(draw(st.integers(0, 40)))
        if draw(st.booleans()):
            limits[CORE] = str(draw(st.sampled_from([0, 5, 30, 33, 100, 105, 7])))
        if draw(st.integers(0, 5)) == 0:
            limits["nvidia.com/gpu"] = "1"
        containers.append({"name": f"c{i}", "image": "x", "resources": {"limits": limits}})
    spec: dict[str, Any] = {"containers": containers}
    selector = {k: draw(st.sampled_from(v)) for k, v in LABELS.items() if draw(st.booleans())}
    if selector:
        spec["nodeSelector"] = selector
    if draw(st.integers(0, 5)) == 0:
        spec["nodeName"] = f"wh-{SUFFIX}-np-cgpu"
    meta: dict[str, Any] = {"name": "hyp", "namespace": "x"}
    if draw(st.integers(0, 4)) == 0:
        meta["labels"] = {"aliyun.com/gpu-count": draw(st.sampled_from(["1", "2", "8"]))}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def _live_context(kube: Kube) -> tuple[list[Any], list[dict[str, Any]]]:
    """The pools and nodes the webhook sees, read from the apiserver like `kubectl get -o yaml`."""

    pools = kube.request("GET", "/apis/gpushare.io/v1alpha1/gpusharepools").body["items"]
    nodes = kube.request("GET", "/api/v1/nodes").body["items"]
    return [parse_pool(p) for p in pools], [{"kind": "Node", **n} for n in nodes]


def _sent_with_the_gate_closed(pod: dict[str, Any]) -> bool:
    """Whether the shipped matchCondition sends ``pod`` to the webhook while no NVIDIA pool exists
    (the NVIDIA gate closed, as in this module): a container names an ``aliyun.com/gpu*`` resource
    or ``nvidia.com/gpu.shared``, or the pod carries ACK's ``aliyun.com/gpu-count`` label. A pod
    asking only for ``nvidia.com/gpu`` never reaches the webhook, whatever ``check`` says of it."""
    spec = pod.get("spec") or {}
    names = {
        name
        for key in ("containers", "initContainers", "ephemeralContainers")
        for ctr in spec.get(key) or []
        for part in ("limits", "requests")
        for name in ((ctr.get("resources") or {}).get(part) or {})
    }
    labels = (pod.get("metadata") or {}).get("labels") or {}
    return (
        any(n.startswith("aliyun.com/gpu") for n in names)
        or "nvidia.com/gpu.shared" in names
        or "aliyun.com/gpu-count" in labels
    )


@given(pod=pods())
@example(  # a whole NVIDIA GPU aimed at an ACK pool: check denies it (GS009), the closed gate never sends it
    pod={
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "hyp"},
        "spec": {
            "containers": [{"name": "c0", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
            "nodeSelector": {"alibabacloud.com/nodepool-id": "np-cgpu"},
        },
    }
)  # fmt: skip
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_random_pods_webhook_agrees_with_check(webhook: Webhook, pod: dict[str, Any]) -> None:
    pod = copy.deepcopy(pod)
    pod["metadata"]["namespace"] = webhook.namespace
    ctx = build_context([], *_live_context(webhook.kube))
    findings = check_objects([pod], ctx)
    r = webhook.kube.create(pod)
    assert r.status < 500, r.message
    if not _sent_with_the_gate_closed(pod):  # the apiserver never asked the webhook
        assert r.status == 201 and not r.warnings, (r.status, r.message, findings)
        return
    if is_denied(findings):
        assert r.status in (403, 422), (r.status, r.message, findings)
        missing = [f.message for f in findings if f.verdict == "deny" and f.message not in r.message]
        assert not missing, (r.message, missing)
    else:
        assert r.status == 201, (r.message, findings)
        assert sorted(r.warnings) == sorted(f.message for f in findings if f.verdict == "warn")


# --- certificates: two replicas, renewal -----------------------------------------------------------


async def test_two_replicas_agree_on_secret_and_ca_bundle(cluster: ClusterInfo, webhook: Webhook) -> None:
    api = await make_api_client(str(cluster.kubeconfig))
    async with api:
        sans = certs.serving_sans(webhook.options.webhook_settings(None), ["127.0.0.1"])
        ns = f"{OPERATOR_NS}"
        name = f"race-{secrets.token_hex(3)}"
        a, b = await asyncio.gather(
            lifecycle.ensure_certificates(api, ns, name, sans),
            lifecycle.ensure_certificates(api, ns, name, sans),
        )
        assert a[0] == b[0]  # both replicas end with the one Secret's bundle
        assert [a[1] is not None, b[1] is not None].count(True) == 1  # exactly one wrote it
        settings_ = webhook.options.webhook_settings(webhook_ca_bundle(webhook))
        results = await asyncio.gather(
            lifecycle.ensure_configuration(api, settings_), lifecycle.ensure_configuration(api, settings_)
        )
        # The running webhook already wrote the same. (gather returns a list; typeshed says a tuple.)
        assert cast(list[str], results) == ["unchanged", "unchanged"]


def webhook_ca_bundle(webhook: Webhook) -> str:
    secret = webhook.kube.request("GET", f"/api/v1/namespaces/{OPERATOR_NS}/secrets/{SECRET}")
    return str(secret.body["data"]["ca-bundle.crt"])


def _served_cert(port: int) -> bytes:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock, ctx.wrap_socket(sock) as tls:
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return der


def test_expiring_certificate_is_renewed_and_served(webhook: Webhook) -> None:
    path = f"/api/v1/namespaces/{OPERATOR_NS}/secrets/{SECRET}"
    secret = webhook.kube.request("GET", path).body
    old = certs.bundle_from_secret_data(secret["data"])
    assert old is not None
    now = certs.utcnow()
    expiring = certs.renew(old, ["127.0.0.1", "localhost"], now, validity=certs.RENEW_BEFORE / 2)
    assert expiring.ca_cert == old.ca_cert  # same CA: caBundle must not change
    secret["data"] = certs.secret_data(expiring)
    assert webhook.kube.request("PUT", path, secret).status == 200
    deadline = time.monotonic() + 60
    while True:
        current = certs.bundle_from_secret_data(webhook.kube.request("GET", path).body["data"])
        assert current is not None
        fresh = x509.load_pem_x509_certificate(current.cert)
        try:
            served = x509.load_der_x509_certificate(_served_cert(webhook.options.port))
        except OSError:  # the server is restarting with the renewed certificate
            served = None
        if current.cert != expiring.cert and served == fresh:
            break
        assert time.monotonic() < deadline, "the operator did not renew and serve the certificate"
        time.sleep(0.5)
    assert fresh.not_valid_after_utc - now > certs.RENEW_BEFORE
    assert current.ca_cert == old.ca_cert
    assert base64.b64decode(webhook_ca_bundle(webhook)) == old.ca_cert
    r = webhook.kube.create(_bad_pod(webhook.namespace))  # still answering over TLS
    assert r.status == 422 and "GS001" in r.message


# --- kubectl, the real client ----------------------------------------------------------------------


def _kubectl(cluster: ClusterInfo, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("kubectl")
    assert exe is not None, "kubectl is not installed"
    return subprocess.run(
        [exe, "--kubeconfig", str(cluster.kubeconfig), *args],
        input=stdin, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def test_kubectl_apply_prints_the_warning_and_the_denial(cluster: ClusterInfo, webhook: Webhook) -> None:
    def text(name: str) -> str:
        return (EX / name).read_text().replace("namespace: default", f"namespace: {webhook.namespace}")

    ok = _kubectl(
        cluster, "apply", "--dry-run=server", "-f", "-", stdin=text("job-cgpu-test-no-isolation.yaml")
    )
    assert ok.returncode == 0, ok.stderr
    assert "Warning: " in ok.stderr and "GS010-no-isolation-sizing" in ok.stderr
    bad = _kubectl(cluster, "apply", "-f", "-", stdin=text("invalid/cuda-sample-33.yaml"))
    assert bad.returncode == 1
    assert 'admission webhook "validate-jobs.gpushare.io" denied the request' in bad.stderr
    assert "GS001-core-percentage-step" in bad.stderr and "use 30 or 35" in bad.stderr


# --- the shipped (Service-mode) configuration: only caBundle is ours -------------------------------


async def test_service_mode_patches_only_the_ca_bundle(cluster: ClusterInfo, webhook: Webhook) -> None:
    name = f"gpushare-shipped-{SUFFIX}"
    settings_ = webhook.options.webhook_settings(None)
    shipped = WebhookSettings(name=name, namespace=OPERATOR_NS, failure_policy="Ignore", timeout_seconds=1)
    body = build_configuration(shipped)
    for hook in body["webhooks"]:  # an administrator's edits, and never called during this test
        hook["objectSelector"] = {"matchLabels": {"never-present": f"x-{SUFFIX}"}}
        hook["timeoutSeconds"] = 2
    api = await make_api_client(str(cluster.kubeconfig))
    async with api:
        adm = client.AdmissionregistrationV1Api(api)
        await adm.create_validating_webhook_configuration(body)  # type: ignore[arg-type]
        try:
            bundle = webhook_ca_bundle(webhook)
            replica = WebhookSettings(name=name, namespace=OPERATOR_NS, ca_bundle=bundle)
            assert settings_.url_base is not None  # the module's webhook runs in local mode
            first, second = await asyncio.gather(
                lifecycle.ensure_configuration(api, replica), lifecycle.ensure_configuration(api, replica)
            )
            assert sorted([first, second]) == ["patched", "unchanged"]
            current = api.sanitize_for_serialization(await adm.read_validating_webhook_configuration(name))
            version = current["metadata"]["resourceVersion"]
            for hook in current["webhooks"]:
                assert hook["clientConfig"]["caBundle"] == bundle
                assert hook["clientConfig"]["service"]["namespace"] == OPERATOR_NS
                assert hook["timeoutSeconds"] == 2 and hook["failurePolicy"] == "Ignore"
                assert hook["objectSelector"] == {"matchLabels": {"never-present": f"x-{SUFFIX}"}}
            assert await lifecycle.ensure_configuration(api, replica) == "unchanged"
            again = await adm.read_validating_webhook_configuration(name)
            assert again.metadata.resource_version == version  # no fight: nothing written
        finally:
            await webhook_api.delete_configuration(api, name)


def test_local_mode_restores_match_conditions_removed_from_an_entry(webhook: Webhook) -> None:
    """An older configuration without matchConditions is brought up to date by the operator's
    periodic check (every second in this module)."""
    path = f"/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/{CONFIG_NAME}"
    current = webhook.kube.request("GET", path).body
    index = next(i for i, h in enumerate(current["webhooks"]) if h["name"] == "validate-jobs.gpushare.io")
    patch = [{"op": "remove", "path": f"/webhooks/{index}/matchConditions"}]
    assert (
        webhook.kube.request("PATCH", path, patch, content_type="application/json-patch+json").status == 200
    )
    deadline = time.monotonic() + 60
    while "matchConditions" not in (hook := webhook.kube.request("GET", path).body["webhooks"][index]):
        assert time.monotonic() < deadline, "the operator did not restore the matchConditions"
        time.sleep(0.5)
    assert hook["matchConditions"][0]["name"] == "asks-for-gpu-sharing"


# --- workload kinds beyond the built-ins (minimal Kubeflow, KubeRay and Argo CRDs) ------------------


@pytest.mark.parametrize(
    "example",
    ["workloads/pytorchjob.yaml", "workloads/raycluster.yaml", "workloads/workflow.yaml"],
)
def test_valid_ml_workloads_are_admitted(webhook: Webhook, example: str) -> None:
    (obj,) = load(example)
    r = webhook.kube.create(obj, webhook.namespace, dry_run=False)
    assert r.status == 201, r.message
    assert r.warnings == []
    webhook.kube.delete(obj, webhook.namespace)


@pytest.mark.parametrize(
    ("example", "hook", "code", "rule", "where"),
    [
        pytest.param(
            "invalid/workloads/pytorchjob-33.yaml",
            "validate-pytorchjobs-kubeflow-org",
            422,
            "GS001-core-percentage-step",
            'spec.pytorchReplicaSpecs.Worker.template.spec container "pytorch"',
            id="pytorchjob-33",
        ),
        pytest.param(
            "invalid/workloads/raycluster-no-selector.yaml",
            "validate-rayclusters-ray-io",
            403,
            "GS007-pool-target-missing",
            "spec.workerGroupSpecs[0].template.spec.nodeSelector is missing",
            id="raycluster-no-selector",
        ),
        pytest.param(
            "invalid/workloads/workflow-120.yaml",
            "validate-workflows-argoproj-io",
            422,
            "GS002-core-percentage-range",
            'spec.templates[1] container "main"',
            id="workflow-120",
        ),
    ],
)
def test_invalid_ml_workloads_are_denied_at_apply(
    cluster: ClusterInfo, webhook: Webhook, example: str, hook: str, code: int, rule: str, where: str
) -> None:
    (obj,) = load(example)
    kind = obj["kind"]
    before = _admission_count(kind, "denied", rule)
    r = webhook.kube.create(obj, webhook.namespace, dry_run=False)
    assert r.status == code, r.message
    assert rule in r.message and where in r.message
    assert f"{kind}/{webhook.namespace}/{obj['metadata']['name']}" in r.message
    assert _admission_count(kind, "denied", rule) == before + 1
    gone = webhook.kube.request("GET", f"{collection_path(obj, webhook.namespace)}/{obj['metadata']['name']}")
    assert gone.status == 404  # nothing was stored
    text = (EX / example).read_text().replace("namespace: default", f"namespace: {webhook.namespace}")
    applied = _kubectl(cluster, "apply", "-f", "-", stdin=text)
    assert applied.returncode == 1
    assert f'admission webhook "{hook}.gpushare.io" denied the request' in applied.stderr
    assert rule in applied.stderr


def test_update_of_a_workflow_to_an_invalid_template_is_denied(webhook: Webhook) -> None:
    (wf,) = load("workloads/workflow.yaml")
    created = webhook.kube.create(wf, webhook.namespace, dry_run=False)
    assert created.status == 201, created.message
    try:
        bad = copy.deepcopy(created.body)
        bad["spec"]["templates"][1]["container"]["resources"]["limits"][CORE] = 33
        path = f"{collection_path(wf, webhook.namespace)}/{wf['metadata']['name']}"
        r = webhook.kube.request("PUT", path, bad)
        assert r.status == 422 and "GS001-core-percentage-step" in r.message, r.message
    finally:
        webhook.kube.delete(wf, webhook.namespace)


WORKLOAD_SELECTORS = [None, {"gpushare.io/pool": "gpu-core"}, {"gpushare.io/pool": "cgpu"}, {"cgpu": "true"}]


@st.composite
def workloads(draw: st.DrawFn) -> dict[str, Any]:
    """A PyTorchJob, RayCluster or Workflow whose GPU container is drawn like the pods above."""
    limits: dict[str, str] = {}
    if draw(st.booleans()):
        limits[MEM] = str(draw(st.integers(0, 20)))
    if draw(st.booleans()):
        limits[CORE] = str(draw(st.sampled_from([0, 5, 30, 33, 105])))
    if draw(st.booleans()):
        limits["aliyun.com/gpu-core"] = "50"
    selector = draw(st.sampled_from(WORKLOAD_SELECTORS))
    container = {"name": "c", "image": "x", "resources": {"limits": limits}}
    spec: dict[str, Any] = {"containers": [container]}
    if selector:
        spec["nodeSelector"] = selector
    kind = draw(st.sampled_from(["PyTorchJob", "RayCluster", "Workflow"]))
    meta = {"name": f"hyp-{kind.lower()}"}
    if kind == "PyTorchJob":
        body: dict[str, Any] = {
            "pytorchReplicaSpecs": {"Worker": {"replicas": 1, "template": {"spec": spec}}}
        }
        return {"apiVersion": "kubeflow.org/v1", "kind": kind, "metadata": meta, "spec": body}
    if kind == "RayCluster":
        head = {"template": {"spec": {"containers": [{"name": "head", "image": "x"}]}}}
        body = {"headGroupSpec": head, "workerGroupSpecs": [{"groupName": "g", "template": {"spec": spec}}]}
        return {"apiVersion": "ray.io/v1", "kind": kind, "metadata": meta, "spec": body}
    template: dict[str, Any] = {"name": "main", "container": container}
    body = {"entrypoint": "main", "templates": [template]}
    if selector:
        body["nodeSelector"] = selector  # the workflow-level selector
    return {"apiVersion": "argoproj.io/v1alpha1", "kind": kind, "metadata": meta, "spec": body}


@given(obj=workloads())
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_random_workloads_webhook_agrees_with_check(webhook: Webhook, obj: dict[str, Any]) -> None:
    obj = copy.deepcopy(obj)
    obj["metadata"]["namespace"] = webhook.namespace
    ctx = build_context([], *_live_context(webhook.kube))
    findings = check_objects([obj], ctx)
    r = webhook.kube.create(obj)
    assert r.status < 500, r.message
    if is_denied(findings):
        assert r.status in (403, 422), (r.status, r.message, findings)
        missing = [f.message for f in findings if f.verdict == "deny" and f.message not in r.message]
        assert not missing, (r.message, missing)
    else:
        assert r.status == 201, (r.message, findings)
        assert sorted(r.warnings) == sorted(f.message for f in findings if f.verdict == "warn")


def test_a_crd_installed_while_the_operator_runs_is_checked_without_a_restart(webhook: Webhook) -> None:
    """Kopf watches CRDs (RBAC: list/watch customresourcedefinitions) and serves the new resource."""
    (pytorch_crd, *_) = yaml.safe_load_all(WORKLOAD_CRDS.read_text())
    crd = copy.deepcopy(pytorch_crd)
    crd["metadata"]["name"] = "tfjobs.kubeflow.org"
    crd["spec"]["names"] = {"kind": "TFJob", "listKind": "TFJobList", "plural": "tfjobs", "singular": "tfjob"}
    install_workload_crds(webhook.kube, [crd])
    try:
        (bad,) = load("invalid/workloads/tfjob-typo.yaml")
        deadline = time.monotonic() + 60
        while True:
            r = webhook.kube.create(bad, webhook.namespace)
            if r.status == 422 and "GS012-unknown-gpu-resource" in r.message:  # 404 until Kopf rescans
                break
            assert time.monotonic() < deadline, f"TFJob never checked: {r.status} {r.message}"
            time.sleep(0.5)
        assert 'did you mean "aliyun.com/gpu-core.percentage"?' in r.message
        (good,) = load("workloads/tfjob.yaml")
        assert webhook.kube.create(good, webhook.namespace).status == 201
    finally:
        webhook.kube.request(
            "DELETE", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/tfjobs.kubeflow.org"
        )


def test_nvidia_requests_are_judged_against_nvidia_pools(webhook: Webhook) -> None:
    """An MPS pool (NVIDIA's device plugin): more than one shared GPU aimed at it is denied (GS019),
    nvidia.com/gpu aimed at an ACK pool and ACK sharing aimed at the MPS pool are kind mismatches
    (GS009), and whole GPUs aimed at no pool are admitted (never sent).

    No operator runs in this module: the test opens the NVIDIA gate as the operator does while an
    NVIDIA pool exists (``ensure_nvidia_gate``; tests/integration/test_nvidia_gate.py runs the
    operator), and this module's local-mode webhook, which brings its entries up to date every
    second, keeps it open."""
    name = f"mps-{SUFFIX}"
    pool: dict[str, Any] = {
        "apiVersion": "gpushare.io/v1alpha1",
        "kind": "GPUSharePool",
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": {"matchLabels": {"alibabacloud.com/nodepool-id": f"np-mps-{SUFFIX}"}},
            "nvidia": {"strategy": "MPS", "replicas": 2},
        },
    }
    r = webhook.kube.create(pool, dry_run=False)
    assert r.status == 201, r.body
    assert asyncio.run(_nvidia_gate(webhook, True)) == "opened"
    try:
        two = _pod_in(webhook.namespace, {"nvidia.com/gpu": "2"}, nodeSelector={"gpushare.io/pool": name})
        deadline = time.monotonic() + 60
        while (r := webhook.kube.create(two)).status != 403:  # until the webhook's index has the pool
            assert time.monotonic() < deadline, (r.status, r.message)
            time.sleep(0.5)
        assert "GS019-nvidia-more-than-one-shared-gpu" in r.message and f"pool {name}" in r.message
        assert 'resources.limits["nvidia.com/gpu"]=2' in r.message and "MPS" in r.message
        one = _pod_in(webhook.namespace, {"nvidia.com/gpu": "1"}, nodeSelector={"gpushare.io/pool": name})
        assert (r := webhook.kube.create(one)).status == 201, r.message
        on_ack = _pod_in(webhook.namespace, {"nvidia.com/gpu": "1"})  # gpushare.io/pool: cgpu
        r = webhook.kube.create(on_ack)
        assert r.status == 403 and "GS009-pool-kind-mismatch" in r.message and "pool cgpu" in r.message
        ack = _pod_in(webhook.namespace, {MEM: "2"}, nodeSelector={"gpushare.io/pool": name})
        r = webhook.kube.create(ack)
        assert r.status == 403 and "GS009-pool-kind-mismatch" in r.message, r.message
        whole = _pod_in(webhook.namespace, {"nvidia.com/gpu": "4"})
        del whole["spec"]["nodeSelector"]
        assert (r := webhook.kube.create(whole)).status == 201, r.message
        # The local-mode webhook replaces an entry it finds out of date, and leaves the gate open.
        path = f"/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/{CONFIG_NAME}"
        hooks = webhook.kube.request("GET", path).body["webhooks"]
        jobs = next(i for i, h in enumerate(hooks) if h["name"] == "validate-jobs.gpushare.io")
        pods = next(i for i, h in enumerate(hooks) if h["name"] == "validate-pods.gpushare.io")
        patch = [{"op": "remove", "path": f"/webhooks/{jobs}/matchConditions"}]
        r = webhook.kube.request("PATCH", path, patch, content_type="application/json-patch+json")
        assert r.status == 200, r.message
        deadline = time.monotonic() + 60
        while "matchConditions" not in (hooks := webhook.kube.request("GET", path).body["webhooks"])[jobs]:
            assert time.monotonic() < deadline, "the webhook did not restore the matchConditions"
            time.sleep(0.5)
        assert gate_of(hooks[pods], TARGETS_BY_ID["validate-pods"]) is True
        r = webhook.kube.create(two)
        assert r.status == 403 and "GS019-nvidia-more-than-one-shared-gpu" in r.message, r.message
    finally:
        webhook.kube.delete(pool)
        assert asyncio.run(_nvidia_gate(webhook, False)) == "closed"


def _pytorchjob(ns: str, limits: dict[str, Any], selector: dict[str, str]) -> dict[str, Any]:
    spec = {
        "nodeSelector": selector,
        "containers": [{"name": "c", "image": "x", "resources": {"limits": limits}}],
    }
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": f"nv-{secrets.token_hex(3)}", "namespace": ns},
        "spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 1, "template": {"spec": spec}}}},
    }


def test_nvidia_classes_are_judged_by_the_webhook_as_check_judges_them(webhook: Webhook) -> None:
    """The NVIDIA classes on the real apiserver, the webhook against ``check`` with the same live
    pools and nodes: what no node of the target can hold (GS021: a node of 2 GPUs in a pool of 4
    time-sliced replicas offers 8; the scheduler's NodeResourcesFit filter would leave 9 Pending),
    one targeting (GS009: ACK's resources aimed at the NVIDIA pool by its nodes' own label), and
    Kubernetes' quantity rules on a custom kind, whose pod templates no apiserver validation reads
    (GS020; tests/integration/test_admission_policy.py holds the policy to the same). MIG pools
    (2 GPUs per node): a profile the mixed pool's geometry does not declare, or any profile on the
    single pool (GS022), a whole GPU on the mixed pool, whose every GPU is MIG-enabled (GS023),
    more slices than a node has (GS021: 1 x 3g.20gb per GPU x 2 GPUs; 7 x 1g.5gb x 2 as
    nvidia.com/gpu under single), a profile aimed at the time-slicing pool (GS009). The policy
    holds none of these (they read the pool's geometry). Each object is denied by both with the
    same messages, or admitted by both."""
    ns = webhook.namespace
    np = f"np-ts-{SUFFIX}"
    name = f"ts-{SUFFIX}"
    pool: dict[str, Any] = {
        "apiVersion": "gpushare.io/v1alpha1",
        "kind": "GPUSharePool",
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": {"matchLabels": {"alibabacloud.com/nodepool-id": np}},
            "nvidia": {"strategy": "TimeSlicing", "replicas": 4, "failRequestsGreaterThanOne": False},
        },
    }
    migs = {
        "mixed": {"geometry": [{"profiles": {"3g.20gb": 1, "1g.5gb": 2}}]},
        "single": {"strategy": "single", "geometry": [{"profiles": {"1g.5gb": 7}}]},
    }
    pools = [pool] + [
        {
            "apiVersion": "gpushare.io/v1alpha1",
            "kind": "GPUSharePool",
            "metadata": {"name": f"mig-{kind}-{SUFFIX}"},
            "spec": {
                "nodeSelector": {"matchLabels": {"alibabacloud.com/nodepool-id": f"np-mig-{kind}-{SUFFIX}"}},
                "nvidia": {"strategy": "MIG", "mig": mig},
            },
        }
        for kind, mig in migs.items()
    ]
    nodes = [_node(f"wh-{SUFFIX}-{n}", n) for n in (np, f"np-mig-mixed-{SUFFIX}", f"np-mig-single-{SUFFIX}")]
    for n in nodes:
        n["metadata"]["labels"]["nvidia.com/gpu.count"] = "2"  # GPU Feature Discovery's count
    for obj in (*pools, *nodes):
        assert (r := webhook.kube.create(obj, dry_run=False)).status == 201, r.body
    sel = {"alibabacloud.com/nodepool-id": np}
    mixed, single = ({"gpushare.io/pool": f"mig-{kind}-{SUFFIX}"} for kind in migs)
    m1, m3, m7 = (f"nvidia.com/mig-{p}" for p in ("1g.5gb", "3g.20gb", "7g.40gb"))
    cases: list[tuple[dict[str, Any], str | None]] = [
        (_pod_in(ns, {"nvidia.com/gpu": "9"}, nodeSelector=sel), "GS021-nvidia-request-exceeds-node"),
        # a resource the pool's settings cannot advertise (no renameByDefault: nvidia.com/gpu only)
        (_pod_in(ns, {"nvidia.com/gpu.shared": "1"}, nodeSelector=sel), "GS009-pool-kind-mismatch"),
        (_pytorchjob(ns, {"nvidia.com/gpu": "9"}, sel), "GS021-nvidia-request-exceeds-node"),
        (_pod_in(ns, {MEM: "2"}, nodeSelector=sel), "GS009-pool-kind-mismatch"),
        (_pytorchjob(ns, {"nvidia.com/gpu": "1.5"}, sel), "GS020-nvidia-resource-quantity"),
        (_pytorchjob(ns, {"nvidia.com/gpu": -1}, sel), "GS020-nvidia-resource-quantity"),
        (_pod_in(ns, {"nvidia.com/gpu": "8"}, nodeSelector=sel), None),
        (_pytorchjob(ns, {"nvidia.com/gpu": "8"}, sel), None),
        (_pod_in(ns, {m3: "1"}, nodeSelector=sel), "GS009-pool-kind-mismatch"),
        (_pod_in(ns, {m7: "1"}, nodeSelector=mixed), "GS022-nvidia-mig-profile-not-offered"),
        (_pytorchjob(ns, {m7: "1"}, mixed), "GS022-nvidia-mig-profile-not-offered"),
        (_pod_in(ns, {m1: "1"}, nodeSelector=single), "GS022-nvidia-mig-profile-not-offered"),
        (_pod_in(ns, {"nvidia.com/gpu": "1"}, nodeSelector=mixed), "GS023-nvidia-whole-gpu-on-mig"),
        (_pod_in(ns, {m3: "3"}, nodeSelector=mixed), "GS021-nvidia-request-exceeds-node"),
        (_pod_in(ns, {"nvidia.com/gpu": "15"}, nodeSelector=single), "GS021-nvidia-request-exceeds-node"),
        (_pod_in(ns, {m3: "2", m1: "4"}, nodeSelector=mixed), None),
        (_pod_in(ns, {"nvidia.com/gpu": "14"}, nodeSelector=single), None),
    ]
    assert asyncio.run(_nvidia_gate(webhook, True)) == "opened"
    try:
        deadline = time.monotonic() + 60
        for first in (cases[0][0], cases[-4][0], cases[-3][0]):  # until the webhook's index has them all
            while (r := webhook.kube.create(first)).status != 403:
                assert time.monotonic() < deadline, (r.status, r.message)
                time.sleep(0.5)
        ctx = build_context([], *_live_context(webhook.kube))
        for obj, rule in cases:
            findings = check_objects([obj], ctx)
            denied = [f for f in findings if f.verdict == "deny"]
            assert [f.rule_id for f in denied] == ([rule] if rule else []), (
                obj,
                [f.message for f in findings],
            )
            r = webhook.kube.create(obj)
            if rule is None:
                assert r.status == 201, (obj, r.status, r.message)
                continue
            assert r.status in (403, 422) and "admission webhook" in r.message, (obj, r.status, r.message)
            assert all(f.message in r.message for f in denied), (r.message, [f.message for f in denied])
    finally:
        for obj in (*pools, *nodes):
            webhook.kube.delete(obj)
        assert asyncio.run(_nvidia_gate(webhook, False)) == "closed"


async def _nvidia_gate(webhook: Webhook, open_: bool) -> str:
    async with await make_api_client(webhook.options.kubeconfig) as api:
        return (await ensure_nvidia_gate(api, CONFIG_NAME, open_, TARGETS)).result
