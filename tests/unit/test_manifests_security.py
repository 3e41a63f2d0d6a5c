"""The shipped least-privilege pieces agree with the code (docs/security.md).

- The agent's ValidatingAdmissionPolicy allows exactly the label and annotation keys the agent
  writes, and matches the agent's ServiceAccount as the manifests name it.
- The namespaces the operator restarts device plugins in (GPUSHARE_PLUGIN_NAMESPACES) are exactly
  those where a Role lets it delete pods; no cluster-wide grant lets it delete pods.
- The plugin-namespace guard and its message.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpushare import constants as c
from gpushare.gpu.inventory import AGENT_ANNOTATIONS, AGENT_LABELS
from gpushare.k8s.cluster import PluginNamespaceNotAllowed, parse_plugin_namespaces, plugin_namespace_problem

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def objs() -> dict[tuple[str, str, str], dict[str, Any]]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.fail("kubectl is required for the manifest tests (it ships kustomize)")
    out = subprocess.run(
        [kubectl, "kustomize", str(ROOT / "manifests")], check=True, capture_output=True, text=True
    )
    docs = [d for d in yaml.safe_load_all(out.stdout) if d]
    return {(d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"]): d for d in docs}


def _variables(policy: dict[str, Any]) -> dict[str, str]:
    return {v["name"]: v["expression"] for v in policy["spec"]["variables"]}


def _sa_user(obj: dict[str, Any]) -> str:
    return f"system:serviceaccount:{obj['metadata']['namespace']}:{obj['metadata']['name']}"


def test_agent_policy_allows_exactly_the_agents_keys(objs: dict[tuple[str, str, str], Any]) -> None:
    policy = objs[("ValidatingAdmissionPolicy", "", "gpushare-agent-node-restriction")]
    variables = _variables(policy)
    assert ast.literal_eval(variables["ownedLabels"]) == list(AGENT_LABELS)
    assert ast.literal_eval(variables["ownedAnnotations"]) == list(AGENT_ANNOTATIONS)
    assert all(key.startswith(f"{c.GROUP}/") for key in (*AGENT_LABELS, *AGENT_ANNOTATIONS))
    # none of the operator's keys, nor the ACK ones
    assert not set(AGENT_LABELS) & set(c.MANAGED_LABELS)
    assert policy["spec"]["failurePolicy"] == "Fail"
    binding = objs[("ValidatingAdmissionPolicyBinding", "", "gpushare-agent-node-restriction")]
    assert binding["spec"]["policyName"] == "gpushare-agent-node-restriction"
    assert binding["spec"]["validationActions"] == ["Deny"]
    assert "matchResources" not in binding["spec"]


def test_agent_policy_matches_the_agents_service_account(objs: dict[tuple[str, str, str], Any]) -> None:
    policy = objs[("ValidatingAdmissionPolicy", "", "gpushare-agent-node-restriction")]
    sa = objs[("ServiceAccount", "gpushare-system", "gpushare-agent")]
    ds = objs[("DaemonSet", "gpushare-system", "gpushare-agent")]
    assert ds["spec"]["template"]["spec"]["serviceAccountName"] == sa["metadata"]["name"]
    (condition,) = policy["spec"]["matchConditions"]
    assert condition["expression"] == f"request.userInfo.username == '{_sa_user(sa)}'"
    rules = policy["spec"]["matchConstraints"]["resourceRules"]
    assert {r for rule in rules for r in rule["resources"]} == {"nodes", "nodes/status"}


def test_operator_node_policy_allows_exactly_the_operators_keys(
    objs: dict[tuple[str, str, str], Any],
) -> None:
    policy = objs[("ValidatingAdmissionPolicy", "", "gpushare-operator-node-restriction")]
    variables = _variables(policy)
    assert ast.literal_eval(variables["ownedLabels"]) == list(c.MANAGED_LABELS)
    assert ast.literal_eval(variables["ownedAnnotations"]) == [
        c.ANNOTATION_OWNED,
        c.ANNOTATION_CORDONED_BY,
        c.ANNOTATION_PLUGIN_RESTART,
    ]
    sa = objs[("ServiceAccount", "gpushare-system", "gpushare-operator")]
    (condition,) = policy["spec"]["matchConditions"]
    assert condition["expression"] == f"request.userInfo.username == '{_sa_user(sa)}'"
    assert policy["spec"]["failurePolicy"] == "Fail"
    binding = objs[("ValidatingAdmissionPolicyBinding", "", "gpushare-operator-node-restriction")]
    assert binding["spec"] == {
        "policyName": "gpushare-operator-node-restriction",
        "validationActions": ["Deny"],
    }


def test_agent_rbac_is_get_and_patch_nodes_only(objs: dict[tuple[str, str, str], Any]) -> None:
    role = objs[("ClusterRole", "", "gpushare-agent")]
    assert role["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]}]


def _operator_bound_roles(objs: dict[tuple[str, str, str], Any]) -> list[tuple[str, dict[str, Any]]]:
    """(namespace or "", role) for every Role/ClusterRole bound to the operator's ServiceAccount."""
    out = []
    for (kind, ns, _), binding in objs.items():
        if kind not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        if not any(
            s["kind"] == "ServiceAccount"
            and s["name"] == "gpushare-operator"
            and s["namespace"] == "gpushare-system"
            for s in binding["subjects"]
        ):
            continue
        ref = binding["roleRef"]
        role_ns = "" if ref["kind"] == "ClusterRole" else ns
        out.append((ns if kind == "RoleBinding" else "", objs[(ref["kind"], role_ns, ref["name"])]))
    return out


