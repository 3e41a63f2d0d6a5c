"""The ValidatingAdmissionPolicies that hold the stateless rules inside the apiserver (pure builder).

The rules that need no cluster state (``catalog.STATELESS``: the records with a CEL form) become
one validation each, for the same kinds, namespaces and opt-out label as the webhook (as
matchConditions, not selectors: :data:`NOT_OPTED_OUT`), so they keep denying while no webhook
replica answers. Their messages are the records' cases, the same text the Python engine writes.
The work is done once per request in the policy's variables: the request's containers, then its
GPU containers with their values read (``cel.gpu_entries``), so each validation is a few
comparisons per GPU container; in the workload kinds' policy also the containers asking for
``nvidia.com/*`` (``nvidia_entries``), whose quantities it judges on the custom kinds only
(``CelForm.custom_kinds_only``: the apiserver's own validation refuses a built-in object first).

Two policies are generated (:func:`build_policies`): one for Pods, the hot path, which reads only a
Pod's own container lists (no chain on the request's kind, no grouped containers), and one for
the workload kinds. Both are the guard of a webhook that fails open (``failurePolicy: Ignore``;
``make demo`` applies both for its local webhook): under ``Fail`` the apiserver refuses every
object the webhook is sent while no replica answers, so a policy would only change the message of
that refusal, and none is installed (docs/concepts/admission.md, "Each GPU object judged once").
What a policy costs the apiserver per request is mostly fixed work (one conversion of the object
per evaluation stage, every messageExpression evaluated, the variables computed again for the
messages: docs/benchmarks.md, "Admission"); the split keeps a Pod's share of the CEL to what a
Pod has. The Python rules engine stays the reference; an integration test drives generated
objects through the real apiserver with only these policies installed and compares.

Every expression is laid out over lines for review (:func:`gpushare.admission.celfmt.readable`:
whitespace, and long literals split into concatenations) and written as a YAML literal block.

``python -m gpushare.admission.vap`` prints ``manifests/webhook/policy.yaml``.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Sequence
from typing import Any, Literal

from gpushare import constants as c
from gpushare.admission.catalog import STATELESS
from gpushare.admission.cel import gpu_sharing_anywhere, is_custom
from gpushare.admission.celfmt import readable, yaml_dump_all
from gpushare.admission.webhook_config import (
    TARGETS,
    WebhookSettings,
    WebhookTarget,
    excluded_namespaces,
    kind_paths,
)
from gpushare.backends.ack.admission.cel import gpu_entries
from gpushare.backends.nvidia.admission.cel import nvidia_entries
from gpushare.rulekit.cel import (
    OBJECT_NAME,
    RESOURCE,
    KindPaths,
    all_at,
    container_groups_variable,
    containers_variable,
    entry,
    exists_at,
    is_flat,
    string_literal,
    uncovered,
)
from gpushare.rulekit.records import AdmissionRule, CelMessage, cel_message

POLICY_NAME = "gpushare-stateless-rules.gpushare.io"
#: The matchCondition holding the excluded namespaces (the chart writes its own list into it).
NAMESPACE_CONDITION = "outside-excluded-namespaces"


def outside_namespaces(names: Sequence[str]) -> str:
    """True outside ``names``: the webhook's ``namespaceSelector`` on ``kubernetes.io/metadata.name``
    (a cluster-scoped object has no namespace: in, as that selector has it). The chart's
    templates/policy.yaml writes the same text for its list."""
    return f"!(request.namespace in [{', '.join(string_literal(n) for n in names)}])"


def _opted_out(obj: str) -> str:
    label = string_literal(c.LABEL_WEBHOOK)
    return (
        f"(has({obj}.metadata.labels) && {label} in {obj}.metadata.labels"
        f" && {obj}.metadata.labels[{label}] == {string_literal(c.WEBHOOK_IGNORE)})"
    )


#: The webhook's ``objectSelector`` (``gpushare.io/webhook NotIn [ignore]``) as the apiserver applies
#: it: the request is in when its object or its old object (an UPDATE) is not opted out.
NOT_OPTED_OUT = (
    f"(object != null && !{_opted_out('object')}) || (oldObject != null && !{_opted_out('oldObject')})"
)

#: The rule ids the policy enforces (the rest need pools and nodes: the webhook's job).
POLICY_RULES: tuple[str, ...] = tuple(r.id for r in STATELESS)


def _detail(rule: AdmissionRule) -> str:
    """The CEL string for a broken GPU entry ``e``: ``label "name": field=value problem (rule); fix``."""
    assert rule.cel is not None
    *first, last = rule.cel.messages
    text = cel_message(rule, last)
    for message in reversed(first):
        text = f"({message.when} ? {cel_message(rule, message)} : {text})"
    return f"e.label + ' \"' + e.name + '\": ' + {text}"


#: Each kind of entry a rule's CEL form reads (``CelForm.entries``): the function that builds them
#: and the names of the policy's variables holding them (a list, or a list of lists).
ENTRIES = {
    "gpu": (gpu_entries, "gpu", "gpuGroups"),
    "nvidia": (nvidia_entries, "nvidia", "nvidiaGroups"),
}


def _walked_ok(rule: AdmissionRule, label: str, x: str) -> str:
    """The rule holds for the container at ``x`` (a path no variable covers)."""
    assert rule.cel is not None
    entries = ENTRIES[rule.cel.entries][0]
    return f"{entries(f'[{entry(x, label)}]')}.all(e, !({rule.cel.broken}))"


def rule_validation(
    rule: AdmissionRule,
    kinds: Sequence[KindPaths],
    *,
    gpu_var: str | None = "variables.gpu",
    groups_var: str | None = None,
    name_var: str = "variables.objectName",
    resource_var: str = "variables.resource",
) -> dict[str, str]:
    """The VAP validation of one stateless rule: expression, messageExpression, message, reason.

    ``gpu_var`` a list of GPU entries, ``groups_var`` a list of lists of them (the policy reads
    one or the other; a None is not read). The apiserver evaluates every messageExpression for
    every request the policy matches, passing ones too (validating/validator.go), in a context of
    its own where the variables are computed again; so the object's name is read only in the
    branches of a broken container."""
    assert rule.cel is not None
    broken = f"({rule.cel.broken})"
    checks = []
    if gpu_var is not None:
        checks.append(f"!{gpu_var}.exists(e, {broken})")
    if groups_var is not None:
        checks.append(f"!{groups_var}.exists(g, g.exists(e, {broken}))")
    walks = uncovered(kinds)
    for path, (label, resources) in walks.items():
        known = ", ".join(string_literal(r) for r in resources)
        walked = all_at(path, functools.partial(_walked_ok, rule, label))
        checks.append(f"(!({resource_var} in [{known}]) || {walked})")
    if rule.cel.custom_kinds_only:
        # Only the custom kinds: the apiserver has refused such a built-in object already.
        custom = ", ".join(string_literal(f"{k.group}/{k.plural}") for k in kinds if is_custom(k))
        checks = [f"!({resource_var} in [{custom}]) || ({' && '.join(checks)})"]
    summary = f"a container {rule.cel.summary} {rule.tag}"
    # Without walked paths the last branch is reached only when the rule holds (the message is
    # then not shown): the summary alone.
    message = f"{name_var} + ': ' + {string_literal(summary)}" if walks else string_literal(summary)
    detail = _detail(rule)
    if groups_var is not None:
        message = (
            f"({groups_var}.exists(g, g.exists(e, {broken}))"
            f" ? {name_var} + ': ' + {groups_var}.filter(g, g.exists(e, {broken}))[0]"
            f".filter(e, {broken}).map(e, {detail})[0]"
            f" : {message})"
        )
    if gpu_var is not None:
        message = (
            f"({gpu_var}.exists(e, {broken})"
            f" ? {name_var} + ': ' + {gpu_var}.filter(e, {broken}).map(e, {detail})[0]"
            f" : {message})"
        )
    return {
        "expression": " && ".join(checks),
        "messageExpression": message,
        "message": summary,
        "reason": "Invalid",
    }


def pod_rule_validation(
    rule: AdmissionRule,
    kinds: Sequence[KindPaths],
    *,
    gpu_var: str | None = "variables.gpu",
    groups_var: str | None = None,
    name_var: str = "variables.objectName",
) -> dict[str, str]:
    """The VAP validation of a stateless rule on a pod spec's field (``rule.pod_cel``): broken
    when the object asks for GPU sharing (a GPU entry with gpu-mem or gpu-core.percentage) and a
    pod spec of it, at any of the kinds' pod spec paths, breaks the form. A path without wildcards
    gets the engine's message (the value read from its one pod spec), others the rule's summary."""
    form = rule.pod_cel
    assert form is not None
    sharing = "e.mn != -2 || e.cn != -2"
    asking = [f"{gpu_var}.exists(e, {sharing})"] if gpu_var is not None else []
    if groups_var is not None:
        asking.append(f"{groups_var}.exists(g, g.exists(e, {sharing}))")
    asks = asking[0] if len(asking) == 1 else f"({' || '.join(asking)})"
    paths = list(dict.fromkeys(path for kind in kinds for path in kind.pod_specs))
    at = {path: exists_at(path, lambda node: f"[{node}].exists(p, {form.broken})") for path in paths}
    summary = f"a pod {form.summary} {rule.tag}"
    message = f"{name_var} + ': ' + {string_literal(summary)}"
    for path in reversed(paths):
        if is_flat(path):
            field = string_literal(f"{path}.{form.field}")
            text = cel_message(rule, CelMessage("true", form.case, field, form.value, form.values))
            message = f"({at[path]} ? {name_var} + ': ' + [object.{path}].map(p, {text})[0] : {message})"
    return {
        "expression": f"!{asks} || !({' || '.join(at.values())})",
        "messageExpression": message,
        "message": summary,
        "reason": "Invalid",
    }


def _laid_out(validation: dict[str, str]) -> dict[str, str]:
    """A validation with its expressions laid out over lines (:mod:`gpushare.admission.celfmt`)."""
    return {k: readable(v) if k in ("expression", "messageExpression") else v for k, v in validation.items()}


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


#: Which kinds a policy holds: Pods alone, every other kind (the workload templates), or all.
Part = Literal["pods", "workloads", "all"]


def _is_pod(kind: PolicyKind) -> bool:
    return (kind[0].group, kind[0].plural) == ("", "pods")


def pod_policy_name(name: str = POLICY_NAME) -> str:
    """The Pods policy's name beside the workload policy ``name`` (``a.b`` -> ``a-pods.b``)."""
    head, dot, tail = name.partition(".")
    return f"{head}-pods{dot}{tail}"


