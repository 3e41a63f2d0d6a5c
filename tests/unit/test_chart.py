"""The Helm chart charts/gpushare-operator, rendered offline (`helm lint`, `helm template`).

One source of truth with manifests/: with default values the chart renders the same objects as
``kubectl kustomize manifests/`` (helm's own labels aside), its CRDs are byte-identical to crds/,
and its webhooks equal what ``gpushare.admission.webhook_config`` generates for the same
settings. The value sets (cert-manager, agent off, device-plugin namespaces, extra workload kinds,
monitoring, webhook policy) are rendered and checked object by object.

helm comes from ``make helm`` (the ``helm_bin`` fixture fails, never skips, without it).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpushare.admission.vap import NAMESPACE_CONDITION, build_policies
from gpushare.admission.webhook_config import (
    WebhookSettings,
    WebhookTarget,
    build_configuration,
    build_webhook,
)

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "gpushare-operator"
NS = "gpushare-system"
HELM_LABELS = (
    "helm.sh/chart",
    "app.kubernetes.io/managed-by",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
)

Key = tuple[str, str, str]  # kind, namespace, name


def helm(helm_bin: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([helm_bin, *args], capture_output=True, text=True, timeout=120)
    if check and proc.returncode != 0:
        pytest.fail(f"helm {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


#: What `helm template` (no cluster) is told the cluster serves: the chart refuses cert-manager mode
#: and the Prometheus Operator kinds without them (test_missing_crds_fail_with_a_clear_message).
API_VERSIONS = ("--api-versions", "cert-manager.io/v1", "--api-versions", "monitoring.coreos.com/v1")


def template(helm_bin: str, *sets: str, chart: Path = CHART, crds: bool = False) -> dict[Key, dict[str, Any]]:
    args = ["template", "gpushare", str(chart), "--namespace", NS, *API_VERSIONS]
    args += ["--include-crds"] if crds else []
    for s in sets:
        args += ["--set-json" if s.startswith("json:") else "--set", s.removeprefix("json:")]
    return by_key(yaml.safe_load_all(helm(helm_bin, *args).stdout))


def kustomize(path: Path) -> dict[Key, dict[str, Any]]:
    out = subprocess.run(
        ["kubectl", "kustomize", str(path)], capture_output=True, text=True, check=True, timeout=60
    )
    return by_key(yaml.safe_load_all(out.stdout))


def by_key(docs: Any) -> dict[Key, dict[str, Any]]:
    out: dict[Key, dict[str, Any]] = {}
    for d in docs:
        if not d:
            continue
        key = (d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"])
        assert key not in out, f"{key} rendered twice"
        out[key] = d
    return out


def normalized(obj: dict[str, Any]) -> dict[str, Any]:
    """The object without helm's bookkeeping labels (everything else is compared)."""
    obj = json.loads(json.dumps(obj))
    labels = obj["metadata"].get("labels") or {}
    for k in HELM_LABELS:
        labels.pop(k, None)
    if not labels:
        obj["metadata"].pop("labels", None)
    return obj


def leaf_diff(a: Any, b: Any, path: str = "") -> list[tuple[str, str, str]]:
    """Where two JSON-like values differ: (path, a, b) per differing leaf (absent: '-')."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                out.append(
                    (f"{path}.{k}", json.dumps(a[k]) if k in a else "-", json.dumps(b[k]) if k in b else "-")
                )
            else:
                out += leaf_diff(a[k], b[k], f"{path}.{k}")
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in leaf_diff(x, y, f"{path}[{i}]")]
    return [] if a == b else [(path or ".", json.dumps(a), json.dumps(b))]


def container(
    objs: dict[Key, dict[str, Any]], kind: str, name: str, ctr_name: str | None = None
) -> dict[str, Any]:
    """The first container of a workload, or the one named ``ctr_name``."""
    containers = objs[(kind, NS, name)]["spec"]["template"]["spec"]["containers"]
    ctr: dict[str, Any] = next(c for c in containers if ctr_name in (None, c["name"]))
    return ctr


def webhook_container(objs: dict[Key, dict[str, Any]]) -> dict[str, Any]:
    """The operator pod's ``webhook`` container (``gpushare webhook``)."""
    return container(objs, "Deployment", "gpushare-operator", "webhook")


