"""The admission rules: ``evaluate(obj, ctx) -> list[Finding]`` for pods, workloads and pools.

Pure: plain dicts in, plain findings out; no Kopf, no Kubernetes client. The webhook and
``gpushare check`` both call :func:`evaluate`. The rule table is :data:`gpushare.admission.RULES`.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from gpushare import constants as c
from gpushare.admission.model import EMPTY_CONTEXT, RULES, Context, Finding, Verdict, rule_tag
from gpushare.admission.podspecs import (
    ContainerRef,
    is_gpu_resource,
    iter_containers,
    pod_specs,
    requests_gpu_sharing,
)
from gpushare.admission.quantity import Quantity, parse_quantity
from gpushare.admission.targeting import (
    KIND_TEXT,
    Resolution,
    node_constraints,
    pools_of_kind,
    resolve,
    term_possible,
)
from gpushare.api.v1alpha1 import GPUSharePool, PoolValidationError, parse_pool
from gpushare.manifests import describe

AdmissionMode = Literal["Enforce", "Warn", "Off"]
_MODE_ORDER: dict[str, int] = {"Off": 0, "Warn": 1, "Enforce": 2}

MEMORY_ONLY_KINDS = (c.SCHEDULE_CGPU, c.SCHEDULE_SHARE)


def evaluate(obj: Any, ctx: Context = EMPTY_CONTEXT) -> list[Finding]:
    """Every finding for one object. Objects without GPU-sharing requests give ``[]`` quickly."""
    if not isinstance(obj, Mapping):
        return []
    if obj.get("kind") == c.KIND:
        return evaluate_pool(obj, ctx)
    if not requests_gpu_sharing(obj):
        return []
    name = describe(dict(obj))
    findings: list[Finding] = []
    for path, spec in pod_specs(obj):
        findings.extend(_evaluate_pod_spec(name, path, spec, ctx))
    return findings


def is_denied(findings: list[Finding]) -> bool:
    return any(f.verdict == "deny" for f in findings)


# --- containers -----------------------------------------------------------------------------------


def _res_field(where: str, resource: str) -> str:
    return f'resources.{where}["{resource}"]'


@dataclass
class _ContainerGPU:
    ref: ContainerRef
    mem: Quantity | None
    mem_where: str
    core: Quantity | None
    core_where: str


def _pick(container: ContainerRef, resource: str) -> tuple[Quantity | None, str]:
    if resource in container.limits:
        return parse_quantity(container.limits[resource]), "limits"
    if resource in container.requests:
        return parse_quantity(container.requests[resource]), "requests"
    return None, "limits"


def _nearest_steps(value: int) -> str:
    low = max(5, min(100, value - value % 5))
    high = max(5, min(100, low + 5))
    if low == high or value < 5:
        return f"use {low}"
    return f"use {low} or {high}"


class _Emitter:
    def __init__(self, obj_name: str) -> None:
        self.obj = obj_name
        self.out: list[Finding] = []

    def add(
        self,
        rule_id: str,
        *,
        container: ContainerRef | None,
        field: str,
        value: str | None,
        problem: str,
        fix: str,
        verdict: Verdict | None = None,
        note: str = "",
    ) -> None:
        rule = RULES[rule_id]
        where = f"{container.display}: {field.removeprefix(container.path + '.')}" if container else field
        shown = f"={value}" if value is not None else ""
        message = f"{self.obj}: {where}{shown} {problem} {rule_tag(rule_id)}; {fix}{note}"
        self.out.append(
            Finding(
                rule_id=rule_id,
                verdict=verdict or rule.verdict,
                object=self.obj,
                container=container.name if container else None,
                field=field,
                value=value,
                message=message,
            )
        )


def _check_names(em: _Emitter, ref: ContainerRef) -> None:
    """GS012: an ``aliyun.com/gpu*`` name no node offers (a misspelling), with a did-you-mean."""
    seen: set[str] = set()
    for where, resources in (("limits", ref.limits), ("requests", ref.requests)):
        for name in resources:
            if not is_gpu_resource(name) or name in c.KNOWN_GPU_RESOURCES or name in seen:
                continue
            seen.add(name)
            close = difflib.get_close_matches(name, c.KNOWN_GPU_RESOURCES, n=1, cutoff=0.6)
            em.add(
                "GS012-unknown-gpu-resource",
                container=ref,
                field=f'{ref.path}.resources.{where}["{name}"]',
                value=None,
                problem="is not a GPU resource any node offers",
                fix=(f'did you mean "{close[0]}"? ' if close else "")
                + f"use one of {', '.join(c.KNOWN_GPU_RESOURCES)}",
            )


def _check_container(em: _Emitter, ref: ContainerRef) -> _ContainerGPU:
    _check_names(em, ref)
    mem, mem_where = _pick(ref, c.RES_GPU_MEM)
    core, core_where = _pick(ref, c.RES_GPU_CORE)
    # GS006: requests without limits, or requests different from limits.
    for resource in (c.RES_GPU_MEM, c.RES_GPU_CORE):
        if resource not in ref.requests:
            continue
        req = parse_quantity(ref.requests[resource])
        field = f"{ref.path}.{_res_field('requests', resource)}"
        if resource not in ref.limits:
            em.add(
                "GS006-request-limit-mismatch",
                container=ref,
                field=field,
                value=req.shown,
                problem="is set without a limit; extended resources are allocated by their limit",
                fix=f'set resources.limits["{resource}"] to the same value',
            )
            continue
        lim = parse_quantity(ref.limits[resource])
        same = (
            (req.value == lim.value)
            if (req.value is not None and lim.value is not None)
            else req.raw == lim.raw
        )
        if not same:
            em.add(
                "GS006-request-limit-mismatch",
                container=ref,
                field=field,
                value=req.shown,
                problem=f"differs from the limit {lim.shown}",
                fix="set requests equal to limits, or drop requests",
            )
    if mem is not None:
        field = f"{ref.path}.{_res_field(mem_where, c.RES_GPU_MEM)}"
        if mem.error is not None:
            em.add(
                "GS004-mem-positive-integer",
                container=ref,
                field=field,
                value=mem.shown,
                problem=f"{mem.error}; GPU memory is a positive whole number of GiB",
                fix="write a whole number of GiB such as 2",
            )
        elif mem.value == 0:
            em.add(
                "GS004-mem-positive-integer",
                container=ref,
                field=field,
                value=mem.shown,
                problem="is zero; GPU memory is a positive whole number of GiB",
                fix=f'ask for at least 1, or remove "{c.RES_GPU_MEM}"',
            )
    if core is not None:
        field = f"{ref.path}.{_res_field(core_where, c.RES_GPU_CORE)}"
        if core.error is not None:
            em.add(
                "GS001-core-percentage-step",
                container=ref,
                field=field,
                value=core.shown,
                problem=f"{core.error}; the GPU compute share is a whole multiple of 5 from 5 to 100",
                fix="write a number such as 30",
            )
        elif core.value is not None and not 5 <= core.value <= 100:
            em.add(
                "GS002-core-percentage-range",
                container=ref,
                field=field,
                value=core.shown,
                problem="is outside 5..100 (percent of one GPU)",
                fix="use 5 for the smallest share" if core.value < 5 else "use at most 100 (one whole GPU)",
            )
        elif core.value is not None and core.value % 5:
            em.add(
                "GS001-core-percentage-step",
                container=ref,
                field=field,
                value=core.shown,
                problem="is not a multiple of 5",
                fix=_nearest_steps(core.value),
            )
        if mem is None:
            em.add(
                "GS003-core-without-mem",
                container=ref,
                field=f"{ref.path}.{_res_field('limits', c.RES_GPU_MEM)}",
                value=None,
                problem=f'is missing but the container asks for "{c.RES_GPU_CORE}"={core.shown}',
                fix=f'add "{c.RES_GPU_MEM}" (GiB of GPU memory) to the same container',
            )
    return _ContainerGPU(ref, mem, mem_where, core, core_where)


# --- pods -----------------------------------------------------------------------------------------


def _mode(ctx: Context, pools: set[str], unpooled: bool) -> tuple[AdmissionMode, str]:
    """The strictest ``admission.mode`` among ``pools`` (Enforce when none or unpooled nodes)."""
    if unpooled or not pools:
        return "Enforce", ""
    modes: dict[str, list[str]] = {}
    for name in sorted(pools):
        pool = ctx.pool(name)
        modes.setdefault(pool.spec.admission.mode if pool else "Enforce", []).append(name)
    strictest = max(modes, key=lambda m: _MODE_ORDER[m])
    mode: AdmissionMode = "Enforce" if strictest == "Enforce" else ("Warn" if strictest == "Warn" else "Off")
    names = ", ".join(modes[strictest])
    return mode, names


def _pool_verdict(rule_id: str, ctx: Context, pools: set[str], unpooled: bool) -> tuple[Verdict | None, str]:
    """deny/warn/None(skip) for a pool-targeting rule, and a note naming the pool mode when it mattered."""
    mode, names = _mode(ctx, pools, unpooled)
    base = RULES[rule_id].verdict
    if mode == "Off":
        return None, ""
    if mode == "Warn" and base == "deny":
        return "warn", f" [admission.mode Warn on pool {names}]"
    return base, ""


def _suggest(ctx: Context, compute: bool) -> str:
    kinds = (c.SCHEDULE_CORE_MEM,) if compute else MEMORY_ONLY_KINDS
    pools = pools_of_kind(ctx, kinds)
    if pools:
        return f"e.g. nodeSelector {{{c.LABEL_POOL}: {pools[0]}}} (pools of that kind: {', '.join(pools)})"
    if compute:
        return (
            f"e.g. nodeSelector {{{c.LABEL_SCHEDULE}: {c.SCHEDULE_CORE_MEM}}} or {{{c.LABEL_POOL}: <pool>}}"
        )
    return (
        f"e.g. nodeSelector {{{c.LABEL_POOL}: <pool>}} or {{{c.LABEL_SCHEDULE}: {c.SCHEDULE_CGPU}}}"
        f' / {{{c.LABEL_DISABLE_ISOLATION}: "true"}}'
    )


def _evaluate_pod_spec(obj_name: str, path: str, spec: Mapping[str, Any], ctx: Context) -> list[Finding]:
    em = _Emitter(obj_name)
    containers = [_check_container(em, ref) for ref in iter_containers(path, spec)]
    gpu = [g for g in containers if g.mem is not None or g.core is not None]
    if not gpu:
        return em.out
    compute = any(g.core is not None for g in gpu)
    constraints = node_constraints(path, spec)
    res = resolve(constraints, ctx)
    all_pools = {p.name for p in ctx.pools}
    value = constraints.render() if constraints.present else None

    if res.source == "missing":
        verdict, note = _pool_verdict("GS007-pool-target-missing", ctx, all_pools, False)
        if verdict:
            em.add(
                "GS007-pool-target-missing",
                container=None,
                field=f"{path}.nodeSelector",
                value=None,
                problem=(
                    "is missing: a pod asking for GPU sharing must be confined to one GPU-sharing pool,"
                    " or it may land on a node of another kind"
                ),
                fix=_suggest(ctx, compute),
                verdict=verdict,
                note=note,
            )
        return em.out
    if res.source == "unknown":
        return em.out  # names a pool we cannot resolve offline; nothing more to check
    if res.source == "none":
        verdict, note = _pool_verdict("GS011-pool-target-unknown", ctx, all_pools, False)
        if verdict:
            known = ", ".join(sorted(all_pools)) or "none"
            em.add(
                "GS011-pool-target-unknown",
                container=None,
                field=constraints.field,
                value=value,
                problem=f"matches no GPU-sharing pool or node (known pools: {known})",
                fix=_suggest(ctx, compute),
                verdict=verdict,
                note=note,
            )
        return em.out
    if len(res.kinds) > 1:
        verdict, note = _pool_verdict("GS008-pool-target-ambiguous", ctx, res.pools, res.unpooled)
        if verdict:
            em.add(
                "GS008-pool-target-ambiguous",
                container=None,
                field=constraints.field,
                value=value,
                problem=f"lets the pod land on more than one kind of GPU-sharing pool: {res.describe()}",
                fix=_suggest(ctx, compute),
                verdict=verdict,
                note=note,
            )
        return em.out
    (kind,) = res.kinds
    pools = res.kinds[kind]
    where = f"pool {', '.join(sorted(pools))}" if pools else f"{c.LABEL_SCHEDULE}={kind} nodes"
    if compute != (kind == c.SCHEDULE_CORE_MEM):
        verdict, note = _pool_verdict("GS009-pool-kind-mismatch", ctx, pools, res.unpooled)
        if verdict:
            if compute:
                asker = next(g for g in gpu if g.core is not None).ref
                problem = (
                    f"targets {where} ({kind}: {KIND_TEXT[kind]}) but {asker.display} asks for"
                    f' "{c.RES_GPU_CORE}"; compute shares need a pool with computeAllocation'
                )
            else:
                problem = (
                    f"targets {where} ({kind}: {KIND_TEXT[kind]}) but no container asks for"
                    f' "{c.RES_GPU_CORE}"; memory-only and compute jobs must not share a node'
                )
            em.add(
                "GS009-pool-kind-mismatch",
                container=None,
                field=constraints.field,
                value=value,
                problem=problem,
                fix=_suggest(ctx, compute),
                verdict=verdict,
                note=note,
            )
        return em.out
    if kind == c.SCHEDULE_SHARE:
        verdict, _ = _pool_verdict("GS010-no-isolation-sizing", ctx, pools, res.unpooled)
        if verdict:
            em.add(
                "GS010-no-isolation-sizing",
                container=None,
                field=constraints.field,
                value=value,
                problem=f"targets {where} without memory isolation: containers see the whole GPU",
                fix="size GPU memory from ALIYUN_COM_GPU_MEM_CONTAINER / ALIYUN_COM_GPU_MEM_DEV",
                verdict=verdict,
            )
    _check_memory_fits(em, ctx, res, gpu, path)
    return em.out


def _check_memory_fits(
    em: _Emitter, ctx: Context, res: Resolution, gpu: list[_ContainerGPU], path: str
) -> None:
    pools = res.pools
    if not pools or res.unpooled:
        return
    sizes = {p: ctx.pool_per_gpu_gib.get(p) for p in pools}
    if any(v is None for v in sizes.values()):
        return  # some pool's GPU size is unknown: it might fit there
    best = max(v for v in sizes.values() if v is not None)
    shown = ", ".join(f"{p} {sizes[p]} GiB" for p in sorted(sizes))
    verdict, note = _pool_verdict("GS005-mem-exceeds-gpu", ctx, pools, False)
    if verdict is None:
        return
    any_container = False
    for g in gpu:
        if g.mem is None or g.mem.value is None or g.mem.value <= best:
            continue
        any_container = True
        em.add(
            "GS005-mem-exceeds-gpu",
            container=g.ref,
            field=f"{g.ref.path}.{_res_field(g.mem_where, c.RES_GPU_MEM)}",
            value=g.mem.shown,
            problem=f"is larger than one GPU of the target pool ({shown})",
            fix=f"ask for at most {best}, or target a pool with larger GPUs",
            verdict=verdict,
            note=note,
        )
    if any_container:
        return
    app = sum(g.mem.value for g in gpu if g.ref.label == "container" and g.mem and g.mem.value)
    init = max((g.mem.value for g in gpu if g.ref.label != "container" and g.mem and g.mem.value), default=0)
    total = max(app, init)
    if total > best:
        em.add(
            "GS005-mem-exceeds-gpu",
            container=None,
            field=f'{path}.containers[*].resources.limits["{c.RES_GPU_MEM}"]',
            value=str(total),
            problem=f"(the pod's total) is larger than one GPU of the target pool ({shown}); a pod's"
            " GPU memory comes from a single GPU",
            fix=f"ask for at most {best} in total, or target a pool with larger GPUs",
            verdict=verdict,
            note=note,
        )


# --- pools ----------------------------------------------------------------------------------------

_GP002_TEXT = "computeAllocation: true requires memoryIsolation: true"
_GP003_TEXT = "nodeSelector must not be empty"


def evaluate_pool(obj: Mapping[str, Any], ctx: Context = EMPTY_CONTEXT) -> list[Finding]:
    """Findings for a GPUSharePool: schema problems, compute without isolation, empty selector, overlap."""
    em = _Emitter(describe(dict(obj)))
    raw_spec = obj.get("spec")
    spec: Mapping[str, Any] = raw_spec if isinstance(raw_spec, Mapping) else {}
    if spec.get("computeAllocation") is True and spec.get("memoryIsolation") is False:
        em.add(
            "GP002-pool-compute-without-isolation",
            container=None,
            field="spec.computeAllocation",
            value="true",
            problem="requires spec.memoryIsolation: true (compute isolation needs cGPU memory isolation)",
            fix="set memoryIsolation: true, or computeAllocation: false",
        )
    selector = spec.get("nodeSelector")
    if selector is None or (
        isinstance(selector, Mapping)
        and not selector.get("matchLabels")
        and not selector.get("matchExpressions")
    ):
        em.add(
            "GP003-pool-empty-selector",
            container=None,
            field="spec.nodeSelector",
            value="{}" if selector is not None else None,
            problem="is empty or missing: an empty selector would take over every node",
            fix="select the pool's nodes, e.g. matchLabels {alibabacloud.com/nodepool-id: <id>}",
        )
    try:
        pool = parse_pool(dict(obj))
    except PoolValidationError as exc:
        for problem in exc.problems:
            missing_selector = selector is None and problem.startswith("spec.nodeSelector:")
            if _GP002_TEXT in problem or _GP003_TEXT in problem or missing_selector:
                continue
            loc, _, text = problem.partition(": ")
            em.add(
                "GP001-pool-schema",
                container=None,
                field=loc,
                value=None,
                problem=f"is invalid: {text}",
                fix="correct the field (see `kubectl explain gpusharepool.spec`)",
            )
        return em.out
    _check_overlap(em, pool, ctx)
    return em.out


def _check_overlap(em: _Emitter, pool: GPUSharePool, ctx: Context) -> None:
    others = [p for p in ctx.pools if p.name != pool.name]
    clashes: dict[str, list[str]] = {}
    for node in ctx.nodes:
        if not pool.spec.node_selector.matches(dict(node.labels)):
            continue
        owners = {p.name for p in others if p.spec.node_selector.matches(dict(node.labels))}
        labelled = node.labels.get(c.LABEL_POOL)
        if labelled and labelled != pool.name:
            owners.add(labelled)
        for owner in owners:
            clashes.setdefault(owner, []).append(node.name)
    for owner, nodes in sorted(clashes.items()):
        shown = ", ".join(sorted(nodes)[:10]) + (f" and {len(nodes) - 10} more" if len(nodes) > 10 else "")
        em.add(
            "GP004-pool-overlap",
            container=None,
            field="spec.nodeSelector",
            value=pool.spec.node_selector.to_query(),
            problem=f"selects node(s) {shown} that belong to GPUSharePool {owner}",
            fix=f"narrow the nodeSelector of {pool.name} or {owner} so that each node is in one pool",
        )


__all__ = ["evaluate", "evaluate_pool", "is_denied", "term_possible"]
