"""One record per admission rule (gpushare.admission.catalog), and the engines that read it.

The Python engine and the ValidatingAdmissionPolicy must write the same message for the same
broken container. The real apiserver compares them on generated objects
(tests/integration/test_admission_policy.py); here, without one, each case of each stateless
rule is checked on both sides against the record: the Python engine's message is the record's
text, and the policy's messageExpression holds that same text as CEL (so a message edited in
either engine, instead of in the record, fails here).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from gpushare.admission import EMPTY_CONTEXT, evaluate
from gpushare.admission import catalog as cat
from gpushare.admission.catalog import STATELESS
from gpushare.admission.review import verdict
from gpushare.admission.vap import build_policy
from gpushare.backends.ack.admission import catalog as ack
from gpushare.backends.nvidia.admission import catalog as nvidia
from gpushare.rulekit.records import CODE_FORBIDDEN, CODE_INVALID, AdmissionRule, cel_text
from support.celtext import one_line

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "operator" / "gpushare"
#: Where the GS* records are (the backends' admission rules, behind the sharing-backend seam).
BACKEND_CATALOGS = [PACKAGE / "backends" / name / "admission" / "catalog.py" for name in ("ack", "nvidia")]
MEM = "aliyun.com/gpu-mem"
CORE = "aliyun.com/gpu-core.percentage"
NVG = "nvidia.com/gpu"


def test_each_rule_id_is_defined_in_one_place() -> None:
    """No GSnnn id is written anywhere in the package but in its record."""
    ids = re.compile(r"GS\d{3}")
    for path in PACKAGE.rglob("*.py"):
        if path.name == "catalog.py" and path.parent.name == "admission":
            continue
        found = ids.findall(path.read_text())
        assert not found, f"{path.relative_to(REPO)} names {sorted(set(found))}: use the catalog's record"
    text = "".join(path.read_text() for path in BACKEND_CATALOGS)
    for rule in cat.ALL_RULES:
        if rule.id.startswith("GS"):
            assert text.count(f'"{rule.id}"') == 1, rule.id


def _pod(limits: dict[str, Any], requests: dict[str, Any] | None = None) -> dict[str, Any]:
    resources: dict[str, Any] = {"limits": limits}
    if requests is not None:
        resources["requests"] = requests
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ns"},
        "spec": {
            "nodeSelector": {"ack.node.gpu.schedule": "core_mem"},
            "containers": [{"name": "c", "image": "x", "resources": resources}],
        },
    }


#: (rule, case, the broken container's limits and requests, the values of the case's placeholders)
CASES: list[tuple[AdmissionRule, str, dict[str, Any], dict[str, Any] | None, dict[str, object]]] = [
    (ack.CORE_STEP, "step", {MEM: "2", CORE: "33"}, None, {"low": 30, "high": 35}),
    (ack.CORE_STEP, "malformed", {MEM: "2", CORE: "1.5"}, None, {"error": "is not a whole number"}),
    (ack.CORE_RANGE, "below", {MEM: "2", CORE: "3"}, None, {}),
    (ack.CORE_RANGE, "above", {MEM: "2", CORE: "1.05e2"}, None, {}),
    (ack.CORE_WITHOUT_MEM, "missing", {CORE: "30"}, None, {"core": "30", "unit": "GiB"}),
    (ack.MEM_POSITIVE, "zero", {MEM: "0"}, None, {"unit": "GiB"}),
    (
        ack.MEM_POSITIVE,
        "malformed",
        {MEM: "2Gi"},
        None,
        {"error": "has a unit suffix 'Gi'", "unit": "GiB", "example": 2},
    ),
    (ack.REQUEST_LIMIT, "differs", {MEM: "2"}, {MEM: "3"}, {"limit": "2"}),
    (ack.REQUEST_LIMIT, "no-limit", {}, {MEM: "3"}, {"resource": MEM}),
    (ack.UNKNOWN_RESOURCE, "unknown", {MEM: "2", "aliyun.com/gpu-xyz": "1"}, None, {"suggestion": ""}),
    (
        ack.SHARED_WITH_WHOLE_GPU,
        "both",
        {MEM: "2", "nvidia.com/gpu": "1"},
        None,
        {"shared": MEM, "what": "whole GPUs", "resource": "nvidia.com/gpu"},
    ),
    (
        ack.SHARED_WITH_WHOLE_GPU,
        "both",
        {MEM: "2"},
        {"nvidia.com/gpu.shared": "1"},
        {"shared": MEM, "what": "NVIDIA's shared GPUs", "resource": "nvidia.com/gpu.shared"},
    ),
    (nvidia.NVIDIA_QUANTITY, "malformed", {NVG: "a lot"}, None, {"resource": NVG}),
    (nvidia.NVIDIA_QUANTITY, "negative", {NVG: "-1"}, None, {"resource": NVG}),
    (nvidia.NVIDIA_QUANTITY, "not-integer", {NVG: "1.5"}, None, {"resource": NVG}),
    (nvidia.NVIDIA_QUANTITY, "no-limit", {}, {NVG: "1"}, {"resource": NVG}),
    (nvidia.NVIDIA_QUANTITY, "differs", {NVG: "2"}, {NVG: "1"}, {"resource": NVG, "limit": "2"}),
]


@pytest.mark.parametrize(("rule", "case", "limits", "requests", "values"), CASES, ids=lambda v: str(v)[:24])
def test_the_engine_writes_the_records_message(
    rule: AdmissionRule,
    case: str,
    limits: dict[str, Any],
    requests: dict[str, Any] | None,
    values: dict[str, object],
) -> None:
    problem, fix = rule.text(case, **values)
    messages = [f.message for f in evaluate(_pod(limits, requests), EMPTY_CONTEXT) if f.rule_id == rule.id]
    assert messages, f"{rule.id} {case} did not fire"
    assert any(m.endswith(f" {problem} {rule.tag}; {fix}") for m in messages), (messages, problem, fix)


def test_every_case_the_policy_denies_is_tested_here() -> None:
    tested = {(rule.id, case) for rule, case, *_ in CASES}
    in_policy = {(rule.id, m.case) for rule in STATELESS if rule.cel for m in rule.cel.messages}
    assert in_policy <= tested


def test_whole_gpus_in_another_container_name_the_sharing_one() -> None:
    pod = _pod({MEM: "2"})
    pod["spec"]["initContainers"] = [
        {"name": "i", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
    ]
    problem, fix = ack.SHARED_WITH_WHOLE_GPU.text(
        "pod", sharing='container "c"', what="whole GPUs", resource="nvidia.com/gpu"
    )
    (f,) = [f for f in evaluate(pod, EMPTY_CONTEXT) if f.rule_id == ack.SHARED_WITH_WHOLE_GPU.id]
    assert f.message == (
        f'Pod/ns/p: init container "i": resources.limits["nvidia.com/gpu"]=1 {problem}'
        f" {ack.SHARED_WITH_WHOLE_GPU.tag}; {fix}"
    )


def test_the_engine_writes_the_records_message_for_a_pod_field() -> None:
    pod = _pod({MEM: "2"})
    pod["spec"]["nodeName"] = "node-1"
    problem, fix = ack.NODE_NAME_SET.text("set", node="node-1")
    (f,) = [f for f in evaluate(pod, EMPTY_CONTEXT) if f.rule_id == ack.NODE_NAME_SET.id]
    assert f.message == f"Pod/ns/p: spec.nodeName=node-1 {problem} {ack.NODE_NAME_SET.tag}; {fix}"


@pytest.mark.parametrize("rule", STATELESS, ids=lambda r: r.id)
def test_the_policy_writes_the_records_messages(rule: AdmissionRule) -> None:
    """Each case of the record, as a CEL concatenation of the same text, is in the rule's
    messageExpression; and no other rule's text is."""
    (validation,) = [
        v for v in build_policy()["spec"]["validations"] if rule.tag in one_line(v["messageExpression"])
    ]
    expression = one_line(validation["messageExpression"])
    others = {r.tag for r in cat.ALL_RULES} - {rule.tag}
    if rule.pod_cel is not None:
        form = rule.pod_cel
        case = rule.cases[form.case]
        assert cel_text(f"{case.problem} {rule.tag}; {case.fix}", form.values) in expression
        assert f"'spec.template.spec.{form.field}'" in expression and form.value in expression
        assert f"a pod {form.summary} {rule.tag}" == validation["message"]
        assert not [tag for tag in others if tag in expression]
        return
    assert rule.cel is not None
    for message in rule.cel.messages:
        case = rule.cases[message.case]
        assert cel_text(f"{case.problem} {rule.tag}; {case.fix}", message.values) in expression
        assert message.field in expression
        assert message.value is None or message.value in expression
    assert f"a container {rule.cel.summary} {rule.tag}" == validation["message"]
    assert not [tag for tag in others if tag in expression]


