"""ACK's admission rules for pods: which pods they judge (:func:`judges`) and the judging
(:func:`evaluate_pod`); :data:`POD_RULES` is what ``gpushare.admission.rules`` drives.

Pure: plain dicts in, plain findings out; no Kopf, no Kubernetes client. Each rule is a record of
:mod:`gpushare.backends.ack.admission.catalog` (verdict, pool mode, code, and the messages the
ValidatingAdmissionPolicy writes too). A pod asking for ACK's GPU sharing (an ``aliyun.com/gpu*``
resource) is judged by its values, by the kind of pool it targets
(:mod:`gpushare.backends.ack.admission.targeting`) and by what one GPU of that pool holds, and
denied if it also asks for NVIDIA's GPUs (``SHARED_WITH_WHOLE_GPU``). A pod asking only for
NVIDIA's resources is NVIDIA's rules' (``gpushare.backends.nvidia.admission.rules``).
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpushare import constants as c
from gpushare.backends.ack.admission.catalog import (
    CGPU_DISABLE_ENV,
    CORE_RANGE,
    CORE_STEP,
    CORE_WITHOUT_MEM,
    GPU_COUNT_EXCEEDS_NODE,
    GPU_COUNT_SPLIT,
    KIND_MISMATCH,
    KIND_UNKNOWN,
    MEM_EXCEEDS_GPU,
    MEM_POSITIVE,
    NO_ISOLATION,
    NODE_NAME_SET,
    REQUEST_LIMIT,
    SHARED_WITH_WHOLE_GPU,
    TARGET_AMBIGUOUS,
    TARGET_MISSING,
    TARGET_UNKNOWN,
    UNKNOWN_RESOURCE,
)
from gpushare.backends.ack.admission.targeting import KIND_TEXT, pools_of_kind, resolve
from gpushare.backends.base import PodRules
from gpushare.backends.nvidia.admission.catalog import NVIDIA_WHAT
from gpushare.backends.nvidia.admission.rules import offered
from gpushare.rulekit.constraints import Constraints
from gpushare.rulekit.emit import Emitter, pool_verdict
from gpushare.rulekit.kinds import KindTable, object_name
from gpushare.rulekit.model import Context, Finding
from gpushare.rulekit.podspecs import (
    ContainerRef,
    PodLike,
    asks_prefixed,
    find_container,
    has_prefix,
    resource_field,
)
from gpushare.rulekit.quantity import Amount, clip, parse_amount, parse_count, same_amount, shown_value
from gpushare.rulekit.records import AdmissionRule, Verdict

#: ACK's GPU-sharing resources (and those it reports): ``aliyun.com/gpu*``.
GPU_PREFIXES: tuple[str, ...] = (c.GPU_RESOURCE_PREFIX,)
MEMORY_ONLY_KINDS = (c.SCHEDULE_CGPU, c.SCHEDULE_SHARE)
CGPU_DISABLE = "CGPU_DISABLE"
#: The GPU-sharing resources a device plugin offers; any other ``aliyun.com/gpu*`` name is a typo.
KNOWN_RESOURCES: tuple[str, ...] = (c.RES_GPU_MEM, c.RES_GPU_CORE)
#: Names that exist but are not for containers of sharing pods, with what they are
#: (``UNKNOWN_RESOURCE`` only warns).
OTHER_RESOURCES: dict[str, str] = {
    c.RES_GPU_COUNT: "a node capacity the device plugin reports, not a container request; ACK's"
    f' multi-GPU sharing uses the pod label {c.RES_GPU_COUNT}: "M"',
    "aliyun.com/gpu": "ACK's topology-aware whole-GPU resource (ack.node.gpu.schedule=topology),"
    " not GPU sharing",
}
#: Other names ACK-compatible device plugins offer, which gpushare does not check. Every name of
#: ``c.KNOWN_GPU_RESOURCES`` is allowed or warned about; only the rest (misspellings) are denied,
#: exactly what the ValidatingAdmissionPolicy denies (``catalog.UNKNOWN_RESOURCE``).
ALLOWED_OTHER: frozenset[str] = frozenset(c.KNOWN_GPU_RESOURCES) - {*KNOWN_RESOURCES, *OTHER_RESOURCES}
assert set(OTHER_RESOURCES) <= set(c.KNOWN_GPU_RESOURCES)


def is_gpu_resource(name: object) -> bool:
    return has_prefix(name, GPU_PREFIXES)


def asks_gpu(ref: ContainerRef) -> bool:
    return asks_prefixed(ref, GPU_PREFIXES)


def unknown_kind(obj: Mapping[str, Any], table: KindTable) -> list[Finding]:
    """``KIND_UNKNOWN``: a container of an object of an unknown kind asks for ``aliyun.com/gpu*``."""
    where = find_container(obj, GPU_PREFIXES)
    if where is None:
        return []
    em = Emitter(object_name(obj, table))
    api = obj.get("apiVersion")
    kind = f"{obj.get('kind')} ({api})" if isinstance(api, str) else str(obj.get("kind"))
    em.add(
        KIND_UNKNOWN,
        container=None,
        field=where,
        value=None,
        problem=f"asks for {c.GPU_RESOURCE_PREFIX}* but gpushare does not know where {kind} keeps its pod"
        " templates, so its GPU requests are not checked",
        fix="register the kind with its podSpecs paths in a workload-kinds file"
        " (`gpushare check --kinds FILE`, `gpushare run --workload-kinds FILE`;"
        " see docs/reference/workload-kinds.md)",
    )
    return em.out


# --- containers -----------------------------------------------------------------------------------


@dataclass
class _ContainerGPU:
    ref: ContainerRef
    mem: Amount | None
    mem_where: str
    core: Amount | None
    core_where: str


def _pick(container: ContainerRef, resource: str) -> tuple[Amount | None, str]:
    if resource in container.limits:
        return parse_amount(container.limits[resource]), "limits"
    if resource in container.requests:
        return parse_amount(container.requests[resource]), "requests"
    return None, "limits"


def _did_you_mean(name: str) -> str:
    """The known resource the name most likely meant: a shared stem first (``gpu-core`` ->
    ``gpu-core.percentage``, ``gpu-memory`` -> ``gpu-mem``), else the closest spelling."""
    tail = name.removeprefix(c.GPU_RESOURCE_PREFIX).lstrip("-").lower()
    stems = {
        known: known.removeprefix(c.GPU_RESOURCE_PREFIX).lstrip("-").split(".")[0]
        for known in KNOWN_RESOURCES
    }
    by_stem = [k for k, stem in stems.items() if tail and (tail.startswith(stem) or stem.startswith(tail))]
    tails = {known.removeprefix(c.GPU_RESOURCE_PREFIX).lstrip("-"): known for known in KNOWN_RESOURCES}
    close = by_stem or [tails[t] for t in difflib.get_close_matches(tail, list(tails), n=1, cutoff=0.6)]
    # The ValidatingAdmissionPolicy writes the same message without the did-you-mean.
    return f'did you mean "{close[0]}"? ' if close else ""


def _check_names(em: Emitter, ref: ContainerRef) -> None:
    """``UNKNOWN_RESOURCE``: ``aliyun.com/gpu*`` names no node offers (a typo: the pod stays Pending)."""
    seen: set[str] = set()
    for where, resources in (("limits", ref.limits), ("requests", ref.requests)):
        for name in resources:
            if not is_gpu_resource(name) or name in KNOWN_RESOURCES or name in ALLOWED_OTHER or name in seen:
                continue
            seen.add(name)
            other = OTHER_RESOURCES.get(name)
            field = f"{ref.path}.{resource_field(where, name)}"
            shown = shown_value(resources[name])
            if other is None:
                em.case(
                    UNKNOWN_RESOURCE,
                    "unknown",
                    container=ref,
                    field=field,
                    value=shown,
                    suggestion=_did_you_mean(name),
                )
                continue
            # A name nodes do report (gpu-count capacity, topology's aliyun.com/gpu) can be
            # scheduled, so it is only a warning; a misspelled one can never be.
            problem, fix = UNKNOWN_RESOURCE.text("other", what=other)
            em.add(
                UNKNOWN_RESOURCE,
                container=ref,
                field=field,
                value=shown,
                problem=problem,
                fix=fix,
                verdict="warn",
            )


def _check_env(em: Emitter, ref: ContainerRef) -> None:
    """``CGPU_DISABLE_ENV``: CGPU_DISABLE set by hand."""
    for i, var in enumerate(ref.env):
        if var.get("name") != CGPU_DISABLE:
            continue
        value = var.get("value")
        em.add(
            CGPU_DISABLE_ENV,
            container=ref,
            field=f"{ref.path}.env[{i}]",
            value=f"{CGPU_DISABLE}={shown_value(value)}" if value is not None else CGPU_DISABLE,
            problem="is set in the manifest; the device plugin sets CGPU_DISABLE=true itself on nodes"
            f" labelled {c.LABEL_DISABLE_ISOLATION}=true, which turns off cGPU memory isolation for the"
            " container (it then sees and may use the whole GPU)",
            fix="remove it and choose isolation by the target pool (memoryIsolation: true or false)",
        )


def _check_container(em: Emitter, ref: ContainerRef, unit: str) -> _ContainerGPU:
    _check_names(em, ref)
    _check_env(em, ref)
    mem, mem_where = _pick(ref, c.RES_GPU_MEM)
    core, core_where = _pick(ref, c.RES_GPU_CORE)
    # ``REQUEST_LIMIT``: requests without limits, or requests different from limits.
    for resource in (c.RES_GPU_MEM, c.RES_GPU_CORE):
        if resource not in ref.requests:
            continue
        req = parse_amount(ref.requests[resource])
        field = f"{ref.path}.{resource_field('requests', resource)}"
        if resource not in ref.limits:
            em.case(REQUEST_LIMIT, "no-limit", container=ref, field=field, value=req.shown, resource=resource)
        elif not same_amount(ref.requests[resource], ref.limits[resource]):
            limit = parse_amount(ref.limits[resource]).shown
            em.case(REQUEST_LIMIT, "differs", container=ref, field=field, value=req.shown, limit=limit)
    if mem is not None:
        field = f"{ref.path}.{resource_field(mem_where, c.RES_GPU_MEM)}"
        example = 2 if unit == "GiB" else 2048
        if mem.error is not None:
            em.case(
                MEM_POSITIVE,
                "malformed",
                container=ref,
                field=field,
                value=mem.shown,
                error=mem.error,
                unit=unit,
                example=example,
            )
        elif mem.value == 0:
            em.case(MEM_POSITIVE, "zero", container=ref, field=field, value=mem.shown, unit=unit)
    if core is not None:
        field = f"{ref.path}.{resource_field(core_where, c.RES_GPU_CORE)}"
        if core.error is not None:
            em.case(CORE_STEP, "malformed", container=ref, field=field, value=core.shown, error=core.error)
        elif core.value is not None and not 5 <= core.value <= 100:
            case = "below" if core.value < 5 else "above"
            em.case(CORE_RANGE, case, container=ref, field=field, value=core.shown)
        elif core.value is not None and core.value % 5:
            low = core.value - core.value % 5
            em.case(CORE_STEP, "step", container=ref, field=field, value=core.shown, low=low, high=low + 5)
        if mem is None:
            em.case(
                CORE_WITHOUT_MEM,
                "missing",
                container=ref,
                field=f"{ref.path}.{resource_field('limits', c.RES_GPU_MEM)}",
                value=None,
                core=core.shown,
                unit=unit,
            )
    if mem is not None or core is not None:
        _check_whole_gpus(em, ref, "both", shared=c.RES_GPU_MEM if mem is not None else c.RES_GPU_CORE)
    return _ContainerGPU(ref, mem, mem_where, core, core_where)


def _check_whole_gpus(em: Emitter, ref: ContainerRef, case: str, **values: object) -> bool:
    """``SHARED_WITH_WHOLE_GPU``: NVIDIA's GPUs (``nvidia.com/gpu``, ``nvidia.com/gpu.shared``)
    asked for by a container of a pod that asks for ACK GPU sharing (``case`` "both": in the same
    container; "pod": in another one): a node runs one GPU scheduling mode, whose resources are the
    only ones it offers. The first one found (limits before requests, as the policy)."""
    for where, resources in (("limits", ref.limits), ("requests", ref.requests)):
        for name, what in NVIDIA_WHAT.items():
            if name in resources:
                shown = parse_amount(resources[name]).shown
                field = f"{ref.path}.{resource_field(where, name)}"
                em.case(
                    SHARED_WITH_WHOLE_GPU,
                    case,
                    container=ref,
                    field=field,
                    value=shown,
                    what=what,
                    resource=name,
                    **values,
                )
                return True
    return False


# --- pods -----------------------------------------------------------------------------------------


def _wanted_kinds(compute: bool, multi: bool, reachable: set[str] | None = None) -> tuple[str, ...]:
    """The pool kinds a pod fits, best first: core_mem for compute shares, cgpu for multi-GPU
    sharing, else cgpu (isolated) then share; narrowed to ``reachable`` when that leaves any."""
    if compute:
        kinds: tuple[str, ...] = (c.SCHEDULE_CORE_MEM,)
    elif multi:
        kinds = (c.SCHEDULE_CGPU,)
    else:
        kinds = MEMORY_ONLY_KINDS
    if reachable:
        narrowed = tuple(k for k in kinds if k in reachable)
        if narrowed:
            return narrowed
    return kinds


def _suggest(ctx: Context, compute: bool, multi: bool = False, reachable: set[str] | None = None) -> str:
    kinds = _wanted_kinds(compute, multi, reachable)
    by_kind = [(k, pools_of_kind(ctx, (k,))) for k in kinds]
    found = [(k, p) for k, p in by_kind if p]
    if found:
        first = found[0][1][0]
        listed = "; ".join(f"{k} pools: {', '.join(p)}" for k, p in found)
        return f"e.g. nodeSelector {{{c.LABEL_POOL}: {first}}} ({listed})"
    if kinds == (c.SCHEDULE_CORE_MEM,):
        return (
            f"e.g. nodeSelector {{{c.LABEL_SCHEDULE}: {c.SCHEDULE_CORE_MEM}}} or {{{c.LABEL_POOL}: <pool>}}"
        )
    if kinds == (c.SCHEDULE_SHARE,):
        return f'e.g. nodeSelector {{{c.LABEL_POOL}: <pool>}} or {{{c.LABEL_DISABLE_ISOLATION}: "true"}}'
    # Memory-only: isolation first; sharing without isolation only when asked for by name.
    return (
        f"e.g. nodeSelector {{{c.LABEL_POOL}: <pool>}} or {{{c.LABEL_SCHEDULE}: {c.SCHEDULE_CGPU}}}"
        " (memory isolation)"
    )


#: The spec that makes each kind of pool (for the fix of a pod aimed at a kind no pool makes).
_KIND_SPEC: dict[str, str] = {
    c.SCHEDULE_CGPU: "memoryIsolation: true",
    c.SCHEDULE_SHARE: "memoryIsolation: false",
    c.SCHEDULE_CORE_MEM: "computeAllocation: true",
}


def _unmatched_fix(ctx: Context, wanted: str, compute: bool, multi: bool) -> str:
    """``TARGET_UNKNOWN`` for ACK labels nothing carries: target an existing pool, or make one."""
    existing = _suggest(ctx, compute, multi) if pools_of_kind(ctx, _wanted_kinds(compute, multi)) else ""
    make = (
        f"create a GPUSharePool with {_KIND_SPEC[wanted]} for the GPU nodes it should run on and target"
        f" it with nodeSelector {{{c.LABEL_POOL}: <pool>}}"
    )
    scaled = (
        f"; nodes that an autoscaler adds later with these labels are not known yet: label the object"
        f" {c.LABEL_WEBHOOK}: {c.WEBHOOK_IGNORE} to admit it anyway"
    )
    return (f"target an existing pool, {existing}, or " if existing else "") + make + scaled


def _unit(ctx: Context, pools: set[str]) -> str:
    """The memory unit of the target pools (GiB unless every one of them says MiB)."""
    units = {ctx.pool_unit(p) for p in pools}
    return "MiB" if units == {"MiB"} else "GiB"


@dataclass(frozen=True)
class _Split:
    """ACK multi-GPU sharing: the pod label ``aliyun.com/gpu-count``."""

    count: int  # M (1 when absent or invalid)
    field: str
    shown: str | None  # the label value as written, when present


def _gpu_count(em: Emitter, pod: PodLike) -> _Split:
    field = f'{pod.labels_path}["{c.RES_GPU_COUNT}"]'
    if c.RES_GPU_COUNT not in pod.labels:
        return _Split(1, field, None)
    raw = pod.labels[c.RES_GPU_COUNT]
    q = parse_count(raw)
    if q.value is None or q.value < 1:
        em.add(
            GPU_COUNT_SPLIT,
            container=None,
            field=field,
            value=q.shown,
            problem=f"{q.error or 'is zero'}; the number of GPUs to spread the pod's memory over is a"
            ' whole number of at least 1, written as a string label value (e.g. "2")',
            fix=f'write e.g. {c.RES_GPU_COUNT}: "2", or remove the label for one GPU',
        )
        return _Split(1, field, q.shown)
    return _Split(q.value, field, q.shown)


def _check_node_name(em: Emitter, pod: PodLike) -> None:
    """``NODE_NAME_SET``: a GPU-sharing pod bound by hand (``spec.nodeName``) skips the scheduler."""
    name = pod.spec.get("nodeName")
    if isinstance(name, str) and name:
        shown = clip(name)
        em.case(NODE_NAME_SET, "set", container=None, field=f"{pod.path}.nodeName", value=shown, node=shown)


def judges(pod: PodLike) -> bool:
    """Whether ACK's rules judge the pod: a container asks for ``aliyun.com/gpu*``."""
    return any(asks_gpu(ref) for ref in pod.containers)