# --- lint and the single source of truth -------------------------------------------------------


def test_helm_lint_strict_passes(helm_bin: str) -> None:
    out = helm(helm_bin, "lint", "--strict", str(CHART), "--namespace", NS)
    assert "1 chart(s) linted, 0 chart(s) failed" in out.stdout


def test_chart_crds_are_the_same_bytes_as_crds_and_manifests() -> None:
    chart_crds = sorted(p.name for p in (CHART / "crds").glob("*.yaml"))
    assert chart_crds == ["gpushare.io_gpusharepools.yaml", "kopf.dev_clusterkopfpeerings.yaml"]
    gsp = (CHART / "crds" / "gpushare.io_gpusharepools.yaml").read_bytes()
    assert gsp == (REPO / "crds" / "gpushare.io_gpusharepools.yaml").read_bytes(), "run 'make crds'"
    assert gsp == (REPO / "manifests" / "crd" / "gpushare.io_gpusharepools.yaml").read_bytes()
    peering = (CHART / "crds" / "kopf.dev_clusterkopfpeerings.yaml").read_bytes()
    assert peering == (REPO / "manifests" / "crd" / "kopf.dev_clusterkopfpeerings.yaml").read_bytes()


def chart_vs_kustomize(chart: dict[Key, dict[str, Any]], kust: dict[Key, dict[str, Any]]) -> list[str]:
    """Every difference, one line per missing object or differing field (lead-friendly report)."""
    # The release namespace is created before `helm install` (Helm stores the release in it), with
    # the Pod Security labels of manifests/namespace. The chart owns the webhook's certificate
    # Secret (so that `helm uninstall` removes it); with kustomize the operator creates it.
    only_kust = sorted(set(kust) - set(chart) - {("Namespace", "", NS)})
    only_chart = sorted(set(chart) - set(kust) - {("Secret", NS, "gpushare-webhook-tls")})
    report = [f"only in manifests/: {'/'.join(filter(None, k))}" for k in only_kust]
    report += [f"only in the chart: {'/'.join(filter(None, k))}" for k in only_chart]
    for key in sorted(set(chart) & set(kust)):
        want = json.loads(json.dumps(kust[key]))
        if key[0] == "CustomResourceDefinition":  # crds/ is not templated; kustomize labels them
            want["metadata"]["labels"].pop("app.kubernetes.io/part-of", None)
        for path, got_v, want_v in leaf_diff(normalized(chart[key]), normalized(want)):
            report.append(f"{'/'.join(filter(None, key))} {path}: chart={got_v} manifests={want_v}")
    return report


def test_default_values_render_the_objects_of_manifests(helm_bin: str) -> None:
    chart = template(helm_bin, crds=True)
    # The CRDs are a kustomization of their own (manifests/crd), as the chart keeps them in crds/.
    kust = {**kustomize(REPO / "manifests"), **kustomize(REPO / "manifests" / "crd")}
    assert ("Namespace", "", NS) in kust
    assert ("Secret", NS, "gpushare-webhook-tls") in chart
    report = chart_vs_kustomize(chart, kust)
    assert not report, "chart (default values) and manifests/ differ:\n" + "\n".join(report)


def test_chart_labels_every_object_for_helm(helm_bin: str) -> None:
    for key, obj in template(helm_bin).items():
        labels = obj["metadata"]["labels"]
        assert labels["app.kubernetes.io/managed-by"] == "Helm", key
        assert labels["app.kubernetes.io/part-of"] == "gpushare", key
        assert labels["app.kubernetes.io/instance"] == "gpushare", key


def test_chart_version_and_app_version_follow_pyproject(helm_bin: str) -> None:
    import tomllib

    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["appVersion"] == version
    assert chart["version"] == version
    objs = template(helm_bin)
    assert container(objs, "Deployment", "gpushare-operator")["image"] == f"gpushare-operator:{version}"
    assert container(objs, "DaemonSet", "gpushare-agent")["image"] == f"gpushare-operator:{version}"


