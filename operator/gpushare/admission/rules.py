"""The admission rules: ``evaluate(obj, ctx) -> list[Finding]`` for pods, workloads and pools.

Pure: plain dicts in, plain findings out; no Kopf, no Kubernetes client. The webhook and
``gpushare check`` both call :func:`evaluate`. Each rule is a record of
:mod:`gpushare.admission.catalog` (verdict, pool mode, code, and the messages the
ValidatingAdmissionPolicy writes too). Pods and workloads are judged by the backends' pod rules
(:data:`POD_RULES`, each a :class:`gpushare.backends.base.PodRules`): this module finds the pods of
a workload and offers each to the backends in turn; GPUSharePools it judges itself.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from gpushare import constants as c
from gpushare.admission.catalog import POOL_OVERLAP, POOL_SCHEMA, RULES
from gpushare.api.rules import EMPTY_SELECTOR, SCHEMA_FIX, SPEC_RULES, SpecRule
from gpushare.api.v1alpha1 import GPUSharePool, PoolValidationError, Problem, parse_pool
from gpushare.backends.ack.admission import rules as ack
from gpushare.backends.base import PodRules
from gpushare.backends.nvidia.admission import rules as nvidia
from gpushare.rulekit.constraints import node_constraints
from gpushare.rulekit.emit import Emitter
from gpushare.rulekit.kinds import DEFAULT_TABLE, KindTable, object_name
from gpushare.rulekit.model import EMPTY_CONTEXT, Context, Finding
from gpushare.rulekit.podspecs import PodLike, pod_likes
from gpushare.rulekit.quantity import clip

#: The backends' pod rules, in the order they are offered a pod: the first that judges it has it.
#: ACK's first: a pod asking for ``aliyun.com/gpu*`` is ACK's, also when it asks for NVIDIA's GPUs
#: too (ACK's ``SHARED_WITH_WHOLE_GPU`` denies that); NVIDIA's get every other pod asking for
#: NVIDIA's resources.
POD_RULES: tuple[PodRules, ...] = (ack.POD_RULES, nvidia.POD_RULES)


def evaluate(obj: Any, ctx: Context = EMPTY_CONTEXT, table: KindTable = DEFAULT_TABLE) -> list[Finding]:
    """Every finding for one object, in one pass. Objects without GPU-sharing requests give ``[]``."""
    if not isinstance(obj, Mapping):
        return []
    if obj.get("kind") == c.KIND:
        return evaluate_pool(obj, ctx)
    return evaluate_workload(obj, ctx, table)


def evaluate_workload(
    obj: Mapping[str, Any], ctx: Context = EMPTY_CONTEXT, table: KindTable = DEFAULT_TABLE
) -> list[Finding]:
    """Every finding for one object that is no GPUSharePool: each of its pods (a Pod, or the pod
    templates of a workload kind of ``table``) judged by the first backend that judges it, in the
    pods' order. Objects without GPU-sharing requests give ``[]``; an object of a kind ``table``
    does not know, what each backend says of it (``PodRules.unknown_kind``)."""
    kind = table.lookup(obj)
    if kind is None:
        return [finding for rules in POD_RULES for finding in rules.unknown_kind(obj, table)]
    pods = pod_likes(obj, table)
    judged: list[tuple[PodLike, PodRules]] = []
    for pod in pods:
        for rules in POD_RULES:
            if rules.judges(pod):
                judged.append((pod, rules))
                break
    if not judged:
        return []
    name = object_name(obj, table)
    several = len(pods) > 1 or any("*" in s.path for s in kind.sources)
    findings: list[Finding] = []
    for pod, rules in judged:
        em = Emitter(name, pod.path if several else None)
        for each in POD_RULES:
            if each.kubernetes is not None:
                each.kubernetes(em, pod)
        rules.evaluate(em, pod, node_constraints(pod.constraints_path, pod.spec), ctx)
        findings.extend(em.out)
    return findings


def is_denied(findings: list[Finding]) -> bool:
    return any(f.verdict == "deny" for f in findings)


# --- pools ----------------------------------------------------------------------------------------

#: The pool's own rules (gpushare.api.rules) that have an admission rule of their own; every
#: other problem parse_pool reports is a GP001-pool-schema finding.
_POOL_RULES = {rule.id: rule for rule in SPEC_RULES if rule.id != POOL_SCHEMA.id}


def _pool_rule(problem: Problem) -> SpecRule | None:
    """The pool rule with a finding of its own that ``problem`` breaks (a missing nodeSelector is
    an empty one), or None for a GP001-pool-schema problem."""
    if problem.rule == "missing" and problem.field == f"spec.{EMPTY_SELECTOR.field}":
        return EMPTY_SELECTOR
    return _POOL_RULES.get(problem.rule)


def evaluate_pool(obj: Mapping[str, Any], ctx: Context = EMPTY_CONTEXT) -> list[Finding]:
    """Findings for a GPUSharePool: schema problems, compute without isolation, empty selector, overlap."""
    em = Emitter(object_name(obj))
    try:
        pool = parse_pool(dict(obj))
    except PoolValidationError as exc:
        own = [(rule, p) for p in exc.errors if (rule := _pool_rule(p)) is not None]
        for rule, problem in sorted(own, key=lambda found: SPEC_RULES.index(found[0])):
            em.add(
                RULES[rule.id],
                container=None,
                field=f"spec.{rule.field}",
                value=None
                if problem.value is None
                else clip(json.dumps(problem.value, sort_keys=True, default=str)),
                problem=f"is invalid: {rule.message}",
                fix=rule.fix,
            )
        for problem in exc.errors:
            if _pool_rule(problem) is None:
                em.add(
                    POOL_SCHEMA,
                    container=None,
                    field=problem.field,
                    value=None,
                    problem=f"is invalid: {problem.message}",
                    fix=SCHEMA_FIX,
                )
        return em.out
    _check_overlap(em, pool, ctx)
    return em.out


def _check_overlap(em: Emitter, pool: GPUSharePool, ctx: Context) -> None:
    others = [p for p in ctx.pools if p.name != pool.name]
    known = {p.name for p in ctx.pools}
    clashes: dict[str, list[str]] = {}
    for node in ctx.nodes:
        if not pool.spec.node_selector.matches(node.labels):
            continue
        owners = {p.name for p in others if p.spec.node_selector.matches(node.labels)}
        labelled = node.labels.get(c.LABEL_POOL)
        # A node labelled for a pool that no longer selects it is moving to the pool that does (the
        # operator holds it under Wait until its GPU pods are gone), and a node this pool lent is
        # its own: neither is an overlap. A label of a pool that is gone still claims the node.
        if labelled and labelled not in known and node.lender != pool.name:
            owners.add(labelled)
        for owner in owners:
            clashes.setdefault(owner, []).append(node.name)
    for owner, nodes in sorted(clashes.items()):
        shown = ", ".join(sorted(nodes)[:10]) + (f" and {len(nodes) - 10} more" if len(nodes) > 10 else "")
        em.add(
            POOL_OVERLAP,
            container=None,
            field="spec.nodeSelector",
            value=pool.spec.node_selector.to_query(),
            problem=f"selects node(s) {shown} that belong to GPUSharePool {owner}",
            fix=f"narrow the nodeSelector of {pool.name} or {owner} so that each node is in one pool",
        )


__all__ = ["evaluate", "evaluate_pool", "is_denied"]
