"""With the gpushare webhook down: the ValidatingAdmissionPolicy and the matchConditions, for real.

No webhook server runs in this module. The shipped ValidatingAdmissionPolicy (``build_policy``,
the source of manifests/webhook/policy.yaml) is installed in the real kube-apiserver; where a test
needs it, a ValidatingWebhookConfiguration built like the shipped one points at a closed port, as
after the operator was stopped. Then:

* objects that do not ask for GPU sharing never reach the webhook (matchConditions): a Deployment
  and a Pod are admitted;
* the stateless rules still deny, inside the apiserver, with the rule id and the fix;
* GPU objects that need the stateful rules follow ``failurePolicy``: ``Fail`` refuses them naming
  the gpushare webhook, ``Ignore`` admits them;
* hypothesis-generated Pods, Deployments, Jobs and CronJobs get the same verdict and rule id from
  the policy as from the Python rules engine (``gpushare check``'s engine), for every stateless rule.
* a quantity is judged as the apiserver stores it: the canonical form gpushare computes is the one
  the apiserver returns, for hypothesis-generated spellings (exponents, suffixes, decimals);
* kinds of the workload-kinds table beyond the built-ins (PyTorchJob, Argo Workflow, RayCluster on
  minimal CRDs) are covered by the same policy, with the engine's message.
"""

from __future__ import annotations

import copy
import re
import secrets
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpushare.admission import EMPTY_CONTEXT, evaluate
from gpushare.admission.gate import gate_patch
from gpushare.admission.vap import POLICY_RULES, build_binding, build_policies, pod_policy_name
from gpushare.admission.webhook_config import TARGETS, WebhookSettings, build_configuration
from gpushare.api.quantity import parse_quantity
from gpushare.devcluster import ClusterInfo
from gpushare.rulekit.cel import kind_paths
from gpushare.rulekit.kinds import PodSource, WorkloadKind, table_with
from support.kube import ADM, CRDS, Kube, Response

MEM = "aliyun.com/gpu-mem"
CORE = "aliyun.com/gpu-core.percentage"
NVG = "nvidia.com/gpu"
NVS = "nvidia.com/gpu.shared"
#: A MIG device (the device plugin's mixed strategy): an nvidia.com/* quantity as any other (GS020).
MIG = "nvidia.com/mig-1g.5gb"
QUANTITY = "GS020-nvidia-resource-quantity"
SUFFIX = secrets.token_hex(3)
OPERATOR_NS = f"gpushare-system-vap-{SUFFIX}"
USER_NS = f"vap-{SUFFIX}"
POLICY = f"gpushare-stateless-rules-{SUFFIX}.gpushare.io"
#: The shipped pair: the Pods policy and the workload kinds' (``build_policies``).
POLICIES = (pod_policy_name(POLICY), POLICY)
WEBHOOKS = f"gpushare-webhook-down-{SUFFIX}"
RULE_ID = re.compile(r"\(rule (G[SP]\d{3}-[a-z0-9-]+)\)")
DID_YOU_MEAN = re.compile(r'did you mean "[^"]*"\? ')
REPO = Path(__file__).resolve().parents[2]
#: The minimal schema-less CRDs of tests/integration/test_webhook.py (PyTorchJob, RayCluster, Workflow).
WORKLOAD_CRDS = Path(__file__).parent / "crds" / "workload-kinds.yaml"

# A custom resource of the shape of Kubeflow's training jobs (written here): pod templates in a map
# of replica specs, values stored as written (no apiserver validation of resources), so the
# policy's GS004/GS006/malformed-value CEL and its wildcard paths meet raw ints, floats, strings.
TRAIN_PATH = "spec.replicaSpecs.*.template.spec"
TRAIN_WORKLOAD = WorkloadKind(
    "GPUTrainJob", "test.gpushare.io", ("v1",), "gputrainjobs", (PodSource(TRAIN_PATH),)
)
TRAIN_TABLE = table_with([TRAIN_WORKLOAD])  # the engine learns the kind from the same table entry
_train_paths = kind_paths(TRAIN_WORKLOAD)
assert _train_paths is not None
TRAIN_KIND = (_train_paths, ("CREATE", "UPDATE"), ("v1",))
TRAIN_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "gputrainjobs.test.gpushare.io"},
    "spec": {
        "group": "test.gpushare.io",
        "scope": "Namespaced",
        "names": {"plural": "gputrainjobs", "singular": "gputrainjob", "kind": "GPUTrainJob"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
                        },
                    }
                },
            }
        ],
    },
}


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port  # closed again when the socket is: nothing listens there


def container(name: str, limits: dict[str, Any], requests: dict[str, Any] | None = None) -> dict[str, Any]:
    resources: dict[str, Any] = {"limits": limits}
    if requests:
        resources["requests"] = requests
    return {"name": name, "image": "registry.invalid/app:1", "resources": resources}


def pod(name: str, containers: list[dict[str, Any]], ns: str = USER_NS, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"containers": containers, **spec},
    }


