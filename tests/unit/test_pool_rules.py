"""gpushare.api.rules: each pool rule defined once and projected into CRD, validator and finding."""

from __future__ import annotations

from typing import Any

import pytest

from gpushare import constants as c
from gpushare.admission import evaluate
from gpushare.api.crd import build_crd
from gpushare.api.rules import (
    COMPUTE_WITHOUT_ISOLATION,
    EMPTY_SELECTOR,
    MANAGED_SELECTOR,
    MIG_ONE_ENTRY_PER_MODEL,
    MIG_ONE_SHARING,
    MIG_ONE_SOURCE,
    MIG_PROFILE_NAMES,
    MIG_SINGLE_PROFILE,
    MIG_SLICED_PROFILES,
    ONE_BACKEND,
    REPLICAS_FIT_STRATEGY,
    REWRITTEN_SELECTOR,
    SPEC_RULES,
    VALUES_FIT_OPERATOR,
    SpecRule,
)
from gpushare.api.v1alpha1 import PoolValidationError, parse_pool
from gpushare.policy.planner import selector_problem


def _pool(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "gpushare.io/v1alpha1",
        "kind": "GPUSharePool",
        "metadata": {"name": "p"},
        "spec": spec,
    }


NP = {"matchLabels": {"alibabacloud.com/nodepool-id": "np"}}
#: MIG geometry entries: seven 1g.5gb slices; three profiles; a filter for H100-SXM5-80GB.
G7 = {"profiles": {"1g.5gb": 7}}
MIXED = {"profiles": {"3g.20gb": 1, "2g.10gb": 1, "1g.5gb": 1}}
H100 = {"deviceFilter": ["0x233010DE"]}
#: For each rule: a pool that breaks it, and the field the problem is reported on.
BROKEN: list[tuple[SpecRule, dict[str, Any], str]] = [
    (
        COMPUTE_WITHOUT_ISOLATION,
        _pool(nodeSelector=NP, computeAllocation=True, memoryIsolation=False),
        "spec.computeAllocation",
    ),
    (EMPTY_SELECTOR, _pool(nodeSelector={"matchExpressions": []}), "spec.nodeSelector"),
    (
        MANAGED_SELECTOR,
        _pool(nodeSelector={"matchExpressions": [{"key": "gpushare.io/pool", "operator": "DoesNotExist"}]}),
        "spec.nodeSelector",
    ),
    (
        REWRITTEN_SELECTOR,
        _pool(nodeSelector={"matchLabels": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB"}}),
        "spec.nodeSelector",
    ),
    (
        ONE_BACKEND,
        _pool(nodeSelector=NP, placement="spread", nvidia={"strategy": "TimeSlicing", "replicas": 4}),
        "spec",
    ),
    (REPLICAS_FIT_STRATEGY, _pool(nodeSelector=NP, nvidia={"strategy": "MPS"}), "spec.nvidia"),
    (MIG_ONE_SHARING, _pool(nodeSelector=NP, nvidia={"strategy": "MIG"}), "spec.nvidia"),
    (MIG_ONE_SOURCE, _pool(nodeSelector=NP, nvidia={"strategy": "MIG", "mig": {}}), "spec.nvidia.mig"),
    (
        MIG_ONE_ENTRY_PER_MODEL,
        _pool(nodeSelector=NP, nvidia={"strategy": "MIG", "mig": {"geometry": [G7, {**G7, **H100}]}}),
        "spec.nvidia.mig",
    ),
    (
        MIG_SINGLE_PROFILE,
        _pool(
            nodeSelector=NP, nvidia={"strategy": "MIG", "mig": {"strategy": "single", "geometry": [MIXED]}}
        ),
        "spec.nvidia.mig",
    ),
    (
        MIG_SLICED_PROFILES,
        _pool(
            nodeSelector=NP,
            nvidia={
                "strategy": "MIG",
                "mig": {"geometry": [G7], "timeSlicing": [{"profile": "2g.10gb", "replicas": 2}]},
            },
        ),
        "spec.nvidia.mig",
    ),
    (
        MIG_PROFILE_NAMES,
        _pool(
            nodeSelector=NP, nvidia={"strategy": "MIG", "mig": {"geometry": [{"profiles": {"1g.5GB": 7}}]}}
        ),
        "spec.nvidia.mig.geometry[0].profiles",
    ),
    (
        VALUES_FIT_OPERATOR,
        _pool(nodeSelector={"matchExpressions": [{"key": "k", "operator": "Exists", "values": ["v"]}]}),
        "spec.nodeSelector.matchExpressions[0]",
    ),
]


def _schema_node(on: str) -> dict[str, Any]:
    spec: dict[str, Any] = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"][
        "spec"
    ]
    return spec if on == "spec" else spec["properties"][on]


@pytest.mark.parametrize("rule", SPEC_RULES, ids=lambda r: r.id)
def test_every_rule_is_in_the_crd_where_it_says(rule: SpecRule) -> None:
    if rule.cel_on == "LabelSelectorRequirement":  # every selector's terms
        terms = _schema_node("nodeSelector")["properties"]["matchExpressions"]["items"]
        pod_terms = _schema_node("devicePlugin")["properties"]["podSelector"]["properties"][
            "matchExpressions"
        ]
        for entry in rule.validations():
            assert entry in pod_terms["items"]["x-kubernetes-validations"]
    elif rule.cel_on == "Nvidia":
        terms = _schema_node("nvidia")
    elif rule.cel_on == "Mig":
        terms = _schema_node("nvidia")["properties"]["mig"]
    elif rule.cel_on == "MigGeometry":
        terms = _schema_node("nvidia")["properties"]["mig"]["properties"]["geometry"]["items"]
    else:
        terms = _schema_node(rule.cel_on)
    for entry in rule.validations():
        assert entry in terms["x-kubernetes-validations"]


def test_every_rule_has_a_broken_example() -> None:
    assert [rule for rule, _, _ in BROKEN] == list(SPEC_RULES)


@pytest.mark.parametrize(("rule", "obj", "field"), BROKEN, ids=[r.cel for r, _, _ in BROKEN])
def test_the_validator_reports_the_rule_by_id(rule: SpecRule, obj: dict[str, Any], field: str) -> None:
    with pytest.raises(PoolValidationError) as info:
        parse_pool(obj)
    (problem,) = info.value.errors
    assert (problem.rule, problem.field) == (rule.id, field)
    assert all(problem.message.split(" (")[0] in str(v["message"]) for v in rule.validations())


@pytest.mark.parametrize(("rule", "obj", "field"), BROKEN, ids=[r.cel for r, _, _ in BROKEN])
def test_the_webhook_reports_the_rule(rule: SpecRule, obj: dict[str, Any], field: str) -> None:
    (finding,) = evaluate(obj)
    assert (finding.rule_id, finding.field) == (rule.id, field)
    assert f"(rule {rule.id})" in finding.message


def test_managed_selector_message_names_the_labels_used() -> None:
    with pytest.raises(PoolValidationError, match=r"gpushare writes itself \(gpushare.io/pool\)"):
        parse_pool(BROKEN[2][1])


#: Each label GPU Feature Discovery rewrites because of sharing (k8s-device-plugin v0.19.3
#: internal/lm), in each place a selector can name it, with and without spec.nvidia.
REWRITTEN_CASES = [
    pytest.param(where, key, nvidia, id=f"{where}-{key}-{'nvidia' if nvidia else 'ack'}")
    for key in c.NVIDIA_SHARING_LABELS
    for where in ("matchLabels", "matchExpressions")
    for nvidia in (True, False)
]


def _selecting(where: str, key: str, nvidia: bool) -> dict[str, Any]:
    selector: dict[str, Any] = (
        {"matchLabels": {key: "x"}}
        if where == "matchLabels"
        else {"matchLabels": NP["matchLabels"], "matchExpressions": [{"key": key, "operator": "Exists"}]}
    )
    backend: dict[str, Any] = {"nvidia": {"strategy": "TimeSlicing", "replicas": 4}} if nvidia else {}
    return _pool(nodeSelector=selector, **backend)


@pytest.mark.parametrize(("where", "key", "nvidia"), REWRITTEN_CASES)
def test_every_pool_is_refused_a_selector_on_a_label_sharing_rewrites(
    where: str, key: str, nvidia: bool
) -> None:
    """ACK pools too: a node moves between backends, and an ACK pool can become an NVIDIA one."""
    with pytest.raises(PoolValidationError) as info:
        parse_pool(_selecting(where, key, nvidia))
    (problem,) = info.value.errors
    assert (problem.rule, problem.field) == (REWRITTEN_SELECTOR.id, "spec.nodeSelector")
    assert f"rewrites when a node's GPUs are shared ({key})" in problem.message
    assert c.LABEL_GPU_PRODUCT in problem.message, "the message says what to select by instead"
    (finding,) = evaluate(_selecting(where, key, nvidia))
    assert key in finding.message and c.LABEL_GPU_PRODUCT in finding.message


def test_selecting_by_the_agents_product_label_or_another_nvidia_label_is_fine() -> None:
    ok = {"gpushare.io/gpu.product": "NVIDIA-A100-SXM4-40GB", "nvidia.com/gpu.count": "8"}
    pool = parse_pool(
        _pool(nodeSelector={"matchLabels": ok}, nvidia={"strategy": "TimeSlicing", "replicas": 4})
    )
    assert selector_problem(pool.spec) is None


def test_the_crd_holds_one_rule_per_refused_label_whose_message_names_it() -> None:
    entries = REWRITTEN_SELECTOR.validations()
    assert len(entries) == len(c.NVIDIA_SHARING_LABELS)
    for key, entry in zip(c.NVIDIA_SHARING_LABELS, entries, strict=True):
        assert f"'{key}' in self.matchLabels" in str(entry["rule"]) and f"e.key == '{key}'" in str(
            entry["rule"]
        )
        assert entry["message"] == REWRITTEN_SELECTOR.message.format(labels=key)


def test_planner_applies_the_same_rule_to_pools_built_without_it() -> None:
    spec = parse_pool(_pool(nodeSelector=NP)).spec
    assert selector_problem(spec) is None
    bad = spec.model_copy(
        update={"node_selector": spec.node_selector.model_copy(update={"match_labels": {"cgpu": "true"}})}
    )
    assert selector_problem(bad) == ("spec.nodeSelector: " + MANAGED_SELECTOR.message.format(labels="cgpu"))
    shared = spec.model_copy(
        update={
            "node_selector": spec.node_selector.model_copy(
                update={"match_labels": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB-SHARED"}}
            )
        }
    )
    assert selector_problem(shared) == (
        "spec.nodeSelector: " + REWRITTEN_SELECTOR.message.format(labels="nvidia.com/gpu.product")
    )


def test_a_rule_is_reported_beside_other_field_errors() -> None:
    obj = _pool(nodeSelector={}, computeAllocation=True, memoryIsolation=False, placement="pack")
    assert [f.rule_id for f in evaluate(obj)] == [
        COMPUTE_WITHOUT_ISOLATION.id,
        EMPTY_SELECTOR.id,
        "GP001-pool-schema",
    ]


def test_isolation_left_at_its_default_allows_compute() -> None:
    assert parse_pool(_pool(nodeSelector=NP, computeAllocation=True)).spec.mode == "core_mem"


def test_an_nvidia_pools_kind_is_nvidia_not_an_ack_schedule() -> None:
    """Admission, advise and inspect read a pool's kind from spec.mode: an NVIDIA pool keeps the
    ACK fields' model defaults (memoryIsolation true), which must not make it a cgpu pool."""
    nv = parse_pool(
        {
            "apiVersion": "gpushare.io/v1alpha1",
            "kind": "GPUSharePool",
            "metadata": {"name": "ts"},
            "spec": {"nodeSelector": NP, "nvidia": {"strategy": "TimeSlicing", "replicas": 4}},
        }
    )
    assert nv.spec.mode == "nvidia" and nv.spec.backend == "nvidia" and not nv.spec.isolates_memory
