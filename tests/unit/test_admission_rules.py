"""The admission rules engine, rule by rule (table-driven), plus targeting, pool modes and pools."""

from __future__ import annotations

import copy
import json
import re
from typing import Any, cast

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpushare.admission import RULES, Context, Finding, evaluate, node_info, pod_specs, requests_gpu_sharing
from gpushare.api.loan import LoanRecord
from gpushare.api.v1alpha1 import GPUSharePool, parse_pool
from gpushare.rulekit.quantity import parse_amount

MEM = "aliyun.com/gpu-mem"
CORE = "aliyun.com/gpu-core.percentage"


def container(
    name: str = "main",
    limits: dict[str, Any] | None = None,
    requests: dict[str, Any] | None = None,
) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if limits is not None:
        resources["limits"] = limits
    if requests is not None:
        resources["requests"] = requests
    return {"name": name, "image": "busybox", "resources": resources}


def pod(
    limits: dict[str, Any] | None = None,
    *,
    selector: dict[str, str] | None = None,
    affinity_terms: list[list[dict[str, Any]]] | None = None,
    containers: list[dict[str, Any]] | None = None,
    init: list[dict[str, Any]] | None = None,
    name: str = "p",
    namespace: str = "default",
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": containers if containers is not None else [container(limits=limits)]
    }
    if init:
        spec["initContainers"] = init
    if selector is not None:
        spec["nodeSelector"] = selector
    if affinity_terms is not None:
        spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": t} for t in affinity_terms]
                }
            }
        }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def wrap(pod_obj: dict[str, Any], kind: str, name: str = "w") -> dict[str, Any]:
    """The pod's spec as the template of a workload of ``kind``."""
    template = {"metadata": {"labels": {"app": name}}, "spec": copy.deepcopy(pod_obj["spec"])}
    meta = {"name": name, "namespace": "default"}
    api = {"Job": "batch/v1", "CronJob": "batch/v1", "ReplicationController": "v1", "PodTemplate": "v1"}
    obj: dict[str, Any] = {"apiVersion": api.get(kind, "apps/v1"), "kind": kind, "metadata": meta}
    if kind == "CronJob":
        obj["spec"] = {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": template}}}
    elif kind == "PodTemplate":
        obj["template"] = template
    else:
        obj["spec"] = {"selector": {"matchLabels": {"app": name}}, "template": template}
    return obj


def pool_obj(
    name: str,
    nodepool: str | None = None,
    *,
    isolation: bool = True,
    compute: bool = False,
    mode: str = "Enforce",
    selector: dict[str, Any] | None = None,
) -> dict[str, Any]:
    sel = (
        selector
        if selector is not None
        else {"matchLabels": {"alibabacloud.com/nodepool-id": nodepool or f"np-{name}"}}
    )
    return {
        "apiVersion": "gpushare.io/v1alpha1",
        "kind": "GPUSharePool",
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": sel,
            "memoryIsolation": isolation,
            "computeAllocation": compute,
            "admission": {"mode": mode},
        },
    }


def pool(name: str, nodepool: str | None = None, **kw: Any) -> GPUSharePool:
    return parse_pool(pool_obj(name, nodepool, **kw))


def node_obj(
    name: str,
    labels: dict[str, str],
    *,
    gpu_mem: int | None = None,
    gpus: int | None = None,
    inventory_mib: list[int] | None = None,
) -> dict[str, Any]:
    alloc: dict[str, str] = {}
    if gpu_mem is not None:
        alloc[MEM] = str(gpu_mem)
    if gpus is not None:
        alloc["aliyun.com/gpu-count"] = str(gpus)
    meta: dict[str, Any] = {"name": name, "labels": labels}
    if inventory_mib is not None:
        gpus_json = [
            {"index": i, "uuid": f"GPU-{i}", "name": "T4", "memoryMiB": m}
            for i, m in enumerate(inventory_mib)
        ]
        meta["annotations"] = {"gpushare.io/gpu-inventory": json.dumps({"state": "ok", "gpus": gpus_json})}
    return {"apiVersion": "v1", "kind": "Node", "metadata": meta, "status": {"allocatable": alloc}}


#: The three seed pools (cgpu, cgpu-no-isolation, gpu-core), by ACK node pool id.
SEED_POOLS = (
    pool("cgpu"),
    pool("cgpu-no-isolation", isolation=False),
    pool("gpu-core", compute=True),
)
SEED_CTX = Context.build(SEED_POOLS)


def nvidia_pool(name: str, mode: str = "Enforce", **nvidia: Any) -> GPUSharePool:
    """An NVIDIA device-plugin pool (TimeSlicing, 4 replicas unless ``nvidia`` says otherwise)."""
    return parse_pool(
        {
            "apiVersion": "gpushare.io/v1alpha1",
            "kind": "GPUSharePool",
            "metadata": {"name": name},
            "spec": {
                "nodeSelector": {"matchLabels": {"alibabacloud.com/nodepool-id": f"np-{name}"}},
                "nvidia": {"strategy": "TimeSlicing", "replicas": 4, **nvidia},
                "admission": {"mode": mode},
            },
        }
    )


#: The seed pools and four NVIDIA pools: plain time-slicing, failing requests > 1, MPS, renamed.
NV_POOLS = (
    nvidia_pool("ts"),
    nvidia_pool("ts-strict", failRequestsGreaterThanOne=True),
    nvidia_pool("mps", strategy="MPS", replicas=2),
    nvidia_pool("ts-shared", renameByDefault=True, failRequestsGreaterThanOne=True),
)
NV_CTX = Context.build((*SEED_POOLS, *NV_POOLS))
#: A MIG pool's geometry: every GPU cut into 2 x 3g.20gb (mixed strategy).
MIG_MIXED = {"strategy": "mixed", "geometry": [{"profiles": {"3g.20gb": 2}}]}
NVG = "nvidia.com/gpu"
NVS = "nvidia.com/gpu.shared"


def on(pool_name: str) -> dict[str, str]:
    return {"gpushare.io/pool": pool_name}


def seed_nodes(per_gpu_mib: int = 15360) -> Context:
    nodes = [
        node_info(
            node_obj(
                f"{p.name}-n1",
                {"alibabacloud.com/nodepool-id": f"np-{p.name}", "kubernetes.io/hostname": f"{p.name}-n1"},
                inventory_mib=[per_gpu_mib] * 2,
            )
        )
        for p in SEED_POOLS
    ]
    return Context.build(SEED_POOLS, nodes)


def labelled(pod_obj: dict[str, Any], count: str) -> dict[str, Any]:
    """The pod with ACK's multi-GPU label ``aliyun.com/gpu-count``."""
    out = copy.deepcopy(pod_obj)
    out["metadata"]["labels"] = {"aliyun.com/gpu-count": count}
    return out


def ids(findings: list[Finding]) -> list[tuple[str, str]]:
    return [(f.rule_id, f.verdict) for f in findings]


# --- quantities -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "value", "error"),
    [
        pytest.param(2, 2, None, id="int"),
        pytest.param("2", 2, None, id="string"),
        pytest.param("30", 30, None, id="string-30"),
        pytest.param(0, 0, None, id="zero"),
        pytest.param(" 7 ", 7, None, id="spaces"),
        pytest.param("1.5", None, "not a whole number", id="fraction-string"),
        pytest.param(1.5, None, "not a whole number", id="float"),
        pytest.param(2.0, None, "not a whole number", id="float-whole"),
        pytest.param("2Gi", None, "unit suffix 'Gi'", id="suffix"),
        # judged as the apiserver stores it: every spelling of a whole amount is that amount
        pytest.param("2000m", 2, None, id="milli"),
        pytest.param("2E", 2 * 10**18, None, id="exa"),
        pytest.param("2e3", 2000, None, id="exponent"),
        pytest.param("+2", 2, None, id="plus"),
        pytest.param("0.5Ki", 512, None, id="binary-below-1Ki"),
        pytest.param("1Ki", None, "unit suffix 'Ki'", id="binary-kept"),
        pytest.param("1500m", None, "not a whole number", id="milli-fraction"),
        pytest.param("1.5Ki", 1536, None, id="binary-stored-as-decimal"),
        pytest.param("007", 7, None, id="leading-zeros"),
        pytest.param("-abc", None, "negative", id="negative-word"),
        pytest.param("2GB", None, "not a number", id="unknown-suffix"),
        pytest.param("-1", None, "negative", id="negative-string"),
        pytest.param(-1, None, "negative", id="negative-int"),
        pytest.param("abc", None, "not a number", id="word"),
        pytest.param("", None, "not a number", id="empty-string"),
        pytest.param(None, None, "empty", id="null"),
        pytest.param(True, None, "boolean", id="bool"),
        pytest.param([1], None, "list", id="list"),
    ],
)
def test_parse_quantity(raw: Any, value: int | None, error: str | None) -> None:
    q = parse_amount(raw)
    assert q.value == value
    if error is None:
        assert q.error is None
    else:
        assert q.error is not None and error in q.error