def wrap(kind: str, p: dict[str, Any]) -> dict[str, Any]:
    """The pod as the template of a Deployment, Job or CronJob."""
    if kind == "Pod":
        return p
    labels = {"app": p["metadata"]["name"]}
    template = {"metadata": {"labels": labels}, "spec": p["spec"]}
    meta = p["metadata"]
    if kind == "Deployment":
        spec: dict[str, Any] = {"selector": {"matchLabels": labels}, "template": template}
        return {"apiVersion": "apps/v1", "kind": kind, "metadata": meta, "spec": spec}
    template["spec"] = {**p["spec"], "restartPolicy": "Never"}
    job = {"template": template}
    if kind == "Job":
        return {"apiVersion": "batch/v1", "kind": kind, "metadata": meta, "spec": job}
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": meta,
        "spec": {"schedule": "*/5 * * * *", "jobTemplate": {"spec": job}},
    }


@dataclass
class Env:
    kube: Kube
    settings: WebhookSettings


def _denied_by_policy(r: Response) -> bool:
    return r.status in (400, 403, 422) and any(
        f"ValidatingAdmissionPolicy '{p}'" in r.message for p in POLICIES
    )


@pytest.fixture(scope="module")
def env(cluster: ClusterInfo) -> Iterator[Env]:
    kube = Kube(cluster)
    for ns in (OPERATOR_NS, USER_NS):
        r = kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}, dry_run=False)
        assert r.status == 201, r.body
    r = kube.create(TRAIN_CRD, dry_run=False)
    assert r.status in (201, 409), r.body
    deadline = time.monotonic() + 60
    while kube.request("GET", "/apis/test.gpushare.io/v1/gputrainjobs").status != 200:
        assert time.monotonic() < deadline, "the test CRD was never served"
        time.sleep(0.5)
    settings_ = WebhookSettings(
        name=WEBHOOKS, namespace=OPERATOR_NS, url_base=f"https://127.0.0.1:{closed_port()}"
    )
    for policy in build_policies(settings_, name=POLICY, extra_kinds=(TRAIN_KIND,)):
        for obj in (policy, build_binding(policy["metadata"]["name"])):
            r = kube.create(obj, dry_run=False)
            assert r.status == 201, r.body
    probe = pod("probe", [container("c", {MEM: "2", CORE: "33"})])
    probes = (probe, wrap("Deployment", probe))
    try:
        deadline = time.monotonic() + 60
        for obj in probes:  # until the apiserver has loaded both policies and their bindings
            while True:
                r = kube.create(obj)
                if _denied_by_policy(r):
                    break
                assert time.monotonic() < deadline, f"the policy never denied: {r.status} {r.message}"
                time.sleep(0.5)
        yield Env(kube, settings_)
    finally:
        for name in POLICIES:
            kube.request("DELETE", f"{ADM}/validatingadmissionpolicybindings/{name}")
            kube.request("DELETE", f"{ADM}/validatingadmissionpolicies/{name}")
        deadline = time.monotonic() + 60
        for obj in probes:
            while _denied_by_policy(kube.create(obj)) and time.monotonic() < deadline:
                time.sleep(0.5)  # the apiserver has forgotten the policies: later modules start clean
        for ns in (OPERATOR_NS, USER_NS):
            kube.request("DELETE", f"/api/v1/namespaces/{ns}")
        kube.request(
            "DELETE",
            f"{CRDS}/customresourcedefinitions/gputrainjobs.test.gpushare.io",
        )


@pytest.fixture
def dead_webhook(env: Env) -> Iterator[WebhookSettings]:
    """The shipped webhook configuration, pointing at a port nothing listens on (operator stopped)."""
    r = env.kube.create(build_configuration(env.settings), dry_run=False)
    assert r.status == 201, r.body
    try:
        deadline = time.monotonic() + 60
        probe = pod("probe-ok", [container("c", {MEM: "2", CORE: "30"})])
        while True:  # until the apiserver calls (and fails to reach) the webhook
            r = env.kube.create(probe)
            if r.status >= 500 and "gpushare.io" in r.message:
                break
            assert time.monotonic() < deadline, (
                f"the webhook configuration never applied: {r.status} {r.message}"
            )
            time.sleep(0.5)
        yield env.settings
    finally:
        env.kube.request("DELETE", f"{ADM}/validatingwebhookconfigurations/{WEBHOOKS}")