@pytest.mark.parametrize(
    ("sets", "settings"),
    [
        ((), WebhookSettings()),
        (
            (
                "webhook.failurePolicy=Ignore",
                "webhook.timeoutSeconds=3",
                "webhook.excludedNamespaces={kube-system,monitoring}",
            ),
            WebhookSettings(
                failure_policy="Ignore", timeout_seconds=3, excluded_namespaces=("kube-system", "monitoring")
            ),
        ),
        (("json:webhook.excludedNamespaces=[]",), WebhookSettings(excluded_namespaces=())),
    ],
    ids=["defaults", "ignore-3s-monitoring", "no-exclusions"],
)
def test_webhooks_equal_the_generated_configuration(
    helm_bin: str, sets: tuple[str, ...], settings: WebhookSettings
) -> None:
    objs = template(helm_bin, *sets)
    vwc = objs[("ValidatingWebhookConfiguration", "", "gpushare-webhook")]
    assert vwc["webhooks"] == build_configuration(settings)["webhooks"]
    args = webhook_container(objs)["args"]
    # The webhook process gets the same policy (it only writes caBundle in-cluster, but its local
    # mode and its logs use these).
    if settings.failure_policy != "Fail":
        assert f"--webhook-failure-policy={settings.failure_policy}" in args
    if settings.timeout_seconds != 5:
        assert f"--webhook-timeout={settings.timeout_seconds}" in args


@pytest.mark.parametrize(
    ("sets", "excluded"),
    [
        ((), ("kube-system",)),
        (("webhook.excludedNamespaces={kube-system,monitoring}",), ("kube-system", "monitoring")),
        (("json:webhook.excludedNamespaces=[]",), ()),
    ],
    ids=["defaults", "monitoring", "no-exclusions"],
)
def test_policies_equal_the_generated_ones_with_the_charts_excluded_namespaces(
    helm_bin: str, sets: tuple[str, ...], excluded: tuple[str, ...]
) -> None:
    """The chart writes its excluded namespaces (and its own) into each policy's namespace
    matchCondition in the text the builder writes for the same list."""
    objs = template(helm_bin, "webhook.failurePolicy=Ignore", *sets)
    for policy in build_policies(WebhookSettings(excluded_namespaces=excluded)):
        rendered = objs[("ValidatingAdmissionPolicy", "", policy["metadata"]["name"])]
        assert rendered["spec"] == policy["spec"]
        (condition,) = [m for m in rendered["spec"]["matchConditions"] if m["name"] == NAMESPACE_CONDITION]
        names = sorted({*excluded, "gpushare-system"})
        assert (
            condition["expression"] == "!(request.namespace in [" + ", ".join(f"'{n}'" for n in names) + "])"
        )


