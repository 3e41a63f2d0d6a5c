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
        candidates = _pool_candidates(ctx)
        entries = _node_entries(ctx)
        for term in terms:
            named = bool(ctx.nodes) and names_nodes(term)
            for pool, cand in candidates:
                if not named and term_possible(term, cand):
                    _add(res.kinds, pool.spec.mode, pool.name)
            # The symbolic pool check already covers a switched node of a matched pool (its labels
            # are the pool's), so without node names only the others need a look.
            for entry in entries if named else _unsettled(ctx, entries):
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
    every label of the pool's nodeSelector, names nodes of pools, or pins ACK's
    ``ack.node.gpu.schedule`` to a sharing kind (``labels``: no pool, ACK-labelled nodes)."""

    #: The pools the confined terms reach.
    pools: set[str] = field(default_factory=set)
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


def nvidia_target(constraints: Constraints, ctx: Context) -> NvidiaTarget:
    """Where a pod asking for ``nvidia.com/gpu`` is aimed (:class:`NvidiaTarget`)."""
    out = NvidiaTarget()
    if not constraints.present:
        out.unconfined = True
        return out
    candidates = _pool_candidates(ctx)
    for term in constraints.terms:
        named = _named_pools(term, ctx)
        if named is not None:
            out.pools |= named[0]
            out.unconfined |= named[1]
            continue
        wanted = sel.pinned(term, c.LABEL_POOL)
        if wanted is not None:
            known = {p.name for p, cand in candidates if p.name in wanted and term_possible(term, cand)}
            out.pools |= known
            out.unknown |= not known and not ctx.pools
            if ctx.pools:
                out.missing |= {name for name in wanted if ctx.pool(name) is None}
            continue
        implied = {
            p.name
            for p, cand in candidates
            if p.spec.node_selector.requirements()
            and sel.implies(term, p.spec.node_selector.requirements())
            and term_possible(term, cand)
        }
        if implied:
            out.pools |= implied
            continue
        schedule = sel.pinned(term, c.LABEL_SCHEDULE)
        if schedule is not None and schedule and schedule <= set(KINDS):
            by_mode = {
                p.name for p, cand in candidates if p.spec.mode in schedule and term_possible(term, cand)
            }
            out.pools |= by_mode
            if not by_mode:
                out.labels |= schedule
            continue
        out.unconfined = True
    return out


def reaches_pool(constraints: Constraints, pool: GPUSharePool, ctx: Context) -> bool:
    """Whether a pod with these constraints can land on a node of ``pool`` (symbolically, as
    :func:`resolve` reaches pools; a pod without constraints reaches every pool)."""
    if not constraints.present:
        return True
    cand = next((cand for p, cand in _pool_candidates(ctx) if p.name == pool.name), None)
    if cand is None:
        return False
    return any(
        (not ctx.nodes or not names_nodes(term)) and term_possible(term, cand) for term in constraints.terms
    ) or any(
        (named := _named_pools(term, ctx)) is not None and pool.name in named[0] for term in constraints.terms
    )