def test_the_policies_pass_over_opted_out_objects_and_excluded_namespaces_as_the_webhook_does(
    env: Env,
) -> None:
    """The webhook's namespaceSelector and objectSelector, as the policies' matchConditions: an
    object labelled ``gpushare.io/webhook: ignore``, or in an excluded namespace, is not judged;
    an UPDATE is judged unless both its old and its new object carry the label (the apiserver's
    objectSelector)."""
    for kind in ("Pod", "Deployment", "CronJob"):
        bad = wrap(kind, pod("opt-33", [container("cuda", {MEM: "2", CORE: "33"})]))
        assert _denied_by_policy(r := env.kube.create(bad)), (kind, r.status, r.message)
        opted_out = copy.deepcopy(bad)
        opted_out["metadata"]["labels"] = {"gpushare.io/webhook": "ignore"}
        assert (r := env.kube.create(opted_out)).status == 201, (kind, r.message)
        elsewhere = copy.deepcopy(bad)
        elsewhere["metadata"]["namespace"] = OPERATOR_NS
        assert (r := env.kube.create(elsewhere)).status == 201, (kind, r.message)
        other_label = copy.deepcopy(bad)
        other_label["metadata"]["labels"] = {"gpushare.io/webhook": "check"}
        assert _denied_by_policy(r := env.kube.create(other_label)), (kind, r.message)

    def put(path: str, edit: Callable[[dict[str, Any]], None], **params: str) -> Response:
        """GET, ``edit``, PUT: again when the deployment controller wrote its status in between."""
        for _ in range(20):
            current = env.kube.request("GET", path).body
            edit(current)
            r = env.kube.request("PUT", path, current, **params)
            if r.status != 409:
                return r
        raise AssertionError(f"PUT {path}: still conflicting: {r.message}")

    def annotate(obj: dict[str, Any]) -> None:
        obj["metadata"]["annotations"] = {"example.com/edited": "yes"}

    def unlabel(obj: dict[str, Any]) -> None:
        del obj["metadata"]["labels"]["gpushare.io/webhook"]

    def label_and_break(obj: dict[str, Any]) -> None:
        obj["metadata"]["labels"] = {"gpushare.io/webhook": "ignore"}
        obj["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"][CORE] = "33"

    stored = wrap("Deployment", pod(f"opted-out-{SUFFIX}", [container("cuda", {MEM: "2", CORE: "33"})]))
    stored["metadata"]["labels"] = {"gpushare.io/webhook": "ignore"}
    valid = wrap("Deployment", pod(f"opting-out-{SUFFIX}", [container("cuda", {MEM: "2", CORE: "30"})]))
    for obj in (stored, valid):
        obj["spec"]["replicas"] = 0  # no pods for the controllers to create
        assert (r := env.kube.create(obj, dry_run=False)).status == 201, r.message
    out, stays_in = (
        f"/apis/apps/v1/namespaces/{USER_NS}/deployments/{o['metadata']['name']}" for o in (stored, valid)
    )
    try:
        assert (r := put(out, annotate)).status == 200, r.message  # still opted out: not judged
        assert _denied_by_policy(r := put(out, unlabel, dryRun="All")), r.message  # its new object is in
        assert "rule GS001-core-percentage-step" in r.message
        # one that is in stays judged when an UPDATE labels it out: its old object is in
        assert _denied_by_policy(r := put(stays_in, label_and_break, dryRun="All")), r.message
    finally:
        for path in (out, stays_in):
            env.kube.request("DELETE", path)


# --- the webhook is down --------------------------------------------------------------------------


def test_objects_without_gpu_sharing_are_admitted_while_the_webhook_is_down(
    env: Env, dead_webhook: WebhookSettings
) -> None:
    web = pod("web", [container("web", {"cpu": "100m", "memory": "64Mi"})])
    deployment = wrap("Deployment", copy.deepcopy(web))
    for obj in (deployment, web, wrap("CronJob", copy.deepcopy(web))):
        r = env.kube.create(obj, dry_run=False)
        assert r.status == 201, (obj["kind"], r.status, r.message)
    # an object opted out, or in an excluded namespace, is not sent either (GPU or not)
    opted_out = pod("opted-out", [container("c", {MEM: "2", CORE: "30"})])
    opted_out["metadata"]["labels"] = {"gpushare.io/webhook": "ignore"}
    assert env.kube.create(opted_out).status == 201
    assert env.kube.create(pod("in-operator-ns", [container("c", {MEM: "2"})], ns=OPERATOR_NS)).status == 201


def test_nvidia_pods_reach_the_webhook_only_when_they_can_aim_at_a_pool(
    env: Env, dead_webhook: WebhookSettings
) -> None:
    """Whole GPUs without node constraints never reach the webhook (they keep working while it is
    down); nvidia.com/gpu.shared is always sent; nvidia.com/gpu with a nodeSelector only while the
    NVIDIA gate is open (the operator opens it while an NVIDIA pool exists: the NVIDIA pool rules
    need the pools). So with failurePolicy Fail those sent are refused while it is down."""
    whole = pod("whole-gpus", [container("c", {"nvidia.com/gpu": "4"})])
    assert (r := env.kube.create(whole)).status == 201, r.message
    assert (r := env.kube.create(wrap("Deployment", copy.deepcopy(whole)))).status == 201, r.message
    aimed = pod("aimed", [container("c", {"nvidia.com/gpu": "2"})], nodeSelector={"gpushare.io/pool": "ts"})
    shared = pod("shared", [container("c", {"nvidia.com/gpu.shared": "1"})])

    def refused(r: Response) -> bool:
        return r.status >= 500 and "failed calling webhook" in r.message and "gpushare.io" in r.message

    # The shipped configuration (the gate closed: no NVIDIA pool): nvidia.com/gpu is never sent.
    for obj in (aimed, wrap("Job", copy.deepcopy(aimed))):
        assert (r := env.kube.create(obj)).status == 201, (obj["kind"], r.status, r.message)
    assert refused(r := env.kube.create(shared)), r.message
    # The gate opened, as the operator opens it (gpushare.admission.gate): sent, so refused.
    path = f"{ADM}/validatingwebhookconfigurations/{WEBHOOKS}"
    patch = gate_patch(env.kube.request("GET", path).body, True, TARGETS)
    assert patch.ops and not patch.foreign
    r = env.kube.request("PATCH", path, list(patch.ops), content_type="application/json-patch+json")
    assert r.status == 200, r.message
    deadline = time.monotonic() + 60
    while not refused(r := env.kube.create(aimed)):  # until the apiserver has the patched configuration
        assert time.monotonic() < deadline, (r.status, r.message)
        time.sleep(0.5)
    for obj in (aimed, shared, wrap("Job", copy.deepcopy(aimed))):
        assert refused(r := env.kube.create(obj)), (obj["kind"], r.status, r.message)
    assert (r := env.kube.create(whole)).status == 201, r.message