def test_generated_webhooks_file_is_current() -> None:
    out = subprocess.run(
        [sys.executable, str(REPO / "hack" / "chart-webhooks.py"), "--print"],
        capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    assert (CHART / "files" / "webhooks.yaml").read_text() == out.stdout, "stale: run 'make manifests'"


def test_extra_workload_kinds_get_their_webhooks(helm_bin: str) -> None:
    kinds = [
        {"kind": "TrainingRun", "group": "example.com", "version": "v1", "plural": "trainingruns",
         "podSpecs": ["spec.template.spec"]},
        {"kind": "ClusterJob", "group": "batch.example.io", "versions": ["v2", "v1"], "plural": "clusterjobs",
         "namespaced": False, "operations": ["CREATE"], "podSpecs": ["spec.pod"]},
    ]  # fmt: skip
    objs = template(helm_bin, f"json:workloadKinds={json.dumps(kinds)}", "webhook.failurePolicy=Ignore")
    hooks = {
        h["name"]: h for h in objs[("ValidatingWebhookConfiguration", "", "gpushare-webhook")]["webhooks"]
    }
    settings = WebhookSettings(failure_policy="Ignore")
    want = [
        WebhookTarget(handler_id="validate-trainingruns-example-com", kind="TrainingRun", group="example.com",
                      version="v1", plural="trainingruns", operations=("CREATE", "UPDATE")),
        WebhookTarget(handler_id="validate-clusterjobs-batch-example-io", kind="ClusterJob",
                      group="batch.example.io", version="v2", plural="clusterjobs", operations=("CREATE",),
                      namespaced=False),
    ]  # fmt: skip
    for target in want:
        expected = build_webhook(settings, target)
        if target.handler_id.startswith("validate-clusterjobs"):
            expected["rules"][0]["apiVersions"] = ["v2", "v1"]
        assert hooks[expected["name"]] == expected
    assert len(hooks) == len(build_configuration(settings)["webhooks"]) + 2


# --- value sets --------------------------------------------------------------------------------


def test_image_replicas_resources(helm_bin: str) -> None:
    objs = template(
        helm_bin,
        "image.repository=registry.example/gpushare", "image.tag=1.2.3", "image.pullPolicy=Always",
        "operator.replicas=3", "operator.resources.requests.cpu=250m", "agent.resources.limits.memory=64Mi",
        "json:imagePullSecrets=[{\"name\":\"pull\"}]",
    )  # fmt: skip
    dep = objs[("Deployment", NS, "gpushare-operator")]
    assert dep["spec"]["replicas"] == 3
    for kind, name, ctr_name in (
        ("Deployment", "gpushare-operator", "operator"),
        ("Deployment", "gpushare-operator", "webhook"),
        ("DaemonSet", "gpushare-agent", None),
    ):
        ctr = container(objs, kind, name, ctr_name)
        assert ctr["image"] == "registry.example/gpushare:1.2.3"
        assert ctr["imagePullPolicy"] == "Always"
        assert objs[(kind, NS, name)]["spec"]["template"]["spec"]["imagePullSecrets"] == [{"name": "pull"}]
    assert container(objs, "Deployment", "gpushare-operator")["resources"]["requests"]["cpu"] == "250m"
    assert container(objs, "DaemonSet", "gpushare-agent")["resources"]["limits"]["memory"] == "64Mi"


def test_cert_manager_mode_matches_the_kustomize_overlay(helm_bin: str) -> None:
    chart = template(helm_bin, "webhook.tls.mode=cert-manager")
    overlay = kustomize(REPO / "manifests" / "overlays" / "cert-manager")
    cm_keys = sorted(k for k in overlay if k[0] in ("Issuer", "Certificate"))
    assert len(cm_keys) == 4
    for key in [*cm_keys, ("Deployment", NS, "gpushare-operator")]:
        assert leaf_diff(normalized(chart[key]), normalized(overlay[key])) == [], key
    # cert-manager writes the certificate: no Secret owned by the chart, no Secret access at all.
    assert ("Secret", NS, "gpushare-webhook-tls") not in chart
    assert ("Role", NS, "gpushare-operator-webhook-certs") not in chart
    assert ("RoleBinding", NS, "gpushare-operator-webhook-certs") not in chart


def test_agent_off_renders_no_agent_objects(helm_bin: str) -> None:
    on, off = template(helm_bin), template(helm_bin, "agent.enabled=false")
    gone = sorted(set(on) - set(off))
    assert gone == [
        ("ClusterRole", "", "gpushare-agent"),
        ("ClusterRoleBinding", "", "gpushare-agent"),
        ("DaemonSet", NS, "gpushare-agent"),
        ("ServiceAccount", NS, "gpushare-agent"),
        ("ValidatingAdmissionPolicy", "", "gpushare-agent-node-restriction"),
        ("ValidatingAdmissionPolicyBinding", "", "gpushare-agent-node-restriction"),
    ]
    assert set(off) <= set(on)


def test_agent_node_selector_and_tolerations(helm_bin: str) -> None:
    objs = template(
        helm_bin,
        "agent.nodeSelector.gpu=yes",
        'json:agent.tolerations=[{"key":"nvidia.com/gpu","operator":"Exists","effect":"NoSchedule"}]',
        "agent.affinity=null",
    )
    spec = objs[("DaemonSet", NS, "gpushare-agent")]["spec"]["template"]["spec"]
    assert spec["nodeSelector"] == {"gpu": "yes"}
    assert spec["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert "affinity" not in spec


def _pod_verbs(objs: dict[Key, dict[str, Any]]) -> list[str]:
    rules = objs[("ClusterRole", "", "gpushare-operator")]["rules"]
    verbs: list[str] = next(r["verbs"] for r in rules if r["resources"] == ["pods"])
    return verbs


def test_device_plugin_namespaces_get_a_role_each_and_no_cluster_wide_delete(helm_bin: str) -> None:
    default = template(helm_bin)  # as manifests/: kube-system only
    assert _pod_verbs(default) == ["list", "watch"]
    assert ("Role", "kube-system", "gpushare-operator-device-plugin") in default
    assert "delete" in _pod_verbs(template(helm_bin, "devicePlugin.namespaces=null"))  # opt-out: cluster-wide
    objs = template(helm_bin, "devicePlugin.namespaces={kube-system,gpu-operator}")
    assert _pod_verbs(objs) == ["list", "watch"]
    env = container(objs, "Deployment", "gpushare-operator")["env"]
    assert {"name": "GPUSHARE_PLUGIN_NAMESPACES", "value": "kube-system,gpu-operator"} in env
    for ns in ("kube-system", "gpu-operator"):
        role = objs[("Role", ns, "gpushare-operator-device-plugin")]
        assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["delete"]}]
        binding = objs[("RoleBinding", ns, "gpushare-operator-device-plugin")]
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": "gpushare-operator", "namespace": NS}
        ]
        assert binding["roleRef"]["name"] == "gpushare-operator-device-plugin"