def _grants(role: dict[str, Any], verb: str, resource: str) -> bool:
    return any(
        "" in rule.get("apiGroups", [])
        and resource in rule.get("resources", [])
        and verb in rule.get("verbs", [])
        and not rule.get("resourceNames")
        for rule in role["rules"]
    )


def test_operator_deletes_pods_exactly_in_its_plugin_namespaces(
    objs: dict[tuple[str, str, str], Any],
) -> None:
    dep = objs[("Deployment", "gpushare-system", "gpushare-operator")]
    env = {e["name"]: e.get("value") for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]}
    configured = parse_plugin_namespaces(env["GPUSHARE_PLUGIN_NAMESPACES"])
    assert configured == frozenset({c.DEFAULT_PLUGIN_NAMESPACE})
    bound = _operator_bound_roles(objs)
    deleting = {ns for ns, role in bound if _grants(role, "delete", "pods")}
    assert "" not in deleting, "a ClusterRole lets the operator delete pods everywhere"
    assert deleting == configured
    assert not any(_grants(role, "deletecollection", "pods") for _, role in bound)
    # evictions stay cluster-wide (GPU pods live anywhere); Events only where --namespace-for-events says
    assert any(ns == "" and _grants(role, "create", "pods/eviction") for ns, role in bound)
    args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--namespace-for-events=default" in args
    assert {ns for ns, role in bound if _grants(role, "create", "events")} == {"default"}


def test_operator_cluster_role_has_no_unexplained_verbs(objs: dict[tuple[str, str, str], Any]) -> None:
    role = objs[("ClusterRole", "", "gpushare-operator")]
    got = {
        (g, r, v)
        for rule in role["rules"]
        for g in rule["apiGroups"]
        for r in rule["resources"]
        for v in rule["verbs"]
    }
    # docs/security.md explains each of these; a new one needs a line there and here.
    assert got == {
        ("gpushare.io", "gpusharepools", "list"),
        ("gpushare.io", "gpusharepools", "watch"),
        ("gpushare.io", "gpusharepools", "patch"),
        ("gpushare.io", "gpusharepools/status", "patch"),
        ("gpushare.io", "gpusharepools/finalizers", "update"),
        ("", "nodes", "get"),
        ("", "nodes", "list"),
        ("", "nodes", "watch"),
        ("", "nodes", "patch"),
        ("", "pods", "list"),
        ("", "pods", "watch"),
        ("", "pods/eviction", "create"),
        ("kopf.dev", "clusterkopfpeerings", "list"),
        ("kopf.dev", "clusterkopfpeerings", "watch"),
        ("kopf.dev", "clusterkopfpeerings", "patch"),
        ("apiextensions.k8s.io", "customresourcedefinitions", "list"),
        ("apiextensions.k8s.io", "customresourcedefinitions", "watch"),
        ("admissionregistration.k8s.io", "validatingwebhookconfigurations", "get"),
        ("admissionregistration.k8s.io", "validatingwebhookconfigurations", "patch"),
        ("admissionregistration.k8s.io", "validatingwebhookconfigurations", "update"),
    }


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, None),
        ("", None),
        ("*", None),
        ("kube-system", frozenset({"kube-system"})),
        (" kube-system , gpu-plugins,", frozenset({"kube-system", "gpu-plugins"})),
        ("kube-system,*", None),
    ],
)
def test_parse_plugin_namespaces(value: str | None, expected: frozenset[str] | None) -> None:
    assert parse_plugin_namespaces(value) == expected


def test_plugin_namespace_problem_names_field_value_and_fix() -> None:
    assert plugin_namespace_problem("kube-system", None) is None
    assert plugin_namespace_problem("anything", None) is None
    assert plugin_namespace_problem("kube-system", frozenset({"kube-system"})) is None
    problem = plugin_namespace_problem("gpu-plugins", frozenset({"kube-system", "b"}))
    assert problem is not None
    assert "spec.devicePlugin.namespace='gpu-plugins'" in problem
    assert "(b, kube-system)" in problem
    assert "--plugin-namespaces" in problem and "restart: Never" in problem
    exc = PluginNamespaceNotAllowed("gpu-plugins", frozenset({"kube-system"}))
    assert exc.status == 403
    assert str(exc) == plugin_namespace_problem("gpu-plugins", frozenset({"kube-system"}))


def test_run_option_and_env(monkeypatch: pytest.MonkeyPatch) -> None:
    import argparse
    import importlib

    run_cli = importlib.import_module("gpushare.cli.run")  # gpushare.cli.run is also a function

    def parse(*argv: str) -> argparse.Namespace:
        parser = argparse.ArgumentParser()
        run_cli.register(parser.add_subparsers())
        return parser.parse_args(["run", *argv])

    monkeypatch.delenv(run_cli.PLUGIN_NAMESPACES_ENV, raising=False)
    assert parse().plugin_namespaces is None
    monkeypatch.setenv(run_cli.PLUGIN_NAMESPACES_ENV, "kube-system,gpu")
    assert parse().plugin_namespaces == "kube-system,gpu"
    assert parse("--plugin-namespaces", "x").plugin_namespaces == "x"
