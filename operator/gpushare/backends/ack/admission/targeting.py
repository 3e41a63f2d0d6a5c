"""Which GPU-sharing pools (and which kinds of pool) a pod can land on, by ACK's labels.

A pod's node constraints (:func:`gpushare.rulekit.constraints.node_constraints`) are resolved
three ways, most precise first:

1. against every known pool: a node of the pool carries the labels the pool's ``nodeSelector``
   requires plus the labels the operator writes (:func:`pool_node_labels`: the pool's backend's
   ``labels_for`` and ``gpushare.io/pool``); labels the pod asks for that neither fixes are
   assumed possible;
2. against every known node: its current labels, and the labels it will carry once its pool is applied
   (a term naming nodes, by ``kubernetes.io/hostname`` or ``matchFields`` ``metadata.name``, is
   resolved by the known nodes alone);
3. when neither pools nor nodes are known (or nothing matched), from the ACK labels alone:
   ``ack.node.gpu.schedule`` decides when the pod constrains it; otherwise
   ``cgpu.disable.isolation=false`` means the ``cgpu`` kind and ``true`` the ``share`` kind
   (ACK's node-pool convention); ``cgpu=true`` alone or unrelated labels allow every kind.
   With the nodes known (the webhook watches them all) that is only a diagnosis: no pool will make
   such a node and no node is one, so the pod could never be scheduled (source ``unmatched``).

An NVIDIA pool is the kind ``nvidia`` (its ``spec.mode``) among ACK's; where a pod asking for
NVIDIA's resources is aimed is :func:`nvidia_target`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import cast

from gpushare import constants as c
from gpushare.api import selector as sel
from gpushare.api.selector import Term, term_possible
from gpushare.api.v1alpha1 import GPUSharePool
from gpushare.backends import backend_for
from gpushare.rulekit.constraints import Constraints, exact, identity_only, names_nodes
from gpushare.rulekit.model import Context

#: The kinds of GPU-sharing pool, i.e. the ``ack.node.gpu.schedule`` value of their nodes.
KINDS: tuple[str, ...] = (c.SCHEDULE_CGPU, c.SCHEDULE_SHARE, c.SCHEDULE_CORE_MEM)
#: ACK sharing modes outside the pool API: pods aimed at them are not judged by the pool rules.
UNMANAGED_SHARING_MODES: tuple[str, ...] = ("mps",)
KIND_TEXT: dict[str, str] = {
    c.SCHEDULE_CGPU: "memory isolation, no compute allocation",
    c.SCHEDULE_SHARE: "no isolation",
    c.SCHEDULE_CORE_MEM: "compute allocation",
    c.POOL_KIND_NVIDIA: f"NVIDIA's device plugin, {c.RES_NVIDIA_GPU} or {c.RES_NVIDIA_GPU_SHARED}",
}


def pool_node_labels(pool: GPUSharePool) -> dict[str, str]:
    """The labels the operator puts on every node of ``pool``: its backend's and ``gpushare.io/pool``
    (the planner's label mapping)."""
    return {**backend_for(pool.spec).labels_for(pool.spec), c.LABEL_POOL: pool.name}


def pool_candidate(pool: GPUSharePool) -> dict[str, frozenset[str] | None]:
    """What is known about the labels of any node of ``pool``."""
    out = sel.candidate(pool.spec.node_selector.requirements())
    for key, value in pool_node_labels(pool).items():
        out[key] = frozenset((value,))
    return out


def node_kind(labels: Mapping[str, str]) -> str | None:
    """The GPU-sharing kind a node's current ACK labels give it, or None for a non-sharing node."""
    schedule = labels.get(c.LABEL_SCHEDULE)
    if schedule in KINDS:
        return schedule
    if schedule is None and labels.get(c.LABEL_CGPU) == "true":
        return c.SCHEDULE_SHARE if labels.get(c.LABEL_DISABLE_ISOLATION) == "true" else c.SCHEDULE_CGPU
    return None


def _requires_pool_label(term: Term) -> bool:
    return any(r.key == c.LABEL_POOL and r.operator in ("In", "Exists") and not r.is_field for r in term)


def label_kinds(term: Term) -> set[str] | None:
    """Kinds a term allows by the ACK labels alone; None when it names a pool that cannot be resolved."""
    by_isolation: set[str] = set()
    if sel.constrains(term, c.LABEL_DISABLE_ISOLATION):
        allowed = sel.allowed(term, c.LABEL_DISABLE_ISOLATION, ("false", "true"))
        if "false" in allowed:
            by_isolation.add(c.SCHEDULE_CGPU)
        if "true" in allowed:
            by_isolation.add(c.SCHEDULE_SHARE)
    else:
        by_isolation = {c.SCHEDULE_CGPU, c.SCHEDULE_SHARE}
    if c.LABEL_CGPU in {r.key for r in term} and "true" not in sel.allowed(term, c.LABEL_CGPU, ("true",)):
        by_isolation = set()
    pinned = sel.pinned(term, c.LABEL_SCHEDULE)
    if pinned is not None and pinned & set(UNMANAGED_SHARING_MODES):
        return (
            None  # ACK's mps nodes: GPU sharing gpushare does not manage or judge (docs/security.md: Limits)
        )
    if sel.constrains(term, c.LABEL_SCHEDULE):
        allowed_sched = sel.allowed(term, c.LABEL_SCHEDULE, (*KINDS, None))
        kinds = {k for k in allowed_sched if k is not None}
        if None in allowed_sched:
            kinds |= by_isolation
        return kinds
    if sel.constrains(term, c.LABEL_DISABLE_ISOLATION):
        return by_isolation
    if sel.constrains(term, c.LABEL_POOL):
        return None
    return set(KINDS)


@dataclass
class Resolution:
    """Where a pod can land. ``kinds`` maps a kind to the pools of that kind it can reach."""

    constraints: Constraints
    kinds: dict[str, set[str]] = field(default_factory=dict)
    #: True when some kind was reached through nodes outside any pool or through labels alone.
    unpooled: bool = False
    #: "cluster" (pools/nodes), "labels" (ACK labels alone), "unknown" (a pool name we cannot resolve),
    #: "none" (nothing matched), "unmatched" (ACK labels of one kind that no known pool or node
    #: has, with the nodes known), "missing" (no constraints at all).
    source: str = "cluster"

    @property
    def pools(self) -> set[str]:
        return set().union(*self.kinds.values()) if self.kinds else set()

    def describe(self) -> str:
        parts = []
        for kind in sorted(self.kinds):
            pools = sorted(self.kinds[kind])
            where = f"pool {', '.join(pools)}" if pools else "ACK-labelled nodes"
            parts.append(f"{kind} ({where})")
        return ", ".join(parts)


def _add(kinds: dict[str, set[str]], kind: str, pool: str | None) -> None:
    kinds.setdefault(kind, set())
    if pool is not None:
        kinds[kind].add(pool)


def resolve(constraints: Constraints, ctx: Context) -> Resolution:
    """Resolve a pod's constraints against the context (see the module docstring)."""
    if not constraints.present:
        return Resolution(constraints, source="missing")
    res = Resolution(constraints)
    # Without nodes, a term that only names nodes (nodeName, hostname) says nothing about the kind.
    opaque = [t for t in constraints.terms if not ctx.nodes and names_nodes(t) and identity_only(t)]
    terms = [t for t in constraints.terms if not any(t is o for o in opaque)]
    if ctx.pools or ctx.nodes:
        entries = _node_entries(ctx)
        for term in terms:
            for name in reachable_pools(term, ctx):
                pool = ctx.pool(name)
                if pool is not None:
                    _add(res.kinds, pool.spec.mode, name)
            # The pools' own nodes are judged by reachable_pools (with the pool's labels applied);
            # what remains is the nodes sharing GPUs today as another kind, or outside every pool.
            for entry in _unsettled(ctx, entries):
                _resolve_node(term, entry, res)
        if res.kinds:
            return res
    unknown = bool(opaque)
    kinds: set[str] = set()
    for term in terms:
        if ctx.nodes and names_nodes(term):
            continue  # the named nodes are known, and none of them shares GPUs this way
        if _requires_pool_label(term) and (ctx.pools or ctx.nodes):
            continue  # only nodes of a known pool carry gpushare.io/pool, and none matched
        if any(sel.implies(term, p.spec.node_selector.requirements()) for p in ctx.pools):
            continue  # the nodes it names are a pool's nodes, and the pool's labels contradict it
        found = label_kinds(term)
        if found is None:
            unknown = True
        else:
            kinds |= found
    if not kinds and unknown:
        return Resolution(constraints, source="unknown")
    if (ctx.pools or ctx.nodes) and len(kinds) != 1:
        return Resolution(constraints, source="none")
    if not kinds:
        return Resolution(constraints, source="none")
    if ctx.nodes:
        # Every node is known and none has (or will have, through a pool) these labels.
        return Resolution(constraints, {k: set() for k in kinds}, unpooled=True, source="unmatched")
    return Resolution(constraints, {k: set() for k in kinds}, unpooled=True, source="labels")


@dataclass(frozen=True)
class _NodeEntry:
    """A node that can take GPU-sharing pods: in a pool, or sharing by its current ACK labels."""

    name: str
    pool: GPUSharePool | None
    current: Mapping[str, frozenset[str] | None]
    effective: Mapping[str, frozenset[str] | None] | None
    kind: str | None


def _node_entries(ctx: Context) -> list[_NodeEntry]:
    """Per-context precomputation (cached on the context: the webhook reuses contexts)."""
    cached = ctx.cache.get("node_entries")
    if cached is not None:
        return cast(list[_NodeEntry], cached)
    out = []
    for node in ctx.nodes:
        pool_name = ctx.node_pool.get(node.name)
        pool = ctx.pool(pool_name) if pool_name else None
        kind = node_kind(node.labels)
        if pool is None and kind is None:
            continue
        effective = exact({**node.labels, **pool_node_labels(pool)}) if pool is not None else None
        out.append(_NodeEntry(node.name, pool, exact(node.labels), effective, kind))
    ctx.cache["node_entries"] = out
    return out


def _unsettled(ctx: Context, entries: list[_NodeEntry]) -> list[_NodeEntry]:
    """Nodes sharing GPUs today outside every pool, or as another kind than their pool's.

    A pool node without sharing labels yet adds nothing here: its future labels are the pool's,
    which the symbolic pool check already covers.
    """
    cached = ctx.cache.get("unsettled")
    if cached is None:
        cached = ctx.cache["unsettled"] = [
            e for e in entries if e.kind is not None and (e.pool is None or e.kind != e.pool.spec.mode)
        ]
    return cast(list[_NodeEntry], cached)


def _pool_members(ctx: Context) -> dict[str, list[tuple[str, dict[str, frozenset[str] | None]]]]:
    """pool name -> its known nodes, each with the labels it carries once the pool's are applied."""
    cached = ctx.cache.get("pool_members")
    if cached is None:
        cached = {}
        for node in ctx.nodes:
            name = ctx.node_pool.get(node.name)
            pool = ctx.pool(name) if name else None
            if pool is not None:
                labels = exact({**node.labels, **pool_node_labels(pool)})
                cached.setdefault(pool.name, []).append((node.name, labels))
        ctx.cache["pool_members"] = cached
    return cast(dict[str, list[tuple[str, dict[str, frozenset[str] | None]]]], cached)


def reachable_pools(term: Term, ctx: Context) -> frozenset[str]:
    """The pools a pod's constraint term can land on, one rule for every backend: a pool is reached
    when the term can match one of its nodes, judged on its known nodes (their labels with the
    pool's applied: exactly, names included) when it has any, on its selector otherwise (the
    pool's candidate labels, anything it does not fix assumed possible; a term naming nodes, with
    the nodes known, reaches no pool without known nodes). Cached on the context per term (the
    webhook reuses a context until pools or nodes change)."""
    cache = ctx.cache.setdefault("reach", {})
    hit = cache.get(term)
    if hit is not None:
        return cast(frozenset[str], hit)
    members = _pool_members(ctx)
    named = bool(ctx.nodes) and names_nodes(term)
    out = set()
    for pool, cand in _pool_candidates(ctx):
        nodes = members.get(pool.name)
        if nodes:
            if any(term_possible(term, labels, exact=True, name=name) for name, labels in nodes):
                out.add(pool.name)
        elif not named and term_possible(term, cand):
            out.add(pool.name)
    found = cache[term] = frozenset(out)
    return found


def _pool_candidates(ctx: Context) -> list[tuple[GPUSharePool, dict[str, frozenset[str] | None]]]:
    cached = ctx.cache.get("pool_candidates")
    if cached is None:
        cached = ctx.cache["pool_candidates"] = [(p, pool_candidate(p)) for p in ctx.pools]
    return cast(list[tuple[GPUSharePool, dict[str, frozenset[str] | None]]], cached)


def _resolve_node(term: Term, entry: _NodeEntry, res: Resolution) -> None:
    pool = entry.pool
    if (
        pool is not None
        and entry.effective is not None
        and term_possible(term, entry.effective, exact=True, name=entry.name)
    ):
        _add(res.kinds, pool.spec.mode, pool.name)  # once the pool's labels are applied
    kind = entry.kind
    if kind is not None and term_possible(term, entry.current, exact=True, name=entry.name):
        # As labelled today (a node of a pool may not have been switched yet).
        if pool is not None and kind == pool.spec.mode:
            _add(res.kinds, kind, pool.name)
        else:
            _add(res.kinds, kind, None)
            res.unpooled = True


def pools_of_kind(ctx: Context, kinds: Sequence[str]) -> list[str]:
    return sorted(p.name for p in ctx.pools if p.spec.mode in kinds)


# --- NVIDIA's resources ---------------------------------------------------------------------------


@dataclass
class NvidiaTarget:
    """Where a pod asking for NVIDIA's GPU resources is aimed.

    ``nvidia.com/gpu`` is offered by every whole-GPU node, so such a pod is aimed at a pool only
    when its constraints confine it there: each term names the pool (``gpushare.io/pool``), pins
    every label of the pool's nodeSelector, names nodes of pools, pins ACK's
    ``ack.node.gpu.schedule`` to a sharing kind (``labels``: no pool, ACK-labelled nodes), or, with
    the nodes known, can match no node outside the pools that advertises what the pod asks for."""

    #: The pools the terms reach (:func:`reachable_pools`).
    pools: set[str] = field(default_factory=set)
    #: The pools the terms confined to pools reach (a term that may land elsewhere left out).
    confined: set[str] = field(default_factory=set)
    #: ACK sharing kinds pinned by ``ack.node.gpu.schedule`` in terms that reach no pool.
    labels: set[str] = field(default_factory=set)
    #: Some term is not confined to pools: the pod may land on any GPU node.
    unconfined: bool = False
    #: Some term names a pool that is not known (offline): nothing can be judged.
    unknown: bool = False
    #: Pool names the terms ask for that no known pool has (with pools known).
    missing: set[str] = field(default_factory=set)


def _named_pools(term: Term, ctx: Context) -> tuple[set[str], bool] | None:
    """The pools of the known nodes a term names (and whether one of them is in no pool), or None
    when the term names no nodes (or the nodes are unknown)."""
    if not ctx.nodes or not names_nodes(term):
        return None
    pools: set[str] = set()
    loose = False
    for node in ctx.nodes:
        if term_possible(term, exact(node.labels), exact=True, name=node.name):
            pool = ctx.node_pool.get(node.name)
            if pool is None:
                loose = True
            else:
                pools.add(pool)
    return pools, loose


def _loose_offer(term: Term, ctx: Context, resources: frozenset[str]) -> bool:
    """Whether a known node outside every pool that the term can match advertises one of
    ``resources`` (a node whose allocatable does not could never hold the pod). Cached on the
    context per term and resources."""
    cache = ctx.cache.setdefault("loose_offer", {})
    hit = cache.get((term, resources))
    if hit is not None:
        return bool(hit)
    pooled = ctx.node_pool
    found = cache[term, resources] = any(
        node.name not in pooled
        and any(node.allocatable.get(r) not in (None, "0") for r in resources)
        and term_possible(term, exact(node.labels), exact=True, name=node.name)
        for node in ctx.nodes
    )
    return found


def nvidia_target(
    constraints: Constraints, ctx: Context, resources: frozenset[str] = frozenset((c.RES_NVIDIA_GPU,))
) -> NvidiaTarget:
    """Where a pod asking for NVIDIA's ``resources`` is aimed (:class:`NvidiaTarget`): the pools each
    term reaches (:func:`reachable_pools`, the one targeting of every backend), and whether the
    term may land elsewhere. A term is confined to pools when it names them (``gpushare.io/pool``),
    pins every label of a pool's nodeSelector, pins ACK's schedule label to sharing kinds, names
    nodes of pools, or, with the nodes known, no known node outside the pools that it can match
    advertises what the pod asks for."""
    out = NvidiaTarget()
    if not constraints.present:
        out.unconfined = True
        return out
    for term in constraints.terms:
        named = _named_pools(term, ctx)
        if named is not None:
            out.pools |= named[0]
            if named[1]:
                out.unconfined = True
            else:
                out.confined |= named[0]
            continue
        reach = reachable_pools(term, ctx)
        wanted = sel.pinned(term, c.LABEL_POOL)
        if wanted is not None:
            known = {name for name in reach if name in wanted}
            out.pools |= known
            out.confined |= known
            out.unknown |= not known and not ctx.pools
            if ctx.pools:
                out.missing |= {name for name in wanted if ctx.pool(name) is None}
            continue
        schedule = sel.pinned(term, c.LABEL_SCHEDULE)
        if schedule is not None and schedule and schedule <= set(KINDS):
            # ACK's sharing nodes: the pools of those kinds it reaches, else ACK-labelled nodes.
            by_mode = {p.name for p in ctx.pools if p.name in reach and p.spec.mode in schedule}
            out.pools |= by_mode
            out.confined |= by_mode
            if not by_mode:
                out.labels |= schedule
            continue
        out.pools |= reach
        if any(
            p.spec.node_selector.requirements() and sel.implies(term, p.spec.node_selector.requirements())
            for p in ctx.pools
            if p.name in reach
        ) or (ctx.nodes and not _loose_offer(term, ctx, resources)):
            # Confined: every node it can land on (that could hold the pod) is a pool's.
            out.confined |= reach
            continue
        out.unconfined = True
    return out


def reaches_pool(constraints: Constraints, pool: GPUSharePool, ctx: Context) -> bool:
    """Whether a pod with these constraints can land on a node of ``pool`` (:func:`reachable_pools`;
    a pod without constraints reaches every pool)."""
    if not constraints.present:
        return True
    return any(pool.name in reachable_pools(term, ctx) for term in constraints.terms)