def test_extra_workload_kinds_become_a_mounted_file_and_the_flag(helm_bin: str) -> None:
    kinds = [{"group": "example.com", "version": "v1", "kind": "TrainingRun", "plural": "trainingruns",
              "podSpecs": ["spec.template.spec"]}]  # fmt: skip
    objs = template(helm_bin, f"json:workloadKinds={json.dumps(kinds)}")
    cm = objs[("ConfigMap", NS, "gpushare-workload-kinds")]
    assert yaml.safe_load(cm["data"]["workload-kinds.yaml"]) == kinds
    dep = objs[("Deployment", NS, "gpushare-operator")]
    ctr = webhook_container(objs)  # only the webhook reads the kinds
    assert "--workload-kinds=/etc/gpushare/workload-kinds.yaml" in ctr["args"]
    mount = next(m for m in ctr["volumeMounts"] if m["name"] == "workload-kinds")
    assert mount == {"name": "workload-kinds", "mountPath": "/etc/gpushare", "readOnly": True}
    vol = next(v for v in dep["spec"]["template"]["spec"]["volumes"] if v["name"] == "workload-kinds")
    assert vol["configMap"]["name"] == "gpushare-workload-kinds"
    # A changed list rolls the pods.
    other = template(helm_bin, f"json:workloadKinds={json.dumps([{**kinds[0], 'kind': 'Other'}])}")
    ann = "gpushare.io/workload-kinds-sha256"
    pod_ann = dep["spec"]["template"]["metadata"]["annotations"][ann]
    assert (
        pod_ann
        != other[("Deployment", NS, "gpushare-operator")]["spec"]["template"]["metadata"]["annotations"][ann]
    )
    # None by default: no ConfigMap, no flag.
    default = template(helm_bin)
    assert ("ConfigMap", NS, "gpushare-workload-kinds") not in default
    assert not any(
        a.startswith("--workload-kinds")
        for ctr in default[("Deployment", NS, "gpushare-operator")]["spec"]["template"]["spec"]["containers"]
        for a in ctr["args"]
    )


RULE = """\
# a PrometheusRule as manifests/monitoring ships it; the chart uses its spec
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: gpushare-operator
  namespace: gpushare-system
spec:
  groups:
  - name: gpushare-test
    rules:
    - alert: GPUShareOperatorDown
      expr: absent(up{job="gpushare-operator"} == 1)
      for: 5m
      labels: {severity: critical}
      annotations: {summary: no gpushare operator is scraped}
"""
MONITORING_FILES = ("files/prometheusrule.yaml", "files/dashboards/gpushare-operator.json")


def _chart_with_monitoring_files(tmp_path: Path) -> Path:
    chart = tmp_path / "gpushare-operator"
    shutil.copytree(CHART, chart)
    (chart / "files" / "dashboards").mkdir(exist_ok=True)
    (chart / MONITORING_FILES[0]).write_text(RULE)
    (chart / MONITORING_FILES[1]).write_text('{"title": "gpushare", "panels": []}\n')
    return chart