# --- pod specs ------------------------------------------------------------------------------------

GPU_POD = pod({MEM: 2, CORE: 30}, selector={"gpushare.io/pool": "gpu-core"})


@pytest.mark.parametrize(
    ("kind", "path"),
    [
        pytest.param("Deployment", "spec.template.spec", id="deployment"),
        pytest.param("StatefulSet", "spec.template.spec", id="statefulset"),
        pytest.param("DaemonSet", "spec.template.spec", id="daemonset"),
        pytest.param("ReplicaSet", "spec.template.spec", id="replicaset"),
        pytest.param("ReplicationController", "spec.template.spec", id="replicationcontroller"),
        pytest.param("Job", "spec.template.spec", id="job"),
        pytest.param("CronJob", "spec.jobTemplate.spec.template.spec", id="cronjob"),
        pytest.param("PodTemplate", "template.spec", id="podtemplate"),
    ],
)
def test_pod_specs_of_workloads(kind: str, path: str) -> None:
    obj = wrap(GPU_POD, kind)
    ((found_path, spec),) = pod_specs(obj)
    assert found_path == path
    assert spec["nodeSelector"] == {"gpushare.io/pool": "gpu-core"}
    assert requests_gpu_sharing(obj)


def test_pod_specs_of_a_pod_and_other_kinds() -> None:
    assert pod_specs(GPU_POD) == [("spec", GPU_POD["spec"])]
    assert pod_specs({"kind": "ConfigMap", "data": {}}) == []
    assert pod_specs({"kind": "Deployment", "spec": "oops"}) == []
    assert pod_specs({"kind": "Job", "spec": {"template": None}}) == []
    assert pod_specs({"spec": {}}) == []


def test_workload_findings_point_into_the_template() -> None:
    bad = pod({MEM: 2, CORE: 33}, selector={"gpushare.io/pool": "gpu-core"})
    (finding,) = evaluate(wrap(bad, "CronJob", "nightly"), SEED_CTX)
    assert finding.rule_id == "GS001-core-percentage-step"
    assert finding.object == "CronJob/default/nightly"
    assert finding.field == (
        'spec.jobTemplate.spec.template.spec.containers[0].resources.limits["aliyun.com/gpu-core.percentage"]'
    )


def test_every_backends_pod_rules_are_driven_ack_first() -> None:
    """``admission.rules`` offers each pod to every backend's pod rules (a backend without them
    fails here), ACK's first: a pod asking for ACK's sharing and NVIDIA's shared GPUs is claimed by
    both, judged by ACK's (GS018), and NVIDIA's rules say nothing of it."""
    from gpushare.admission.rules import POD_RULES
    from gpushare.backends import BACKENDS
    from gpushare.backends.nvidia import MIG
    from gpushare.rulekit.podspecs import pod_likes

    # MIG pools' pods ask for nvidia.com/*: NVIDIA's pod rules judge them (MIG's own rules: not yet).
    assert [rules.name for rules in POD_RULES] == [name for name in BACKENDS if name != MIG.name]
    (mig_like,) = pod_likes(pod({"nvidia.com/mig-1g.5gb": 1}))
    assert [rules.name for rules in POD_RULES if rules.judges(mig_like)] == ["nvidia"]
    both = pod({MEM: 2, "nvidia.com/gpu.shared": 1}, selector=CGPU_SEL)
    (like,) = pod_likes(both)
    assert [rules.name for rules in POD_RULES if rules.judges(like)] == ["ack", "nvidia"]
    assert [f.rule_id for f in evaluate(both, SEED_CTX)] == ["GS018-shared-and-whole-gpu"]
    shared = pod({"nvidia.com/gpu.shared": 1}, selector=CGPU_SEL)
    (like,) = pod_likes(shared)
    assert [rules.name for rules in POD_RULES if rules.judges(like)] == ["nvidia"]
    assert [f.rule_id for f in evaluate(shared, SEED_CTX)] == ["GS009-pool-kind-mismatch"]


def test_objects_without_gpu_requests_have_no_findings() -> None:
    plain = pod({"cpu": "1", "nvidia.com/gpu": 1})
    assert not requests_gpu_sharing(plain)
    assert evaluate(plain, SEED_CTX) == []
    assert evaluate(wrap(plain, "Deployment"), SEED_CTX) == []
    assert evaluate({"kind": "Pod"}) == []
    assert evaluate("not an object") == []
    assert evaluate({"kind": "ConfigMap", "data": {MEM: "x"}}) == []


# --- the rule table -------------------------------------------------------------------------------

CORE_SEL = {"gpushare.io/pool": "gpu-core"}
CGPU_SEL = {"gpushare.io/pool": "cgpu"}
SHARE_SEL = {"gpushare.io/pool": "cgpu-no-isolation"}
NONE: Context = Context()