def evaluate_pod(em: Emitter, pod: PodLike, constraints: Constraints, ctx: Context) -> None:
    """The rules for a pod asking for ACK's GPU sharing: its containers' values, NVIDIA's GPUs
    beside them (``SHARED_WITH_WHOLE_GPU``), its GPU count, and the pools its node constraints target."""
    res = resolve(constraints, ctx)
    if len(res.kinds) > 1:
        # NVIDIA pools offer no aliyun.com/gpu*: the scheduler cannot place the pod there, so they
        # make no ambiguity beside another kind (only an NVIDIA pool alone is a mismatch).
        res.kinds.pop(c.POOL_KIND_NVIDIA, None)
    all_pools = {p.name for p in ctx.pools if p.spec.mode != c.POOL_KIND_NVIDIA}
    unit = _unit(ctx, res.pools) if res.pools else "GiB"
    containers = [_check_container(em, ref, unit) for ref in pod.containers]
    gpu = [g for g in containers if g.mem is not None or g.core is not None]
    if not gpu:
        return
    if len(gpu) < len(containers):  # whole GPUs in a container of its own (its own are checked above)
        sharing = gpu[0].ref.display
        for g in containers:
            if g not in gpu and _check_whole_gpus(em, g.ref, "pod", sharing=sharing):
                break
    _check_node_name(em, pod)
    compute = any(g.core is not None for g in gpu)
    split = _gpu_count(em, pod)
    multi = split.count > 1
    value = constraints.render() if constraints.present else None
    total = _pod_total(gpu)
    if multi:
        _check_split(em, split, gpu, total, unit)

    if res.source == "missing":
        verdict, note = pool_verdict(TARGET_MISSING, ctx, all_pools, False)
        if verdict:
            em.add(
                TARGET_MISSING,
                container=None,
                field=f"{pod.constraints_path}.nodeSelector",
                value=None,
                problem=(
                    "is missing: a pod asking for GPU sharing must be confined to one GPU-sharing pool,"
                    " or it may land on a node of another kind"
                ),
                fix=_suggest(ctx, compute, multi),
                verdict=verdict,
                note=note,
            )
        _check_fits(em, ctx, all_pools, gpu, pod.path, split, total, anywhere=True)
        return
    if res.source == "unknown":
        return  # names a pool we cannot resolve offline; nothing more to check

    def on_target(rule: AdmissionRule, problem: str, fix: str, verdict: Verdict, note: str) -> None:
        """A finding of the pod as a whole, on its node constraints."""
        em.add(
            rule,
            container=None,
            field=constraints.field,
            value=value,
            problem=problem,
            fix=fix,
            verdict=verdict,
            note=note,
        )

    def target_unknown(problem: str, fix: str) -> None:
        """``TARGET_UNKNOWN`` on the pod's targeting (one record for both ways a target can be unknown)."""
        verdict, note = pool_verdict(TARGET_UNKNOWN, ctx, all_pools, False)
        if verdict:
            on_target(TARGET_UNKNOWN, problem, fix, verdict, note)

    known = ", ".join(sorted(all_pools)) or "none"
    if res.source == "unmatched":
        (wanted,) = res.kinds
        target_unknown(
            f"asks for {wanted} nodes ({KIND_TEXT[wanted]}), but no node has these labels and no"
            f" GPUSharePool makes {wanted} nodes (known pools: {known}); the pod would stay Pending",
            _unmatched_fix(ctx, wanted, compute, multi),
        )
        return
    if res.source == "none":
        target_unknown(
            f"matches no GPU-sharing pool or node (known pools: {known})", _suggest(ctx, compute, multi)
        )
        _check_fits(em, ctx, all_pools, gpu, pod.path, split, total, anywhere=True)
        return
    if len(res.kinds) > 1:
        verdict, note = pool_verdict(TARGET_AMBIGUOUS, ctx, res.pools, res.unpooled)
        if verdict:
            on_target(
                TARGET_AMBIGUOUS,
                f"lets the pod land on more than one kind of GPU-sharing pool: {res.describe()}",
                _suggest(ctx, compute, multi, set(res.kinds)),
                verdict,
                note,
            )
        if not res.unpooled:
            _check_fits(em, ctx, res.pools, gpu, pod.path, split, total, anywhere=True)
        return
    (kind,) = res.kinds
    pools = res.kinds[kind]
    where = f"pool {', '.join(sorted(pools))}" if pools else f"{c.LABEL_SCHEDULE}={kind} nodes"
    if kind == c.POOL_KIND_NVIDIA:
        verdict, note = pool_verdict(KIND_MISMATCH, ctx, pools, res.unpooled)
        if verdict:
            first = gpu[0]
            problem, fix = KIND_MISMATCH.text(
                "ack-on-nvidia",
                where=where,
                kind_text=KIND_TEXT[kind],
                asker=first.ref.display,
                resource=c.RES_GPU_MEM if first.mem is not None else c.RES_GPU_CORE,
                suggestion=_suggest(ctx, compute, multi),
                offered=" or ".join(sorted(offered(ctx, pools))),
            )
            on_target(KIND_MISMATCH, problem, fix, verdict, note)
        return
    if compute != (kind == c.SCHEDULE_CORE_MEM):
        verdict, note = pool_verdict(KIND_MISMATCH, ctx, pools, res.unpooled)
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
            on_target(KIND_MISMATCH, problem, _suggest(ctx, compute, multi), verdict, note)
    elif multi and not compute and kind != c.SCHEDULE_CGPU:
        verdict, note = pool_verdict(GPU_COUNT_SPLIT, ctx, pools, res.unpooled)
        if verdict:
            em.add(
                GPU_COUNT_SPLIT,
                container=None,
                field=constraints.field,
                value=value,
                problem=f"targets {where} ({kind}: {KIND_TEXT[kind]}) but the pod spreads its memory over"
                f" {split.count} GPUs ({c.RES_GPU_COUNT}={split.shown}); ACK supports multi-GPU sharing only"
                " with memory isolation and shared compute (cgpu)",
                fix=_suggest(ctx, compute, multi),
                verdict=verdict,
                note=note,
            )
    if kind == c.SCHEDULE_SHARE and not compute:
        verdict, _ = pool_verdict(NO_ISOLATION, ctx, pools, res.unpooled)
        if verdict:
            em.add(
                NO_ISOLATION,
                container=None,
                field=constraints.field,
                value=value,
                problem=f"targets {where} without memory isolation: containers see the whole GPU",
                fix="size GPU memory from ALIYUN_COM_GPU_MEM_CONTAINER / ALIYUN_COM_GPU_MEM_DEV",
                verdict=verdict,
            )
    if not res.unpooled:
        _check_fits(em, ctx, res.pools, gpu, pod.path, split, total)


