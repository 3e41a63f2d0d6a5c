"""The workload-kinds table: every kind's pod templates are found, configured kinds, names, targets,
and the webhook handler agrees with ``gpushare check`` on generated objects of every kind."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpushare.admission import (
    BUILTIN_KINDS,
    DEFAULT_TABLE,
    Context,
    KindsError,
    evaluate,
    kind_targets,
    load_kinds,
    object_name,
    table_with,
)
from gpushare.admission.podspecs import requests_gpu_sharing
from gpushare.admission.review import verdict
from gpushare.admission.webhook_config import TARGETS, WebhookSettings, build_configuration, targets_for
from gpushare.api.v1alpha1 import parse_pool
from gpushare.cli import main
from gpushare.cli.check import check_objects
from gpushare.cli.run import webhook_options
from gpushare.rulekit.kinds import WorkloadKind, parse_path, walk
from gpushare.rulekit.podspecs import pod_likes
from gpushare.webhook.answer import admit, fast_allow

MEM = "aliyun.com/gpu-mem"
CORE = "aliyun.com/gpu-core.percentage"
CORE_SEL = {"gpushare.io/pool": "gpu-core"}
CGPU_SEL = {"gpushare.io/pool": "cgpu"}


def _pool(name: str, isolation: bool = True, compute: bool = False, unit: str = "GiB") -> Any:
    return parse_pool(
        {
            "apiVersion": "gpushare.io/v1alpha1",
            "kind": "GPUSharePool",
            "metadata": {"name": name},
            "spec": {
                "nodeSelector": {"matchLabels": {"alibabacloud.com/nodepool-id": f"np-{name}"}},
                "memoryIsolation": isolation,
                "computeAllocation": compute,
                "devicePlugin": {"memoryUnit": unit},
            },
        }
    )


POOLS = (_pool("cgpu"), _pool("cgpu-no-isolation", isolation=False), _pool("gpu-core", compute=True))
CTX = Context.build(POOLS)


def _set(root: dict[str, Any], segments: tuple[str, ...], value: Any) -> None:
    """Create ``segments`` in ``root`` (a wildcard becomes key "Worker" or list item 0) and put ``value``."""
    node: Any = root
    for i, seg in enumerate(segments):
        last = i == len(segments) - 1
        nxt = segments[i + 1] if not last else None
        child: Any = value if last else ([] if nxt == "[*]" else {})
        if seg == "[*]":
            if not node:
                node.append(child)
            node = node[0]
            if last:
                node.update(value)
            continue
        key = "Worker" if seg == "*" else seg
        if last:
            node[key] = value
        else:
            node = node.setdefault(key, child)


def api_version(kind: WorkloadKind) -> str:
    return kind.api_versions[0]


def build(
    kind: WorkloadKind, pod_spec: dict[str, Any], labels: dict[str, str] | None = None
) -> dict[str, Any]:
    """An object of ``kind`` with ``pod_spec`` (a PodSpec: nodeSelector + containers) at every source."""
    obj: dict[str, Any] = {"apiVersion": api_version(kind), "kind": kind.kind, "metadata": {"name": "w"}}
    if kind.namespaced:
        obj["metadata"]["namespace"] = "ml"
    for source in kind.sources:
        spec = copy.deepcopy(pod_spec)
        containers = spec.pop("containers")
        first = source.containers[0]
        # Put the containers where the kind keeps them (a list, or one container object).
        node: dict[str, Any] = dict(spec)
        if first.endswith("[*]"):
            _set(node, parse_path(first)[:-1], containers)
        else:
            _set(node, parse_path(first), containers[0])
        _set(obj, parse_path(source.path), node)
        if labels:
            pod_path = next(p for p, _ in walk(obj, parse_path(source.path)))
            rel = source.labels
            if rel.startswith("../"):
                parent = pod_path.rsplit(".", 1)[0] if "." in pod_path else ""
                target = f"{parent}.{rel[3:]}" if parent else rel[3:]
            else:
                target = f"{pod_path}.{rel}"
            _set(obj, parse_path(target.replace("[0]", "[*]")), dict(labels))
    return obj


def gpu_spec(limits: dict[str, Any], selector: dict[str, str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": "x", "resources": {"limits": limits}}]}
    if selector is not None:
        spec["nodeSelector"] = selector
    return spec


KINDS = [pytest.param(k, id=f"{k.kind}.{k.group or 'core'}") for k in BUILTIN_KINDS]


@pytest.mark.parametrize("kind", KINDS)
def test_every_pod_source_of_every_kind_is_checked(kind: WorkloadKind) -> None:
    obj = build(kind, gpu_spec({MEM: 2, CORE: 33}, CORE_SEL))
    assert requests_gpu_sharing(obj)
    findings = evaluate(obj, CTX)
    assert [f.rule_id for f in findings] == ["GS001-core-percentage-step"] * len(kind.sources)
    fields = sorted(f.field for f in findings)
    assert all(f.object == object_name(obj) for f in findings)
    for source, field in zip(sorted(kind.sources, key=lambda s: s.path), fields, strict=True):
        prefix = source.path.replace(".*.", ".Worker.").replace("[*]", "[0]")
        assert field.startswith(prefix), (field, prefix)
    assert evaluate(build(kind, gpu_spec({MEM: 2, CORE: 30}, CORE_SEL)), CTX) == []
    assert evaluate(build(kind, gpu_spec({"cpu": "1", "nvidia.com/gpu": 1})), CTX) == []


@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_reports_selector_and_size_in_one_pass(kind: WorkloadKind) -> None:
    obj = build(kind, gpu_spec({MEM: 2, "aliyun.com/gpu-core": 50}))
    rules = [f.rule_id for f in evaluate(obj, CTX)]
    assert rules == ["GS012-unknown-gpu-resource", "GS007-pool-target-missing"] * len(kind.sources)


@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_reads_the_multi_gpu_label_of_its_pods(kind: WorkloadKind) -> None:
    uneven = build(kind, gpu_spec({MEM: 7}, CGPU_SEL), labels={"aliyun.com/gpu-count": "2"})
    assert [f.rule_id for f in evaluate(uneven, CTX)] == ["GS013-gpu-count-split"] * len(kind.sources)
    even = build(kind, gpu_spec({MEM: 8}, CGPU_SEL), labels={"aliyun.com/gpu-count": "2"})
    assert evaluate(even, CTX) == []


def argo(templates: list[dict[str, Any]], selector: dict[str, str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"entrypoint": "main", "templates": templates}
    if selector is not None:
        spec["nodeSelector"] = selector
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"name": "wf"},
        "spec": spec,
    }


def _tmpl(
    limits: dict[str, Any], selector: dict[str, str] | None = None, key: str = "container"
) -> dict[str, Any]:
    t: dict[str, Any] = {"name": "t", key: {"image": "x", "resources": {"limits": limits}}}
    if selector is not None:
        t["nodeSelector"] = selector
    return t


def test_argo_workflow_level_node_selector_applies_and_a_template_overrides_it() -> None:
    steps = {"name": "main", "steps": [[{"name": "s", "template": "t"}]]}
    inherited = argo([steps, _tmpl({MEM: 2}, key="script")], CORE_SEL)
    (f,) = evaluate(inherited, CTX)
    assert f.rule_id == "GS009-pool-kind-mismatch" and f.field == "spec.nodeSelector"
    overridden = argo([steps, _tmpl({MEM: 2}, CGPU_SEL)], CORE_SEL)
    assert evaluate(overridden, CTX) == []
    (missing,) = evaluate(argo([steps, _tmpl({MEM: 2})]), CTX)
    assert missing.rule_id == "GS007-pool-target-missing"
    assert missing.field == "spec.templates[1].nodeSelector"


def test_argo_container_set_sidecars_and_init_containers_are_checked() -> None:
    tmpl = {
        "name": "t",
        "nodeSelector": CORE_SEL,
        "containerSet": {"containers": [{"name": "a", "resources": {"limits": {MEM: 2, CORE: 33}}}]},
        "sidecars": [{"name": "side", "resources": {"limits": {MEM: 2, CORE: 7}}}],
        "initContainers": [{"name": "init", "resources": {"limits": {MEM: 2, CORE: 101}}}],
    }
    got = [(f.rule_id, f.container) for f in evaluate(argo([tmpl]), CTX)]
    assert got == [
        ("GS001-core-percentage-step", "a"),
        ("GS001-core-percentage-step", "side"),
        ("GS002-core-percentage-range", "init"),
    ]


def test_kserve_model_format_containers_take_the_predictor_node_selector() -> None:
    isvc = {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": {"name": "m", "namespace": "serve"},
        "spec": {
            "predictor": {"pytorch": {"resources": {"limits": {MEM: 2, CORE: 33}}}, "nodeSelector": CORE_SEL}
        },
    }
    (f,) = evaluate(isvc, CTX)
    assert f.rule_id == "GS001-core-percentage-step"
    assert f.field.startswith("spec.predictor.pytorch.resources")
    assert 'pytorch container "pytorch"' in f.message


def test_volcano_job_and_batch_job_are_told_apart_by_api_group() -> None:
    spec = gpu_spec({MEM: 2, CORE: 33}, CORE_SEL)
    vc = {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": "v", "namespace": "ml"},
        "spec": {"tasks": [{"name": "t", "template": {"spec": spec}}]},
    }
    batch = {**vc, "apiVersion": "batch/v1", "spec": {"template": {"spec": spec}}}
    assert [f.field.split(".containers")[0] for f in evaluate(vc, CTX)] == ["spec.tasks[0].template.spec"]
    assert [f.field.split(".containers")[0] for f in evaluate(batch, CTX)] == ["spec.template.spec"]
    # A volcano Job shaped like a batch Job has no tasks: nothing to check, and no exception.
    assert evaluate({**batch, "apiVersion": "batch.volcano.sh/v1alpha1"}, CTX) == []


def test_unknown_kind_with_a_gpu_container_gets_a_warning_naming_it_and_how_to_register() -> None:
    obj = {
        "apiVersion": "example.com/v1",
        "kind": "Trainer",
        "metadata": {"name": "t", "namespace": "ml"},
        "spec": {
            "runners": [{"pod": {"spec": {"containers": [{"name": "c", "resources": {"limits": {MEM: 2}}}]}}}]
        },
    }
    (f,) = evaluate(obj, CTX)
    assert (f.rule_id, f.verdict) == ("GS015-workload-kind-unknown", "warn")
    assert f.field == "spec.runners[0].pod.spec.containers[0]"
    assert "Trainer (example.com/v1)" in f.message and "--kinds FILE" in f.message
    assert "--workload-kinds FILE" in f.message
    # Objects of unknown kinds without such a container, and ConfigMaps naming the resource, pass.
    assert evaluate({**obj, "spec": {"x": {"resources": {"limits": {"cpu": 1}}}}}, CTX) == []
    assert evaluate({"apiVersion": "v1", "kind": "ConfigMap", "data": {MEM: "2"}}, CTX) == []


def test_unknown_kind_scan_is_bounded_in_depth() -> None:
    deep: dict[str, Any] = {"resources": {"limits": {MEM: 2}}}
    for _ in range(200):
        deep = {"a": deep}
    assert evaluate({"apiVersion": "x/v1", "kind": "Deep", "metadata": {"name": "d"}, "spec": deep}) == []


KINDS_FILE = """
kinds:
- kind: Trainer
  group: example.com
  version: v1
  plural: trainers
  podSpecs:
  - spec.runners[*].pod.spec
  - path: spec.steps.*
    containers: [step]
    labels: meta.labels
    inherit: spec