RULE_CASES = [
    # GS012: a misspelled aliyun.com/gpu* name (no node offers it; the pod would stay Pending)
    pytest.param(
        pod({MEM: 2, "aliyun.com/gpu-core": 50}, selector=CGPU_SEL),
        SEED_CTX,
        [("GS012-unknown-gpu-resource", "deny")],
        id="gpu-core-typo",
    ),
    # GS001 / GS002: core percentage
    pytest.param(pod({MEM: 2, CORE: 30}, selector=CORE_SEL), SEED_CTX, [], id="cuda-sample-ok"),
    pytest.param(pod({MEM: 2, CORE: 5}, selector=CORE_SEL), SEED_CTX, [], id="core-5-ok"),
    pytest.param(pod({MEM: 2, CORE: 100}, selector=CORE_SEL), SEED_CTX, [], id="core-100-ok"),
    pytest.param(pod({MEM: 2, CORE: "30"}, selector=CORE_SEL), SEED_CTX, [], id="core-string-ok"),
    pytest.param(
        pod({MEM: 2, CORE: 33}, selector=CORE_SEL),
        SEED_CTX,
        [("GS001-core-percentage-step", "deny")],
        id="core-33",
    ),
    pytest.param(
        pod({MEM: 2, CORE: "1.5"}, selector=CORE_SEL),
        SEED_CTX,
        [("GS001-core-percentage-step", "deny")],
        id="core-frac",
    ),
    pytest.param(
        pod({MEM: 2, CORE: "abc"}, selector=CORE_SEL),
        SEED_CTX,
        [("GS001-core-percentage-step", "deny")],
        id="core-abc",
    ),
    pytest.param(
        pod({MEM: 2, CORE: "-5"}, selector=CORE_SEL),
        SEED_CTX,
        [("GS001-core-percentage-step", "deny")],
        id="core-neg",
    ),
    pytest.param(
        pod({MEM: 2, CORE: 0}, selector=CORE_SEL),
        SEED_CTX,
        [("GS002-core-percentage-range", "deny")],
        id="core-0",
    ),
    pytest.param(
        pod({MEM: 2, CORE: 105}, selector=CORE_SEL),
        SEED_CTX,
        [("GS002-core-percentage-range", "deny")],
        id="core-105",
    ),
    pytest.param(
        pod({MEM: 2, CORE: 103}, selector=CORE_SEL),
        SEED_CTX,
        [("GS002-core-percentage-range", "deny")],
        id="core-103",
    ),
    # GS003: core without mem (still a compute pod for targeting)
    pytest.param(
        pod({CORE: 30}, selector=CORE_SEL),
        SEED_CTX,
        [("GS003-core-without-mem", "deny")],
        id="core-without-mem",
    ),
    pytest.param(
        pod(containers=[container("a", {MEM: 2}), container("b", {CORE: 30})], selector=CORE_SEL),
        SEED_CTX,
        [("GS003-core-without-mem", "deny")],
        id="core-and-mem-in-different-containers",
    ),
    # GS004: gpu-mem quantity
    pytest.param(pod({MEM: 3}, selector=CGPU_SEL), SEED_CTX, [], id="mem-ok"),
    pytest.param(
        pod({MEM: 0}, selector=CGPU_SEL), SEED_CTX, [("GS004-mem-positive-integer", "deny")], id="mem-0"
    ),
    pytest.param(
        pod({MEM: "2Gi"}, selector=CGPU_SEL), SEED_CTX, [("GS004-mem-positive-integer", "deny")], id="mem-2Gi"
    ),
    pytest.param(
        pod({MEM: "1.5"}, selector=CGPU_SEL), SEED_CTX, [("GS004-mem-positive-integer", "deny")], id="mem-1.5"
    ),
    pytest.param(
        pod({MEM: "-1"}, selector=CGPU_SEL), SEED_CTX, [("GS004-mem-positive-integer", "deny")], id="mem-neg"
    ),
    pytest.param(
        pod({MEM: "abc"}, selector=CGPU_SEL), SEED_CTX, [("GS004-mem-positive-integer", "deny")], id="mem-abc"
    ),
    # GS006: requests vs limits
    pytest.param(
        pod(containers=[container(limits={MEM: 2}, requests={MEM: "2"})], selector=CGPU_SEL),
        SEED_CTX,
        [],
        id="requests-equal-limits",
    ),
    pytest.param(
        pod(containers=[container(limits={MEM: 2}, requests={MEM: 1})], selector=CGPU_SEL),
        SEED_CTX,
        [("GS006-request-limit-mismatch", "deny")],
        id="requests-differ",
    ),
    pytest.param(
        pod(
            containers=[container(limits={MEM: 2, CORE: 30}, requests={MEM: 2, CORE: 20})], selector=CORE_SEL
        ),
        SEED_CTX,
        [("GS006-request-limit-mismatch", "deny")],
        id="core-requests-differ",
    ),
    pytest.param(
        pod(containers=[container(requests={MEM: 2})], selector=CGPU_SEL),
        SEED_CTX,
        [("GS006-request-limit-mismatch", "deny")],
        id="requests-without-limits",
    ),
    # GS007: no targeting at all (with and without pools)
    pytest.param(pod({MEM: 3}), SEED_CTX, [("GS007-pool-target-missing", "deny")], id="no-selector"),
    pytest.param(pod({MEM: 3}), NONE, [("GS007-pool-target-missing", "deny")], id="no-selector-no-pools"),
    pytest.param(
        pod(init=[container("init", {MEM: 1})], containers=[container("app", {"cpu": 1})]),
        NONE,
        [("GS007-pool-target-missing", "deny")],
        id="init-container-counts",
    ),
    # GS008: more than one kind
    pytest.param(
        pod({MEM: 3}, selector={"cgpu": "true"}),
        NONE,
        [("GS008-pool-target-ambiguous", "deny")],
        id="cgpu-true-alone",
    ),
    pytest.param(
        pod({MEM: 3}, selector={"cgpu": "true"}),
        SEED_CTX,
        [("GS008-pool-target-ambiguous", "deny")],
        id="cgpu-true-alone-with-pools",
    ),
    pytest.param(
        pod({MEM: 3}, selector={"cgpu.disable.isolation": "false"}),
        SEED_CTX,
        [("GS008-pool-target-ambiguous", "deny")],
        id="seed-selector-with-a-compute-pool",
    ),
    pytest.param(
        pod({MEM: 3}, selector={"disktype": "ssd"}),
        SEED_CTX,
        [("GS008-pool-target-ambiguous", "deny")],
        id="unrelated-label",
    ),
    pytest.param(
        pod(
            {MEM: 3},
            affinity_terms=[[{"key": "gpushare.io/pool", "operator": "In", "values": ["cgpu", "gpu-core"]}]],
        ),
        SEED_CTX,
        [("GS008-pool-target-ambiguous", "deny")],
        id="affinity-in-two-kinds",
    ),
    pytest.param(
        pod(
            {MEM: 3},
            affinity_terms=[
                [{"key": "gpushare.io/pool", "operator": "In", "values": ["cgpu"]}],
                [{"key": "ack.node.gpu.schedule", "operator": "In", "values": ["core_mem"]}],
            ],
        ),
        SEED_CTX,
        [("GS008-pool-target-ambiguous", "deny")],
        id="affinity-terms-are-ored",
    ),
    # one kind: OK
    pytest.param(
        pod({MEM: 3}, selector={"cgpu.disable.isolation": "false"}),
        NONE,
        [],
        id="seed-selector-without-pools",
    ),
    pytest.param(
        pod({MEM: 3}, selector={"cgpu.disable.isolation": "false"}),
        Context.build([SEED_POOLS[0], SEED_POOLS[1]]),
        [],
        id="seed-selector-without-a-compute-pool",
    ),
    pytest.param(
        pod({MEM: 3}, selector={"cgpu.disable.isolation": "false", "ack.node.gpu.schedule": "cgpu"}),
        SEED_CTX,
        [],
        id="isolation-and-schedule",
    ),
    pytest.param(
        pod({MEM: 3}, selector={"alibabacloud.com/nodepool-id": "np-cgpu"}),
        SEED_CTX,
        [],
        id="pool-by-its-own-selector",
    ),
    pytest.param(
        pod(
            {MEM: 3},
            affinity_terms=[
                [
                    {"key": "gpushare.io/pool", "operator": "In", "values": ["cgpu", "gpu-core"]},
                    {"key": "ack.node.gpu.schedule", "operator": "NotIn", "values": ["core_mem"]},
                ]
            ],
        ),
        SEED_CTX,
        [],
        id="affinity-expressions-are-anded",
    ),
    pytest.param(
        pod(
            {MEM: 3},
            selector={"gpushare.io/pool": "cgpu"},
            affinity_terms=[[{"key": "zone", "operator": "Exists"}]],
        ),
        SEED_CTX,
        [],
        id="selector-anded-into-terms",
    ),
    pytest.param(pod({MEM: 3}, selector={"gpushare.io/pool": "whatever"}), NONE, [], id="pool-name-offline"),
    pytest.param(
        pod({MEM: 2, CORE: 30}, selector={"ack.node.gpu.schedule": "core_mem"}), NONE, [], id="core-by-ack"
    ),
    # GS009: kind mismatch
    pytest.param(
        pod({MEM: 3}, selector=CORE_SEL),
        SEED_CTX,
        [("GS009-pool-kind-mismatch", "deny")],
        id="memory-only-on-core",
    ),
    pytest.param(
        pod({MEM: 3}, selector={"ack.node.gpu.schedule": "core_mem"}),
        NONE,
        [("GS009-pool-kind-mismatch", "deny")],
        id="memory-only-on-core-by-ack",
    ),
    pytest.param(
        pod({MEM: 2, CORE: 30}, selector=CGPU_SEL),
        SEED_CTX,
        [("GS009-pool-kind-mismatch", "deny")],
        id="compute-on-memory-pool",
    ),
    pytest.param(
        pod({MEM: 2, CORE: 30}, selector={"cgpu.disable.isolation": "true"}),
        NONE,
        [("GS009-pool-kind-mismatch", "deny"), ("GS010-no-isolation-sizing", "warn")][:1],
        id="compute-on-share-by-ack",
    ),
    # GS010: no isolation
    pytest.param(
        pod({MEM: 3}, selector=SHARE_SEL),
        SEED_CTX,
        [("GS010-no-isolation-sizing", "warn")],
        id="no-isolation-pool",
    ),
    pytest.param(
        pod({MEM: 3}, selector={"cgpu.disable.isolation": "true"}),
        NONE,
        [("GS010-no-isolation-sizing", "warn")],
        id="no-isolation-by-ack",
    ),
    pytest.param(
        pod({MEM: 3}, selector={"ack.node.gpu.schedule": "share"}),
        NONE,
        [("GS010-no-isolation-sizing", "warn")],
        id="share-by-ack",
    ),
    # GS011: nothing matches
    pytest.param(
        pod({MEM: 3}, selector={"gpushare.io/pool": "typo"}),
        SEED_CTX,
        [("GS011-pool-target-unknown", "deny")],
        id="unknown-pool",
    ),
    pytest.param(
        pod({MEM: 3}, selector={"ack.node.gpu.schedule": "default"}),
        NONE,
        [("GS011-pool-target-unknown", "deny")],
        id="exclusive-nodes",
    ),
    pytest.param(
        pod({MEM: 3}, selector={"ack.node.gpu.schedule": "cgpu"}),
        Context.build([SEED_POOLS[2]]),
        [],
        id="ack-nodes-outside-any-pool",
    ),
    # GS005: per-GPU memory (needs nodes)
    pytest.param(pod({MEM: 15, CORE: 30}, selector=CORE_SEL), seed_nodes(), [], id="mem-15-fits"),
    pytest.param(pod({MEM: 20, CORE: 30}, selector=CORE_SEL), SEED_CTX, [], id="mem-20-unknown-gpu"),
    pytest.param(
        pod({MEM: 16, CORE: 30}, selector=CORE_SEL),
        seed_nodes(),
        [("GS005-mem-exceeds-gpu", "deny")],
        id="mem-16-too-big",
    ),
    pytest.param(
        pod(
            containers=[container("a", {MEM: 8, CORE: 30}), container("b", {MEM: 8, CORE: 30})],
            selector=CORE_SEL,
        ),
        seed_nodes(),
        [("GS005-mem-exceeds-gpu", "deny")],
        id="pod-total-too-big",
    ),
    pytest.param(
        pod(
            init=[container("init", {MEM: 10, CORE: 30})],
            containers=[container("a", {MEM: 8, CORE: 30})],
            selector=CORE_SEL,
        ),
        seed_nodes(),
        [],
        id="init-runs-before-app",
    ),
    # GS012: unknown aliyun.com/gpu* names
    pytest.param(
        pod({MEM: 2, "aliyun.com/gpu-core": 50}, selector=CORE_SEL),
        SEED_CTX,
        [("GS012-unknown-gpu-resource", "deny"), ("GS009-pool-kind-mismatch", "deny")],
        id="typo-gpu-core",
    ),
    pytest.param(
        pod({"aliyun.com/gpu-memory": 2}, selector=CGPU_SEL),
        SEED_CTX,
        [("GS012-unknown-gpu-resource", "deny")],
        id="typo-gpu-memory",
    ),
    pytest.param(
        pod({MEM: 2, "aliyun.com/gpu-count": 2}, selector=CGPU_SEL),
        SEED_CTX,
        [("GS012-unknown-gpu-resource", "warn")],
        id="gpu-count-as-resource",
    ),
    # GS013: ACK multi-GPU sharing (pod label aliyun.com/gpu-count)
    pytest.param(labelled(pod({MEM: 24}, selector=CGPU_SEL), "2"), seed_nodes(), [], id="split-24-over-2x15"),
    pytest.param(labelled(pod({MEM: 8}, selector=CGPU_SEL), "2"), seed_nodes(), [], id="split-ack-example"),
    pytest.param(
        labelled(pod({MEM: 7}, selector=CGPU_SEL), "2"),
        seed_nodes(),
        [("GS013-gpu-count-split", "deny")],
        id="split-uneven",
    ),
    pytest.param(
        labelled(pod({MEM: 8, CORE: 30}, selector=CORE_SEL), "2"),
        seed_nodes(),
        [("GS013-gpu-count-split", "deny")],
        id="split-core-mem",
    ),
    pytest.param(
        labelled(pod({MEM: 8}, selector=SHARE_SEL), "2"),
        seed_nodes(),
        [("GS013-gpu-count-split", "deny"), ("GS010-no-isolation-sizing", "warn")],
        id="split-share",
    ),
    pytest.param(
        labelled(pod({MEM: 8}, selector=CGPU_SEL), "two"),
        SEED_CTX,
        [("GS013-gpu-count-split", "deny")],
        id="split-label-not-a-number",
    ),
    pytest.param(
        labelled(pod({MEM: 40}, selector=CGPU_SEL), "2"),
        seed_nodes(),
        [("GS005-mem-exceeds-gpu", "deny")],
        id="split-per-card-too-big",
    ),
    pytest.param(
        pod({MEM: 24}, selector=CGPU_SEL),
        seed_nodes(),
        [("GS005-mem-exceeds-gpu", "deny")],
        id="24-on-one-card-too-big",
    ),
    # GS016: a pod spread over more GPUs than a node of its pool has (seed nodes: 2 GPUs each)
    pytest.param(labelled(pod({MEM: 8}, selector=CGPU_SEL), "2"), seed_nodes(), [], id="count-2-of-2-fits"),
    pytest.param(
        labelled(pod({MEM: 8}, selector=CGPU_SEL), "8"),
        seed_nodes(),
        [("GS016-gpu-count-exceeds-node", "deny")],
        id="count-8-of-2",
    ),
    pytest.param(
        labelled(pod({MEM: 8}, selector=CGPU_SEL), "8"), SEED_CTX, [], id="count-8-pool-count-unknown"
    ),
    pytest.param(
        labelled(pod({MEM: 8}), "4"),
        seed_nodes(),
        [("GS007-pool-target-missing", "deny"), ("GS016-gpu-count-exceeds-node", "deny")],
        id="count-4-no-target-no-pool-has-4",
    ),
    # GS017: spec.nodeName on a GPU-sharing pod (bypasses GPU-sharing scheduling)
    pytest.param(
        {
            **pod({MEM: 2}, selector=CGPU_SEL),
            "spec": {**pod({MEM: 2}, selector=CGPU_SEL)["spec"], "nodeName": "n"},
        },
        SEED_CTX,
        [("GS017-node-name-set", "deny")],
        id="node-name",
    ),
    pytest.param(
        {**pod({"cpu": 1}), "spec": {**pod({"cpu": 1})["spec"], "nodeName": "n"}},
        SEED_CTX,
        [],
        id="node-name-no-gpu",
    ),
    # GS018: GPU sharing and whole GPUs in one container (no node offers both)
    pytest.param(
        pod({MEM: 2, "nvidia.com/gpu": 1}, selector=CGPU_SEL),
        SEED_CTX,
        [("GS018-shared-and-whole-gpu", "deny")],
        id="mem-and-nvidia-gpu",
    ),
    pytest.param(
        pod(containers=[container("a", {MEM: 2}), container("b", {"nvidia.com/gpu": 1})], selector=CGPU_SEL),
        SEED_CTX,
        [("GS018-shared-and-whole-gpu", "deny")],
        id="mem-and-nvidia-gpu-in-two-containers",
    ),
    pytest.param(
        pod(containers=[container("a", {"cpu": 1}), container("b", {"nvidia.com/gpu": 1})]),
        SEED_CTX,
        [],
        id="nvidia-gpu-alone",
    ),
    pytest.param(
        pod({MEM: 2, NVS: 1}, selector=CGPU_SEL),
        NV_CTX,
        [("GS018-shared-and-whole-gpu", "deny")],
        id="mem-and-nvidia-shared-gpu",
    ),
    pytest.param(
        pod(containers=[container("a", {MEM: 2}), container("b", requests={NVS: 1})], selector=CGPU_SEL),
        NV_CTX,
        # Kubernetes' own rule first (a request without its limit: the apiserver refuses the Pod
        # whichever backend judges it), then ACK's
        [("GS020-nvidia-resource-quantity", "deny"), ("GS018-shared-and-whole-gpu", "deny")],
        id="mem-and-nvidia-shared-gpu-in-two-containers",
    ),
    # GS019: more than one shared GPU where NVIDIA's plugin refuses it at Allocate
    pytest.param(
        pod({NVG: 2}, selector=on("ts-strict")),
        NV_CTX,
        [("GS019-nvidia-more-than-one-shared-gpu", "deny")],
        id="nv-2-fail",
    ),
    pytest.param(
        pod({NVG: "2"}, selector={"alibabacloud.com/nodepool-id": "np-mps"}),
        NV_CTX,
        [("GS019-nvidia-more-than-one-shared-gpu", "deny")],
        id="nv-2-mps-by-selector",
    ),
    pytest.param(
        pod({NVS: 3}),
        NV_CTX,
        [("GS019-nvidia-more-than-one-shared-gpu", "deny")],
        id="nv-shared-3-reaches-strict",
    ),
    pytest.param(pod({NVG: 1}, selector=on("ts-strict")), NV_CTX, [], id="nv-1-fail-ok"),
    pytest.param(pod({NVG: 1}, selector=on("mps")), NV_CTX, [], id="nv-1-mps-ok"),
    pytest.param(pod({NVG: 2}, selector=on("ts")), NV_CTX, [], id="nv-2-timeslicing-ok"),
    pytest.param(pod({NVG: 4}), NV_CTX, [], id="nv-whole-gpus-no-selector-ok"),
    pytest.param(
        pod({NVG: 4}, selector={"accelerator": "a100"}), NV_CTX, [], id="nv-whole-gpus-elsewhere-ok"
    ),
    pytest.param(
        pod({NVG: 2}, selector=on("ts-strict")),
        Context.build((nvidia_pool("ts-strict", mode="Warn", failRequestsGreaterThanOne=True),)),
        [("GS019-nvidia-more-than-one-shared-gpu", "warn")],
        id="nv-2-fail-warn-mode",
    ),
    # GS020: Kubernetes refuses a fraction of an extended resource (pkg/apis/core/validation
    # ValidateResourceQuantityValue; more in test_admission_nvidia.py)
    pytest.param(
        pod({NVS: "0.5"}, selector=on("ts-shared")),
        NV_CTX,
        [("GS020-nvidia-resource-quantity", "deny")],
        id="nv-shared-fraction",
    ),
    # GS021: more nvidia.com/gpu than any node it can land on offers (the scheduler's
    # NodeResourcesFit; more in test_admission_nvidia.py): 2 GPUs x 4 replicas on ts's node
    pytest.param(
        pod(containers=[container(f"c{i}", {NVG: 1}) for i in range(9)], selector=on("ts")),
        Context.build(
            NV_POOLS,
            [
                node_info(
                    node_obj("ts-1", {"alibabacloud.com/nodepool-id": "np-ts", "nvidia.com/gpu.count": "2"})
                )
            ],
        ),
        [("GS021-nvidia-request-exceeds-node", "deny")],
        id="nv-9-of-8",
    ),
    # GS022: a MIG profile the MIG pool's geometry does not declare (more in test_admission_nvidia.py)
    pytest.param(
        pod({"nvidia.com/mig-2g.10gb": 1}, selector=on("mig")),
        Context.build((nvidia_pool("mig", strategy="MIG", replicas=1, mig=MIG_MIXED),)),
        [("GS022-nvidia-mig-profile-not-offered", "deny")],
        id="mig-profile-not-in-geometry",
    ),
    # GS023: a whole GPU on a mixed MIG pool whose every GPU is MIG-enabled
    pytest.param(
        pod({NVG: 1}, selector=on("mig")),
        Context.build((nvidia_pool("mig", strategy="MIG", replicas=1, mig=MIG_MIXED),)),
        [("GS023-nvidia-whole-gpu-on-mig", "deny")],
        id="whole-gpu-on-mixed-mig",
    ),
    # GS009: NVIDIA resources aimed at ACK pools, ACK sharing aimed at NVIDIA pools, the other name
    pytest.param(
        pod({NVG: 1}, selector=on("cgpu")),
        NV_CTX,
        [("GS009-pool-kind-mismatch", "deny")],
        id="nv-on-ack-pool",
    ),
    pytest.param(
        pod({NVG: 1}, selector={"ack.node.gpu.schedule": "core_mem"}),
        NV_CTX,
        [("GS009-pool-kind-mismatch", "deny")],
        id="nv-on-ack-schedule",
    ),
    pytest.param(
        pod({NVS: 1}, selector=on("gpu-core")),
        NV_CTX,
        [("GS009-pool-kind-mismatch", "deny")],
        id="nv-shared-on-ack-pool",
    ),
    pytest.param(
        pod({MEM: 2}, selector=on("ts")),
        NV_CTX,
        [("GS009-pool-kind-mismatch", "deny")],
        id="ack-on-nvidia-pool",
    ),
    pytest.param(
        pod({NVG: 1}, selector=on("ts-shared")),
        NV_CTX,
        [("GS009-pool-kind-mismatch", "deny")],
        id="nv-gpu-on-renamed-pool",
    ),
    pytest.param(
        pod({NVS: 1}, selector=on("ts")),
        NV_CTX,
        [("GS009-pool-kind-mismatch", "deny")],
        id="nv-shared-on-plain-pool",
    ),
    pytest.param(pod({NVS: 1}, selector=on("ts-shared")), NV_CTX, [], id="nv-shared-on-renamed-pool-ok"),
    pytest.param(
        pod({MEM: 2}, selector={"alibabacloud.com/nodepool-id": "np-cgpu"}),
        NV_CTX,
        [],
        id="ack-pool-beside-nvidia-ok",
    ),
    # GS011: nvidia.com/gpu.shared that no pool or node it reaches advertises
    pytest.param(
        pod({NVS: 1}, selector={"accelerator": "a100"}),
        SEED_CTX,
        [("GS011-pool-target-unknown", "deny")],
        id="nv-shared-no-renamed-pool",
    ),
    pytest.param(
        pod({NVS: 1}),
        SEED_CTX,
        [("GS011-pool-target-unknown", "deny")],
        id="nv-shared-no-selector-no-renamed-pool",
    ),
    pytest.param(
        pod({NVS: 1}, selector={"accelerator": "a100"}), NV_CTX, [], id="nv-shared-may-reach-renamed-pool"
    ),
    pytest.param(
        pod({NVG: 1}, selector=on("tss")),
        NV_CTX,
        [("GS011-pool-target-unknown", "deny")],
        id="nv-pool-name-typo",
    ),
    # GS014: CGPU_DISABLE in the env
    pytest.param(
        pod(
            containers=[{**container(limits={MEM: 2}), "env": [{"name": "CGPU_DISABLE", "value": "true"}]}],
            selector=CGPU_SEL,
        ),
        SEED_CTX,
        [("GS014-cgpu-disable-env", "warn")],
        id="cgpu-disable-env",
    ),
    # GS015: an unknown kind with a GPU-sharing container
    pytest.param(
        {
            "apiVersion": "example.com/v1",
            "kind": "GPUThing",
            "metadata": {"name": "t", "namespace": "ml"},
            "spec": {"runner": {"template": {"spec": {"containers": [container(limits={MEM: 2})]}}}},
        },
        SEED_CTX,
        [("GS015-workload-kind-unknown", "warn")],
        id="unknown-kind",
    ),
    # One pass: the selector finding and the size finding together.
    pytest.param(
        pod({MEM: 20}),
        seed_nodes(),
        [("GS007-pool-target-missing", "deny"), ("GS005-mem-exceeds-gpu", "deny")],
        id="missing-selector-and-too-big",
    ),
]