def test_monitoring_toggles_render_service_monitor_rule_and_dashboard(helm_bin: str, tmp_path: Path) -> None:
    chart = _chart_with_monitoring_files(tmp_path)
    off = template(helm_bin, chart=chart)
    assert not [k for k in off if k[0] in ("ServiceMonitor", "PrometheusRule") or "dashboard" in k[2]]
    objs = template(
        helm_bin, "monitoring.serviceMonitor.enabled=true", "monitoring.prometheusRule.enabled=true",
        "monitoring.dashboard.enabled=true", "monitoring.prometheusRule.labels.release=kps", chart=chart,
    )  # fmt: skip
    sm = objs[("ServiceMonitor", NS, "gpushare-operator")]
    svc = objs[("Service", NS, "gpushare-operator-metrics")]
    # The ServiceMonitor selects the metrics Service (and only it) and scrapes its named port.
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    webhook_svc = objs[("Service", NS, "gpushare-webhook")]
    assert not sm["spec"]["selector"]["matchLabels"].items() <= webhook_svc["metadata"]["labels"].items()
    assert [e["port"] for e in sm["spec"]["endpoints"]] == [p["name"] for p in svc["spec"]["ports"]]
    assert svc["metadata"]["labels"][sm["spec"]["jobLabel"]] == "gpushare-operator"
    rule = objs[("PrometheusRule", NS, "gpushare-operator")]
    assert rule["spec"] == yaml.safe_load(RULE)["spec"]
    assert rule["metadata"]["labels"]["release"] == "kps"
    dash = objs[("ConfigMap", NS, "gpushare-operator-dashboard")]
    assert json.loads(dash["data"]["gpushare-operator.json"])["title"] == "gpushare"
    assert dash["metadata"]["labels"]["grafana_dashboard"] == "1"


@pytest.mark.parametrize("toggle", ["prometheusRule", "dashboard"])
def test_monitoring_without_its_file_fails_clearly(helm_bin: str, tmp_path: Path, toggle: str) -> None:
    chart = tmp_path / "gpushare-operator"
    shutil.copytree(CHART, chart)
    for f in MONITORING_FILES:
        (chart / f).unlink(missing_ok=True)
    out = helm(
        helm_bin, "template", "x", str(chart), *API_VERSIONS, "--set", f"monitoring.{toggle}.enabled=true",
        check=False,
    )  # fmt: skip
    assert out.returncode != 0
    assert f"monitoring.{toggle}.enabled: the chart has no files/" in out.stderr


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (
            "webhook.tls.mode=cert-manager",
            "webhook.tls.mode=cert-manager needs cert-manager (API cert-manager.io/v1), which this cluster "
            "does not serve: install cert-manager first, or set webhook.tls.mode=self",
        ),
        (
            "monitoring.serviceMonitor.enabled=true",
            "monitoring.serviceMonitor.enabled=true needs the Prometheus Operator's CRDs (API "
            "monitoring.coreos.com/v1), which this cluster does not serve",
        ),
        (
            "monitoring.prometheusRule.enabled=true",
            "monitoring.prometheusRule.enabled=true needs the Prometheus Operator's CRDs",
        ),
    ],
)
def test_missing_crds_fail_with_a_clear_message(helm_bin: str, value: str, message: str) -> None:
    """Not Helm's generic "no matches for kind": the value, the API it needs, and the way out."""
    out = helm(helm_bin, "template", "x", str(CHART), "--set", value, check=False)
    assert out.returncode != 0
    assert message in out.stderr, out.stderr
    # the dashboard is a plain ConfigMap: it needs no CRD
    assert helm(helm_bin, "template", "x", str(CHART), "--set", "monitoring.dashboard.enabled=true").stdout


