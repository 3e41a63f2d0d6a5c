"""The CEL generator (pure): paths, the webhook's matchConditions and the policy's shape.

Whether the CEL *means* what the rules engine means is tested against the real apiserver
(tests/integration/test_admission_policy.py); here: the paths, the shape, and safety guards."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpushare.admission import requests_gpu_sharing
from gpushare.admission.cel import gpu_sharing_condition
from gpushare.admission.vap import MANIFESTS, POLICY_RULES, build_policies, build_policy, render_manifest
from gpushare.admission.webhook_config import TARGETS, WebhookSettings, build_configuration, targets_for
from gpushare.rulekit.cel import KindPaths, PathError, Step, exists_at, kind_paths, parse_path
from gpushare.rulekit.kinds import DEFAULT_TABLE, PodSource, WorkloadKind, table_with
from gpushare.rulekit.podspecs import pod_specs
from support.celtext import one_line

REPO = Path(__file__).resolve().parents[2]


def test_parse_path() -> None:
    assert parse_path("spec.template.spec") == (Step("spec"), Step("template"), Step("spec"))
    assert parse_path("spec.tasks[*].template.spec")[1] == Step("tasks", items=True)
    assert parse_path("spec.pytorchReplicaSpecs.*.template.spec")[2] == Step(None)
    for bad in ("", "*.spec", "spec.a-b", "spec.in", "spec..x", "spec.*[*]", "spec.tasks[]"):
        with pytest.raises(PathError):
            parse_path(bad)


def _table_kind(api_version: str, kind: str) -> WorkloadKind:
    found = DEFAULT_TABLE.lookup({"apiVersion": api_version, "kind": kind})
    assert found is not None
    return found


def test_kind_paths_come_from_the_kinds_table() -> None:
    pod = kind_paths(_table_kind("v1", "Pod"))
    assert pod is not None
    assert pod.containers == (
        ("spec.containers[*]", "container"),
        ("spec.initContainers[*]", "init container"),
        ("spec.ephemeralContainers[*]", "ephemeral container"),
    )
    assert pod.labels == ("metadata.labels",)
    cron = kind_paths(_table_kind("batch/v1", "CronJob"))
    assert cron is not None and cron.labels == ("spec.jobTemplate.spec.template.metadata.labels",)
    # Argo: containers directly in the templates, labels in each template's metadata.
    wf = kind_paths(_table_kind("argoproj.io/v1alpha1", "Workflow"))
    assert wf is not None
    assert ("spec.templates[*].container", "container") in wf.containers
    assert ("spec.templates[*].script", "script") in wf.containers
    assert ("spec.templates[*].containerSet.containers[*]", "container") in wf.containers
    assert wf.labels == ("spec.templates[*].metadata.labels",)
    isvc = kind_paths(_table_kind("serving.kserve.io/v1beta1", "InferenceService"))
    assert isvc is not None and ("spec.predictor.model", "model container") in isvc.containers
    # A configured kind with a key CEL cannot select: no CEL view (sent whole, not in the policy).
    odd = WorkloadKind("Odd", "example.com", ("v1",), "odds", (PodSource("spec.my-pods.template.spec"),))
    assert kind_paths(odd) is None


def test_exists_guards_every_step_and_uses_fresh_variables() -> None:
    cel = exists_at("spec.replicas.*.template.spec.containers[*]", lambda x: f"f({x})")
    assert cel == (
        "(has(object.spec) && (has(object.spec.replicas) && object.spec.replicas.exists(k1,"
        " (has(object.spec.replicas[k1].template) && (has(object.spec.replicas[k1].template.spec)"
        " && (has(object.spec.replicas[k1].template.spec.containers)"
        " && object.spec.replicas[k1].template.spec.containers.exists(x2, f(x2))))))))"
    )


def test_every_workload_webhook_matches_only_gpu_sharing_and_pools_always_go() -> None:
    hooks = {h["name"]: h for h in build_configuration(WebhookSettings())["webhooks"]}
    for target in TARGETS:
        hook = hooks[f"{target.handler_id}.gpushare.io"]
        if target.kind == "GPUSharePool":
            assert "matchConditions" not in hook
            continue
        (cond,) = hook["matchConditions"]  # every kind of the table, Argo and KServe included
        expr = one_line(cond["expression"])
        assert expr.startswith("object != null && (")
        assert target.workload is not None
        for source in target.workload.sources:
            if "*" not in source.path:
                for key in ("containers", "initContainers", "ephemeralContainers"):
                    if f"{key}[*]" in source.containers:
                        assert f"object.{source.path}.{key}.exists(" in expr
            for rel in source.containers:
                assert f".{rel.rsplit('.', 1)[-1].removesuffix('[*]')}" in expr
        assert "'aliyun.com/gpu-count' in " in expr
        assert expr.count("(") == expr.count(")")
        # the exclusions stay
        if target.namespaced:  # ClusterWorkflowTemplate is cluster-scoped
            assert hook["namespaceSelector"]["matchExpressions"][0]["operator"] == "NotIn"
        assert hook["objectSelector"]["matchExpressions"][0]["values"] == ["ignore"]


def test_a_kind_with_a_wildcard_path_gets_a_condition_from_the_same_generator() -> None:
    kind = kind_paths(_table_kind("kubeflow.org/v1", "PyTorchJob"))
    assert kind is not None
    expr = gpu_sharing_condition(kind)
    assert "object.spec.pytorchReplicaSpecs.exists(k1," in expr
    assert "object.spec.pytorchReplicaSpecs[k1].template.spec.containers" in expr
    assert "].template.metadata.labels" in expr
    argo = kind_paths(_table_kind("argoproj.io/v1alpha1", "CronWorkflow"))
    assert argo is not None
    expr = gpu_sharing_condition(argo)
    assert "object.spec.workflowSpec.templates.exists(x" in expr and ".container.resources" in expr


def _pod(**spec: Any) -> dict[str, Any]:
    return {"kind": "Pod", "metadata": {"name": "p"}, "spec": spec}


@pytest.mark.parametrize(
    ("obj", "asks"),
    [
        pytest.param(_pod(containers=[{"resources": {"limits": {"cpu": 1}}}]), False, id="cpu"),
        pytest.param(
            _pod(initContainers=[{"resources": {"requests": {"aliyun.com/gpu-mem": 1}}}]), True, id="init"
        ),
        pytest.param(
            _pod(ephemeralContainers=[{"resources": {"limits": {"aliyun.com/gpu": 1}}}]), True, id="eph"
        ),
        pytest.param(
            {"kind": "Pod", "metadata": {"labels": {"aliyun.com/gpu-count": "2"}}, "spec": {}},
            True,
            id="label",
        ),
        pytest.param(
            {
                "kind": "CronJob",
                "spec": {
                    "jobTemplate": {
                        "spec": {"template": {"metadata": {"labels": {"aliyun.com/gpu-count": "2"}}}}
                    }
                },
            },
            True,
            id="cronjob-template-label",
        ),
        pytest.param({"kind": "Deployment", "spec": {"template": "nonsense"}}, False, id="malformed"),
        pytest.param(
            _pod(containers=[{"resources": {"limits": {"nvidia.com/gpu": 1}}}]), False, id="whole-gpu"
        ),
        pytest.param(
            _pod(nodeSelector={"a": "b"}, containers=[{"resources": {"limits": {"nvidia.com/gpu": 1}}}]),
            True,
            id="whole-gpu-with-selector",
        ),
        pytest.param(
            _pod(nodeName="n", initContainers=[{"resources": {"requests": {"nvidia.com/gpu": 1}}}]),
            True,
            id="whole-gpu-init-with-node-name",
        ),
        pytest.param(
            _pod(containers=[{"resources": {"requests": {"nvidia.com/gpu.shared": 1}}}]),
            True,
            id="shared-gpu",
        ),
        # A MIG device as nvidia.com/gpu: sent only from a pod spec with node constraints.
        pytest.param(
            _pod(containers=[{"resources": {"limits": {"nvidia.com/mig-1g.5gb": 1}}}]), False, id="mig"
        ),
        pytest.param(
            _pod(
                nodeSelector={"a": "b"}, containers=[{"resources": {"limits": {"nvidia.com/mig-1g.5gb": 1}}}]
            ),
            True,
            id="mig-with-selector",
        ),
    ],
)
def test_python_gate_asks_what_the_match_condition_asks(obj: dict[str, Any], asks: bool) -> None:
    assert requests_gpu_sharing(obj) is asks


def test_wildcard_paths_expand_in_python() -> None:
    sources = (PodSource("spec.replicas.*.template.spec"), PodSource("spec.tasks[*].template.spec"))
    table = table_with([WorkloadKind("TrainJob", "example.com", ("v1",), "trainjobs", sources)])
    obj = {
        "apiVersion": "example.com/v1",
        "kind": "TrainJob",
        "spec": {
            "replicas": {"Master": {"template": {"spec": {"containers": []}}}, "Worker": {"template": "x"}},
            "tasks": [{"template": {"spec": {"containers": [1]}}}, "junk"],
        },
    }
    assert [p for p, _ in pod_specs(obj, table)] == [
        "spec.replicas.Master.template.spec",
        "spec.tasks[0].template.spec",
    ]


def test_policy_covers_the_webhook_kinds_and_the_stateless_rules() -> None:
    policy = build_policy()
    spec = policy["spec"]
    covered = {(r["apiGroups"][0], r["resources"][0]) for r in spec["matchConstraints"]["resourceRules"]}
    # every kind of the kinds table: built-ins, Kubeflow, KubeRay, Argo, Volcano, JobSet, LWS, KServe
    assert covered == {(t.group, t.plural) for t in TARGETS if t.kind != "GPUSharePool"}
    assert ("argoproj.io", "workflows") in covered and ("serving.kserve.io", "inferenceservices") in covered
    mpi = next(r for r in spec["matchConstraints"]["resourceRules"] if r["resources"] == ["mpijobs"])
    assert mpi["apiVersions"] == ["v1", "v2beta1"]
    # every built-in container path is in one of the two variables: no per-rule walk, bounded size
    assert all("all(x" not in v["expression"] for v in spec["validations"])
    assert len(yaml.safe_dump(policy)) < 400_000
    assert [one_line(v["messageExpression"]).count("(rule ") > 0 for v in spec["validations"]] == [
        True
    ] * len(POLICY_RULES)
    assert set(POLICY_RULES) == {
        "GS001-core-percentage-step",
        "GS002-core-percentage-range",
        "GS003-core-without-mem",
        "GS004-mem-positive-integer",
        "GS006-request-limit-mismatch",
        "GS012-unknown-gpu-resource",
        "GS017-node-name-set",
        "GS018-shared-and-whole-gpu",
        "GS020-nvidia-resource-quantity",
    }
    assert all(v["reason"] == "Invalid" for v in spec["validations"])
    # The webhook's selectors as matchConditions (the apiserver evaluates those only for the
    # policy's kinds): none on the policy itself, which it would test on every request of every kind.
    assert set(spec["matchConstraints"]) == {"matchPolicy", "resourceRules"}
    assert [m["name"] for m in spec["matchConditions"]] == [
        "outside-excluded-namespaces", "not-opted-out", "asks-for-gpu-sharing",
    ]  # fmt: skip
    assert (
        spec["matchConditions"][0]["expression"]
        == "!(request.namespace in ['gpushare-system', 'kube-system'])"
    )


def test_committed_policy_manifests_match_the_builder() -> None:
    """policy.yaml (the workload kinds) and policy-pods.yaml (Pods), one policy and its binding each;
    kustomize installs neither: the shipped webhooks fail closed, so each GPU-sharing object is
    judged once, by the webhook (docs/concepts/admission.md)."""
    names = {"policy.yaml": "gpushare-stateless-rules.gpushare.io",
             "policy-pods.yaml": "gpushare-stateless-rules-pods.gpushare.io"}  # fmt: skip
    for (part, file), want in zip(MANIFESTS.items(), names.values(), strict=True):
        assert file in names
        path = REPO / "manifests" / "webhook" / file
        assert path.read_text() == render_manifest(part=part), "run: make manifests"
        docs = list(yaml.safe_load_all(path.read_text()))
        assert [d["kind"] for d in docs] == ["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"]
        assert docs[0]["metadata"]["name"] == names[file] == want
        assert docs[1]["spec"] == {"policyName": docs[0]["metadata"]["name"], "validationActions": ["Deny"]}
    kustomization = yaml.safe_load((REPO / "manifests" / "webhook" / "kustomization.yaml").read_text())
    assert kustomization["resources"] == ["webhook.yaml"]
    configs = yaml.safe_load_all((REPO / "manifests" / "webhook" / "webhook.yaml").read_text())
    webhooks = [
        w for d in configs if d and d["kind"] == "ValidatingWebhookConfiguration" for w in d["webhooks"]
    ]
    assert next(w for w in webhooks if w["name"] == "validate-pods.gpushare.io")["failurePolicy"] == "Fail"
    # Every webhook of a kind the policies hold fails closed (only the pools' entry fails open).
    open_ = {w["name"] for w in webhooks if w["failurePolicy"] != "Fail"}
    assert all("gpusharepools" in name for name in open_), open_


def test_the_shipped_policies_split_the_kinds_and_a_pod_reads_only_its_own_paths() -> None:
    """Pods have a policy of their own: no test of the request's kind, no grouped containers; the
    workload kinds keep theirs. Together they are the one policy over every kind."""
    pods, workloads = build_policies()
    whole = build_policy()["spec"]

    def kinds(spec: dict[str, Any]) -> list[tuple[str, str]]:
        return [(r["apiGroups"][0], r["resources"][0]) for r in spec["matchConstraints"]["resourceRules"]]

    assert kinds(pods["spec"]) == [("", "pods")]
    assert kinds(pods["spec"]) + kinds(workloads["spec"]) == kinds(whole)
    assert [v["name"] for v in pods["spec"]["variables"]] == ["objectName", "containers", "gpu"]
    assert "gpuGroups" in [v["name"] for v in workloads["spec"]["variables"]]
    text = yaml.safe_dump(pods)
    assert "request.resource" not in text and "variables.resource" not in text
    assert "template" not in text and "gpuGroups" not in text
    # the same rules, in the same order, with the same fallback messages; but NVIDIA's quantities
    # (GS020), which the apiserver's own Pod validation refuses before admission: the Pods policy
    # leaves it out, and the other never judges it on a built-in kind
    quantity = "(rule GS020-nvidia-resource-quantity)"
    assert [v["message"] for v in pods["spec"]["validations"]] == [
        v["message"] for v in whole["validations"] if quantity not in v["message"]
    ]
    assert "nvidiaGroups" not in text and "variables.nvidia" not in text
    (gs020,) = [v for v in workloads["spec"]["validations"] if quantity in v["message"]]
    assert one_line(gs020["expression"]).startswith("!(variables.resource in ['kubeflow.org/pytorchjobs',")
    assert "apps/" not in gs020["expression"] and "batch/jobs" not in gs020["expression"]
    assert [v["message"] for v in workloads["spec"]["validations"]] == [
        v["message"] for v in whole["validations"]
    ]
    # a messageExpression reads the object's name only for a broken container (the apiserver
    # evaluates every messageExpression for every matched request, passing ones too)
    for v in pods["spec"]["validations"]:
        assert not v["messageExpression"].startswith("variables.objectName")


def test_a_kind_without_known_pod_specs_is_sent_whole() -> None:
    from gpushare.admission.webhook_config import WebhookTarget, build_webhook

    target = WebhookTarget("validate-widgets", "Widget", "example.com", "v1", "widgets", ("CREATE",))
    assert "matchConditions" not in build_webhook(WebhookSettings(), target)
    assert gpu_sharing_condition(KindPaths("example.com", "widgets")) == "object != null"
    odd = WorkloadKind("Odd", "example.com", ("v1",), "odds", (PodSource("spec.my-pods.template.spec"),))
    (odd_target,) = [t for t in targets_for(table_with([odd])) if t.kind == "Odd"]
    assert "matchConditions" not in build_webhook(WebhookSettings(), odd_target)
    policy = build_policy(WebhookSettings(targets=targets_for(table_with([odd]))))
    assert "odds" not in {r["resources"][0] for r in policy["spec"]["matchConstraints"]["resourceRules"]}


def test_chart_policy_spec_is_current() -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("chart_webhooks", REPO / "hack" / "chart-webhooks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    path = REPO / "charts" / "gpushare-operator" / "files" / "policy-spec.yaml"
    assert path.read_text() == module.render_policy(), "stale: run 'make manifests'"


def _open_gate(configuration: dict[str, Any]) -> dict[str, Any]:
    """The configuration with every entry's NVIDIA gate open (the operator's patch)."""
    from gpushare.admission.gate import gate_patch

    patch = gate_patch({**configuration, "metadata": {"resourceVersion": "1"}}, True, TARGETS)
    out: dict[str, Any] = json.loads(json.dumps(configuration))
    for op in patch.ops[1:]:
        _, _, index, _, j, _ = op["path"].split("/")
        out["webhooks"][int(index)]["matchConditions"][int(j)]["expression"] = op["value"]
    return out


def test_each_shipped_object_fits_kubectls_last_applied_annotation() -> None:
    """A client-side ``kubectl apply`` keeps the whole object, as JSON, in its
    last-applied-configuration annotation, and the apiserver refuses annotations over 256 KiB
    (the manifests test applies them that way): the laid-out CEL's whitespace counts too. The
    webhook configuration with the NVIDIA gate open is the largest it gets."""
    configuration = build_configuration(WebhookSettings())
    opened = _open_gate(configuration)
    assert opened != configuration
    for obj in [*build_policies(), configuration, opened]:
        size = len(json.dumps(obj, separators=(",", ":")))
        assert size < 256 * 1024 - 16 * 1024, (obj["metadata"]["name"], size)


#: The generated files whose CEL is laid out over lines.
GENERATED = [
    REPO / "manifests" / "webhook" / "policy.yaml",
    REPO / "manifests" / "webhook" / "policy-pods.yaml",
    REPO / "manifests" / "webhook" / "webhook.yaml",
    REPO / "charts" / "gpushare-operator" / "files" / "policy-spec.yaml",
    REPO / "charts" / "gpushare-operator" / "files" / "webhooks.yaml",
]


@pytest.mark.parametrize("path", GENERATED, ids=lambda p: p.name)
def test_no_line_of_the_generated_cel_files_is_over_200_characters(path: Path) -> None:
    """Every variable, condition and validation is multi-line CEL a reviewer can read: a YAML
    literal block (``|-``) of lines of at most 200 characters (a long message literal is split)."""
    lines = path.read_text().splitlines()
    assert max(len(line) for line in lines) <= 200, [line[:80] for line in lines if len(line) > 200]
    text = path.read_text()
    assert text.count("expression: |-") > 0


def _expressions(obj: Any) -> list[str]:
    """Every CEL expression of a generated object, in order."""
    if isinstance(obj, dict):
        own = [v for k, v in obj.items() if k in ("expression", "messageExpression") and isinstance(v, str)]
        return own + [
            e for k, v in obj.items() if k not in ("expression", "messageExpression") for e in _expressions(v)
        ]
    if isinstance(obj, list):
        return [e for item in obj for e in _expressions(item)]
    return []


def test_the_shipped_cel_is_the_generators_laid_out(monkeypatch: pytest.MonkeyPatch) -> None:
    """The builders write what the CEL generator wrote, laid out (celfmt.readable): the same
    text once back on one line; only the whitespace and the long literals' splits differ."""
    import gpushare.admission.vap as vap
    import gpushare.admission.webhook_config as webhook_config
    from gpushare.admission.celfmt import readable

    shipped = _expressions([*build_policies(), build_configuration(WebhookSettings())])
    monkeypatch.setattr(vap, "readable", lambda expr: expr)
    monkeypatch.setattr(webhook_config, "readable", lambda expr: expr)
    raw = _expressions([*build_policies(), build_configuration(WebhookSettings())])
    assert len(shipped) == len(raw) > 50
    for laid, written in zip(shipped, raw, strict=True):
        assert laid == readable(written)
        assert one_line(laid) == written
        assert max(len(line) for line in laid.split("\n")) <= 190, laid[:200]