def test_cel_text_is_the_template_with_its_placeholders() -> None:
    assert cel_text("use {low} or {high}", {"low": "a", "high": "b"}) == "'use ' + (a) + ' or ' + (b)"
    assert cel_text("it's", {}) == "'it\\'s'"


def test_the_http_code_is_the_records() -> None:
    invalid = [f for f in evaluate(_pod({MEM: "2", CORE: "33"})) if f.rule_id == ack.CORE_STEP.id]
    assert verdict(invalid).code == CODE_INVALID == ack.CORE_STEP.code
    pod = _pod({MEM: "2", CORE: "30"})
    del pod["spec"]["nodeSelector"]
    missing = [f for f in evaluate(pod) if f.rule_id == ack.TARGET_MISSING.id]
    assert missing and verdict(missing).code == CODE_FORBIDDEN == ack.TARGET_MISSING.code


def test_the_stateless_list_is_the_records_with_a_cel_form() -> None:
    assert {r.id for r in STATELESS} == {r.id for r in cat.ALL_RULES if r.cel or r.pod_cel}
    assert all(not r.pool_mode and r.code == CODE_INVALID for r in STATELESS)


def test_the_docs_tables_are_the_records() -> None:
    page = (REPO / "docs" / "reference" / "admission-rules.md").read_text()
    assert cat.rules_table() in page, "docs/reference/admission-rules.md is stale: run `make docs`"
    assert cat.policy_table() in page, "docs/reference/admission-rules.md is stale: run `make docs`"
