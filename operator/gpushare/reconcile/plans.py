"""The plan cache: each node's last plan, and which pools each plan concerns (membership).

``replan`` plans the store's dirty nodes (all of them after a pool change or a resync) with the
pure planner and returns the pools whose plans changed, for the caller to wake.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from datetime import datetime
from typing import Any

from gpushare import metrics
from gpushare.api.v1alpha1 import GPUSharePool
from gpushare.policy import NodePlan, NodeView
from gpushare.policy.decide import ORPHANS, related_pools
from gpushare.reconcile.store import ClusterState


class PlanCache:
    """Node plans and their membership index (pool -> nodes, node -> pools)."""

    def __init__(self) -> None:
        self.plans: dict[str, NodePlan] = {}
        self._related: dict[str, frozenset[str]] = {}
        self.members: dict[str, set[str]] = {}
        self.invalid_pools: Mapping[str, str] = {}
        #: The clock of the last ``replan`` and the nodes it planned with it (a confirmation with
        #: the same clock need not plan those again: the planner is pure and per node).
        self.planned_with: tuple[datetime | None, frozenset[str]] = (None, frozenset())

    def concerned(self, name: str, view: NodeView | None, models: Iterable[GPUSharePool]) -> set[str]:
        """Pools a change of node ``name`` may concern: those its last plan names, those selecting it."""
        out = set(self._related.get(name, ()))
        if view is not None:
            labels = dict(view.labels)
            out.update(m.name for m in models if m.spec.node_selector.matches(labels))
        return out

    def of_pool(self, name: str, *, orphans: bool) -> list[NodePlan]:
        """The plans related to pool ``name`` (with ``orphans``, also those of vanished pools)."""
        names = set(self.members.get(name, ()))
        if orphans:
            names |= self.members.get(ORPHANS, set())
        return [self.plans[n] for n in names if n in self.plans]

    def put(self, p: NodePlan, live: Collection[str]) -> frozenset[str]:
        """Store ``p``; returns the pools to wake (those it concerned or concerns, if it changed)."""
        old = self.plans.get(p.node)
        self.plans[p.node] = p
        new_rel = related_pools(p, live)
        old_rel = self._related.get(p.node, frozenset())
        if new_rel != old_rel:
            for pool in old_rel - new_rel:
                members = self.members.get(pool)
                if members is not None:
                    members.discard(p.node)
            for pool in new_rel - old_rel:
                self.members.setdefault(pool, set()).add(p.node)
            self._related[p.node] = new_rel
        return old_rel | new_rel if old != p else frozenset()

    def drop(self, name: str) -> frozenset[str]:
        """Forget node ``name``'s plan; returns the pools it concerned."""
        self.plans.pop(name, None)
        related = self._related.pop(name, frozenset())
        for pool in related:
            self.members.get(pool, set()).discard(name)
        return related

    def replan(self, state: ClusterState, now: datetime) -> tuple[int, set[str]]:
        """Plan the dirty nodes (every node after a pool change or resync): (how many, pools to wake)."""
        if state.plan_all:
            names = set(state.nodes) | set(self.plans) | set(state.fresh)
            state.plan_all = False
            state.dirty = set()
            self.members = {}
            self._related = {}
        else:
            names, state.dirty = state.dirty, set()
        wake: set[str] = set()
        if not names:
            self.planned_with = (now, frozenset())
            return 0, wake
        views = [v for v in (state.view(n) for n in names) if v is not None]
        cp = state.plan_nodes(views, now)
        self.planned_with = (now, frozenset(v.name for v in views))
        self.invalid_pools = cp.invalid_pools
        live = state.live()
        for p in cp.nodes:
            wake |= self.put(p, live)
        for name in names - {v.name for v in views}:
            wake |= self.drop(name)
        metrics.PLANNED_NODES.inc(len(views))
        return len(views), wake

    def remember(self, state: ClusterState, obj: Mapping[str, Any] | None, now: datetime) -> frozenset[str]:
        """Believe our own write (the returned node) and plan it again; returns the pools to wake."""
        view = state.believe(obj)
        if view is None:
            return frozenset()
        wake: frozenset[str] = frozenset()
        live = state.live()
        for p in state.plan_nodes([view], now).nodes:
            wake |= self.put(p, live)
        return wake
