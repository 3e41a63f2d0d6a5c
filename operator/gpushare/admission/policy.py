"""The ValidatingAdmissionPolicy that holds the stateless rules inside the apiserver (pure builder).

The rules that need no cluster state (GS001 percentage step and malformed percentages, GS002 range,
GS003 percentage without memory, GS004 malformed or zero memory, GS006 request != limit, GS012
misspelled ``aliyun.com/gpu*`` names) are written as CEL (:mod:`gpushare.admission.cel`) for the
same kinds, namespaces and object-selector opt-out as the webhook, so they keep denying while no
webhook replica answers. The Python rules engine stays the reference; an integration test drives
generated objects through the real apiserver with only this policy installed and compares.

``python -m gpushare.admission.policy`` prints ``manifests/webhook/policy.yaml``.
"""

from __future__ import annotations

import sys
from typing import Any

import yaml

from gpushare import constants as c
from gpushare.admission.cel import (
    OBJECT_NAME,
    RESOURCE,
    STATELESS_RULES,
    KindPaths,
    container_groups_variable,
    containers_variable,
    gpu_sharing_anywhere,
    rule_validation,
)
from gpushare.admission.webhook_config import (
    TARGETS,
    WebhookSettings,
    WebhookTarget,
    excluded_namespaces,
    kind_paths,
)

POLICY_NAME = "gpushare-stateless-rules.gpushare.io"
#: The rule ids the policy enforces (the rest need pools and nodes: the webhook's job).
POLICY_RULES: tuple[str, ...] = tuple(r.rule_id for r in STATELESS_RULES)


#: ``(paths, operations, versions)`` of one kind.
PolicyKind = tuple[KindPaths, tuple[str, ...], tuple[str, ...]]


def policy_kinds(targets: tuple[WebhookTarget, ...] = TARGETS) -> list[PolicyKind]:
    """``(paths, operations, versions)`` of every workload kind the webhook validates (the
    workload-kinds table), less the kinds with a path CEL cannot select (only the webhook checks
    those)."""
    out: list[PolicyKind] = []
    for target in targets:
        paths = kind_paths(target)
        if paths is not None:
            out.append((paths, target.operations, target.versions or (target.version,)))
    return out


def build_policy(
    settings: WebhookSettings | None = None,
    name: str = POLICY_NAME,
    extra_kinds: tuple[PolicyKind, ...] = (),
) -> dict[str, Any]:
    """The policy over the webhook's kinds (and ``extra_kinds``: custom resources, tests)."""
    settings = settings or WebhookSettings()
    kinds = [*policy_kinds(settings.targets or TARGETS), *extra_kinds]
    paths = [k for k, _, _ in kinds]
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {
            "name": name,
            "labels": {
                "app.kubernetes.io/name": "gpushare-operator",
                "app.kubernetes.io/component": "webhook",
            },
        },
        "spec": {
            # An expression that cannot be evaluated (an object of a shape no controller would
            # accept) skips the policy rather than blocking the object; the webhook still checks it.
            "failurePolicy": "Ignore",
            "matchConstraints": {
                "matchPolicy": "Equivalent",
                "namespaceSelector": {
                    "matchExpressions": [
                        {
                            "key": "kubernetes.io/metadata.name",
                            "operator": "NotIn",
                            "values": excluded_namespaces(settings),
                        }
                    ]
                },
                "objectSelector": {
                    "matchExpressions": [
                        {"key": c.LABEL_WEBHOOK, "operator": "NotIn", "values": [c.WEBHOOK_IGNORE]}
                    ]
                },
                "resourceRules": [
                    {
                        "apiGroups": [k.group],
                        "apiVersions": list(versions),
                        "resources": [k.plural],
                        "operations": list(ops),
                    }
                    for k, ops, versions in kinds
                ],
            },
            "matchConditions": [{"name": "asks-for-gpu-sharing", "expression": gpu_sharing_anywhere(paths)}],
            "variables": [
                {"name": "resource", "expression": RESOURCE},
                {"name": "objectName", "expression": OBJECT_NAME},
                {"name": "containers", "expression": containers_variable(paths)},
                {"name": "containerGroups", "expression": container_groups_variable(paths)},
            ],
            "validations": [rule_validation(rule, paths) for rule in STATELESS_RULES],
        },
    }


def build_binding(policy_name: str = POLICY_NAME, name: str | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {
            "name": name or policy_name,
            "labels": {
                "app.kubernetes.io/name": "gpushare-operator",
                "app.kubernetes.io/component": "webhook",
            },
        },
        "spec": {"policyName": policy_name, "validationActions": ["Deny"]},
    }


def render_manifest(settings: WebhookSettings | None = None) -> str:
    header = (
        "# Generated by `python -m gpushare.admission.policy` (make manifests); do not edit by hand.\n"
        "# The stateless GPU-sharing rules as a ValidatingAdmissionPolicy: they hold inside the\n"
        "# kube-apiserver even while the gpushare webhook is down (docs/webhook.md).\n"
    )
    docs = [build_policy(settings), build_binding()]
    return header + yaml.safe_dump_all(docs, sort_keys=False, width=100000)


if __name__ == "__main__":
    sys.stdout.write(render_manifest())