def test_monitoring_is_the_same_as_manifests_monitoring(helm_bin: str) -> None:
    """The chart's monitoring files are byte copies of manifests/monitoring (make manifests copies
    them), and render the same objects as the kustomize overlay manifests/overlays/monitoring."""
    source = REPO / "manifests" / "monitoring"
    copies = {CHART / f: source / f.removeprefix("files/") for f in MONITORING_FILES}
    if not source.exists():
        shipped = [str(c.relative_to(REPO)) for c in copies if c.exists()]
        assert not shipped, f"the chart ships {shipped} but manifests/monitoring does not exist"
        return
    for copy, original in copies.items():
        assert copy.read_bytes() == original.read_bytes(), f"{copy} is stale: run 'make manifests'"
    chart = template(
        helm_bin, "monitoring.serviceMonitor.enabled=true", "monitoring.prometheusRule.enabled=true",
        "monitoring.dashboard.enabled=true",
    )  # fmt: skip
    kust = kustomize(REPO / "manifests" / "overlays" / "monitoring")
    keys = [
        k
        for k in kust
        if k[0] in ("ServiceMonitor", "PrometheusRule") or k[2] == "gpushare-operator-dashboard"
    ]
    assert len(keys) == 3, keys
    for key in keys:
        got, want = normalized(chart[key]), normalized(kust[key])
        if key[0] == "ConfigMap":
            name = "gpushare-operator.json"
            assert json.loads(got["data"].pop(name)) == json.loads(want["data"].pop(name))
        assert leaf_diff(got, want) == [], key


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("webhook.failurePolicy=Maybe", "at '/webhook/failurePolicy': value must be one of 'Fail', 'Ignore'"),
        ("webhook.timeoutSeconds=9", "at '/webhook/timeoutSeconds': maximum: got 9, want 5"),
        ("webhook.tls.mode=vault", "at '/webhook/tls/mode'"),
        ("operator.replicas=0", "at '/operator/replicas': minimum: got 0, want 1"),
        ("image.pullPolicy=Sometimes", "at '/image/pullPolicy'"),
    ],
)
def test_bad_values_are_refused_naming_the_field(helm_bin: str, value: str, message: str) -> None:
    out = helm(helm_bin, "template", "x", str(CHART), "--set", value, check=False)
    assert out.returncode != 0
    assert message in out.stderr
    assert "goroutine" not in out.stderr


@pytest.mark.parametrize(
    ("value", "where", "key"),
    [
        ("webhook.failurPolicy=Ignore", "/webhook", "failurPolicy"),
        ("agent.enable=false", "/agent", "enable"),
        ("webhook.tls.mdoe=cert-manager", "/webhook/tls", "mdoe"),
        ("monitoring.serviceMonitor.enable=true", "/monitoring/serviceMonitor", "enable"),
        ("imagePullSecret[0].name=x", "", "imagePullSecret"),
    ],
)
def test_misspelt_keys_are_refused_naming_the_key(helm_bin: str, value: str, where: str, key: str) -> None:
    """A typo must not pass silently (webhook.failurPolicy=Ignore would leave the webhook fail-closed)."""
    out = helm(helm_bin, "template", "x", str(CHART), "--set", value, check=False)
    assert out.returncode != 0, f"--set {value} was accepted"
    err = out.stderr
    assert f"at '{where}'" in err and f"'{key}'" in err and "not allowed" in err, err


def _declared(schema: dict[str, Any], values: Any, path: str = "") -> list[str]:
    """Keys of ``values`` under a schema object with ``additionalProperties: false`` that the schema
    does not declare."""
    if not isinstance(values, dict) or schema.get("additionalProperties") is not False:
        return []
    props = schema.get("properties", {})
    out = [f"{path}/{k}" for k in values if k not in props]
    for k, v in values.items():
        if k in props:
            out += _declared(props[k], v, f"{path}/{k}")
    return out


def test_the_schema_declares_every_key_of_values_yaml() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert schema["additionalProperties"] is False
    assert _declared(schema, values) == [], "values.yaml keys missing from values.schema.json"
    # every object of gpushare's own values is closed (free-form Kubernetes fields aside)
    free_form = {"resources", "nodeSelector", "tolerations", "affinity", "labels", "global"}

    def open_objects(node: dict[str, Any], path: str) -> list[str]:
        out = []
        for k, sub in node.get("properties", {}).items():
            if sub.get("type") == "object" and k not in free_form:
                if sub.get("additionalProperties") is not False:
                    out.append(f"{path}/{k}")
                out += open_objects(sub, f"{path}/{k}")
        return out

    assert open_objects(schema, "") == []


