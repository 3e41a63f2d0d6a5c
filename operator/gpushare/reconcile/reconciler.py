"""The operator's reconciler: the observed state, the plan cache, the writes, and the passes.

The Kopf handlers (``gpushare.handlers``) push every Node, GPU/plugin Pod and pool change in
(``observe_node``, ``observe_pod``, ``set_pools``); a change marks the node dirty and wakes only
the pools it concerns (their selector matches the node, or the node's last plan names them:
owner, conflict, restart owed). ``run_pass`` then runs one pass of a pool
(``gpushare.reconcile.passes``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from gpushare import metrics
from gpushare.backends import BACKENDS
from gpushare.backends.nvidia.configmap import KEEP_UNUSED
from gpushare.k8s.cluster import pool_ref
from gpushare.k8s.cluster_api import ClusterAPI
from gpushare.policy import ClusterPlan, NodePlan, NodeView, PodView
from gpushare.policy.decide import ORPHANS, orphan_owner
from gpushare.policy.events import Event
from gpushare.policy.restart import is_plugin_pod
from gpushare.reconcile import passes
from gpushare.reconcile.calls import PassCalls
from gpushare.reconcile.memory import ReportMemory, RestartMemory
from gpushare.reconcile.plans import PlanCache
from gpushare.reconcile.scope import Effects, PassResult
from gpushare.reconcile.store import ClusterState


class Reconciler:
    """Long-lived parts of the reconciler (all rebuilt from the watches after a restart)."""

    def __init__(
        self,
        cluster: ClusterAPI,
        *,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        config_retention: timedelta = KEEP_UNUSED,
    ) -> None:
        self.clock = clock
        self.state = ClusterState()
        self.cache = PlanCache()
        self.writes = PassCalls(cluster)
        self.restarts = RestartMemory()
        self.reports: dict[str, ReportMemory] = {}
        self.wakeups: dict[str, asyncio.Event] = {}
        self.parts = passes.Parts(
            self.state, self.cache, self.writes, self.restarts, self.reports, config_retention
        )

    # --- what tests and the watches read ---------------------------------------------------------

    @property
    def nodes(self) -> Mapping[str, NodeView]:
        return self.state.nodes

    @property
    def pods(self) -> Mapping[str, Mapping[str, PodView]]:
        return self.state.pods

    @property
    def dirty(self) -> set[str]:
        return self.state.dirty

    @property
    def plans(self) -> Mapping[str, NodePlan]:
        return self.cache.plans

    # --- wake-ups (set by observed changes, awaited by the pool loops) ---------------------------

    def wakeup(self, pool: str) -> asyncio.Event:
        return self.wakeups.setdefault(pool, asyncio.Event())

    def wake_all(self) -> None:
        for event in self.wakeups.values():
            event.set()

    def wake(self, pools: Iterable[str], *, but: str | None = None) -> None:
        """Wake ``pools`` (``ORPHANS``: the pool acting on vanished pools' nodes), not ``but``."""
        for pool in pools:
            target = orphan_owner(self.state.live()) if pool == ORPHANS else pool
            if target is not None and target != but and target in self.wakeups:
                self.wakeups[target].set()

    def _marked(self, names: Iterable[str]) -> None:
        for name in names:
            view = self.state.view(name)
            self.wake(self.cache.concerned(name, view, self.state.pools.models))

    # --- observe: the watches --------------------------------------------------------------------

    def observe_node(self, view: NodeView) -> None:
        """A node as the watch shows it (added or modified)."""
        for backend in BACKENDS.values():
            if (seen := backend.switch_seen(view.labels, view.annotations, view.label_times)) is not None:
                self.state.note_switch(view, seen)
        if self.state.observe_node(view):
            self._marked([view.name])

    def echo(self, name: str, resource_version: str | None) -> NodeView | None:
        """Our own write of node ``name`` if ``resource_version`` is its version (the watch's echo
        of it: the same object, so its projection need not be made again)."""
        return self.state.echo(name, resource_version)

    def apply(self, pool: str, effects: Effects) -> None:
        """What a phase of ``pool``'s pass left: nodes to plan again, nodes gone, pools to wake."""
        self.state.dirty.update(effects.dirty)
        for node in sorted(effects.gone):
            self.forget_node(node)
        self.wake(effects.wake, but=pool)

    def forget_node(self, name: str) -> None:
        view = self.state.forget_node(name)
        self.wake(self.cache.concerned(name, view, self.state.pools.models))

    def nodes_listed(self, names: Collection[str]) -> None:
        """A complete list of the nodes: forget those not in it."""
        for name in self.state.missing_nodes(names):
            self.forget_node(name)

    def observe_pod(self, pod: PodView) -> None:
        """A GPU or device plugin pod as the watch shows it."""
        self._marked(self.state.observe_pod(pod))

    def forget_pod(self, key: str) -> None:
        self._marked(self.state.forget_pod(key))

    def pods_listed(self, keys: Collection[str]) -> None:
        """A complete list of the pods kept: forget those not in it."""
        for key in self.state.missing_pods(keys):
            self.forget_pod(key)

    def set_pools(self, bodies: Iterable[Mapping[str, Any]]) -> None:
        """The pools as the watch shows them; a spec or deletion change plans every node again.

        A pool gone from the watch loses its gauges here too: one deleted without our finalizer
        (never added, e.g. the finalizer patch was refused) has no cleanup pass to forget them, and
        its last values (Conflict=1) would keep an alert active for a pool that no longer exists."""
        before = set(self.state.bodies)
        if self.state.set_pools(bodies):
            self.wake_all()
        for gone in sorted(before - set(self.state.bodies)):
            metrics.forget_pool(gone)

    # --- the one model, as the demand loop reads it (``demand_loop.Model``) -----------------------

    def node_views(self) -> dict[str, NodeView]:
        """Every node as last seen, our own newer writes in place of the watch's."""
        return {**self.state.nodes, **self.state.fresh}

    def view(self, name: str) -> NodeView | None:
        return self.state.view(name)

    def generation(self) -> int:
        """Moves whenever a node, pod or pool the store keeps changed."""
        return self.state.generation

    def gpu_pods(self) -> list[PodView]:
        """The unfinished GPU-sharing pods bound to a node (not the device plugin pods)."""
        return [
            pod
            for on_node in self.state.pods.values()
            for pod in on_node.values()
            if not pod.terminated and not is_plugin_pod(pod.labels)
        ]

    def plans_now(self, now: datetime) -> ClusterPlan:
        """Every node's plan as of ``now``: the nodes that changed planned again (the pools whose
        plans changed are woken), the others as last planned. One plan cache serves the passes
        and the demand loop."""
        _count, wake = self.cache.replan(self.state, now)
        self.wake(wake)
        plans = self.cache.plans
        return ClusterPlan(
            nodes=tuple(plans[n] for n in sorted(plans)), invalid_pools=self.cache.invalid_pools
        )

    def remember(self, obj: Mapping[str, Any] | None, now: datetime) -> None:
        """Believe a write of ours made outside a pass (a loan) until the watch shows it."""
        self.wake(self.cache.remember(self.state, obj, now))

    # --- passes ----------------------------------------------------------------------------------

    async def run_pass(self, name: str, *, resync: bool = False) -> PassResult:
        """One pass of pool ``name`` over what the watches delivered (``resync``: plan every node)."""
        started = time.monotonic()
        result_label = "ok"
        if resync:
            self.state.plan_all = True
        try:
            return await passes.run_pass(self.parts, name, self.clock(), self.apply)
        except Exception:
            result_label = "error"
            raise
        finally:
            metrics.RECONCILE_SECONDS.labels(pool=name, result=result_label).observe(
                time.monotonic() - started
            )

    def forget(self, pool: str) -> None:
        self.wakeups.pop(pool, None)
        self.writes.forget(pool)
        self.reports.pop(pool, None)
        metrics.forget_pool(pool)

    async def cleanup_done(self, name: str, uid: str | None) -> None:
        await self.writes.post(
            pool_ref(name, uid), [Event("CleanupDone", f"Nodes of GPUSharePool {name} cleaned up")]
        )
        self.forget(name)