def build_policy(
    settings: WebhookSettings | None = None,
    name: str = POLICY_NAME,
    extra_kinds: tuple[PolicyKind, ...] = (),
    part: Part = "all",
) -> dict[str, Any]:
    """The policy over the webhook's kinds (and ``extra_kinds``: custom resources, tests), or the
    ``part`` of them: ``pods`` (only the Pod's own paths: no test of the request's kind, no grouped
    containers) or ``workloads`` (every kind but Pods). What a request pays for is what its
    policy holds; :func:`build_policies` is the shipped pair."""
    settings = settings or WebhookSettings()
    kinds = [*policy_kinds(settings.targets or TARGETS), *extra_kinds]
    if part != "all":
        kinds = [k for k in kinds if _is_pod(k) == (part == "pods")]
    if not kinds:
        raise ValueError(f"no kinds for the {part} policy")
    paths = [k for k, _, _ in kinds]
    # A rule for custom kinds only (NVIDIA's quantities) is left out of a policy without one.
    rules = [r for r in STATELESS if not (r.cel and r.cel.custom_kinds_only) or any(map(is_custom, paths))]
    groups = container_groups_variable(paths)
    grouped = groups != "[]"
    variables = [
        {"name": "resource", "expression": RESOURCE},
        {"name": "objectName", "expression": OBJECT_NAME},
        {"name": "containers", "expression": containers_variable(paths)},
    ]
    if grouped:
        variables.append({"name": "containerGroups", "expression": groups})
    for kind in dict.fromkeys(r.cel.entries if r.cel else "gpu" for r in rules):
        entries, flat, nested = ENTRIES[kind]
        if grouped:
            # One list of lists of entries: the ungrouped containers first, then each group (the
            # entries' expression written once; a broken container is found in the same order).
            every = "[variables.containers] + variables.containerGroups"
            variables.append({"name": nested, "expression": f"({every}).map(g, {entries('g')})"})
        else:
            variables.append({"name": flat, "expression": entries("variables.containers")})

    def where(kind: str) -> tuple[str | None, str | None]:
        _, flat, nested = ENTRIES[kind]
        return (None, f"variables.{nested}") if grouped else (f"variables.{flat}", None)

    validations = []
    for rule in rules:
        gpu_var, groups_var = where(rule.cel.entries if rule.cel else "gpu")
        validations.append(
            rule_validation(rule, paths, gpu_var=gpu_var, groups_var=groups_var)
            if rule.cel is not None
            else pod_rule_validation(rule, paths, gpu_var=gpu_var, groups_var=groups_var)
        )
    condition = gpu_sharing_anywhere(
        paths, nvidia_quantities=any(r.cel and r.cel.custom_kinds_only for r in rules)
    )
    if not any("variables.resource" in text for v in [*variables, *validations] for text in v.values()):
        variables = [v for v in variables if v["name"] != "resource"]
    variables = [{**v, "expression": readable(v["expression"])} for v in variables]
    validations = [_laid_out(v) for v in validations]
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
            # No namespaceSelector or objectSelector: the apiserver tests a policy's selectors on
            # every admission request of every kind before its resourceRules (a namespace lookup
            # and two selectors parsed each time), so they are matchConditions, which it tests
            # only on the kinds below (docs/concepts/admission.md, "Safety").
            "matchConstraints": {
                "matchPolicy": "Equivalent",
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
            "matchConditions": [
                {
                    "name": NAMESPACE_CONDITION,
                    "expression": outside_namespaces(excluded_namespaces(settings)),
                },
                {"name": "not-opted-out", "expression": readable(NOT_OPTED_OUT)},
                {"name": "asks-for-gpu-sharing", "expression": readable(condition)},
            ],
            "variables": variables,
            "validations": validations,
        },
    }


