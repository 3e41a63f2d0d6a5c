"""NVIDIA's admission rules for pods (pure): which pods they judge, and the judging.

A pod asking for ``nvidia.com/gpu.shared`` is always judged (only sharing users create such pods:
NVIDIA's plugin advertises the name with ``renameByDefault``); one asking for ``nvidia.com/gpu``
only when its own fields constrain its nodes (it may be aimed at an NVIDIA pool; whole GPUs
anywhere are none of gpushare's business). The webhook's matchConditions ask the same
(``gpushare.admission.cel.gpu_sharing_condition`` with ``nvidia="all"``). A pod that also asks
for ACK's GPU sharing is ACK's to judge (its ``SHARED_WITH_WHOLE_GPU``):
``gpushare.admission.rules`` offers each pod to ACK's rules first.

The rules (:func:`evaluate_pod`) judge a pod against every pool its node constraints confine it
to, ACK's too: where it is aimed (:func:`gpushare.backends.ack.admission.targeting.nvidia_target`,
which resolves pools by ``gpushare.io/pool``, their nodeSelectors and ACK's schedule label). So
they emit the NVIDIA cases of two records shared with ACK's rules, ``KIND_MISMATCH`` and
``TARGET_UNKNOWN`` (ACK's catalog), beside NVIDIA's own ``NVIDIA_MORE_THAN_ONE`` (:mod:`.catalog`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from decimal import Decimal
from typing import Any, cast

from gpushare import constants as c
from gpushare.api.quantity import quantity_or_none
from gpushare.api.v1alpha1 import GPUSharePool
from gpushare.backends.ack.admission.catalog import KIND_MISMATCH, TARGET_UNKNOWN
from gpushare.backends.ack.admission.targeting import KIND_TEXT, nvidia_target, pool_node_labels, reaches_pool
from gpushare.backends.base import PodRules
from gpushare.backends.nvidia.admission import mig as mig_rules
from gpushare.backends.nvidia.admission.catalog import (
    NVIDIA_EXCEEDS_NODE,
    NVIDIA_MORE_THAN_ONE,
    NVIDIA_PREFIX,
    NVIDIA_QUANTITY,
    NVIDIA_WHAT,
)
from gpushare.backends.nvidia.admission.cel import AIMED_NAMES, AIMED_PREFIXES
from gpushare.backends.nvidia.config import name_of
from gpushare.rulekit.constraints import Constraints, reaches_node
from gpushare.rulekit.emit import Emitter, pool_verdict
from gpushare.rulekit.model import Context, NodeInfo
from gpushare.rulekit.podspecs import (
    ContainerRef,
    PodLike,
    asks_any,
    asks_prefixed,
    has_prefix,
    resource_field,
)
from gpushare.rulekit.quantity import Amount, shown_value
from gpushare.rulekit.records import AdmissionRule, Verdict
from gpushare.rulekit.requests import container_spec, effective_requests


def judged_nvidia(pod: PodLike) -> bool:
    """Whether the NVIDIA rules judge the pod: a container asks for an ``nvidia.com/*`` resource.
    Kubernetes' own rules (``NVIDIA_QUANTITY``) and what no node can hold (``NVIDIA_EXCEEDS_NODE``)
    hold for every such pod; the pool rules only for a pod :func:`aimed` at pools."""
    return any(asks_prefixed(ref, (NVIDIA_PREFIX,)) for ref in pod.containers)


def aimed(pod: PodLike) -> bool:
    """Whether a pod asking for NVIDIA's resources may be aimed at a pool: a container asks for
    ``nvidia.com/gpu.shared``, or for ``nvidia.com/gpu`` or a MIG device (``nvidia.com/mig-*``) in a
    pod whose own fields constrain its nodes (the webhook's matchConditions ask the same:
    ``gpushare.admission.podspecs.requests_gpu_sharing``; any other NVIDIA pod may land on any GPU
    node and is sent to the webhook only beside one of these)."""
    if any(asks_any(ref, (c.RES_NVIDIA_GPU_SHARED,)) for ref in pod.containers):
        return True
    return pod.own_constraints and any(
        asks_any(ref, AIMED_NAMES) or asks_prefixed(ref, AIMED_PREFIXES) for ref in pod.containers
    )


def _nvidia_pools(ctx: Context, names: set[str] | None = None) -> list[GPUSharePool]:
    return [
        p
        for p in ctx.pools
        if p.spec.nvidia is not None
        and p.spec.mode == c.POOL_KIND_NVIDIA
        and (names is None or p.name in names)
    ]


def offered(ctx: Context, pools: set[str]) -> set[str]:
    """The NVIDIA resources the NVIDIA pools among ``pools`` advertise (ACK's ``KIND_MISMATCH``
    names them to a pod asking for ACK's GPU sharing on an NVIDIA pool)."""
    return {r for p in _nvidia_pools(ctx, pools) for r in _resources_of(p)}


def _resources_of(pool: GPUSharePool) -> tuple[str, ...]:
    """What an NVIDIA pool's nodes advertise (a MIG pool's: :func:`.mig.resources`)."""
    nv = pool.spec.nvidia
    if nv is None:
        return ()
    return mig_rules.resources(nv.mig) if nv.mig is not None else (nv.resource,)


def _nvidia_why(pool: GPUSharePool) -> str:
    nv = pool.spec.nvidia
    assert nv is not None
    if nv.mig is not None:
        return f"MIG, strategy {nv.mig.strategy}"
    if nv.strategy == "None":
        return "strategy None: whole GPUs"
    return f"{nv.strategy}, renameByDefault: {'true' if nv.rename_by_default else 'false'}"


def _nvidia_asks(pod: PodLike) -> list[tuple[ContainerRef, str, str, Amount]]:
    """(container, resource, limits|requests, amount) of every NVIDIA resource a container asks for."""
    out = []
    for ref in pod.containers:
        mig = sorted(
            {str(n) for n in (*ref.limits, *ref.requests) if has_prefix(n, (c.RES_NVIDIA_MIG_PREFIX,))}
        )
        for name in (*NVIDIA_WHAT, *mig):
            if name in ref.limits:
                out.append((ref, name, "limits", _amount(ref.limits[name])))
            elif name in ref.requests:
                out.append((ref, name, "requests", _amount(ref.requests[name])))
    return out


def may_offer(pool: GPUSharePool, resource: str) -> bool:
    """Whether the nodes of an NVIDIA pool can advertise ``resource`` under the pool's sharing.

    The config gpushare writes (``backends.nvidia.config.document``) shares ``nvidia.com/gpu``
    only, advertised as ``nvidia.com/gpu.shared`` with renameByDefault (k8s-device-plugin v0.19.3
    ``api/config/v1/replicas.go``). A MIG device (``nvidia.com/mig-<profile>``) exists only with
    the plugin's mixed MIG strategy (its command line; README "Configuration Option Details":
    ``--mig-strategy``), on whole GPUs: a TimeSlicing pool's config names no MIG resource to
    share, and NVIDIA's README says MPS is not supported on MIG-enabled devices. Strategy None
    (whole GPUs) leaves MIG to the plugin's flags: it may advertise them."""
    nv = pool.spec.nvidia
    if nv is None:
        return False
    if nv.mig is not None:
        return mig_rules.offers(nv.mig, resource)  # a MIG pool: its strategy and geometry say
    if resource.startswith(c.RES_NVIDIA_MIG_PREFIX):
        return nv.strategy == "None"
    return nv.resource == resource


def _amount(raw: object) -> Amount:
    """A count of NVIDIA's devices as Kubernetes reads it (``kubernetes_quantity``: ``2.0`` and
    ``2000m`` are 2); a value it refuses has no number (``NVIDIA_QUANTITY`` says why)."""
    amount, case = kubernetes_quantity(raw)
    if amount is None:
        return Amount(raw, error=case)
    return Amount(raw, value=int(amount))


def kubernetes_quantity(raw: object) -> tuple[Decimal | None, str | None]:
    """An extended resource's quantity as the apiserver reads it: ``(amount, None)``, else
    ``(None, case)`` with the ``NVIDIA_QUANTITY`` case it breaks. A JSON number is parsed as
    written (``2.0`` is 2, ``1.5`` a fraction); the amount is kept in nano units, rounded up, and
    must be whole (``ValidateResourceQuantityValue``: ``MilliValue() % 1000 == 0``) and not negative
    (``ValidateNonnegativeQuantity``)."""
    amount = _read(raw)
    if amount is None:
        return None, "malformed"
    if amount < 0:
        return None, "negative"
    if amount != amount.to_integral_value():
        return None, "not-integer"
    return amount, None


def _read(raw: object) -> Decimal | None:
    """The amount of a quantity in nano units (rounded up, as Kubernetes keeps it), or None for
    what is no quantity."""
    if isinstance(raw, float):
        raw = repr(raw) if math.isfinite(raw) else None
    q = quantity_or_none(raw)
    return None if q is None else q.nano


def _check_kubernetes(em: Emitter, ref: ContainerRef) -> None:
    """``NVIDIA_QUANTITY``: what Kubernetes refuses in a container's ``nvidia.com/*`` resources
    (pkg/apis/core/validation ``ValidateResourceRequirements``): each quantity whole and not negative
    (``ValidateResourceQuantityValue``, ``ValidateNonnegativeQuantity``), a request only with its
    limit and equal to it (extended resources: ``helper.IsOvercommitAllowed`` is false)."""
    amounts: dict[tuple[str, str], Decimal | None] = {}
    for where, resources in (("limits", ref.limits), ("requests", ref.requests)):
        for name, raw in resources.items():
            if not isinstance(name, str) or not name.startswith(NVIDIA_PREFIX):
                continue
            _, case = kubernetes_quantity(raw)
            amounts[where, name] = _read(raw)  # compared even when refused, as Kubernetes does
            if case is not None:
                field = f"{ref.path}.{resource_field(where, name)}"
                em.case(
                    NVIDIA_QUANTITY, case, container=ref, field=field, value=shown_value(raw), resource=name
                )
    for name, raw in ref.requests.items():
        if not isinstance(name, str) or not name.startswith(NVIDIA_PREFIX):
            continue
        field = f"{ref.path}.{resource_field('requests', name)}"
        if name not in ref.limits:
            em.case(
                NVIDIA_QUANTITY, "no-limit", container=ref, field=field, value=shown_value(raw), resource=name
            )
            continue
        request, limit = amounts.get(("requests", name)), amounts.get(("limits", name))
        if request is not None and limit is not None and request != limit:
            em.case(
                NVIDIA_QUANTITY,
                "differs",
                container=ref,
                field=field,
                value=shown_value(raw),
                resource=name,
                limit=shown_value(ref.limits[name]),
            )


def _container_asks(container: Mapping[str, Any]) -> dict[str, int]:
    """A container's ``nvidia.com/*`` requests as the scheduler reads them: the request, else the
    limit (Kubernetes defaults an extended resource's request to its limit); a value Kubernetes
    refuses (``NVIDIA_QUANTITY``) is left out."""
    resources = container.get("resources")
    out: dict[str, int] = {}
    if not isinstance(resources, Mapping):
        return out
    for where in ("limits", "requests"):  # requests win when both are given
        values = resources.get(where)
        if not isinstance(values, Mapping):
            continue
        for name, raw in values.items():
            if isinstance(name, str) and name.startswith(NVIDIA_PREFIX):
                amount, _ = kubernetes_quantity(raw)
                if amount is not None:
                    out[name] = int(amount)
    return out


def _gpus(node: NodeInfo) -> int | None:
    """A node's physical GPUs: the agent's inventory or count label, else GPU Feature Discovery's."""
    if node.gpu_count:
        return node.gpu_count
    value = node.labels.get(c.LABEL_NVIDIA_GPU_COUNT, "")
    return int(value) if value.isdigit() and int(value) > 0 else None


def node_offers(ctx: Context, node: NodeInfo, resource: str) -> int | None:
    """The most of ``resource`` a node can ever offer one pod, or None when unknown.

    A node of an NVIDIA pool: its allocatable once the pool's config is applied there (its config
    label names the pool's config), else its GPUs x the pool's replicas (what NVIDIA's plugin
    advertises under that config: k8s-device-plugin v0.19.3 ``api/config/v1/replicas.go``); 0 for a
    resource the pool cannot offer (:func:`may_offer`). A node of a MIG pool with a geometry: the
    profile's devices per GPU x its GPUs x the profile's replicas (:func:`.mig.node_size`). A node
    of an ACK pool offers no ``nvidia.com/*``. Any other node: its allocatable today."""
    name = ctx.node_pool.get(node.name)
    pool = ctx.pool(name) if name else None
    if pool is None:
        return _alloc(node, resource)
    nv = pool.spec.nvidia
    if nv is None or not may_offer(pool, resource):
        return 0
    if nv.mig is not None and (size := mig_rules.node_size(nv.mig, resource, _gpus(node))) is not None:
        return size
    if node.labels.get(c.LABEL_NVIDIA_CONFIG) == name_of(nv) and resource in node.allocatable:
        return _alloc(node, resource)
    if nv.mig is not None or resource.startswith(c.RES_NVIDIA_MIG_PREFIX):
        return None  # MIG slices per GPU are the MIG manager's and the node's, not the pool's
    gpus = _gpus(node)
    return None if gpus is None else gpus * (nv.replicas if nv.strategy != "None" else 1)


def _alloc(node: NodeInfo, resource: str) -> int:
    amount, _ = kubernetes_quantity(node.allocatable.get(resource, "0"))
    return int(amount) if amount is not None else 0


def _reached(ctx: Context, constraints: Constraints) -> list[tuple[NodeInfo, str | None]]:
    """The known nodes a pod can land on (with the pool's labels applied on a pool's nodes), each
    with its pool; every node for a pod without constraints. Cached on the context."""
    cache = ctx.cache.setdefault("nvidia_reached", {})
    key = constraints.terms if constraints.present else None
    cached = cache.get(key)
    if cached is not None:
        return cast(list[tuple[NodeInfo, str | None]], cached)
    out: list[tuple[NodeInfo, str | None]] = []
    for node in ctx.nodes:
        name = ctx.node_pool.get(node.name)
        pool = ctx.pool(name) if name else None
        labels = {**node.labels, **pool_node_labels(pool)} if pool is not None else node.labels
        if reaches_node(constraints, labels, node.name):
            out.append((node, name))
    cache[key] = out
    return out


Sizes = tuple[dict[str, int], set[str], bool]


def _sizes(ctx: Context, constraints: Constraints, resource: str) -> Sizes | None:
    """The most of ``resource`` each pool (``pool <name>``) or node outside the pools that the
    pod can land on offers (those offering none left out), the pools among them, and whether a
    node outside the pools is; None when some node's size is unknown. Cached on the context."""
    cache = ctx.cache.setdefault("nvidia_sizes", {})
    key = (constraints.terms if constraints.present else None, resource)
    if key in cache:
        return cast(Sizes | None, cache[key])
    sizes: dict[str, int] = {}
    pools: set[str] = set()
    unpooled = False
    out: Sizes | None = None
    for node, pool in _reached(ctx, constraints):
        size = node_offers(ctx, node, resource)
        if size is None:
            break
        if size == 0:
            continue
        where = f"pool {pool}" if pool else node.name
        sizes[where] = max(sizes.get(where, 0), size)
        if pool:
            pools.add(pool)
        else:
            unpooled = True
    else:
        out = (sizes, pools, unpooled)
    cache[key] = out
    return out


def _check_capacity(em: Emitter, pod: PodLike, constraints: Constraints, ctx: Context) -> None:
    """``NVIDIA_EXCEEDS_NODE``: an effective request no node the pod can land on can ever hold
    (the scheduler's NodeResourcesFit: Insufficient <resource>). Only with the nodes known; a node
    of unknown size might hold it."""
    if not ctx.nodes:
        return
    requests = effective_requests(container_spec(pod.containers), _container_asks)
    wanted = {n: v for n, v in requests.items() if v > 0}
    if not wanted:
        return
    for resource, count in sorted(wanted.items()):
        sized = _sizes(ctx, constraints, resource)
        if sized is None:
            continue  # a node of unknown size might hold it
        sizes, pools, unpooled = sized
        most = max(sizes.values(), default=0)
        if count <= most or (not sizes and constraints.present):
            continue  # fits; or no node there offers it at all: the targeting rules say so
        verdict, note = pool_verdict(NVIDIA_EXCEEDS_NODE, ctx, pools, unpooled)
        if verdict is None:
            continue
        listed = ", ".join(f"{w} {n}" for w, n in sorted(sizes.items())[:5])
        more = f" and {len(sizes) - 5} more" if len(sizes) > 5 else ""
        case = "target" if constraints.present else ("anywhere" if sizes else "nowhere")
        shown = f"{listed}{more}" if case == "target" else (f" ({listed}{more})" if sizes else "")
        how = _mig_how(ctx, constraints, pools, resource, most) if case == "target" and not unpooled else None
        if how is not None:
            problem, fix = NVIDIA_EXCEEDS_NODE.text(
                "mig", count=count, resource=resource, most=most, pool=how[0], how=how[1], profile=how[2]
            )
        else:
            problem, fix = NVIDIA_EXCEEDS_NODE.text(
                case, count=count, resource=resource, most=most, sizes=shown
            )
        em.add(
            NVIDIA_EXCEEDS_NODE,
            container=None,
            field=f'{pod.path}.containers[*].resources.limits["{resource}"]',
            value=str(count),
            problem=problem,
            fix=fix,
            verdict=verdict,
            note=note,
        )


def _mig_how(
    ctx: Context, constraints: Constraints, pools: set[str], resource: str, most: int
) -> tuple[str, str, str] | None:
    """For a pod confined to one MIG pool with a geometry: the pool, how its largest node counts
    ``resource`` (:func:`.mig.size_words`) and the profile; else None."""
    if len(pools) != 1:
        return None
    (name,) = pools
    found = mig_rules.mig_of(ctx.pool(name))
    per_gpu = mig_rules.per_gpu(found, resource) if found is not None else None
    if found is None or per_gpu is None:
        return None
    for node, pool in _reached(ctx, constraints):
        gpus = _gpus(node)
        if pool == name and gpus is not None and mig_rules.node_size(found, resource, gpus) == most:
            return name, mig_rules.size_words(found, resource, gpus), per_gpu[1]
    return None


def _nvidia_suggest(ctx: Context, resource: str | None = None) -> str:
    pools = sorted(p.name for p in _nvidia_pools(ctx) if resource is not None and may_offer(p, resource))
    if not pools:
        return f"e.g. nodeSelector {{{c.LABEL_POOL}: <pool>}}"
    listed = ", ".join(pools)
    return f"e.g. nodeSelector {{{c.LABEL_POOL}: {pools[0]}}} (NVIDIA pools advertising {resource}: {listed})"


def evaluate_pod(em: Emitter, pod: PodLike, constraints: Constraints, ctx: Context) -> None:
    """The rules for a pod asking for NVIDIA's GPU resources and no ``aliyun.com/gpu*``:
    ``KIND_MISMATCH`` (confined to ACK pools, or to NVIDIA pools advertising the other resource),
    ``TARGET_UNKNOWN`` (``nvidia.com/gpu.shared`` that no pool or node it reaches advertises) and
    ``NVIDIA_MORE_THAN_ONE`` (more than one shared GPU where the plugin refuses it)."""
    _check_capacity(em, pod, constraints, ctx)
    asks = _nvidia_asks(pod)
    if not asks or not aimed(pod):
        return
    value = constraints.render() if constraints.present else None
    field = constraints.field
    wanted = {name for _, name, _, _ in asks}
    target = nvidia_target(constraints, ctx, frozenset(wanted)) if constraints.present else None
    if target is not None and target.unknown:
        return  # names a pool that cannot be resolved offline

    def emit(rule: AdmissionRule, problem: str, fix: str, verdict: Verdict, note: str) -> None:
        """A finding of the pod as a whole, on its node constraints."""
        em.add(
            rule,
            container=None,
            field=field,
            value=value,
            problem=problem,
            fix=fix,
            verdict=verdict,
            note=note,
        )

    nv_asker, resource = asks[0][0], asks[0][1]
    if target is not None and target.missing and not target.pools and not target.unconfined:
        # Aimed by name at pools that do not exist: no node carries the label.
        verdict, note = pool_verdict(TARGET_UNKNOWN, ctx, {p.name for p in ctx.pools}, False)
        if verdict:
            problem, fix = TARGET_UNKNOWN.text(
                "nvidia-pool-unknown",
                wanted=", ".join(sorted(target.missing)),
                known=", ".join(sorted(p.name for p in ctx.pools)),
                asker=nv_asker.display,
                suggestion=_nvidia_suggest(ctx, resource),
            )
            emit(TARGET_UNKNOWN, problem, fix, verdict, note)
        return
    # Confined to pools (or ACK-labelled nodes) none of which offers what the pod asks for.
    if target is not None and not target.unconfined and (target.pools or target.labels):
        confined = _nvidia_pools(ctx, target.pools)
        every_mig = len(confined) == len(target.pools) and all(mig_rules.mig_of(p) for p in confined)
        if confined and every_mig and not target.labels and mig_rules.check_offers(em, asks, confined, ctx):
            return  # a MIG device or whole GPU the MIG pools do not offer: their own rules said so
        offering = {p.name for p in _nvidia_pools(ctx, target.pools) if any(may_offer(p, r) for r in wanted)}
        if not offering:
            ack = {
                p.name: p.spec.mode
                for p in ctx.pools
                if p.name in target.pools and p.spec.mode != c.POOL_KIND_NVIDIA
            }
            nvidia = _nvidia_pools(ctx, target.pools)
            verdict, note = pool_verdict(KIND_MISMATCH, ctx, target.pools, not target.pools)
            if verdict and (ack or target.labels):
                kinds = sorted({*ack.values(), *target.labels})
                where = ", ".join(
                    [
                        *(f"pool {n}" for n in sorted(ack)),
                        *(f"{c.LABEL_SCHEDULE}={k} nodes" for k in sorted(target.labels)),
                    ]
                )
                problem, fix = KIND_MISMATCH.text(
                    "nvidia-on-ack",
                    where=where,
                    asker=nv_asker.display,
                    resource=resource,
                    kinds=", ".join(f"{k}: {KIND_TEXT[k]}" for k in kinds),
                    suggestion=_nvidia_suggest(ctx, resource),
                )
                emit(KIND_MISMATCH, problem, fix, verdict, note)
                return
            mig = next(((ref, n) for ref, n, _, _ in asks if n.startswith(c.RES_NVIDIA_MIG_PREFIX)), None)
            if verdict and nvidia and mig is not None:
                offered = sorted({r for p in nvidia for r in _resources_of(p)})
                by_mps = ", ".join(
                    p.name for p in nvidia if p.spec.nvidia and p.spec.nvidia.strategy == "MPS"
                )
                no_mps = "; NVIDIA's device plugin does not support MPS on MIG-enabled devices"
                problem, fix = KIND_MISMATCH.text(
                    "nvidia-mig",
                    where=f"pool {', '.join(p.name for p in nvidia)}",
                    asker=mig[0].display,
                    resource=mig[1],
                    why="; ".join(f"pool {p.name}: {_nvidia_why(p)}" for p in nvidia),
                    mps=f"{no_mps} (pool {by_mps})" if by_mps else "",
                    offered=" or ".join(offered),
                    suggestion=_nvidia_suggest(ctx, mig[1]),
                )
                emit(KIND_MISMATCH, problem, fix, verdict, note)
                return
            if verdict and nvidia:
                offered = sorted({r for p in nvidia for r in _resources_of(p)})
                why = "; ".join(f"pool {p.name}: {_nvidia_why(p)}" for p in nvidia)
                problem, fix = KIND_MISMATCH.text(
                    "nvidia-resource",
                    where=f"pool {', '.join(p.name for p in nvidia)}",
                    asker=nv_asker.display,
                    resource=resource,
                    offered=" or ".join(offered),
                    why=why,
                    suggestion=_nvidia_suggest(ctx, resource),
                )
                emit(KIND_MISMATCH, problem, fix, verdict, note)
                return
    # The NVIDIA pools each request can land on.
    reach: dict[str, list[GPUSharePool]] = {}
    if c.RES_NVIDIA_GPU_SHARED in wanted:
        # Only nodes that advertise nvidia.com/gpu.shared take the pod: the pools it can reach.
        shared = [
            p
            for p in _nvidia_pools(ctx)
            if p.spec.nvidia
            and p.spec.nvidia.resource == c.RES_NVIDIA_GPU_SHARED
            and reaches_pool(constraints, p, ctx)
        ]
        reach[c.RES_NVIDIA_GPU_SHARED] = shared
        in_pools = {p.name for p in shared}
        elsewhere = any(
            n.allocatable.get(c.RES_NVIDIA_GPU_SHARED) not in (None, "0")
            and ctx.node_pool.get(n.name) not in in_pools
            and reaches_node(constraints, n.labels, n.name)
            for n in ctx.nodes
        )
        if not shared and not elsewhere and (ctx.pools or ctx.nodes):
            nvidia = _nvidia_pools(ctx)
            verdict, note = pool_verdict(TARGET_UNKNOWN, ctx, {p.name for p in nvidia}, False)
            if verdict:
                sharer = next(ref for ref, name, _, _ in asks if name == c.RES_NVIDIA_GPU_SHARED)
                known = (
                    ", ".join(
                        p.name
                        for p in nvidia
                        if p.spec.nvidia and p.spec.nvidia.resource == c.RES_NVIDIA_GPU_SHARED
                    )
                    or "none"
                )
                problem, fix = TARGET_UNKNOWN.text(
                    "no-shared-pool",
                    asker=sharer.display,
                    known=known,
                    suggestion=_nvidia_suggest(ctx, c.RES_NVIDIA_GPU_SHARED),
                )
                em.add(
                    TARGET_UNKNOWN,
                    container=None,
                    field=field if constraints.present else f"{pod.constraints_path}.nodeSelector",
                    value=value,
                    problem=problem,
                    fix=fix,
                    verdict=verdict,
                    note=note,
                )
    if c.RES_NVIDIA_GPU in wanted and target is not None:
        reach[c.RES_NVIDIA_GPU] = [
            p
            for p in _nvidia_pools(ctx, target.confined)
            if p.spec.nvidia and p.spec.nvidia.resource == c.RES_NVIDIA_GPU
        ]
    for ref, name, where, amount in asks:
        if amount.value is None or amount.value <= 1:
            continue
        refusing = [
            p
            for p in reach.get(name, [])
            if p.spec.nvidia
            and p.spec.nvidia.strategy != "None"
            and (p.spec.nvidia.strategy == "MPS" or p.spec.nvidia.fail_requests_greater_than_one)
        ]
        if not refusing:
            continue
        names = {p.name for p in refusing}
        verdict, note = pool_verdict(NVIDIA_MORE_THAN_ONE, ctx, names, False)
        if not verdict:
            continue
        mps = [p.name for p in refusing if p.spec.nvidia and p.spec.nvidia.strategy == "MPS"]
        failing = [p for p in refusing if p.name not in mps]
        if failing:
            problem, fix = NVIDIA_MORE_THAN_ONE.text(
                "fail",
                count=amount.shown,
                pool=", ".join(p.name for p in failing),
                strategy=" / ".join(sorted({p.spec.nvidia.strategy for p in failing if p.spec.nvidia})),
                resource=name,
            )
        else:
            problem, fix = NVIDIA_MORE_THAN_ONE.text(
                "mps", count=amount.shown, pool=", ".join(mps), resource=name
            )
        em.add(
            NVIDIA_MORE_THAN_ONE,
            container=ref,
            field=f"{ref.path}.{resource_field(where, name)}",
            value=amount.shown,
            problem=problem,
            fix=fix,
            verdict=verdict,
            note=note,
        )


#: NVIDIA's pod rules, as ``gpushare.admission.rules`` drives them.
def check_kubernetes(em: Emitter, pod: PodLike) -> None:
    """``NVIDIA_QUANTITY`` on every container of a pod, whichever backend judges it (the
    apiserver refuses the Pod as much beside ``aliyun.com/gpu*`` as without)."""
    for ref in pod.containers:
        _check_kubernetes(em, ref)


POD_RULES = PodRules(name="nvidia", judges=judged_nvidia, evaluate=evaluate_pod, kubernetes=check_kubernetes)