@pytest.mark.parametrize(("obj", "ctx", "expected"), RULE_CASES)
def test_rules(obj: dict[str, Any], ctx: Context, expected: list[tuple[str, str]]) -> None:
    assert ids(evaluate(obj, ctx)) == expected


def test_every_pod_rule_has_a_case() -> None:
    covered = {rule for case in RULE_CASES for rule, _ in cast(list[tuple[str, str]], case.values[2])}
    assert covered == {rule for rule in RULES if rule.startswith("GS")}


def test_message_names_object_container_field_value_rule_and_fix() -> None:
    job = wrap(pod({MEM: 2, CORE: 33}, selector=CORE_SEL), "Job", "cuda-sample")
    job["spec"]["template"]["spec"]["containers"][0]["name"] = "cuda-sample"
    (f,) = evaluate(job, SEED_CTX)
    assert f.message == (
        'Job/default/cuda-sample: container "cuda-sample": '
        'resources.limits["aliyun.com/gpu-core.percentage"]=33 is not a multiple of 5'
        " (rule GS001-core-percentage-step); use 30 or 35"
    )
    assert (f.object, f.container, f.value) == ("Job/default/cuda-sample", "cuda-sample", "33")


@pytest.mark.parametrize(
    ("value", "fix"),
    [
        pytest.param(33, "use 30 or 35", id="33"),
        pytest.param(7, "use 5 or 10", id="7"),
        pytest.param(3, None, id="3-is-range"),
        pytest.param(98, "use 95 or 100", id="98"),
    ],
)
def test_core_fix_suggests_neighbours(value: int, fix: str | None) -> None:
    (f,) = evaluate(pod({MEM: 2, CORE: value}, selector=CORE_SEL), SEED_CTX)
    if fix is None:
        assert f.rule_id == "GS002-core-percentage-range"
        assert "use 5 for the smallest share" in f.message
    else:
        assert f.message.endswith(fix)