def _pod_total(gpu: list[_ContainerGPU]) -> int:
    """The pod's GPU memory: its running containers together, or its largest init container."""
    app = sum(g.mem.value for g in gpu if not g.ref.init and g.mem and g.mem.value)
    init = max((g.mem.value for g in gpu if g.ref.init and g.mem and g.mem.value), default=0)
    return max(app, init)


def _check_split(em: Emitter, split: _Split, gpu: list[_ContainerGPU], total: int, unit: str) -> None:
    """``GPU_COUNT_SPLIT`` for what the pod alone decides: compute shares and an uneven split."""
    asker = next((g for g in gpu if g.core is not None), None)
    if asker is not None:
        em.add(
            GPU_COUNT_SPLIT,
            container=asker.ref,
            field=f"{asker.ref.path}.{resource_field(asker.core_where, c.RES_GPU_CORE)}",
            value=asker.core.shown if asker.core else None,
            problem=f"is asked for by a pod spread over {split.count} GPUs ({c.RES_GPU_COUNT}={split.shown});"
            " ACK's multi-GPU sharing works with memory isolation and shared compute (cgpu) only, not with"
            " compute allocation (core_mem)",
            fix=f"drop {c.RES_GPU_CORE}, or drop the {c.RES_GPU_COUNT} label and use one GPU",
        )
    if total and total % split.count:
        low = total - total % split.count
        em.add(
            GPU_COUNT_SPLIT,
            container=None,
            field=split.field,
            value=split.shown,
            problem=f"splits the pod's {total} {unit} of {c.RES_GPU_MEM} over {split.count} GPUs:"
            f" {total}/{split.count} is not a whole number of {unit} per GPU",
            fix=f"ask for a multiple of {split.count} in total"
            f" (e.g. {low or split.count} or {low + split.count})",
        )