def test_operator_pods_give_kopf_their_name_as_peering_identity(helm_bin: str) -> None:
    # Kopf reads POD_ID; without it, it builds user@host from getpass.getuser(), which fails for the
    # image's uid unless /etc/passwd has it (hack/image-check.sh runs that path).
    env = container(template(helm_bin), "Deployment", "gpushare-operator")["env"]
    assert {"name": "POD_ID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}} in env


def test_chart_has_a_readme_covering_install_values_and_uninstall(helm_bin: str) -> None:
    readme = helm(helm_bin, "show", "readme", str(CHART)).stdout
    assert readme.rstrip("\n") == (CHART / "README.md").read_text().rstrip("\n")
    for text in ("helm install gpushare", "helm uninstall", "kubectl delete gsp --all", "--api-versions"):
        assert text in readme, text
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    for key in values:  # every top-level value is in its table
        assert f"`{key}" in readme, f"chart README does not mention {key}"
    # uninstall order: pools first, while the operator still runs
    assert readme.index("kubectl delete gsp --all") < readme.index("helm uninstall gpushare --namespace")


def test_make_helm_says_how_to_put_helm_on_path(helm_bin: str) -> None:
    bin_dir = Path(helm_bin).parent
    env = {**os.environ, "GPUSHARE_HELM_BIN": str(bin_dir)}  # the binary the tests use, wherever it is
    script = str(REPO / "hack" / "build-helm.sh")
    out = subprocess.run(["bash", script], env=env, capture_output=True, text=True, timeout=60, check=True)
    assert f'export PATH="{bin_dir}:$PATH"' in out.stderr, out.stderr
    # --print-bin (what the tests use) still prints the path alone on stdout
    printed = subprocess.run(
        ["bash", script, "--print-bin", "--no-build"], env=env, capture_output=True, text=True, timeout=60,
        check=True,
    )  # fmt: skip
    assert printed.stdout == f"{bin_dir / 'helm'}\n"


def test_network_policy_opens_only_the_pods_ports_and_takes_the_peers_given(helm_bin: str) -> None:
    key = ("NetworkPolicy", NS, "gpushare-operator")
    policy = template(helm_bin)[key]
    assert policy["spec"]["podSelector"] == {"matchLabels": {"app.kubernetes.io/name": "gpushare-operator"}}
    rules = {p["port"]: r.get("from") for r in policy["spec"]["ingress"] for p in r["ports"]}
    assert rules == {
        "webhook": None,
        "metrics": [{"namespaceSelector": {}}],
        "webhook-metrics": [{"namespaceSelector": {}}],
        "health": None,
        "webhook-health": None,
    }
    # Every port the policy names is a port of the pod's containers (operator and webhook), and
    # every port of theirs is named.
    deployment = template(helm_bin)[("Deployment", NS, "gpushare-operator")]
    ports = {p["name"] for c in deployment["spec"]["template"]["spec"]["containers"] for p in c["ports"]}
    assert set(rules) == ports
    narrowed = template(helm_bin, 'json:networkPolicy.webhookFrom=[{"ipBlock":{"cidr":"10.0.0.0/24"}}]')[key]
    webhook = next(r for r in narrowed["spec"]["ingress"] if r["ports"][0]["port"] == "webhook")
    assert webhook["from"] == [{"ipBlock": {"cidr": "10.0.0.0/24"}}]
    assert key not in template(helm_bin, "networkPolicy.enabled=false")


def test_the_policies_are_rendered_only_when_the_webhook_does_not_fail_closed(helm_bin: str) -> None:
    """Under failurePolicy Fail (the default) every GPU-sharing pod and workload is refused while
    no webhook answers, so the chart leaves both policies out and each object is judged once, by
    the webhook; with Ignore both hold the stateless rules during an outage."""
    pods, workloads = "gpushare-stateless-rules-pods.gpushare.io", "gpushare-stateless-rules.gpushare.io"

    def policies(*sets: str) -> set[str]:
        return {
            name
            for kind, _, name in template(helm_bin, *sets)
            if kind in ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
            and "stateless" in name
        }

    assert policies() == set()
    assert policies("webhook.failurePolicy=Fail") == set()
    assert policies("webhook.failurePolicy=Ignore") == {pods, workloads}
    objs = template(helm_bin, "webhook.failurePolicy=Ignore")
    for name in (pods, workloads):
        assert objs[("ValidatingAdmissionPolicyBinding", "", name)]["spec"]["policyName"] == name