def test_init_container_is_named_as_such() -> None:
    obj = pod(
        init=[container("setup", {MEM: 2, CORE: 12})],
        containers=[container("app", {MEM: 1, CORE: 5})],
        selector=CORE_SEL,
    )
    (f,) = evaluate(obj, SEED_CTX)
    assert f.rule_id == "GS001-core-percentage-step"
    assert 'init container "setup"' in f.message
    assert f.field == 'spec.initContainers[0].resources.limits["aliyun.com/gpu-core.percentage"]'


def test_suggestions_name_pools_of_the_right_kind() -> None:
    (f,) = evaluate(pod({MEM: 2, CORE: 30}), SEED_CTX)
    assert "gpushare.io/pool: gpu-core" in f.message
    (f,) = evaluate(pod({MEM: 2}), SEED_CTX)
    assert "cgpu pools: cgpu; share pools: cgpu-no-isolation" in f.message and "gpu-core" not in f.message
    # Isolation first: the first suggestion for a memory-only pod is a cgpu pool, never share.
    assert "e.g. nodeSelector {gpushare.io/pool: cgpu}" in f.message


# --- pool admission.mode --------------------------------------------------------------------------


def _ctx_with_mode(mode: str) -> Context:
    return Context.build(
        [
            pool("cgpu", mode=mode),
            pool("cgpu-no-isolation", isolation=False, mode=mode),
            pool("gpu-core", compute=True, mode=mode),
        ]
    )


@pytest.mark.parametrize(
    ("obj", "enforce", "warn"),
    [
        pytest.param(pod({MEM: 3}, selector=CORE_SEL), "deny", "warn", id="GS009"),
        pytest.param(pod({MEM: 3}), "deny", "warn", id="GS007"),
        pytest.param(pod({MEM: 3}, selector={"cgpu": "true"}), "deny", "warn", id="GS008"),
        pytest.param(pod({MEM: 3}, selector={"gpushare.io/pool": "nope"}), "deny", "warn", id="GS011"),
        pytest.param(pod({MEM: 3}, selector=SHARE_SEL), "warn", "warn", id="GS010"),
    ],
)
def test_pool_mode_decides_pool_rules(obj: dict[str, Any], enforce: str, warn: str) -> None:
    (f,) = evaluate(obj, _ctx_with_mode("Enforce"))
    assert f.verdict == enforce
    (g,) = evaluate(obj, _ctx_with_mode("Warn"))
    assert (g.rule_id, g.verdict) == (f.rule_id, warn)
    if enforce == "deny":
        assert "[admission.mode Warn on pool" in g.message
    assert evaluate(obj, _ctx_with_mode("Off")) == []