"""


def test_configured_kinds_are_checked_like_built_ins() -> None:
    (trainer,) = load_kinds(KINDS_FILE, "kinds.yaml")
    assert trainer.origin == "kinds.yaml" and trainer.handler_id == "validate-trainers-example-com"
    table = table_with([trainer])
    obj = {
        "apiVersion": "example.com/v1",
        "kind": "Trainer",
        "metadata": {"name": "t", "namespace": "ml"},
        "spec": {
            "nodeSelector": CGPU_SEL,
            "runners": [
                {
                    "pod": {
                        "spec": {"containers": [{"name": "c", "resources": {"limits": {MEM: 2, CORE: 30}}}]}
                    }
                }
            ],
            "steps": {
                "s1": {
                    "step": {"resources": {"limits": {MEM: 7}}},
                    "meta": {"labels": {"aliyun.com/gpu-count": "2"}},
                }
            },
        },
    }
    got = [(f.rule_id, f.field) for f in evaluate(obj, CTX, table)]
    assert got == [
        ("GS007-pool-target-missing", "spec.runners[0].pod.spec.nodeSelector"),
        ("GS013-gpu-count-split", 'spec.steps.s1.meta.labels["aliyun.com/gpu-count"]'),
    ]
    assert evaluate(obj, CTX)[0].rule_id == "GS015-workload-kind-unknown"  # not in the default table
    ids = [t.handler_id for t in targets_for(table)]
    assert "validate-trainers-example-com" in ids and ids[-1] == "validate-gpusharepools"


@pytest.mark.parametrize(
    ("text", "error"),
    [
        pytest.param("- kind: X\n", "kinds[0].plural: is required", id="no-plural"),
        pytest.param(
            "- {kind: X, plural: xs, version: v1, podSpecs: [spec]}\n", "group: is required", id="no-group"
        ),
        pytest.param(
            "- {kind: X, group: g, plural: xs, version: v1, podSpecs: ['spec..a']}\n",
            "segment ''",
            id="bad-path",
        ),
        pytest.param(
            "- {kind: X, group: g, plural: xs, version: v1, podSpecs: [spec], extra: 1}\n",
            "unknown field(s) extra",
            id="unknown-field",
        ),
        pytest.param(
            "- {kind: X, group: g, plural: xs, version: v1, podSpecs: [spec], operations: [DELETE]}\n",
            "DELETE is not CREATE or UPDATE",
            id="bad-op",
        ),
        pytest.param("kinds: {a: 1}\n", "must be a list of kinds", id="not-a-list"),
        pytest.param("- [unclosed\n", "is not valid YAML", id="bad-yaml"),
    ],
)
def test_bad_kinds_files_say_what_is_wrong(text: str, error: str) -> None:
    with pytest.raises(KindsError, match=None) as info:
        load_kinds(text, "k.yaml")
    assert error in str(info.value) and str(info.value).startswith("k.yaml")


def test_check_takes_a_kinds_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    kinds = tmp_path / "kinds.yaml"
    kinds.write_text(KINDS_FILE)
    obj = {
        "apiVersion": "example.com/v1",
        "kind": "Trainer",
        "metadata": {"name": "t", "namespace": "ml"},
        "spec": {
            "runners": [
                {
                    "pod": {
                        "spec": {"containers": [{"name": "c", "resources": {"limits": {MEM: 2, CORE: 33}}}]}
                    }
                }
            ]
        },
    }
    manifest = tmp_path / "t.yaml"
    manifest.write_text(json.dumps(obj))
    assert main(["check", "--offline", "-f", str(manifest), "-o", "json"]) == 0
    assert [f["rule_id"] for f in json.loads(capsys.readouterr().out)] == ["GS015-workload-kind-unknown"]
    assert main(["check", "--offline", "-f", str(manifest), "--kinds", str(kinds), "-o", "json"]) == 1
    rules = [f["rule_id"] for f in json.loads(capsys.readouterr().out)]
    assert rules == ["GS001-core-percentage-step", "GS007-pool-target-missing"]
    bad = tmp_path / "bad.yaml"
    bad.write_text("- kind: X\n")
    assert main(["check", "--offline", "-f", str(manifest), "--kinds", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "kinds[0]" in err


def test_object_names_have_one_format() -> None:
    assert object_name({"kind": "Job", "metadata": {"name": "j"}}) == "Job/default/j"
    assert object_name({"kind": "Job", "metadata": {"name": "j", "namespace": "ml"}}) == "Job/ml/j"
    assert object_name({"kind": "GPUSharePool", "metadata": {"name": "p"}}) == "GPUSharePool/p"
    assert object_name({"kind": "Node", "metadata": {"name": "n"}}) == "Node/n"
    cwt = {"apiVersion": "argoproj.io/v1alpha1", "kind": "ClusterWorkflowTemplate", "metadata": {"name": "c"}}
    assert object_name(cwt) == "ClusterWorkflowTemplate/c"
    assert object_name({"kind": "Pod", "metadata": {"generateName": "p-"}}) == "Pod/default/p-"


def test_kind_targets_give_what_a_registration_or_a_policy_needs() -> None:
    targets = {(t.group, t.kind): t for t in kind_targets()}
    assert len(targets) == len(BUILTIN_KINDS)
    mpi = targets[("kubeflow.org", "MPIJob")]
    assert (mpi.version, mpi.versions, mpi.plural, mpi.namespaced) == (
        "v1",
        ("v1", "v2beta1"),
        "mpijobs",
        True,
    )
    assert mpi.pod_spec_paths == ("spec.mpiReplicaSpecs.*.template.spec",)
    assert "spec.mpiReplicaSpecs.*.template.spec.containers[*]" in mpi.container_paths
    wf = targets[("argoproj.io", "ClusterWorkflowTemplate")]
    assert not wf.namespaced and "spec.templates[*].script" in wf.container_paths
    assert targets[("", "Pod")].operations == ("CREATE",)
    cfg = build_configuration(WebhookSettings())
    hooks = {h["name"]: h for h in cfg["webhooks"]}
    assert len(hooks) == len(TARGETS) == len(BUILTIN_KINDS) + 1
    mpi_rule = hooks["validate-mpijobs-kubeflow-org.gpushare.io"]["rules"][0]
    assert mpi_rule["apiVersions"] == ["v1", "v2beta1"] and mpi_rule["apiGroups"] == ["kubeflow.org"]
    assert hooks["validate-jobs-batch-volcano-sh.gpushare.io"]["rules"][0]["apiGroups"] == [
        "batch.volcano.sh"
    ]
    assert (
        hooks["validate-clusterworkflowtemplates-argoproj-io.gpushare.io"]["rules"][0]["scope"] == "Cluster"
    )


def test_pod_likes_of_malformed_objects_are_skipped() -> None:
    spec: object
    for spec in (
        "oops",
        None,
        {"pytorchReplicaSpecs": "x"},
        {"pytorchReplicaSpecs": {"W": None}},
        {"pytorchReplicaSpecs": []},
    ):
        obj: dict[str, Any] = {
            "apiVersion": "kubeflow.org/v1",
            "kind": "PyTorchJob",
            "metadata": {"name": "x"},
            "spec": spec,
        }
        assert pod_likes(obj) == []
        assert evaluate(obj, CTX) == []


# --- check and the webhook agree on generated objects of every kind --------------------------------

QUANTITY = st.one_of(
    st.integers(min_value=-5, max_value=130), st.sampled_from(["2", "1.5", "2Gi", "abc", "", "30", "33"])
)
RESOURCE = st.sampled_from([MEM, CORE, "cpu", "aliyun.com/gpu-core", "aliyun.com/gpu-count"])
SELECTOR = st.sampled_from(
    [None, CORE_SEL, CGPU_SEL, {"gpushare.io/pool": "cgpu-no-isolation"}, {"cgpu": "true"}, {"x": "y"}]
)


@st.composite
def workload(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.sampled_from(BUILTIN_KINDS))
    limits = draw(st.dictionaries(RESOURCE, QUANTITY, max_size=3))
    labels = draw(st.sampled_from([None, {"aliyun.com/gpu-count": "2"}, {"aliyun.com/gpu-count": "x"}]))
    return build(kind, gpu_spec(limits, draw(SELECTOR)), labels)


@given(obj=workload())
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_check_and_the_webhook_handler_agree_on_every_kind(obj: dict[str, Any]) -> None:
    findings = check_objects([obj], CTX)
    want = verdict(findings)
    kind = DEFAULT_TABLE.lookup(obj)
    assert kind is not None
    (target,) = [t for t in TARGETS if t.handler_id == kind.handler_id]
    got = admit(target, obj, "CREATE", lambda: CTX)
    assert (got.allowed, got.code, got.message, got.warnings) == (
        want.allowed,
        want.code,
        want.message,
        want.warnings,
    )
    review = {
        "request": {
            "resource": {"group": target.group, "version": target.version, "resource": target.plural},
            "operation": "CREATE",
            "object": obj,
        }
    }
    # The server's fast path allows only what the handler would allow without findings.
    if fast_allow(target.handler_id, review):
        assert want.allowed and not findings


# --- the pool's memory unit -----------------------------------------------------------------------


def _node(name: str, nodepool: str, gpu_mem: int, gpus: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"alibabacloud.com/nodepool-id": nodepool}},
        "status": {"allocatable": {MEM: str(gpu_mem), "aliyun.com/gpu-count": str(gpus)}},
    }


def _mib_ctx() -> Context:
    from gpushare.admission import node_info

    pools = [_pool("mib", unit="MiB"), _pool("gib")]
    nodes = [_node("m1", "np-mib", 4 * 15360, 4), _node("g1", "np-gib", 4 * 15, 4)]
    return Context.build(pools, [node_info(n) for n in nodes])


def test_mib_pools_judge_memory_in_mib() -> None:
    ctx = _mib_ctx()
    assert ctx.pool_per_gpu == {"mib": 15360, "gib": 15}
    mib = {"gpushare.io/pool": "mib"}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": gpu_spec({MEM: 4096}, mib)}
    assert evaluate(pod, ctx) == []
    pod["spec"] = gpu_spec({MEM: 20000}, mib)
    (f,) = evaluate(pod, ctx)
    assert (
        f.rule_id == "GS005-mem-exceeds-gpu" and "mib 15360 MiB" in f.message and "at most 15360" in f.message
    )
    # The same MiB-sized manifest on a GiB pool is too large, and the message says why.
    pod["spec"] = gpu_spec({MEM: 4096}, {"gpushare.io/pool": "gib"})
    (g,) = evaluate(pod, ctx)
    assert g.rule_id == "GS005-mem-exceeds-gpu" and "looks like MiB" in g.message
    pod["spec"] = gpu_spec({MEM: "2Gi"}, mib)
    (h,) = evaluate(pod, ctx)
    assert h.rule_id == "GS004-mem-positive-integer" and "whole number of MiB" in h.message


def test_inspect_shows_the_unit_of_a_mib_pool() -> None:
    from gpushare.inspection import build_report, render_text

    pools = [_pool("mib", unit="MiB").model_dump(by_alias=True, mode="json")]
    report = build_report([_node("m1", "np-mib", 61440, 4)], [], pools)
    (section,) = report.pools
    assert section.memory_unit == "MiB" and report.to_dict()["pools"][0]["memoryUnit"] == "MiB"
    text = render_text(report)
    assert "gpu-mem in MiB" in text and "allocated (MiB)" in text


def test_operator_takes_a_workload_kinds_file(tmp_path: Path) -> None:
    from gpushare.cli import build_parser

    kinds = tmp_path / "kinds.yaml"
    kinds.write_text(KINDS_FILE)
    args = build_parser().parse_args(["run", "--webhook", "--workload-kinds", str(kinds)])
    options = webhook_options(args)
    assert ("example.com", "Trainer") in {(k.group, k.kind) for k in options.kinds.kinds}
    ids = [t.handler_id for t in options.targets]
    assert "validate-trainers-example-com" in ids and "validate-pytorchjobs-kubeflow-org" in ids
    cfg = build_configuration(options.webhook_settings(None))
    assert "validate-trainers-example-com.gpushare.io" in {h["name"] for h in cfg["webhooks"]}
    review = {
        "request": {
            "resource": {"group": "example.com", "version": "v1", "resource": "trainers"},
            "operation": "CREATE",
            "object": {
                "apiVersion": "example.com/v1",
                "kind": "Trainer",
                "metadata": {"name": "t"},
                "spec": {},
            },
        }
    }
    targets = {t.handler_id: t for t in options.targets}
    assert fast_allow("validate-trainers-example-com", review, targets, options.kinds)
    # Without the file the default configuration has no such webhook.
    default = webhook_options(build_parser().parse_args(["run", "--webhook"]))
    assert "validate-trainers-example-com" not in [t.handler_id for t in default.targets]
    bad = tmp_path / "bad.yaml"
    bad.write_text("- {kind: X}\n")
    with pytest.raises(ValueError, match=r"--workload-kinds .*bad.yaml: kinds\[0\]"):
        webhook_options(build_parser().parse_args(["run", "--webhook", "--workload-kinds", str(bad)]))
    with pytest.raises(ValueError, match=r"missing\.yaml: cannot read"):
        webhook_options(
            build_parser().parse_args(
                ["run", "--webhook", "--workload-kinds", str(tmp_path / "missing.yaml")]
            )
        )


def test_pods_aimed_at_ack_mps_nodes_get_only_the_container_rules() -> None:
    """gpushare has no mps pools (docs/security.md: Limits): such pods are not denied as "no pool"."""
    mps = {"ack.node.gpu.schedule": "mps"}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": gpu_spec({MEM: 2}, mps)}
    assert evaluate(pod, CTX) == []
    pod["spec"] = gpu_spec({MEM: 2, CORE: 33}, mps)
    assert [f.rule_id for f in evaluate(pod, CTX)] == ["GS001-core-percentage-step"]
    pod["spec"] = gpu_spec({MEM: 2}, {"ack.node.gpu.schedule": "default"})
    assert [f.rule_id for f in evaluate(pod, CTX)] == ["GS011-pool-target-unknown"]


def test_the_docs_list_every_kind_and_their_kinds_file_example_loads() -> None:
    import re

    page = Path(__file__).resolve().parents[2] / "docs" / "reference" / "workload-kinds.md"
    section = page.read_text()
    for kind in BUILTIN_KINDS:
        assert kind.kind in section, kind.kind
        for api in kind.api_versions:
            assert f"`{api}`" in section or f"`{api.rsplit('/', 1)[0]}" in section, api
    (block,) = re.findall(r"^```\n(- kind:.*?)^```", section, flags=re.S | re.M)
    (entry,) = load_kinds(block, "docs/reference/workload-kinds.md")
    assert [s.path for s in entry.sources] == ["spec.runners[*].pod.spec", "spec.steps.*"]
    assert entry.sources[1].inherit == "spec" and entry.sources[1].containers == ("step",)


@pytest.mark.parametrize(
    ("name", "suggestion"),
    [
        ("aliyun.com/gpu-core", 'did you mean "aliyun.com/gpu-core.percentage"?'),
        ("aliyun.com/gpu-memory", 'did you mean "aliyun.com/gpu-mem"?'),
        ("aliyun.com/gpumem", 'did you mean "aliyun.com/gpu-mem"?'),
        ("aliyun.com/gpu-core-percentage", 'did you mean "aliyun.com/gpu-core.percentage"?'),
        (
            "aliyun.com/gpu-xyz",
            "the device plugin offers aliyun.com/gpu-mem and aliyun.com/gpu-core.percentage",
        ),
    ],
)
def test_misspelled_gpu_resources_are_denied_with_a_did_you_mean(name: str, suggestion: str) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": gpu_spec({MEM: 2, name: 50}, CGPU_SEL),
    }
    (f,) = evaluate(pod, CTX)
    assert (f.rule_id, f.verdict) == ("GS012-unknown-gpu-resource", "deny")
    assert suggestion in f.message
    # the policy's message is the same less the did-you-mean (tests/integration/test_admission_policy.py)
    assert f.message.endswith(
        "the device plugin offers aliyun.com/gpu-mem and aliyun.com/gpu-core.percentage"
    )
    assert verdict([f]).code == 422  # an invalid value, like GS001-GS004
    pod["spec"] = gpu_spec({MEM: 2, "aliyun.com/gpu-core.tflops": 10}, CGPU_SEL)
    assert evaluate(pod, CTX) == []  # ACK-compatible, not checked by gpushare


def test_ambiguous_and_missing_selector_hints_name_a_pool_of_the_right_kind() -> None:
    """GS007/GS008 suggest isolation (cgpu) first for memory-only pods, core_mem for compute shares,
    and only cgpu for a multi-GPU split; never a pool of another kind."""
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": gpu_spec({MEM: 2}, {"cgpu": "true"}),
    }
    (f,) = evaluate(pod, CTX)
    assert f.rule_id == "GS008-pool-target-ambiguous"
    assert (
        "e.g. nodeSelector {gpushare.io/pool: cgpu} (cgpu pools: cgpu; share pools: cgpu-no-isolation)"
        in f.message
    )
    pod["spec"] = gpu_spec({MEM: 2, CORE: 30}, {"cgpu": "true"})
    (g,) = evaluate(pod, CTX)
    assert g.rule_id == "GS008-pool-target-ambiguous" and g.message.endswith(
        "e.g. nodeSelector {gpushare.io/pool: gpu-core} (core_mem pools: gpu-core)"
    )
    pod["spec"] = gpu_spec({MEM: 8})
    pod["metadata"]["labels"] = {"aliyun.com/gpu-count": "2"}
    (h,) = evaluate(pod, CTX)
    assert h.rule_id == "GS007-pool-target-missing"
    assert h.message.endswith("e.g. nodeSelector {gpushare.io/pool: cgpu} (cgpu pools: cgpu)")
    (none,) = evaluate(pod, Context())
    assert none.message.endswith("{ack.node.gpu.schedule: cgpu} (memory isolation)")
    assert "cgpu.disable.isolation" not in none.message