def test_the_gate_knows_its_conditions_however_they_are_laid_out() -> None:
    """A configuration applied before the CEL was laid out over lines has the same conditions on
    one line: the NVIDIA gate reads them as its own and rewrites them laid out."""
    from gpushare.admission.gate import condition, gate_of, gate_patch
    from gpushare.admission.webhook_config import webhook_name

    configuration = build_configuration(WebhookSettings())
    by_name = {webhook_name(t.handler_id): t for t in TARGETS}
    flat = json.loads(json.dumps(configuration))
    gated = 0
    for hook in flat["webhooks"]:
        target = by_name[hook["name"]]
        if "matchConditions" not in hook:
            continue
        hook["matchConditions"][0]["expression"] = one_line(hook["matchConditions"][0]["expression"])
        assert "\n" not in hook["matchConditions"][0]["expression"]
        assert gate_of(hook, target) is False
        gated += 1
        opened = {
            **hook,
            "matchConditions": [
                {**hook["matchConditions"][0], "expression": one_line(str(condition(target, True)))}
            ],
        }
        assert gate_of(opened, target) is True
    patch = gate_patch({**flat, "metadata": {"resourceVersion": "7"}}, True, TARGETS)
    assert len(patch.ops) == gated + 1 and not patch.foreign
    assert all(
        op["value"] == condition(by_name[flat["webhooks"][int(op["path"].split("/")[2])]["name"]], True)
        for op in patch.ops[1:]
    )
    assert gate_patch({**flat, "metadata": {"resourceVersion": "7"}}, False, TARGETS).ops == ()