def test_pool_mode_never_softens_pod_rules() -> None:
    obj = pod({MEM: 2, CORE: 33}, selector=CORE_SEL)
    assert ids(evaluate(obj, _ctx_with_mode("Off"))) == [("GS001-core-percentage-step", "deny")]


def test_strictest_mode_of_reachable_pools_wins() -> None:
    ctx = Context.build([pool("cgpu", mode="Off"), pool("gpu-core", compute=True, mode="Warn")])
    obj = pod({MEM: 3}, selector={"cgpu": "true"})
    assert ids(evaluate(obj, ctx)) == [("GS008-pool-target-ambiguous", "warn")]
    only_off = pod({MEM: 2, CORE: 30}, selector={"gpushare.io/pool": "cgpu"})
    assert evaluate(only_off, ctx) == []


# --- nodes ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("node", "gib"),
    [
        pytest.param(node_obj("n", {}, inventory_mib=[16160, 15360]), 15, id="inventory-smallest-floored"),
        pytest.param(node_obj("n", {}, gpu_mem=60, gpus=4), 15, id="allocatable"),
        pytest.param(node_obj("n", {"gpushare.io/gpu.memory-mib": "24576"}), 24, id="agent-label"),
        pytest.param(node_obj("n", {}, gpu_mem=60), None, id="no-count"),
        pytest.param(node_obj("n", {}), None, id="nothing"),
    ],
)
def test_node_per_gpu_memory(node: dict[str, Any], gib: int | None) -> None:
    assert node_info(node).per_gpu_gib == gib


def test_broken_inventory_annotation_falls_back() -> None:
    node = node_obj("n", {}, gpu_mem=32, gpus=2)
    node["metadata"]["annotations"] = {"gpushare.io/gpu-inventory": "{not json"}
    assert node_info(node).per_gpu_gib == 16


def test_nodes_resolve_targets_by_current_labels() -> None:
    # A node outside any pool carrying ACK core_mem labels makes a hostname selector a compute target.
    nodes = [
        node_info(node_obj("gpu-7", {"ack.node.gpu.schedule": "core_mem", "kubernetes.io/hostname": "gpu-7"}))
    ]
    ctx = Context.build([SEED_POOLS[0]], nodes)
    assert evaluate(pod({MEM: 2, CORE: 30}, selector={"kubernetes.io/hostname": "gpu-7"}), ctx) == []


def test_nodes_resolve_pool_membership_for_host_selectors() -> None:
    ctx = seed_nodes()
    obj = pod({MEM: 3}, selector={"kubernetes.io/hostname": "gpu-core-n1"})
    # The named node is in gpu-core (by its nodepool id): a memory-only pod must not go there.
    assert ids(evaluate(obj, ctx)) == [("GS009-pool-kind-mismatch", "deny")]
    assert evaluate(pod({MEM: 2, CORE: 30}, selector={"kubernetes.io/hostname": "gpu-core-n1"}), ctx) == []
    # Without nodes the hostname says nothing about the pool: no targeting finding.
    assert evaluate(obj, SEED_CTX) == []
    # ... unless other labels decide it.
    with_label = pod({MEM: 3}, selector={"kubernetes.io/hostname": "x", "ack.node.gpu.schedule": "core_mem"})
    assert ids(evaluate(with_label, SEED_CTX)) == [("GS009-pool-kind-mismatch", "deny")]
    by_pool = pod({MEM: 3}, selector={"gpushare.io/pool": "cgpu", "kubernetes.io/hostname": "cgpu-n1"})
    assert evaluate(by_pool, ctx) == []


# --- pools ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        pytest.param(pool_obj("ok"), [], id="valid"),
        pytest.param(
            pool_obj("x", isolation=False, compute=True),
            ["GP002-pool-compute-without-isolation"],
            id="compute-no-iso",
        ),
        pytest.param(pool_obj("x", selector={}), ["GP003-pool-empty-selector"], id="empty-selector"),
        pytest.param(
            {
                "apiVersion": "gpushare.io/v1alpha1",
                "kind": "GPUSharePool",
                "metadata": {"name": "x"},
                "spec": {},
            },
            ["GP003-pool-empty-selector"],
            id="missing-selector",
        ),
        pytest.param(
            {**pool_obj("x"), "spec": {**pool_obj("x")["spec"], "placement": "pack"}},
            ["GP001-pool-schema"],
            id="bad-enum",
        ),
        pytest.param(
            {**pool_obj("x"), "spec": {**pool_obj("x")["spec"], "admission": {"mode": "Maybe"}}},
            ["GP001-pool-schema"],
            id="bad-admission-mode",
        ),
        pytest.param(
            pool_obj("x", selector={"matchLabels": {"cgpu": "true"}}),
            ["GP001-pool-schema"],
            id="managed-label",
        ),
        pytest.param(
            {**pool_obj("x", selector={}), "spec": {"nodeSelector": {}, "placement": "pack"}},
            ["GP003-pool-empty-selector", "GP001-pool-schema"],
            id="two-problems",
        ),
    ],
)
def test_pool_rules(obj: dict[str, Any], expected: list[str]) -> None:
    findings = evaluate(obj)
    assert [f.rule_id for f in findings] == expected
    assert all(f.verdict == "deny" and f.object.startswith("GPUSharePool/") for f in findings)


def test_pool_overlap_names_nodes_and_other_pool() -> None:
    nodes = [
        node_info(node_obj("a1", {"alibabacloud.com/nodepool-id": "np-a"})),
        node_info(node_obj("a2", {"alibabacloud.com/nodepool-id": "np-a"})),
        node_info(node_obj("b1", {"alibabacloud.com/nodepool-id": "np-b"})),
        node_info(node_obj("c1", {"alibabacloud.com/nodepool-id": "np-c", "gpushare.io/pool": "legacy"})),
    ]
    ctx = Context.build([pool("a", "np-a"), pool("b", "np-b")], nodes)
    wide = pool_obj(
        "wide", selector={"matchExpressions": [{"key": "alibabacloud.com/nodepool-id", "operator": "Exists"}]}
    )
    findings = evaluate(wide, ctx)
    assert [(f.rule_id, f.verdict) for f in findings] == [("GP004-pool-overlap", "deny")] * 3
    assert "a1, a2 that belong to GPUSharePool a" in findings[0].message
    assert "b1 that belong to GPUSharePool b" in findings[1].message
    assert "c1 that belong to GPUSharePool legacy" in findings[2].message
    # Updating pool a itself is not an overlap with itself.
    assert evaluate(pool_obj("a", "np-a"), ctx) == []
    # Without nodes there is nothing to compare.
    assert evaluate(wide, Context.build([pool("a", "np-a")])) == []


def test_a_node_a_pool_lent_is_still_its_own_to_the_overlap_rule() -> None:
    """A lent node carries its borrower's gpushare.io/pool label; the lender still selects it. An
    edit of the lender (turning its lending off, say) is no overlap (the soak, seed 1: soak-b's
    edits were refused while one of its nodes was lent, so its lending could not be turned off)."""
    lent = node_obj("b1", {"alibabacloud.com/nodepool-id": "np-b", "gpushare.io/pool": "a"})
    lent["metadata"]["annotations"] = {
        "gpushare.io/loan": LoanRecord("b", "a", "2026-12-07T02:23:15Z").dump()
    }
    ctx = Context.build([pool("a", "np-a"), pool("b", "np-b")], [node_info(lent)])
    assert evaluate(pool_obj("b", "np-b"), ctx) == []
    # a node lent by another pool to a pool that is gone, or labelled for a gone pool without a
    # loan, still overlaps
    other = copy.deepcopy(lent)
    other["metadata"]["annotations"] = {"gpushare.io/loan": LoanRecord("c", "a").dump()}
    unlent = copy.deepcopy(lent)
    del unlent["metadata"]["annotations"]
    for node in (other, unlent):
        findings = evaluate(pool_obj("b", "np-b"), Context.build([pool("x", "np-x")], [node_info(node)]))
        assert [f.rule_id for f in findings] == ["GP004-pool-overlap"]
        assert "b1 that belong to GPUSharePool a" in findings[0].message


def test_a_node_moving_between_pools_is_no_overlap_for_the_pool_it_moves_to() -> None:
    """A node whose node pool changed still carries the old pool's label while the operator holds
    the move (Wait, a GPU pod running); the new pool selects it, the old one no longer does. Every
    edit of the new pool was refused as an overlap until the move was done (the soak with the real
    node: soak-n's edits refused while realnode-0 moved to it from soak-a)."""
    moving = node_obj("n1", {"alibabacloud.com/nodepool-id": "np-nvidia", "gpushare.io/pool": "soak-a"})
    ctx = Context.build([pool("soak-a", "np-cgpu"), pool("soak-n", "np-nvidia")], [node_info(moving)])
    assert evaluate(pool_obj("soak-n", "np-nvidia"), ctx) == []
    # a third pool selecting the node overlaps the new one, as before
    wide = pool_obj(
        "wide", selector={"matchExpressions": [{"key": "alibabacloud.com/nodepool-id", "operator": "Exists"}]}
    )
    findings = evaluate(wide, ctx)
    assert [f.rule_id for f in findings] == ["GP004-pool-overlap"]
    assert "n1 that belong to GPUSharePool soak-n" in findings[0].message