def _check_fits(
    em: Emitter,
    ctx: Context,
    pools: set[str],
    gpu: list[_ContainerGPU],
    path: str,
    split: _Split,
    total: int,
    *,
    anywhere: bool = False,
) -> None:
    """What a node of the target pools (of every known pool when ``anywhere``) must offer: as
    many GPUs as the pod spreads over, each with its share of memory."""
    _check_count_fits(em, ctx, pools, split, anywhere=anywhere)
    _check_memory_fits(em, ctx, pools, gpu, path, split, total, anywhere=anywhere)


def _check_count_fits(em: Emitter, ctx: Context, pools: set[str], split: _Split, *, anywhere: bool) -> None:
    """``GPU_COUNT_EXCEEDS_NODE``: a pod spread over more GPUs than any node of the pools has."""
    if split.count <= 1 or not pools:
        return
    counts = {p: ctx.pool_gpus.get(p) for p in pools}
    known = {p: n for p, n in counts.items() if n is not None}
    if len(known) < len(counts):
        return  # some pool's GPU count is unknown: it might fit there
    most = max(known.values())
    if split.count <= most:
        return
    verdict, note = pool_verdict(GPU_COUNT_EXCEEDS_NODE, ctx, pools, False)
    if verdict is None:
        return
    names = ", ".join(sorted(known))
    where = f"any known pool ({names})" if anywhere else f"pool{'s' if len(known) > 1 else ''} {names}"
    each = f" ({', '.join(f'{p} {known[p]}' for p in sorted(known))})" if len(known) > 1 else ""
    em.add(
        GPU_COUNT_EXCEEDS_NODE,
        container=None,
        field=split.field,
        value=split.shown,
        problem=f"asks for {split.count} GPUs of one node, but no node of {where} has more than {most}"
        f" GPUs{each}; the pod would stay Pending",
        fix=f'spread the memory over at most {most} GPUs ({c.RES_GPU_COUNT}: "{most}"), or target a pool'
        f" whose nodes have {split.count} GPUs or more",
        verdict=verdict,
        note=note,
    )


