"""NVIDIA pools as NVIDIA and Kubernetes decide them (issue 54, admission): one targeting for every
backend, Kubernetes' own rules for ``nvidia.com/*`` quantities, what a pool's sharing settings
cannot offer, and what no node of the target can ever hold. Each class is a table, judged under
every ``admission.mode`` (Enforce denies, Warn warns, Off admits) and, where the pool's settings
matter, under every ``spec.nvidia`` combination the API accepts. Every case cites its source:
NVIDIA's k8s-device-plugin v0.19.3, or Kubernetes' ``pkg/apis/core/validation`` and scheduler."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from gpushare.admission import Context, Finding, evaluate, node_info
from gpushare.api.v1alpha1 import GPUSharePool, parse_pool

MEM = "aliyun.com/gpu-mem"
NVG = "nvidia.com/gpu"
NVS = "nvidia.com/gpu.shared"
MIG = "nvidia.com/mig-1g.5gb"
NP = "alibabacloud.com/nodepool-id"

#: What each pool mode makes of a pool rule's denial.
MODES: dict[str, str | None] = {"Enforce": "deny", "Warn": "warn", "Off": None}


def container(limits: dict[str, Any] | None = None, requests: dict[str, Any] | None = None) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if limits is not None:
        resources["limits"] = limits
    if requests is not None:
        resources["requests"] = requests
    return {"name": "main", "image": "busybox", "resources": resources}


def pod(
    limits: dict[str, Any] | None = None,
    *,
    requests: dict[str, Any] | None = None,
    selector: dict[str, str] | None = None,
    containers: list[dict[str, Any]] | None = None,
    init: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": containers or [container(limits, requests)]}
    if init:
        spec["initContainers"] = init
    if selector is not None:
        spec["nodeSelector"] = selector
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default"},
        "spec": spec,
    }


def ack_pool(name: str, selector: dict[str, str], mode: str = "Enforce") -> GPUSharePool:
    return parse_pool(
        {
            "apiVersion": "gpushare.io/v1alpha1",
            "kind": "GPUSharePool",
            "metadata": {"name": name},
            "spec": {"nodeSelector": {"matchLabels": selector}, "admission": {"mode": mode}},
        }
    )


def nv_pool(name: str, selector: dict[str, str], mode: str = "Enforce", **nvidia: Any) -> GPUSharePool:
    spec = {"strategy": "TimeSlicing", "replicas": 4, **nvidia}
    return parse_pool(
        {
            "apiVersion": "gpushare.io/v1alpha1",
            "kind": "GPUSharePool",
            "metadata": {"name": name},
            "spec": {"nodeSelector": {"matchLabels": selector}, "nvidia": spec, "admission": {"mode": mode}},
        }
    )


def node(name: str, labels: dict[str, str], allocatable: dict[str, str] | None = None) -> Any:
    return node_info(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **labels}},
            "status": {"allocatable": allocatable or {}},
        }
    )


def ids(findings: list[Finding]) -> list[tuple[str, str]]:
    return [(f.rule_id, f.verdict) for f in findings]


def expect(rule: str | None, mode: str) -> list[tuple[str, str]]:
    verdict = MODES[mode]
    return [] if rule is None or verdict is None else [(rule, verdict)]


#: Every ``spec.nvidia`` the API accepts, up to the replicas: strategy x renameByDefault x
#: failRequestsGreaterThanOne (strategy None takes replicas 1).
NVIDIA_SPECS = [
    {
        "strategy": strategy,
        "replicas": 1 if strategy == "None" else 4,
        "renameByDefault": rename,
        "failRequestsGreaterThanOne": fail,
    }
    for strategy, rename, fail in itertools.product(
        ("TimeSlicing", "MPS", "None"), (False, True), (False, True)
    )
]


def spec_id(spec: dict[str, Any]) -> str:
    rename, fail = int(spec["renameByDefault"]), int(spec["failRequestsGreaterThanOne"])
    return f"{spec['strategy']}-rename{rename}-fail{fail}"


def offered(spec: dict[str, Any]) -> str:
    """What NVIDIA's plugin advertises on the pool's nodes: ``nvidia.com/gpu.shared`` only for a
    shared GPU with renameByDefault (k8s-device-plugin v0.19.3 ``api/config/v1/replicas.go``:
    ``ReplicatedResources`` rename the resource with the ``.shared`` suffix when renameByDefault)."""
    return NVS if spec["renameByDefault"] and spec["strategy"] != "None" else NVG


# --- one targeting for every backend --------------------------------------------------------------
#
# A pool is a target when the pod's constraints can match one of its nodes: judged on its known
# nodes when it has any (their labels with the pool's applied), on its selector otherwise. The
# scheduler places a pod only on a node whose labels match its nodeSelector and required node
# affinity (Kubernetes' NodeAffinity filter plugin, pkg/scheduler/framework/plugins/nodeaffinity)
# and that advertises what it asks for (NodeResourcesFit, .../plugins/noderesources/fit.go): a
# node of an NVIDIA pool offers no aliyun.com/gpu*, a node of ACK's GPU sharing no nvidia.com/*.

#: An ACK pool and an NVIDIA pool that selects its nodes by a label of its own (accelerator=a100).
A100 = {"accelerator": "a100"}


def targeting_ctx(mode: str, nodes: bool, **nvidia: Any) -> Context:
    pools = (ack_pool("cgpu", {NP: "np-cgpu"}, mode), nv_pool("nv", A100, mode, **nvidia))
    known = (
        node("cgpu-1", {NP: "np-cgpu"}, {MEM: "30"}),
        node("nv-1", {**A100, NP: "np-nv"}, {NVG: "8"}),
    )
    return Context.build(pools, known if nodes else ())


TARGETING = [
    # Selecting the NVIDIA pool's own label: with the nodes known only its nodes match, and they
    # offer no aliyun.com/gpu-mem (GS009). Offline a node of the ACK pool may carry the label too
    # (its selector does not say otherwise): the pod may land there, and is admitted.
    pytest.param(pod({MEM: 2}, selector=A100), True, "GS009-pool-kind-mismatch", id="ack-on-nv-label-nodes"),
    pytest.param(pod({MEM: 2}, selector=A100), False, None, id="ack-on-nv-label-offline"),
    pytest.param(
        pod({MEM: 2}, selector={NP: "np-nv"}), False, "GS009-pool-kind-mismatch", id="ack-on-nv-pool-offline"
    ),
    # ACK's schedule label and the NVIDIA pool's label: no known node has both (GS011); before,
    # the cgpu pool was counted by its selector (accelerator not contradicted) and it was admitted.
    pytest.param(
        pod({MEM: 2}, selector={"ack.node.gpu.schedule": "cgpu", **A100}),
        True,
        "GS011-pool-target-unknown",
        id="ack-schedule-and-nv-label-nodes",
    ),
    # nvidia.com/gpu by a label only the ACK pool's nodes carry (no node outside the pools
    # advertises nvidia.com/gpu): confined to the ACK pool (GS009). Before, only a pod whose
    # selector implied the pool's was aimed at it.
    pytest.param(
        pod({NVG: 1}, selector={NP: "np-cgpu"}), True, "GS009-pool-kind-mismatch", id="nv-on-ack-nodepool"
    ),
    pytest.param(pod({NVG: 1}, selector={"disk": "ssd"}), True, None, id="nv-label-no-node-has"),
    pytest.param(pod({MEM: 2}, selector={NP: "np-cgpu"}), True, None, id="ack-on-ack-ok"),
]


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize(("obj", "nodes", "rule"), TARGETING)
def test_one_targeting(obj: dict[str, Any], nodes: bool, rule: str | None, mode: str) -> None:
    assert ids(evaluate(obj, targeting_ctx(mode, nodes))) == expect(rule, mode)


@pytest.mark.parametrize("spec", NVIDIA_SPECS, ids=spec_id)
def test_one_targeting_under_every_nvidia_spec(spec: dict[str, Any]) -> None:
    """ACK's sharing on the NVIDIA pool's own label is refused, whatever the pool shares; NVIDIA's
    resource that the pool advertises is admitted there, the other one refused."""
    ctx = targeting_ctx("Enforce", True, **spec)
    assert ids(evaluate(pod({MEM: 2}, selector=A100), ctx)) == [("GS009-pool-kind-mismatch", "deny")]
    good = offered(spec)
    bad = NVS if good == NVG else NVG
    assert ids(evaluate(pod({good: 1}, selector=A100), ctx)) == []
    assert ids(evaluate(pod({bad: 1}, selector=A100), ctx)) == [("GS009-pool-kind-mismatch", "deny")]


def test_a_node_outside_the_pools_that_offers_the_gpu_leaves_the_pod_unconfined() -> None:
    """nvidia.com/gpu is offered by every whole-GPU node: with one outside the pools that the pod
    can match, the pod may run there and is admitted."""
    ctx = targeting_ctx("Enforce", True)
    loose = node("whole-1", {NP: "np-cgpu-spare"}, {NVG: "8"})
    ctx = Context.build(ctx.pools, (*ctx.nodes, loose))
    assert ids(evaluate(pod({NVG: 1}, selector={"kubernetes.io/os": "linux"}), ctx)) == []
    cpu_only = Context.build(ctx.pools, (*ctx.nodes[:2], node("cpu-1", {}, {"cpu": "8"})))
    # A node that advertises no nvidia.com/gpu cannot hold the pod: confined to the pools it reaches.
    assert ids(evaluate(pod({NVG: 1}, selector={NP: "np-cgpu"}), cpu_only)) == [
        ("GS009-pool-kind-mismatch", "deny")
    ]


# --- Kubernetes' rules for nvidia.com/* -----------------------------------------------------------
#
# pkg/apis/core/validation/validation.go: ValidateResourceRequirements checks every limit and
# request with ValidateResourceQuantityValue (ValidateNonnegativeQuantity: "must be greater than or
# equal to 0"; for an integer resource, helper.IsIntegerResourceName, which every extended resource
# is: "must be an integer") and, since an extended resource cannot be overcommitted
# (helper.IsOvercommitAllowed is false), a request without a limit ("Limit must be set for non
# overcommitable resources") or different from it ("must be equal to <name> limit of <limit>").
# Not pool rules: the apiserver refuses such a Pod whatever the pool's mode says.

QUANTITY = "GS020-nvidia-resource-quantity"
ON_SHARED = {"gpushare.io/pool": "shared"}

KUBERNETES = [
    pytest.param({NVS: "1.5"}, None, "must be an integer", id="fraction"),
    pytest.param({NVS: 0.5}, None, "must be an integer", id="json-fraction"),
    pytest.param({NVS: "500m"}, None, "must be an integer", id="milli"),
    pytest.param({NVS: -1}, None, "must be greater than or equal to 0", id="negative"),
    pytest.param({NVS: "one"}, None, "is not a Kubernetes quantity", id="not-a-quantity"),
    pytest.param(None, {NVS: 1}, "Limit must be set for non overcommitable resources", id="request-no-limit"),
    pytest.param({NVS: 1}, {NVS: "2"}, f"must be equal to {NVS} limit of 1", id="request-differs"),
    # What Kubernetes accepts: the same amount in any spelling, a limit alone, a whole float.
    pytest.param({NVS: 1}, {NVS: "1000m"}, None, id="same-amount-ok"),
    pytest.param({NVS: 1.0}, None, None, id="whole-json-number-ok"),
    pytest.param({NVS: "1"}, None, None, id="limit-alone-ok"),
    pytest.param({MIG: "0.5"}, None, "must be an integer", id="mig-fraction"),
]


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize(("limits", "requests", "words"), KUBERNETES)
def test_kubernetes_rules_for_nvidia_resources(
    limits: dict[str, Any] | None, requests: dict[str, Any] | None, words: str | None, mode: str
) -> None:
    ctx = Context.build((nv_pool("shared", {NP: "np-shared"}, mode, renameByDefault=True),))
    findings = [
        f for f in evaluate(pod(limits, requests=requests, selector=ON_SHARED), ctx) if f.rule_id == QUANTITY
    ]
    if words is None:
        assert findings == []
        return
    (finding,) = findings
    assert finding.verdict == "deny"  # the apiserver's own rule: no pool mode turns it off
    assert words in finding.message


def test_kubernetes_rules_offline_say_what_the_cluster_says() -> None:
    """``check --offline`` (no pools, no nodes) refuses what the apiserver refuses, and no more."""
    bad = pod({NVS: "1.5"}, requests={NVS: "1"})
    assert ids(evaluate(bad, Context())) == [(QUANTITY, "deny"), (QUANTITY, "deny")]
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d", "namespace": "default"},
        "spec": {"template": {"spec": {**pod(None, requests={NVG: 1}, selector=A100)["spec"]}}},
    }
    (finding,) = evaluate(deployment, Context())
    assert finding.field == 'spec.template.spec.containers[0].resources.requests["nvidia.com/gpu"]'
    assert "Limit must be set" in finding.message


# --- what a pool's sharing settings cannot offer --------------------------------------------------
#
# gpushare's config (backends.nvidia.config.document) shares nvidia.com/gpu only: the plugin
# advertises it as nvidia.com/gpu, or nvidia.com/gpu.shared with renameByDefault (k8s-device-plugin
# v0.19.3 api/config/v1/replicas.go, ReplicatedResources). A MIG device is advertised as
# nvidia.com/mig-<profile> only with the plugin's mixed MIG strategy (README, "--mig-strategy"),
# which a TimeSlicing pool's config does not share, and NVIDIA's README: "MPS is not supported on
# MIG-enabled devices". Strategy None leaves MIG to the plugin's flags: it may offer them.


def may_offer_expected(spec: dict[str, Any], resource: str) -> bool:
    if resource == MIG:
        return bool(spec["strategy"] == "None")
    return resource == offered(spec)


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("resource", [NVG, NVS, MIG])
@pytest.mark.parametrize("spec", NVIDIA_SPECS, ids=spec_id)
def test_resources_a_pool_cannot_offer(spec: dict[str, Any], resource: str, mode: str) -> None:
    """Aimed at an NVIDIA pool by its name, its selector or a label only its nodes carry."""
    ctx = targeting_ctx(mode, True, **spec)
    rule = None if may_offer_expected(spec, resource) else "GS009-pool-kind-mismatch"
    for selector in ({"gpushare.io/pool": "nv"}, {**A100, NP: "np-nv"}, A100):
        findings = evaluate(pod({resource: 1}, selector=selector), ctx)
        assert ids(findings) == expect(rule, mode), selector
        if findings and resource == MIG:
            assert "names no MIG device" in findings[0].message
            assert ("does not support MPS on MIG-enabled devices" in findings[0].message) is (
                spec["strategy"] == "MPS"
            )


def test_a_mig_device_without_node_constraints_is_not_aimed_at_a_pool() -> None:
    """As nvidia.com/gpu: without node constraints the pod may land on any GPU node (the webhook is
    not even sent it), so no pool rule judges it; ``check`` still says that no known node offers
    it (GS021). With node constraints it is judged as any NVIDIA request."""
    from gpushare.admission import requests_gpu_sharing

    ctx = targeting_ctx("Enforce", True)
    assert not requests_gpu_sharing(pod({MIG: 1}))
    (finding,) = evaluate(pod({MIG: 1}), ctx)
    assert finding.rule_id == "GS021-nvidia-request-exceeds-node"
    assert f"no known node offers {MIG}" in finding.message
    assert evaluate(pod({MIG: 1}), targeting_ctx("Enforce", False)) == []  # offline: nothing known
    assert ids(evaluate(pod({MIG: 1}, selector={NP: "np-cgpu"}), ctx)) == [
        ("GS009-pool-kind-mismatch", "deny")
    ]


# --- what no node of the target can ever hold -----------------------------------------------------
#
# The scheduler's NodeResourcesFit filter (pkg/scheduler/framework/plugins/noderesources/fit.go)
# leaves a pod Pending ("Insufficient <resource>") when its request exceeds every node's
# allocatable. The request is the pod's effective one (component-helpers/resource/helpers.go,
# PodRequests: containers and restartable init containers summed, a regular init container with
# the sidecars declared before it, the larger of the two). An NVIDIA pool's node advertises its
# GPUs x replicas (k8s-device-plugin v0.19.3 api/config/v1/replicas.go), or what its allocatable
# says once the pool's config is applied there.

EXCEEDS = "GS021-nvidia-request-exceeds-node"
ON_NV = {"gpushare.io/pool": "nv"}


def ones(n: int, resource: str = NVG) -> list[dict[str, Any]]:
    """``n`` containers asking for one each (no container asks for more than one: GS019 stays out)."""
    return [{**container({resource: 1}), "name": f"c{i}"} for i in range(n)]


def sidecar(count: int, name: str = "side") -> dict[str, Any]:
    return {**container({NVG: count}), "name": name, "restartPolicy": "Always"}


def init(count: int, name: str = "init") -> dict[str, Any]:
    return {**container({NVG: count}), "name": name}


def capacity_ctx(
    mode: str = "Enforce", *, gpus: str | None = "2", alloc: dict[str, str] | None = None, **nv: Any
) -> Context:
    """The NVIDIA pool ``nv`` (TimeSlicing x4 unless ``nv`` says otherwise) with one node of ``gpus``
    GPUs (GPU Feature Discovery's count label; None: unknown); ``alloc``: its allocatable, with the
    pool's config applied (its config label names the pool's config)."""
    from gpushare.backends.nvidia.config import name_of

    pool = nv_pool("nv", A100, mode, **nv)
    labels = {**A100}
    if gpus is not None:
        labels["nvidia.com/gpu.count"] = gpus
    if alloc is not None:
        assert pool.spec.nvidia is not None
        labels["nvidia.com/device-plugin.config"] = name_of(pool.spec.nvidia)
    return Context.build((pool,), (node("nv-1", labels, alloc),))


CAPACITY = [
    # 2 GPUs x 4 replicas = 8 nvidia.com/gpu on the pool's node.
    pytest.param(pod(containers=ones(8), selector=ON_NV), capacity_ctx, None, id="8-of-8-ok"),
    pytest.param(pod(containers=ones(9), selector=ON_NV), capacity_ctx, EXCEEDS, id="containers-summed"),
    # Init containers at their peak: 6 then 6 in the containers is 6.
    pytest.param(
        pod(containers=ones(6), init=[init(6)], selector=ON_NV), capacity_ctx, None, id="init-maxed"
    ),
    pytest.param(
        pod(containers=ones(1), init=[init(9)], selector=ON_NV), capacity_ctx, EXCEEDS, id="init-alone"
    ),
    # A sidecar keeps running beside the containers; a regular init container beside the sidecars before it.
    pytest.param(
        pod(containers=ones(5), init=[sidecar(4)], selector=ON_NV), capacity_ctx, EXCEEDS, id="sidecar-summed"
    ),
    pytest.param(
        pod(containers=ones(1), init=[sidecar(2), init(7)], selector=ON_NV),
        capacity_ctx,
        EXCEEDS,
        id="init-after-sidecar",
    ),
    pytest.param(
        pod(containers=ones(1), init=[init(7), sidecar(2)], selector=ON_NV),
        capacity_ctx,
        None,
        id="init-before-sidecar",
    ),
    # Its allocatable once the pool's config is applied there (6: say one GPU is unhealthy).
    pytest.param(
        pod(containers=ones(7), selector=ON_NV),
        lambda m: capacity_ctx(m, alloc={NVG: "6"}),
        EXCEEDS,
        id="allocatable",
    ),
    # Unknown size: admitted, as before.
    pytest.param(
        pod(containers=ones(99), selector=ON_NV),
        lambda m: capacity_ctx(m, gpus=None),
        None,
        id="unknown-size",
    ),
    # Judged on the nodes the pod can land on: by a label only the pool's node carries.
    pytest.param(pod(containers=ones(9), selector=A100), capacity_ctx, EXCEEDS, id="by-label"),
]


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize(("obj", "make_ctx", "rule"), CAPACITY)
def test_capacity(obj: dict[str, Any], make_ctx: Any, rule: str | None, mode: str) -> None:
    assert ids(evaluate(obj, make_ctx(mode))) == expect(rule, mode)


@pytest.mark.parametrize("spec", NVIDIA_SPECS, ids=spec_id)
def test_capacity_under_every_nvidia_spec(spec: dict[str, Any]) -> None:
    """GPUs x replicas of the resource the pool advertises (replicas 1 for strategy None)."""
    ctx = capacity_ctx(**spec)
    most = 2 * spec["replicas"]
    resource = offered(spec)
    assert ids(evaluate(pod(containers=ones(most, resource), selector=ON_NV), ctx)) == []
    (finding,) = evaluate(pod(containers=ones(most + 1, resource), selector=ON_NV), ctx)
    assert (finding.rule_id, finding.verdict) == (EXCEEDS, "deny")
    assert f'asks for {most + 1} "{resource}" in all' in finding.message
    assert f"no node it can land on offers more than {most} (pool nv {most})" in finding.message


def test_a_pod_without_a_target_is_judged_against_every_known_node() -> None:
    """Only ``gpushare check`` judges such a pod (the webhook's gate does not send it): no known
    node offers 9 nvidia.com/gpu (the pool's node 8, a node outside the pools 4)."""
    from gpushare.admission import requests_gpu_sharing

    pools = capacity_ctx()
    ctx = Context.build(pools.pools, (*pools.nodes, node("whole-1", {}, {NVG: "4"})))
    wide = pod(containers=ones(9))
    assert not requests_gpu_sharing(wide)
    (finding,) = evaluate(wide, ctx)
    assert (finding.rule_id, finding.verdict) == (EXCEEDS, "deny")
    assert "no known node offers more than 8 (pool nv 8, whole-1 4)" in finding.message
    assert evaluate(pod(containers=ones(8)), ctx) == []
    assert evaluate(pod(containers=ones(9)), Context.build(pools.pools)) == []  # no node known: admitted


# --- MIG pools ------------------------------------------------------------------------------------
#
# What a MIG pool's nodes advertise: NVIDIA's device plugin (README, "--mig-strategy") advertises
# each MIG device as nvidia.com/mig-<profile> under the mixed strategy (a GPU with MIG disabled as
# nvidia.com/gpu) and, under single, every GPU's devices (one profile) as nvidia.com/gpu; each
# device counts once per time-slicing replica of its profile (NVIDIA's a100-40gb example). NVIDIA's
# MIG manager (mig-parted v0.10.0, cmd/nvidia-mig-parted/assert/assert.go
# WalkSelectedMigConfigForEachGPU) applies an entry to the GPUs its device-filter matches and skips
# the others; every entry gpushare writes enables MIG. A node of the pool has the profile's devices
# per GPU x its GPUs (GPU Feature Discovery's count here) x the profile's replicas.

PROFILE = "GS022-nvidia-mig-profile-not-offered"
WHOLE = "GS023-nvidia-whole-gpu-on-mig"
KIND = "GS009-pool-kind-mismatch"
M1, M2, M3, M7 = (f"nvidia.com/mig-{p}" for p in ("1g.5gb", "2g.10gb", "3g.20gb", "7g.40gb"))
ON_MIG = {"gpushare.io/pool": "mig"}

#: The MIG pools of the table, by name: mixed (3g.20gb + 2g.10gb + 1g.5gb per GPU, 1g.5gb
#: time-sliced x4), single (7 x 1g.5gb), mixed per GPU model only (deviceFilter), a named config.
MIG_SPECS: dict[str, dict[str, Any]] = {
    "mixed": {
        "strategy": "mixed",
        "geometry": [{"profiles": {"3g.20gb": 1, "2g.10gb": 1, "1g.5gb": 1}}],
        "timeSlicing": [{"profile": "1g.5gb", "replicas": 4}],
    },
    "single": {"strategy": "single", "geometry": [{"profiles": {"1g.5gb": 7}}]},
    "filtered": {"geometry": [{"deviceFilter": ["0x20B010DE"], "profiles": {"3g.20gb": 2}}]},
    "named": {"config": "all-1g.5gb"},
}


def mig_ctx(mode: str, spec: str, gpus: str | None = "2") -> Context:
    """The MIG pool ``mig`` of ``MIG_SPECS[spec]`` with one node of ``gpus`` GPUs (GPU Feature
    Discovery's count; None: unknown), a TimeSlicing pool ``ts`` and an ACK pool ``cgpu``, each
    with a node."""
    pool = nv_pool("mig", {NP: "np-mig"}, mode, strategy="MIG", replicas=1, mig=MIG_SPECS[spec])
    labels = {NP: "np-mig", **({"nvidia.com/gpu.count": gpus} if gpus else {})}
    pools = (pool, nv_pool("ts", {NP: "np-ts"}, mode), ack_pool("cgpu", {NP: "np-cgpu"}, mode))
    nodes = (
        node("mig-1", labels),
        node("ts-1", {NP: "np-ts", "nvidia.com/gpu.count": "2"}),
        node("cgpu-1", {NP: "np-cgpu"}, {MEM: "30"}),
    )
    return Context.build(pools, nodes)


def mig_init(resource: str, count: int) -> dict[str, Any]:
    return {**container({resource: count}), "name": "init"}


MIG_CASES = [
    # 1. A profile the pool offers, and one it does not (not in the geometry; any under single).
    pytest.param(pod({M3: 1}, selector=ON_MIG), "mixed", None, id="profile-in-geometry"),
    pytest.param(pod({M7: 1}, selector=ON_MIG), "mixed", PROFILE, id="profile-not-in-geometry"),
    pytest.param(pod({M7: 1}, selector={NP: "np-mig"}), "mixed", PROFILE, id="profile-by-nodepool-label"),
    pytest.param(
        pod(containers=[container({M1: 1}), {**container({M7: 1}), "name": "second"}], selector=ON_MIG),
        "mixed",
        PROFILE,
        id="one-of-two-profiles-not-offered",
    ),
    pytest.param(pod({M1: 1}, selector=ON_MIG), "single", PROFILE, id="any-profile-under-single"),
    pytest.param(pod({NVG: 7}, selector=ON_MIG), "single", None, id="slices-as-gpu-under-single"),
    pytest.param(pod({M7: 1}, selector=ON_MIG), "named", None, id="named-config-not-judged"),
    # 2. More slices than a node has: 1 x 3g.20gb per GPU x 2 GPUs = 2; 1g.5gb x 4 replicas = 8;
    # 7 x 1g.5gb x 2 GPUs = 14 nvidia.com/gpu under single. The pod's effective request.
    pytest.param(pod({M3: 2}, selector=ON_MIG), "mixed", None, id="2-of-2-slices"),
    pytest.param(pod({M3: 3}, selector=ON_MIG), "mixed", EXCEEDS, id="3-of-2-slices"),
    pytest.param(
        pod(containers=[container({M3: 1}), {**container({M3: 2}), "name": "second"}], selector=ON_MIG),
        "mixed",
        EXCEEDS,
        id="slices-summed",
    ),
    pytest.param(
        pod({M3: 1}, init=[mig_init(M3, 2)], selector=ON_MIG), "mixed", None, id="init-at-its-peak-fits"
    ),
    pytest.param(
        pod({M3: 1}, init=[mig_init(M3, 3)], selector=ON_MIG), "mixed", EXCEEDS, id="init-alone-exceeds"
    ),
    pytest.param(pod({M1: 8}, selector=ON_MIG), "mixed", None, id="time-sliced-8-of-8"),
    pytest.param(pod({M1: 9}, selector=ON_MIG), "mixed", EXCEEDS, id="time-sliced-9-of-8"),
    pytest.param(pod({NVG: 15}, selector=ON_MIG), "single", EXCEEDS, id="single-15-of-14"),
    pytest.param(pod({M7: 9}, selector=ON_MIG), "named", None, id="named-config-size-unknown"),
    # 3. MIG profiles aimed at a pool without MIG: GS009 (a TimeSlicing pool, an ACK pool).
    pytest.param(
        pod({M3: 1}, selector={"gpushare.io/pool": "ts"}), "mixed", KIND, id="profile-on-timeslicing"
    ),
    pytest.param(pod({M3: 1}, selector={NP: "np-cgpu"}), "mixed", KIND, id="profile-on-ack"),
    # ... and what a MIG pool never offers: ACK's sharing, nvidia.com/gpu.shared (GS009).
    pytest.param(pod({MEM: 2}, selector=ON_MIG), "mixed", KIND, id="ack-on-mig"),
    pytest.param(pod({NVS: 1}, selector=ON_MIG), "single", KIND, id="shared-on-mig"),
    # 4. Whole GPUs on a mixed pool whose GPUs are all MIG-enabled; not where some may not be.
    pytest.param(pod({NVG: 1}, selector=ON_MIG), "mixed", WHOLE, id="whole-gpu-on-all-mig"),
    pytest.param(pod({NVG: 1}, selector=ON_MIG), "filtered", None, id="whole-gpu-beside-filtered-entry"),
    pytest.param(pod({NVG: 1}, selector=ON_MIG), "named", None, id="whole-gpu-on-named-config"),
]


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize(("obj", "spec", "rule"), MIG_CASES)
def test_mig_pools(obj: dict[str, Any], spec: str, rule: str | None, mode: str) -> None:
    assert ids(evaluate(obj, mig_ctx(mode, spec))) == expect(rule, mode)


def test_mig_messages_name_the_object_container_resource_value_rule_and_fix() -> None:
    ctx = mig_ctx("Enforce", "mixed")
    (f,) = evaluate(pod({M7: 1}, selector=ON_MIG), ctx)
    assert f.message == (
        f'Pod/default/p: container "main": resources.limits["{M7}"]=1 asks for the MIG device "{M7}", but MIG'
        " pool mig"
        " cuts its GPUs into 1g.5gb, 2g.10gb, 3g.20gb devices only (spec.nvidia.mig.geometry); NVIDIA's MIG"
        f" manager creates no 7g.40gb device there, so no node advertises {M7} and the pod would stay Pending"
        f' (rule {PROFILE}); ask for one of {M1}, {M2}, {M3} (e.g. "{M1}"), or add 7g.40gb to the geometry'
        " of pool mig"
    )
    (f,) = evaluate(pod({M1: 1}, selector=ON_MIG), mig_ctx("Enforce", "single"))
    assert (f.container, f.value) == ("main", "1")
    assert "runs the device plugin's single MIG strategy" in f.message
    assert 'ask for "nvidia.com/gpu" (one 1g.5gb slice each) on pool mig' in f.message
    (f,) = evaluate(pod({NVG: 2}, selector=ON_MIG), ctx)
    assert f.message.startswith('Pod/default/p: container "main": resources.limits["nvidia.com/gpu"]=2 asks')
    assert "every GPU of MIG pool mig is MIG-enabled" in f.message and f"(rule {WHOLE})" in f.message
    assert f'ask for a MIG profile instead, e.g. resources.limits["{M1}"]: 2' in f.message
    (f,) = evaluate(pod({M1: 9}, selector=ON_MIG), ctx)
    assert (f.rule_id, f.value) == (EXCEEDS, "9")
    assert (
        f'asks for 9 "{M1}" in all (the pod\'s effective request: containers summed, init containers at'
        " their peak), but no node of MIG pool mig has more than 8 (1 x 1g.5gb per GPU x 4 time-slicing"
        f" replicas x 2 GPU(s)); the pod would stay Pending (Insufficient {M1})"
    ) in f.message
    assert "give pool mig more 1g.5gb devices per GPU" in f.message
    (f,) = evaluate(pod({M3: 1}, selector={"gpushare.io/pool": "ts"}), ctx)
    assert "names no MIG device" in f.message
    assert (
        f"for {M3}, target a MIG pool that offers it, e.g. nodeSelector {{gpushare.io/pool: mig}}"
        in f.message
    )
    (f,) = evaluate(pod({NVS: 1}, selector=ON_MIG), ctx)
    assert f'the pool\'s nodes advertise "{M1} or {M2} or {M3}" (pool mig: MIG, strategy mixed)' in f.message


def test_mig_capacity_needs_the_nodes_gpus_and_judges_a_pod_without_target_too() -> None:
    """Unknown GPUs: the node's size is unknown, the pod admitted. Without node constraints (only
    ``gpushare check`` judges it) the slices count against every known node."""
    assert evaluate(pod({M3: 3}, selector=ON_MIG), mig_ctx("Enforce", "mixed", gpus=None)) == []
    (f,) = evaluate(pod({M3: 3}), mig_ctx("Enforce", "mixed"))
    assert (f.rule_id, f.verdict) == (EXCEEDS, "deny")
    assert "no known node offers more than 2 (pool mig 2)" in f.message