# --- properties -----------------------------------------------------------------------------------

QUANTITIES = st.one_of(
    st.integers(min_value=-10, max_value=200),
    st.integers(min_value=-10, max_value=200).map(str),
    st.sampled_from(["1.5", "2Gi", "abc", "", "2000m", "-0", "007", " 5"]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.none(),
)
LABEL_CHOICES = {
    "gpushare.io/pool": ["cgpu", "cgpu-no-isolation", "gpu-core", "typo"],
    "cgpu": ["true", "false"],
    "cgpu.disable.isolation": ["true", "false"],
    "ack.node.gpu.schedule": ["cgpu", "share", "core_mem", "default"],
    "alibabacloud.com/nodepool-id": ["np-cgpu", "np-gpu-core", "np-other"],
    "kubernetes.io/hostname": ["cgpu-n1", "gpu-core-n1", "elsewhere"],
}
selectors = st.dictionaries(
    st.sampled_from(sorted(LABEL_CHOICES)), st.sampled_from(["true", "cgpu", "core_mem"])
)


@st.composite
def requirement(draw: st.DrawFn) -> dict[str, Any]:
    key = draw(st.sampled_from(sorted(LABEL_CHOICES)))
    op = draw(st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Bogus"]))
    values = draw(st.lists(st.sampled_from(LABEL_CHOICES[key]), min_size=1, max_size=3))
    return {"key": key, "operator": op, "values": values if op in ("In", "NotIn", "Gt") else []}


@st.composite
def gpu_pods(draw: st.DrawFn) -> dict[str, Any]:
    def resources() -> dict[str, Any]:
        return draw(
            st.dictionaries(
                st.sampled_from([MEM, CORE, "cpu", "aliyun.com/gpu-count"]), QUANTITIES, max_size=3
            )
        )

    n = draw(st.integers(min_value=1, max_value=3))
    containers = [
        container(f"c{i}", resources(), resources() if draw(st.booleans()) else None) for i in range(n)
    ]
    init = [container("init", resources())] if draw(st.booleans()) else None
    selector = draw(
        st.none() | st.dictionaries(st.sampled_from(sorted(LABEL_CHOICES)), st.just("x"), max_size=0)
    )
    if draw(st.booleans()):
        selector = {k: draw(st.sampled_from(v)) for k, v in LABEL_CHOICES.items() if draw(st.booleans())}
    terms = draw(st.none() | st.lists(st.lists(requirement(), max_size=3), max_size=3))
    obj = pod(containers=containers, init=init, selector=selector, affinity_terms=terms)
    kind = draw(st.sampled_from(["Pod", "Deployment", "Job", "CronJob", "StatefulSet"]))
    return obj if kind == "Pod" else wrap(obj, kind)


@st.composite
def contexts(draw: st.DrawFn) -> Context:
    mode = draw(st.sampled_from(["Enforce", "Warn", "Off"]))
    pools = [
        pool("cgpu", mode=mode),
        pool("cgpu-no-isolation", isolation=False, mode=mode),
        pool("gpu-core", compute=True, mode=mode),
    ]
    chosen = draw(st.lists(st.sampled_from(pools), unique_by=lambda p: p.name, max_size=3))
    nodes = seed_nodes(draw(st.sampled_from([8192, 15360, 81920]))).nodes if draw(st.booleans()) else ()
    return Context.build(chosen, nodes)


POD_RULES_ALWAYS_DENY = {
    "GS012-unknown-gpu-resource",
    "GS013-gpu-count-split",
    "GS001-core-percentage-step",
    "GS002-core-percentage-range",
    "GS003-core-without-mem",
    "GS004-mem-positive-integer",
    "GS006-request-limit-mismatch",
}


@given(obj=gpu_pods(), ctx=contexts())
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_random_pods_never_raise_and_verdicts_follow_the_rules(obj: dict[str, Any], ctx: Context) -> None:
    findings = evaluate(obj, ctx)
    ((_path, spec),) = pod_specs(obj)
    for f in findings:
        assert f.rule_id in RULES and f.verdict in ("deny", "warn")
        assert f.rule_id in f.message and f.object in f.message
        if f.rule_id in POD_RULES_ALWAYS_DENY:
            assert f.verdict == "deny" or (
                f.rule_id == "GS012-unknown-gpu-resource" and "gpu-count" in f.field
            )
        if f.rule_id == "GS010-no-isolation-sizing":
            assert f.verdict == "warn"
    got = {(f.rule_id, f.container) for f in findings}
    modes = {p.spec.admission.mode for p in ctx.pools}
    any_gpu = False
    for key in ("initContainers", "containers"):
        for c_ in spec.get(key) or []:
            limits = c_["resources"].get("limits") or {}
            requests = c_["resources"].get("requests") or {}
            core = limits.get(CORE, requests.get(CORE)) if (CORE in limits or CORE in requests) else None
            has_core = CORE in limits or CORE in requests
            has_mem = MEM in limits or MEM in requests
            any_gpu = any_gpu or has_core or has_mem
            q = parse_amount(core)
            if has_core and q.value is not None:
                in_range = 5 <= q.value <= 100
                assert (("GS002-core-percentage-range", c_["name"]) in got) == (not in_range)
                assert (("GS001-core-percentage-step", c_["name"]) in got) == (in_range and q.value % 5 != 0)
            if has_core and q.value is None:
                assert ("GS001-core-percentage-step", c_["name"]) in got
            assert (("GS003-core-without-mem", c_["name"]) in got) == (has_core and not has_mem)
            if has_mem:
                mem = parse_amount(limits.get(MEM) if MEM in limits else requests.get(MEM))
                bad = mem.value is None or mem.value <= 0
                assert (("GS004-mem-positive-integer", c_["name"]) in got) == bad
    affinity = spec.get("affinity", {}).get("nodeAffinity", {})
    terms = affinity.get("requiredDuringSchedulingIgnoredDuringExecution", {}).get("nodeSelectorTerms")
    targeted = bool(spec.get("nodeSelector")) or bool(terms)
    missing = any(f.rule_id == "GS007-pool-target-missing" for f in findings)
    if any_gpu and not targeted:
        assert missing == (modes != {"Off"})
    else:
        assert not missing
    if not any_gpu:
        assert all(f.rule_id == "GS012-unknown-gpu-resource" and f.verdict == "warn" for f in findings)


@given(obj=gpu_pods())
@settings(max_examples=100, deadline=None)
def test_pool_mode_off_leaves_only_pod_rules(obj: dict[str, Any]) -> None:
    ctx = Context.build(
        [
            pool("cgpu", mode="Off"),
            pool("cgpu-no-isolation", isolation=False, mode="Off"),
            pool("gpu-core", compute=True, mode="Off"),
        ]
    )
    for f in evaluate(obj, ctx):
        # Pool rules still apply to nodes outside every pool (ACK labels alone), never to the pools.
        unpooled = "ACK-labelled nodes" in f.message or re.search(
            r"targets ack\.node\.gpu\.schedule=\w+ nodes", f.message
        )
        assert f.rule_id in POD_RULES_ALWAYS_DENY or unpooled, f.message
        assert f.rule_id != "GS005-mem-exceeds-gpu"


def test_node_of_a_pool_not_yet_switched_counts_by_its_current_labels() -> None:
    labels = {
        "alibabacloud.com/nodepool-id": "np-gpu-core",
        "cgpu": "true",
        "cgpu.disable.isolation": "false",
        "ack.node.gpu.schedule": "cgpu",
    }
    ctx = Context.build([SEED_POOLS[2]], [node_info(node_obj("switching", labels))])
    # Today the node is a cgpu node outside any cgpu pool: a memory-only pod may target it by ACK labels.
    assert evaluate(pod({MEM: 2}, selector={"ack.node.gpu.schedule": "cgpu"}), ctx) == []
    # Once gpu-core's labels are applied it is core_mem: a compute pod aimed at the pool is fine too.
    assert evaluate(pod({MEM: 2, CORE: 30}, selector={"gpushare.io/pool": "gpu-core"}), ctx) == []
    # The isolation label alone matches it both ways (cgpu today, core_mem soon): ambiguous.
    found = ids(evaluate(pod({MEM: 2}, selector={"cgpu.disable.isolation": "false"}), ctx))
    assert found == [("GS008-pool-target-ambiguous", "deny")]


def test_node_name_is_denied_and_still_counts_as_targeting() -> None:
    """A GPU-sharing pod bound by hand is denied (GS017) whatever its node; the targeting rules
    still resolve the node it names, so their findings come with it."""
    bound = pod({MEM: 3})
    bound["spec"]["nodeName"] = "cgpu-n1"
    node_name = ("GS017-node-name-set", "deny")
    # Without nodes the named node's kind is unknown: no targeting finding.
    assert ids(evaluate(bound, SEED_CTX)) == [node_name]
    assert ids(evaluate(bound, Context())) == [node_name]
    # With nodes it is resolved by that node's pool.
    ctx = seed_nodes()
    assert ids(evaluate(bound, ctx)) == [node_name]
    bound["spec"]["nodeName"] = "gpu-core-n1"
    first, second = evaluate(bound, ctx)
    assert (first.rule_id, first.field) == ("GS017-node-name-set", "spec.nodeName")
    assert second.rule_id == "GS009-pool-kind-mismatch" and second.field == "spec.nodeName"
    assert "kubernetes.io/hostname: gpu-core-n1" in first.message
    bound["spec"]["nodeName"] = "no-such-node"
    assert ids(evaluate(bound, ctx)) == [node_name, ("GS011-pool-target-unknown", "deny")]


def test_a_workload_template_with_node_name_is_denied() -> None:
    job = wrap(pod({MEM: 2}, selector=CGPU_SEL), "Job", "pinned")
    job["spec"]["template"]["spec"]["nodeName"] = "cgpu-n1"
    (f,) = evaluate(job, seed_nodes())
    assert (f.rule_id, f.verdict, f.field, f.value) == (
        "GS017-node-name-set",
        "deny",
        "spec.template.spec.nodeName",
        "cgpu-n1",
    )
    assert f.message.startswith(
        "Job/default/pinned: spec.template.spec.nodeName=cgpu-n1 bypasses the scheduler"
    )


def test_gpu_count_above_every_node_names_the_pool_the_ask_and_the_most() -> None:
    """GS016 reads a node's GPUs as GS005 reads its memory: the agent's inventory, else the device
    plugin's allocatable ``aliyun.com/gpu-count``; a pool with a node of unknown count is skipped
    only when no node of it is known."""
    nodes = [
        node_info(node_obj("a", {"alibabacloud.com/nodepool-id": "np-cgpu"}, gpu_mem=60, gpus=4)),
        node_info(node_obj("b", {"alibabacloud.com/nodepool-id": "np-cgpu"}, inventory_mib=[15360] * 2)),
        node_info(node_obj("c", {"alibabacloud.com/nodepool-id": "np-cgpu"})),
    ]
    ctx = Context.build(SEED_POOLS, nodes)
    job = wrap(labelled(pod({MEM: 16}, selector=CGPU_SEL), "8"), "Job", "eight")
    job["spec"]["template"]["metadata"]["labels"] = {"aliyun.com/gpu-count": "8"}
    (f,) = evaluate(job, ctx)
    assert (f.rule_id, f.field, f.value) == (
        "GS016-gpu-count-exceeds-node",
        'spec.template.metadata.labels["aliyun.com/gpu-count"]',
        "8",
    )
    assert "asks for 8 GPUs of one node, but no node of pool cgpu has more than 4 GPUs" in f.message
    assert 'at most 4 GPUs (aliyun.com/gpu-count: "4")' in f.message
    job["spec"]["template"]["metadata"]["labels"] = {"aliyun.com/gpu-count": "4"}
    assert evaluate(job, ctx) == []
    # The pool's admission.mode decides (a pool rule).
    warn = Context.build([pool("cgpu", mode="Warn"), *SEED_POOLS[1:]], nodes)
    job["spec"]["template"]["metadata"]["labels"] = {"aliyun.com/gpu-count": "8"}
    assert ids(evaluate(job, warn)) == [("GS016-gpu-count-exceeds-node", "warn")]


def test_daemonset_pods_are_resolved_by_their_node() -> None:
    """The DaemonSet controller binds each pod with matchFields metadata.name In [node]."""
    ds_pod = pod({MEM: 2, CORE: 30}, selector={"gpushare.io/pool": "gpu-core"})
    ds_pod["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gpu-core-n1"]}]}
                ]
            }
        }
    }
    assert evaluate(ds_pod, seed_nodes()) == []
    ds_pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ][0]["matchFields"][0]["values"] = ["cgpu-n1"]
    assert ids(evaluate(ds_pod, seed_nodes())) == [("GS011-pool-target-unknown", "deny")]