def _check_memory_fits(
    em: Emitter,
    ctx: Context,
    pools: set[str],
    gpu: list[_ContainerGPU],
    path: str,
    split: _Split,
    total: int,
    *,
    anywhere: bool = False,
) -> None:
    """``MEM_EXCEEDS_GPU``: memory larger than one GPU of every target pool (of every known pool
    when ``anywhere``)."""
    if not pools:
        return
    sizes = {p: ctx.pool_per_gpu.get(p) for p in pools}
    if any(v is None for v in sizes.values()):
        return  # some pool's GPU size is unknown: it might fit there
    best = max(v for v in sizes.values() if v is not None)
    units = {p: ctx.pool_unit(p) for p in pools}
    unit = _unit(ctx, pools)
    shown = ", ".join(f"{p} {sizes[p]} {units[p]}" for p in sorted(sizes))
    target = "any known pool" if anywhere else "the target pool"
    verdict, note = pool_verdict(MEM_EXCEEDS_GPU, ctx, pools, False)
    if verdict is None:
        return

    def pod_total(problem: str, fix: str) -> None:
        """The finding on the pod's total (no single container is too large)."""
        em.add(
            MEM_EXCEEDS_GPU,
            container=None,
            field=f'{path}.containers[*].resources.limits["{c.RES_GPU_MEM}"]',
            value=str(total),
            problem=problem,
            fix=fix,
            verdict=verdict,
            note=note,
        )

    if split.count > 1:
        if total % split.count:
            return  # ``GPU_COUNT_SPLIT`` already says the split is uneven
        per_card = total // split.count
        if per_card > best:
            pod_total(
                f"over {split.count} GPUs ({c.RES_GPU_COUNT}={split.shown}) is {per_card} {unit} per"
                f" GPU, more than one GPU of {target} ({shown})",
                f"ask for at most {best * split.count} in total, or spread over more GPUs",
            )
        return
    hint = _unit_hint(units, best)
    any_container = False
    for g in gpu:
        if g.mem is None or g.mem.value is None or g.mem.value <= best:
            continue
        any_container = True
        em.add(
            MEM_EXCEEDS_GPU,
            container=g.ref,
            field=f"{g.ref.path}.{resource_field(g.mem_where, c.RES_GPU_MEM)}",
            value=g.mem.shown,
            problem=f"is larger than one GPU of {target} ({shown})",
            fix=f"ask for at most {best}, or target a pool with larger GPUs{_multi_hint(g.mem.value, best)}"
            f"{hint if g.mem.value >= 1024 else ''}",
            verdict=verdict,
            note=note,
        )
    if any_container:
        return
    if total > best:
        pod_total(
            f"(the pod's total) is larger than one GPU of {target} ({shown}); a pod's"
            f" GPU memory comes from a single GPU unless it is labelled {c.RES_GPU_COUNT}",
            f"ask for at most {best} in total, or target a pool with larger GPUs{_multi_hint(total, best)}",
        )


def _multi_hint(value: int, best: int) -> str:
    for m in range(2, 9):
        if value % m == 0 and value // m <= best:
            return f', or spread it over {m} GPUs with the pod label {c.RES_GPU_COUNT}: "{m}" (cgpu pools)'
    return ""


def _unit_hint(units: dict[str, str], best: int) -> str:
    if "GiB" in units.values():
        return f" (the value looks like MiB, but the pool counts {c.RES_GPU_MEM} in GiB: one GPU is {best})"
    return ""


#: ACK's pod rules, as ``gpushare.admission.rules`` drives them.
POD_RULES = PodRules(name="ack", judges=judges, evaluate=evaluate_pod, unknown_kind=unknown_kind)