def build_policies(
    settings: WebhookSettings | None = None,
    name: str = POLICY_NAME,
    extra_kinds: tuple[PolicyKind, ...] = (),
) -> list[dict[str, Any]]:
    """The two policies, installed where the webhook fails open: Pods (:func:`pod_policy_name`)
    and the workload kinds (``name``).

    A Pod is the hot path (every pod a controller creates): its policy reads only the Pod's
    containers. The workload kinds' policy keeps the chains on the request's kind."""
    return [
        build_policy(settings, pod_policy_name(name), extra_kinds, "pods"),
        build_policy(settings, name, extra_kinds, "workloads"),
    ]


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


#: The file of each part under manifests/webhook/ (``render_manifest``).
MANIFESTS: dict[Part, str] = {"workloads": "policy.yaml", "pods": "policy-pods.yaml"}

#: What each manifest holds (its first header lines).
_HEADERS: dict[Part, str] = {
    "workloads": (
        "# The stateless GPU-sharing rules for the workload kinds' pod templates (Deployments, Jobs,\n"
        "# Kubeflow, ...) as a ValidatingAdmissionPolicy.\n"
    ),
    "pods": "# The stateless GPU-sharing rules for Pods as a ValidatingAdmissionPolicy.\n",
}
#: When to apply either manifest (the same for both).
_WHEN = (
    "# Apply policy.yaml and policy-pods.yaml together when the webhooks have failurePolicy: Ignore\n"
    "# (then these rules still hold while the webhook is down). With the shipped failurePolicy: Fail\n"
    "# every GPU-sharing object is refused while no webhook answers, so they are left out: each one\n"
    '# is judged once, by the webhook (docs/concepts/admission.md, "Each GPU object judged once").\n'
    "# The chart follows webhook.failurePolicy.\n"
)


def render_manifest(settings: WebhookSettings | None = None, part: Part = "workloads") -> str:
    """One policy and its binding as YAML: ``part`` "workloads" (manifests/webhook/policy.yaml) or
    "pods" (policy-pods.yaml)."""
    header = (
        "# Generated by `python -m gpushare.admission.vap` (make manifests); do not edit by hand.\n"
        + _HEADERS[part]
        + _WHEN
    )
    policy = next(
        p for p, which in zip(build_policies(settings), ("pods", "workloads"), strict=True) if which == part
    )
    docs = [policy, build_binding(policy["metadata"]["name"])]
    return header + yaml_dump_all(docs, sort_keys=False, width=100000)


if __name__ == "__main__":
    sys.stdout.write(render_manifest(part="pods" if sys.argv[1:] == ["--pods"] else "workloads"))