def test_misspelled_gpu_resource_gets_a_did_you_mean() -> None:
    (f,) = evaluate(pod({"aliyun.com/gpu-memory": 2}, selector=CGPU_SEL), SEED_CTX)
    assert f.rule_id == "GS012-unknown-gpu-resource" and f.verdict == "deny"
    assert (
        'resources.limits["aliyun.com/gpu-memory"]=2 is not a resource any GPU-sharing node offers'
        in f.message
    )
    assert 'did you mean "aliyun.com/gpu-mem"?' in f.message


# --- ACK labels that nothing carries (issue 24: a Job that could only stay Pending) -------------


def _core_job(selector: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "core-job", "namespace": "default"},
        "spec": {
            "template": {
                "spec": {
                    "nodeSelector": selector,
                    "restartPolicy": "Never",
                    "containers": [
                        {"name": "c", "image": "x", "resources": {"limits": {MEM: "4", CORE: "30"}}}
                    ],
                }
            }
        },
    }


def _memory_only_cluster() -> Context:
    """The cluster of `make cluster`, roughly: a cgpu pool and a share pool, their nodes, a CPU node."""
    pools = [SEED_POOLS[0], SEED_POOLS[1]]
    nodes = [
        node_info(node_obj(f"{p.name}-n1", {"alibabacloud.com/nodepool-id": f"np-{p.name}"})) for p in pools
    ]
    return Context.build(pools, [*nodes, node_info(node_obj("cpu-1", {}))])


def test_a_job_aimed_at_ack_labels_no_pool_or_node_carries_is_denied_with_the_fix() -> None:
    (finding,) = evaluate(_core_job({"ack.node.gpu.schedule": "core_mem"}), _memory_only_cluster())
    assert (finding.rule_id, finding.verdict) == ("GS011-pool-target-unknown", "deny")
    msg = finding.message
    assert msg.startswith(
        'Job/default/core-job: spec.template.spec.nodeSelector={"ack.node.gpu.schedule": "core_mem"} '
        "asks for core_mem nodes (compute allocation), but no node has these labels and no GPUSharePool"
        " makes core_mem nodes (known pools: cgpu, cgpu-no-isolation); the pod would stay Pending"
    ), msg
    assert "create a GPUSharePool with computeAllocation: true" in msg
    assert "nodeSelector {gpushare.io/pool: <pool>}" in msg
    assert "gpushare.io/webhook: ignore" in msg, "the way out for nodes an autoscaler adds later"


def test_other_ack_sharing_labels_nothing_carries_are_denied_too() -> None:
    pod_obj = pod({MEM: 3}, selector={"cgpu.disable.isolation": "false", "ack.node.gpu.placement": "spread"})
    ctx = Context.build([SEED_POOLS[1]], [node_info(node_obj("cgpu-no-isolation-n1", {}))])
    (finding,) = evaluate(pod_obj, ctx)
    assert (finding.rule_id, finding.verdict) == ("GS011-pool-target-unknown", "deny")
    assert "create a GPUSharePool with memoryIsolation: true" in finding.message


def test_an_existing_pool_the_pod_fits_is_suggested() -> None:
    """A memory-only pod aimed at share nodes in a cluster that has only a cgpu pool."""
    ctx = Context.build(
        [SEED_POOLS[0]], [node_info(node_obj("cgpu-n1", {"alibabacloud.com/nodepool-id": "np-cgpu"}))]
    )
    (finding,) = evaluate(pod({MEM: 3}, selector={"ack.node.gpu.schedule": "share"}), ctx)
    assert finding.rule_id == "GS011-pool-target-unknown"
    assert "target an existing pool, e.g. nodeSelector {gpushare.io/pool: cgpu}" in finding.message
    assert "or create a GPUSharePool with memoryIsolation: false" in finding.message


def test_ack_labelled_nodes_outside_any_pool_still_admit_it() -> None:
    ctx = _memory_only_cluster()
    node = node_info(node_obj("ack-core", {"ack.node.gpu.schedule": "core_mem", "cgpu": "true"}))
    assert (
        evaluate(
            _core_job({"ack.node.gpu.schedule": "core_mem"}), Context.build(ctx.pools, [*ctx.nodes, node])
        )
        == []
    )


def test_without_known_nodes_the_ack_labels_are_trusted() -> None:
    """Offline (`gpushare check` with pool files only), or the webhook's first seconds: no node
    list, so gpushare cannot tell that no node has the labels."""
    assert evaluate(_core_job({"ack.node.gpu.schedule": "core_mem"}), Context.build(SEED_POOLS[:2])) == []