def test_pool_writes_are_admitted_and_still_checked_by_the_crd_while_the_webhook_is_down(
    env: Env, dead_webhook: WebhookSettings
) -> None:
    """The pools' webhook fails open (docs/concepts/admission.md, "Pools and the failure policy"): a pool is
    admitted while no webhook answers, and the CRD's CEL rules still refuse an invalid one."""
    hooks = {h["name"]: h for h in build_configuration(dead_webhook)["webhooks"]}
    assert hooks["validate-gpusharepools.gpushare.io"]["failurePolicy"] == "Ignore"

    def gsp(name: str, **spec: Any) -> dict[str, Any]:
        selector = {"matchLabels": {"alibabacloud.com/nodepool-id": f"np-{name}"}}
        return {
            "apiVersion": "gpushare.io/v1alpha1",
            "kind": "GPUSharePool",
            "metadata": {"name": name},
            "spec": {"nodeSelector": selector, **spec},
        }

    ok = env.kube.create(gsp(f"down-{SUFFIX}"))
    assert ok.status == 201, (ok.status, ok.message)
    bad = env.kube.create(gsp(f"down-bad-{SUFFIX}", computeAllocation=True, memoryIsolation=False))
    assert bad.status == 422, (bad.status, bad.message)
    assert "computeAllocation: true requires memoryIsolation: true" in bad.message
    empty = env.kube.create({**gsp(f"down-empty-{SUFFIX}"), "spec": {"nodeSelector": {}}})
    assert empty.status == 422 and "nodeSelector must not be empty" in empty.message, empty.message


def test_33_percent_is_denied_by_the_policy_while_the_webhook_is_down(
    env: Env, dead_webhook: WebhookSettings
) -> None:
    for kind in ("Pod", "Deployment", "CronJob"):
        obj = wrap(kind, pod("cuda-33", [container("cuda", {MEM: "2", CORE: "33"})]))
        r = env.kube.create(obj)
        assert r.status == 422, (kind, r.status, r.message)
        assert _denied_by_policy(r), r.message
        assert (
            f'{kind}/{USER_NS}/cuda-33: container "cuda": resources.limits["{CORE}"]=33'
            " is not a multiple of 5 (rule GS001-core-percentage-step); use 30 or 35"
        ) in r.message


def test_gpu_objects_needing_the_stateful_rules_follow_the_failure_policy(
    env: Env, dead_webhook: WebhookSettings
) -> None:
    ok = pod("needs-pools", [container("c", {MEM: "2", CORE: "30"})])
    r = env.kube.create(ok)
    assert r.status >= 500, r.message  # Fail: refused, naming the webhook the apiserver could not call
    assert 'failed calling webhook "validate-pods.gpushare.io"' in r.message, r.message
    ignore = build_configuration(WebhookSettings(**{**env.settings.__dict__, "failure_policy": "Ignore"}))
    current = env.kube.request("GET", f"{ADM}/validatingwebhookconfigurations/{WEBHOOKS}").body
    ignore["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
    assert env.kube.request("PUT", f"{ADM}/validatingwebhookconfigurations/{WEBHOOKS}", ignore).status == 200
    deadline = time.monotonic() + 60
    while (r := env.kube.create(ok)).status != 201:  # Ignore: admitted without the stateful rules
        assert time.monotonic() < deadline, (r.status, r.message)
        time.sleep(0.5)
    assert _denied_by_policy(env.kube.create(pod("still-33", [container("c", {MEM: "2", CORE: "33"})])))


def test_as_shipped_for_fail_a_gpu_object_is_judged_by_the_webhook_alone_and_refused_while_it_is_down(
    env: Env, dead_webhook: WebhookSettings
) -> None:
    """manifests/webhook/ and the chart's default (failurePolicy Fail) ship neither policy: each
    GPU-sharing pod and workload is judged once, by the webhook. While no webhook answers, a 33 %
    pod and a Deployment with a 33 % template are still refused (by the apiserver, fail closed),
    and a good one with them: nothing the policies would deny gets in."""
    for name in POLICIES:
        assert env.kube.request("DELETE", f"{ADM}/validatingadmissionpolicybindings/{name}").status == 200
    bad = pod("fail-33", [container("c", {MEM: "2", CORE: "33"})])
    good = pod("fail-30", [container("c", {MEM: "2", CORE: "30"})])
    objects = {
        "Pod": ("pods", bad),
        "Deployment": ("deployments", wrap("Deployment", bad)),
        "Job": ("jobs", wrap("Job", good)),
    }
    try:
        for kind, (plural, obj) in objects.items():
            deadline = time.monotonic() + 60
            while _denied_by_policy(r := env.kube.create(obj)):  # until the apiserver drops the bindings
                assert time.monotonic() < deadline, f"a policy's binding was never dropped ({kind})"
                time.sleep(0.5)
            assert r.status >= 500, (kind, r.status, r.message)
            assert f'failed calling webhook "validate-{plural}.gpushare.io"' in r.message, (kind, r.message)
    finally:
        for name in POLICIES:
            assert env.kube.create(build_binding(name), dry_run=False).status == 201
        for obj in (bad, wrap("Deployment", bad)):
            deadline = time.monotonic() + 60
            while not _denied_by_policy(env.kube.create(obj)):  # the other tests meet both policies
                assert time.monotonic() < deadline, "the policies' bindings never came back"
                time.sleep(0.5)


# --- one source of truth: the policy agrees with the Python rules ---------------------------------

# aliyun.com/gpu-count and aliyun.com/gpu exist on nodes: the engine only warns, the policy allows.
NAMES = [
    MEM,
    CORE,
    MEM,
    CORE,
    "aliyun.com/gpu-core",
    "aliyun.com/gpu-memory",
    "aliyun.com/gpu-count",
    "aliyun.com/gpu",
    "cpu",
]
#: Names whose differing request the apiserver refuses on its own while the engine denies nothing
#: (a request differing from its limit is GS006 only for the GPU-sharing names).
WARNED_OR_PLAIN = ("cpu", "aliyun.com/gpu-count", "aliyun.com/gpu", "nvidia.com/gpu")
#: Other spellings of whole amounts (the apiserver stores ``3e1`` as ``30``, ``4000`` as ``4k``,
#: keeps ``2Gi``): the verdict is the stored value's. (A fraction never reaches the policy: the
#: apiserver refuses a non-integer extended resource of a built-in kind itself.)
SPELLINGS = {
    MEM: ["2e0", "0.002k", "4000", "2Gi", "0e3", "512Mi"],
    CORE: ["3e1", "0.05k", "50000m", "33e0", "1e2", "105e0", "0.5Ki"],
}
VALUES = {
    MEM: ["0", "1", "2", "40", *SPELLINGS[MEM]],
    CORE: ["0", "3", "5", "7", "30", "33", "100", "105", *SPELLINGS[CORE]],
    "aliyun.com/gpu-core": ["50"],
    "aliyun.com/gpu-memory": ["2"],
    "aliyun.com/gpu-count": ["1"],
    "aliyun.com/gpu": ["1"],
    "cpu": ["1"],
    "nvidia.com/gpu": ["1", "2"],
    "nvidia.com/gpu.shared": ["1", "2"],
}


@st.composite
def containers(draw: st.DrawFn, prefix: str) -> list[dict[str, Any]]:
    out = []
    for i in range(draw(st.integers(1, 2))):
        limits: dict[str, str] = {}
        requests: dict[str, str] = {}
        for name in draw(st.lists(st.sampled_from(NAMES), max_size=3, unique=True)):
            value = draw(st.sampled_from(VALUES[name]))
            how = draw(st.sampled_from(["limit", "limit", "both", "request-differs"]))
            limits[name] = value
            if how == "both":
                requests[name] = value
            elif how == "request-differs" and name not in WARNED_OR_PLAIN:
                requests[name] = str(int(parse_quantity(value).amount) + 5)
        # Whole GPUs beside GPU sharing in the same container (GS018; in another container of the
        # pod only the webhook and check deny it: the policy judges one container at a time).
        if {MEM, CORE} & set(limits) and draw(st.integers(0, 4)) == 0:
            nvidia = draw(st.sampled_from(["nvidia.com/gpu", "nvidia.com/gpu.shared"]))
            limits[nvidia] = draw(st.sampled_from(VALUES[nvidia]))
        out.append(container(f"{prefix}{i}", limits, requests))
    return out


@st.composite
def workloads(draw: st.DrawFn) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if draw(st.integers(0, 3)) == 0:
        spec["initContainers"] = draw(containers("init"))
    if draw(st.integers(0, 4)) == 0:  # bound by hand (GS017), to a name short or clipped in messages
        spec["nodeName"] = draw(st.sampled_from(["gpu-node-1", "gpu-node-" + "x" * 50]))
    p = pod("hyp", draw(containers("c")), **spec)
    return wrap(draw(st.sampled_from(["Pod", "Pod", "Deployment", "Job", "CronJob"])), p)


def stored(obj: dict[str, Any]) -> dict[str, Any]:
    """The object with its containers' quantities as the apiserver stores them (what the webhook
    and the policy see); the test below checks that text against the apiserver."""
    out = copy.deepcopy(obj)
    spec = out["spec"]
    if out["kind"] == "CronJob":
        spec = spec["jobTemplate"]["spec"]
    if out["kind"] != "Pod":
        spec = spec["template"]["spec"]
    for key in ("containers", "initContainers"):
        for ctr in spec.get(key, []):
            for where in ("limits", "requests"):
                values = ctr["resources"].get(where, {})
                for name, value in values.items():
                    values[name] = parse_quantity(value).stored
    return out


@given(obj=workloads())
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_policy_agrees_with_the_rules_engine(env: Env, obj: dict[str, Any]) -> None:
    obj = copy.deepcopy(obj)
    stateless = [f for f in evaluate(obj, EMPTY_CONTEXT) if f.rule_id in POLICY_RULES and f.verdict == "deny"]
    # The verdict is the stored value's: the same findings for the object as the apiserver keeps it.
    seen = [
        f for f in evaluate(stored(obj), EMPTY_CONTEXT) if f.rule_id in POLICY_RULES and f.verdict == "deny"
    ]
    assert [f.rule_id for f in seen] == [f.rule_id for f in stateless]
    r = env.kube.create(obj)
    if not stateless:
        assert r.status == 201, (r.status, r.message)
        return
    assert r.status == 422, (r.status, r.message, [f.message for f in stateless])
    if not _denied_by_policy(r):
        # Built-in kinds: the apiserver's own validation refuses an extended resource whose request
        # differs from its limit before admission runs (the rules deny too: GS006, or GS012 for a
        # misspelled name); the verdicts agree, the policy is not asked.
        assert "must be equal to" in r.message, r.message
        return
    fired = set(RULE_ID.findall(r.message))
    assert fired and fired <= {f.rule_id for f in stateless}, (r.message, [f.message for f in stateless])
    text = r.message.split("denied request: ", 1)[1]
    # The webhook's message (it sees the stored object), but for GS012's did-you-mean (difflib has
    # no CEL counterpart).
    expected = [DID_YOU_MEAN.sub("", f.message) for f in seen]
    assert text in expected, (text, expected)


# --- the value the apiserver stores ----------------------------------------------------------------


@st.composite
def quantity_spellings(draw: st.DrawFn) -> str:
    """A non-negative quantity written any way the grammar allows: digits, a fraction, a decimal
    or binary suffix, or an exponent."""
    whole = draw(st.sampled_from(["0", "1", "2", "5", "007", "50", "1000", "1024", "2048", "123456"]))
    fraction = draw(st.sampled_from(["", "", ".", ".5", ".05", ".500", ".000001", ".0000000001"]))
    if whole == "0" and fraction == ".":
        fraction = ""
    suffix = draw(
        st.sampled_from(
            ["", "n", "u", "m", "k", "M", "G", "Ki", "Mi", "Gi", "e0", "e1", "e3", "e-3", "E2", "e-9"]
        )
    )
    return f"{whole}{fraction}{suffix}"


@given(spellings=st.lists(quantity_spellings(), min_size=1, max_size=6, unique=True))
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_the_stored_text_is_the_one_the_apiserver_stores(env: Env, spellings: list[str]) -> None:
    """Quantities of a non-GPU resource (memory), so only the stored text is at stake."""
    containers = [container(f"c{i}", {"memory": s}) for i, s in enumerate(spellings)]
    r = env.kube.create(pod("spellings", containers))
    assert r.status == 201, (r.status, r.message)
    got = [c["resources"]["limits"]["memory"] for c in r.body["spec"]["containers"]]
    assert got == [parse_quantity(s).stored for s in spellings], spellings


# --- custom resources: raw values and wildcard paths -----------------------------------------------

RAW_VALUES: list[Any] = [
    0,
    2,
    5,
    30,
    33,
    105,
    "2",
    "33",
    "1.5",
    "2Gi",
    -1,
    "-5",
    2.5,
    True,
    "abc",
    "3e1",
    "5000m",
    "-0",
    "1Ki",
    "1.5Ki",
]


@st.composite
def raw_containers(draw: st.DrawFn) -> list[dict[str, Any]]:
    out = []
    for i in range(draw(st.integers(1, 2))):
        limits: dict[str, Any] = {}
        requests: dict[str, Any] = {}
        for name in draw(
            st.lists(
                st.sampled_from([MEM, CORE, MEM, CORE, "aliyun.com/gpu-core", NVG, NVS, MIG]), unique=True
            )
        ):
            limits[name] = draw(st.sampled_from(RAW_VALUES))
            how = draw(st.sampled_from(["limit", "limit", "same", "other", "request-only"]))
            if how == "same":
                requests[name] = limits[name]
            elif how == "other":
                requests[name] = draw(st.sampled_from([v for v in RAW_VALUES if not isinstance(v, bool)]))
            elif how == "request-only":
                requests[name] = limits.pop(name)
        resources: dict[str, Any] = {}
        if limits:
            resources["limits"] = limits
        if requests:
            resources["requests"] = requests
        out.append({"name": f"c{i}", "image": "x", "resources": resources})
    return out


@st.composite
def train_jobs(draw: st.DrawFn) -> dict[str, Any]:
    replicas = {
        role: {"replicas": 1, "template": {"spec": {"containers": draw(raw_containers())}}}
        for role in draw(st.lists(st.sampled_from(["Master", "Worker"]), min_size=1, unique=True))
    }
    return {
        "apiVersion": "test.gpushare.io/v1",
        "kind": "GPUTrainJob",
        "metadata": {"name": "train", "namespace": USER_NS},
        "spec": {"replicaSpecs": replicas},
    }


@given(obj=train_jobs())
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_policy_agrees_with_the_rules_engine_on_raw_custom_resources(env: Env, obj: dict[str, Any]) -> None:
    stateless = [
        f
        for f in evaluate(obj, EMPTY_CONTEXT, TRAIN_TABLE)
        if f.rule_id in POLICY_RULES and f.verdict == "deny"
    ]
    r = env.kube.create(obj)
    if not stateless:
        assert r.status == 201, (r.status, r.message)
        return
    assert _denied_by_policy(r) and r.status == 422, (r.status, r.message, [f.message for f in stateless])
    fired = set(RULE_ID.findall(r.message))
    assert fired and fired <= {f.rule_id for f in stateless}, (r.message, [f.message for f in stateless])


def _train(limits: dict[str, Any], requests: dict[str, Any] | None = None) -> dict[str, Any]:
    resources = {"limits": limits, **({"requests": requests} if requests else {})}
    spec = {"containers": [{"name": "c", "image": "x", "resources": resources}]}
    return {
        "apiVersion": "test.gpushare.io/v1",
        "kind": "GPUTrainJob",
        "metadata": {"name": "train", "namespace": USER_NS},
        "spec": {"replicaSpecs": {"Worker": {"template": {"spec": spec}}}},
    }


@pytest.mark.parametrize(
    ("obj", "rule"),
    [
        pytest.param(
            pod("p", [container("c", {MEM: "2", CORE: "33"})]), "GS001-core-percentage-step", id="GS001"
        ),
        pytest.param(
            pod("p", [container("c", {MEM: "2", CORE: "105"})]), "GS002-core-percentage-range", id="GS002"
        ),
        pytest.param(pod("p", [container("c", {CORE: "30"})]), "GS003-core-without-mem", id="GS003"),
        pytest.param(pod("p", [container("c", {MEM: "0"})]), "GS004-mem-positive-integer", id="GS004-zero"),
        pytest.param(
            pod("p", [container("c", {MEM: "2", "aliyun.com/gpu-core": "50"})]),
            "GS012-unknown-gpu-resource",
            id="GS012",
        ),
        pytest.param(
            wrap("CronJob", pod("p", [container("c", {MEM: "2"}), container("d", {MEM: "2", CORE: "7"})])),
            "GS001-core-percentage-step",
            id="GS001-cronjob-second-container",
        ),
        pytest.param(
            pod("p", [container("c", {MEM: "2", "nvidia.com/gpu": "1"})]),
            "GS018-shared-and-whole-gpu",
            id="GS018",
        ),
        pytest.param(
            pod("p", [container("c", {CORE: "30", MEM: "2", "nvidia.com/gpu.shared": "2"})]),
            "GS018-shared-and-whole-gpu",
            id="GS018-nvidia-shared",
        ),
        pytest.param(
            wrap("Job", pod("p", [container("c", {MEM: "2", "nvidia.com/gpu.shared": "1"})])),
            "GS018-shared-and-whole-gpu",
            id="GS018-nvidia-shared-job",
        ),
        pytest.param(
            pod("p", [container("c", {MEM: "2"})], nodeName="gpu-node-1"), "GS017-node-name-set", id="GS017"
        ),
        pytest.param(
            wrap("Job", pod("p", [container("c", {MEM: "2"})], nodeName="gpu-node-1")),
            "GS017-node-name-set",
            id="GS017-job-template",
        ),
        pytest.param(
            {
                **_train({MEM: 2}),
                "spec": {
                    "replicaSpecs": {
                        "Worker": {
                            "template": {
                                "spec": {
                                    "nodeName": "gpu-node-1",
                                    "containers": [
                                        {"name": "c", "image": "x", "resources": {"limits": {MEM: 2}}}
                                    ],
                                }
                            }
                        }
                    }
                },
            },
            "GS017-node-name-set",
            id="GS017-custom-wildcard",
        ),
        pytest.param(_train({MEM: "2Gi"}), "GS004-mem-positive-integer", id="GS004-suffix-custom"),
        pytest.param(_train({MEM: 2, CORE: "1.5"}), "GS001-core-percentage-step", id="GS001-fraction-custom"),
        pytest.param(_train({MEM: 2}, {MEM: 3}), "GS006-request-limit-mismatch", id="GS006-custom"),
        pytest.param(_train({}, {MEM: 3}), "GS006-request-limit-mismatch", id="GS006-no-limit-custom"),
        # Kubernetes' own rules for extended resources (pkg/apis/core/validation
        # ValidateResourceRequirements), which no apiserver validation applies to a custom kind
        pytest.param(_train({NVG: "1.5"}), QUANTITY, id="GS020-not-integer-custom"),
        pytest.param(_train({NVS: -1}), QUANTITY, id="GS020-negative-custom"),
        pytest.param(_train({"nvidia.com/mig-1g.5gb": "one"}), QUANTITY, id="GS020-malformed-custom"),
        pytest.param(_train({NVG: 2}, {NVG: "1"}), QUANTITY, id="GS020-differs-custom"),
        pytest.param(_train({}, {NVS: 1}), QUANTITY, id="GS020-no-limit-custom"),
        pytest.param(_train({NVG: 2.5}), QUANTITY, id="GS020-json-fraction-custom"),
    ],
)
def test_each_stateless_rule_is_denied_by_the_policy(env: Env, obj: dict[str, Any], rule: str) -> None:
    (finding,) = [f for f in evaluate(obj, EMPTY_CONTEXT, TRAIN_TABLE) if f.rule_id in POLICY_RULES]
    assert finding.rule_id == rule
    r = env.kube.create(obj)
    assert r.status == 422 and _denied_by_policy(r), (r.status, r.message)
    assert RULE_ID.findall(r.message) == [rule]
    if obj["kind"] != "GPUTrainJob":  # wildcard paths get the rule's summary, not the container's values
        assert r.message.endswith(DID_YOU_MEAN.sub("", finding.message)), (r.message, finding.message)


# --- kinds of the workload-kinds table beyond the built-ins ----------------------------------------


@pytest.fixture(scope="module")
def workload_crds(env: Env) -> None:
    """The schema-less Kubeflow, KubeRay and Argo CRDs (idempotent, as test_webhook.py installs them;
    left installed like there)."""
    for crd in yaml.safe_load_all(WORKLOAD_CRDS.read_text()):
        r = env.kube.request("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
        assert r.status in (201, 409), r.body
        group, version = crd["spec"]["group"], crd["spec"]["versions"][0]["name"]
        plural = crd["spec"]["names"]["plural"]
        deadline = time.monotonic() + 60
        while env.kube.request("GET", f"/apis/{group}/{version}/{plural}").status != 200:
            assert time.monotonic() < deadline, f"{plural}.{group} never served"
            time.sleep(0.5)


def _example(path: str) -> dict[str, Any]:
    (doc,) = [d for d in yaml.safe_load_all((REPO / path).read_text()) if d]
    doc["metadata"]["namespace"] = USER_NS
    return dict(doc)


def _ray_33() -> dict[str, Any]:
    obj = _example("examples/workloads/raycluster.yaml")
    obj["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]["resources"]["limits"][CORE] = (
        "33"
    )
    return obj


@pytest.mark.parametrize(
    ("make", "rule"),
    [
        # a map of replica specs (Kubeflow)
        pytest.param(
            lambda: _example("examples/invalid/workloads/pytorchjob-33.yaml"),
            "GS001-core-percentage-step",
            id="PyTorchJob",
        ),
        # containers directly in a list of templates (Argo)
        pytest.param(
            lambda: _example("examples/invalid/workloads/workflow-120.yaml"),
            "GS002-core-percentage-range",
            id="Workflow",
        ),
        # a list of worker groups (KubeRay)
        pytest.param(_ray_33, "GS001-core-percentage-step", id="RayCluster"),
    ],
)
def test_the_policy_covers_the_table_kinds_with_the_engines_message(
    env: Env, workload_crds: None, make: Any, rule: str
) -> None:
    obj = make()
    (finding,) = [
        f for f in evaluate(obj, EMPTY_CONTEXT) if f.rule_id in POLICY_RULES and f.verdict == "deny"
    ]
    assert finding.rule_id == rule
    r = env.kube.create(obj)
    assert r.status == 422 and _denied_by_policy(r), (r.status, r.message)
    assert RULE_ID.findall(r.message) == [rule]
    # The engine's message, less the pod's location (a kind with several pods names it; CEL cannot).
    text = r.message.split("denied request: ", 1)[1]
    assert text == re.sub(r"^(\S+: )\S+ ", r"\1", finding.message), (text, finding.message)


@pytest.mark.parametrize(
    "path",
    [
        "examples/workloads/pytorchjob.yaml",
        "examples/workloads/workflow.yaml",
        "examples/workloads/raycluster.yaml",
    ],
)
def test_the_policy_admits_the_valid_table_kind_examples(env: Env, workload_crds: None, path: str) -> None:
    obj = _example(path)
    assert not [f for f in evaluate(obj, EMPTY_CONTEXT) if f.rule_id in POLICY_RULES and f.verdict == "deny"]
    r = env.kube.create(obj)
    assert r.status == 201, (r.status, r.message)
