"""Reconcile passes for GPUSharePools whose cost follows the change: observe → decide → apply → report.

The Kopf handlers (``gpushare.handlers``) push every Node, GPU/plugin Pod and pool change into
:class:`Reconciler` (``observe_node``, ``observe_pod``, ``set_pools``); a change marks the node
*dirty* and wakes only the pools it concerns (their selector matches the node, or the node's
last plan names them: owner, conflict, restart owed). A pool's pass then

1. **observes**: plans the dirty nodes only (the pure planner, fed just those nodes) and keeps
   the plans in a cache with each pool's members; a pool change or the periodic resync plans all;
2. **decides** (``gpushare.policy.decide``, pure): the patches for this pass (rollout budget),
   evictions, and what waits;
3. **applies**: patches stream out with a bound on writes in flight shared by all pools; a node
   another pass is writing is skipped (that claim is the only shared step, there is no global
   lock); a 409 replans that node alone; plugin restarts move on;
4. **reports**: the status (at most about once a second per pool, only when it changed), Events
   aggregated per batch, one info log line per batch (per node at debug).

The operator's own writes are believed (an overlay of the returned nodes) until the watch shows
them; the watch's echo of its own write is recognised and plans nothing. Everything it needs
after a restart is on the nodes: owed plugin restarts (``gpushare.io/plugin-restart``), cordons
it made (``gpushare.io/cordoned-by``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import structlog
from kubernetes_asyncio.client.exceptions import ApiException

from gpushare import constants as c
from gpushare import metrics
from gpushare.api.v1alpha1 import (
    DevicePlugin,
    GPUSharePool,
    GPUSharePoolSpec,
    GPUSharePoolStatus,
    ObjectMeta,
    PoolValidationError,
    parse_pool,
)
from gpushare.k8s.api import ClusterAPI
from gpushare.k8s.cluster import PluginPod, node_ref, pool_ref
from gpushare.k8s.retry import ApiUnavailable
from gpushare.policy import Action, ClusterPlan, NodePlan, NodeView, PodView, RestartRecord, plan
from gpushare.policy import conditions as reasons
from gpushare.policy.decide import (
    FAST_REQUEUE,
    ORPHANS,
    RESYNC,
    WAIT_REQUEUE,
    decide,
    related_pools,
    restarts_owed,
    settle,
)
from gpushare.policy.planner import RestartState, restart_outcome_patch
from gpushare.policy.rollout import disrupts
from gpushare.policy.status import awaiting_plugin_mode, pool_status, status_merge_patch

log = structlog.stdlib.get_logger("gpushare.reconciler")

__all__ = [
    "FAST_REQUEUE",
    "RESYNC",
    "WAIT_REQUEUE",
    "PassResult",
    "Pools",
    "Reconciler",
    "parse_pools",
    "pod_key",
]

#: Node writes (patches, plugin pod deletes) in flight at once, per pool (so that pools never
#: queue behind each other). 64, as the plain loop of bench/bench_operator.py (docs/operator.md).
WRITE_CONCURRENCY = 64

T = TypeVar("T")


async def for_each(
    items: Sequence[T], step: Callable[[T], Awaitable[None]], workers: int = WRITE_CONCURRENCY
) -> None:
    """``step`` over ``items``, ``workers`` at a time, by that many tasks rather than one task per
    item (at 5000 nodes, 5000 tasks waiting on the write bound were megabytes of peak memory).

    The first step runs alone (up to ``LEAD_ALONE`` seconds): on a cold client it opens one
    connection and answers, instead of queueing behind ``workers`` TLS handshakes at once (the
    first node write of a 1000-node pool came 0.9 s after the pass began, now one round trip)."""
    todo = iter(items)
    answered = asyncio.Event()

    async def worker() -> None:
        for item in todo:
            await step(item)
            answered.set()

    async def others(n: int) -> None:
        if n <= 0:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(answered.wait(), LEAD_ALONE)
        await asyncio.gather(*(worker() for _ in range(n)))

    await asyncio.gather(worker(), others(min(workers, len(items)) - 1))


#: How long the first write of a batch runs alone before the others start anyway (``for_each``).
LEAD_ALONE = 1.0


#: At most this many nodes about to switch mode are confirmed with a targeted pod list each
#: (``spec.nodeName``) before the write; above it the GPU-pod index is trusted (never a list of
#: every pod of the cluster).
PER_NODE_LISTS = 8
#: A node patch refused with 409 (the node changed) is read, planned and sent again this often.
PATCH_ATTEMPTS = 3
#: Seconds between two status writes of one pool while it changes.
STATUS_INTERVAL = 1.0
#: A restart owed from before this replica started moving restarts (another replica, or this
#: operator before a restart, wrote it) may have had its plugin pod deleted just before that
#: replica stopped. With no plugin pod on the node, wait this long after taking over for the
#: DaemonSet to create the new one before recording "no device plugin pod" (it is never
#: recorded as such for a node whose pod we deleted ourselves).
PLUGIN_RECREATE_GRACE = timedelta(seconds=30)
_LIST_MAX = 8


def _rv(value: str) -> int:
    try:
        return int(value)
    except ValueError:
        return -1


def _names(items: Sequence[str]) -> str:
    shown = ", ".join(items[:_LIST_MAX])
    return shown + (f" and {len(items) - _LIST_MAX} more" if len(items) > _LIST_MAX else "")


def _parse_time(value: str) -> datetime | None:
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def pod_key(pod: PodView) -> str:
    """How the reconciler keys a pod (uid, or namespace/name without one)."""
    return pod.uid or f"{pod.namespace}/{pod.name}"


@dataclass
class PassResult:
    """What one pass did and what it still waits for."""

    pool: str
    #: True when nothing is left for this pool: no node to restore, restart owed or node held.
    done: bool = True
    requeue: float = RESYNC
    patched: int = 0
    #: Patches refused because the node had changed since it was planned (planned again next pass).
    conflicts: int = 0
    errors: dict[str, str] = field(default_factory=dict)
    summary: str = ""


@dataclass
class Pools:
    models: list[GPUSharePool]
    raw: dict[str, Mapping[str, Any]]
    invalid: dict[str, str]
    deleting: set[str]


def parse_pools(raw_pools: Iterable[Mapping[str, Any]]) -> Pools:
    models: list[GPUSharePool] = []
    raw: dict[str, Mapping[str, Any]] = {}
    invalid: dict[str, str] = {}
    deleting: set[str] = set()
    for body in raw_pools:
        meta = body.get("metadata") or {}
        name = str(meta.get("name", ""))
        if not name:
            continue
        raw[name] = body
        if meta.get("deletionTimestamp"):
            deleting.add(name)
        try:
            models.append(parse_pool(dict(body)))
        except PoolValidationError as exc:
            invalid[name] = "; ".join(exc.problems)
    return Pools(models, raw, invalid, deleting)


def _pool_signature(body: Mapping[str, Any]) -> tuple[Any, ...]:
    """What of a pool changes plans (its status, our own write, does not)."""
    meta = body.get("metadata") or {}
    return (
        meta.get("uid"),
        meta.get("generation"),
        bool(meta.get("deletionTimestamp")),
        json.dumps(body.get("spec"), sort_keys=True, default=str),
    )


def _placeholder(raw: Mapping[str, Any]) -> GPUSharePool:
    """A model of a pool whose spec does not parse, for ``pool_status`` (conditions, nodes)."""
    meta = raw.get("metadata") or {}
    try:
        status = GPUSharePoolStatus.model_validate(raw.get("status") or {})
    except ValueError:
        status = GPUSharePoolStatus()
    return GPUSharePool.model_construct(
        metadata=ObjectMeta.model_validate(
            {"name": meta.get("name"), "generation": meta.get("generation"), "uid": meta.get("uid")}
        ),
        spec=GPUSharePoolSpec.model_construct(),  # type: ignore[call-arg]
        status=status,
    )


def _watched(dp: DevicePlugin) -> bool:
    """Whether the pod watch sees every pod of this device plugin (it watches the default labels)."""
    return dp.namespace == c.DEFAULT_PLUGIN_NAMESPACE and all(
        dp.pod_selector.match_labels.get(k) == v for k, v in c.DEFAULT_PLUGIN_LABELS.items()
    )


class Reconciler:
    """The operator's view of nodes, pods and pools, the plan cache, and the passes.

    Everything here may be lost on a restart: it is rebuilt from the watches.
    """

    def __init__(
        self, cluster: ClusterAPI, *, clock: Callable[[], datetime] = lambda: datetime.now(UTC)
    ) -> None:
        self.cluster = cluster
        self.clock = clock
        # observed (slim projections from the watches) and our own newer writes
        self.nodes: dict[str, NodeView] = {}
        self.pods: dict[str, dict[str, PodView]] = {}
        self._pod_node: dict[str, str] = {}
        self._fresh: dict[str, NodeView] = {}
        self._bodies: dict[str, Mapping[str, Any]] = {}
        self._signatures: dict[str, tuple[Any, ...]] = {}
        self._pools = parse_pools([])
        # plans
        self.plans: dict[str, NodePlan] = {}
        self._related: dict[str, frozenset[str]] = {}
        self.members: dict[str, set[str]] = {}
        self._invalid_pools: Mapping[str, str] = {}
        self.dirty: set[str] = set()
        self._plan_all = True
        #: The clock of the last ``_replan`` and the nodes it planned with it (``_confirm`` need
        #: not plan those again: the planner is pure and per node).
        self._planned_with: tuple[datetime | None, frozenset[str]] = (None, frozenset())
        # writes
        self._claimed: set[str] = set()
        self._sems: dict[str, asyncio.Semaphore] = {}
        # report
        self._last_status: dict[str, dict[str, Any]] = {}
        self._status_at: dict[str, float] = {}
        self._reported: dict[tuple[str, str], frozenset[str]] = {}
        self._deleted_plugin: dict[str, str] = {}  # node -> `since` of the restart we deleted pods for
        self._deleted_uids: set[str] = set()
        self._restarts_since: datetime | None = None  # when this replica first moved restarts
        self.wakeups: dict[str, asyncio.Event] = {}

    # --- wake-ups (set by observed changes, awaited by the pool loops) ---------------------------

    def wakeup(self, pool: str) -> asyncio.Event:
        return self.wakeups.setdefault(pool, asyncio.Event())

    def wake_all(self) -> None:
        for event in self.wakeups.values():
            event.set()

    def _wake(self, pool: str, *, but: str | None = None) -> None:
        if pool == ORPHANS:
            live = sorted(self._pools.raw)
            if not live:
                return
            pool = live[0]
        if pool != but and pool in self.wakeups:
            self.wakeups[pool].set()

    def forget(self, pool: str) -> None:
        self.wakeups.pop(pool, None)
        self._sems.pop(pool, None)
        self._last_status.pop(pool, None)
        self._status_at.pop(pool, None)
        for key in [k for k in self._reported if k[0] == pool]:
            del self._reported[key]
        metrics.forget_pool(pool)

    # --- observe: the watches --------------------------------------------------------------------

    def _view(self, name: str) -> NodeView | None:
        """The node as last seen, or our own newer write until the watch has it."""
        fresh = self._fresh.get(name)
        return fresh if fresh is not None else self.nodes.get(name)

    def _concerned(self, name: str, view: NodeView | None) -> set[str]:
        """Pools a change of ``name`` may concern: those its last plan names, those selecting it."""
        out = set(self._related.get(name, ()))
        if view is not None:
            labels = dict(view.labels)
            for model in self._pools.models:
                if model.spec.node_selector.matches(labels):
                    out.add(model.name)
        return out

    def _mark(self, name: str, view: NodeView | None) -> None:
        self.dirty.add(name)
        for pool in self._concerned(name, view):
            self._wake(pool)

    def observe_node(self, view: NodeView) -> None:
        """A node as the watch shows it (added or modified)."""
        old = self.nodes.get(view.name)
        self.nodes[view.name] = view
        fresh = self._fresh.get(view.name)
        if fresh is not None:
            if _rv(view.resource_version) < _rv(fresh.resource_version):
                return  # older than our own write: our write's plan stands
            del self._fresh[view.name]
            if view == fresh:
                return  # the echo of our own write: already planned from it
            self._mark(view.name, view)
            return
        if old is not None and old == view:
            return  # only the resourceVersion (status heartbeat, ...) moved
        self._mark(view.name, view)

    def forget_node(self, name: str) -> None:
        view = self._view(name)
        self.nodes.pop(name, None)
        self._fresh.pop(name, None)
        self._mark(name, view)

    def observe_pod(self, pod: PodView) -> None:
        """A GPU or device plugin pod as the watch shows it."""
        key = pod_key(pod)
        before = self._pod_node.get(key)
        if before is not None and before != pod.node_name:
            self.forget_pod(key)
        if not pod.node_name:
            return
        on_node = self.pods.setdefault(pod.node_name, {})
        if on_node.get(key) == pod:
            return
        on_node[key] = pod
        self._pod_node[key] = pod.node_name
        self._mark(pod.node_name, self._view(pod.node_name))

    def forget_pod(self, key: str) -> None:
        node = self._pod_node.pop(key, None)
        if node is None:
            return
        on_node = self.pods.get(node, {})
        on_node.pop(key, None)
        if not on_node:
            self.pods.pop(node, None)
        self._mark(node, self._view(node))

    def set_pools(self, bodies: Iterable[Mapping[str, Any]]) -> None:
        """The pools as the watch shows them; a spec or deletion change plans every node again."""
        raw = {str((b.get("metadata") or {}).get("name") or ""): b for b in bodies}
        raw.pop("", None)
        self._bodies = raw
        signatures = {name: _pool_signature(body) for name, body in raw.items()}
        if signatures != self._signatures:
            self._signatures = signatures
            self._pools = parse_pools(raw.values())
            self._plan_all = True
            self.wake_all()

    def _sync(
        self, pools: Iterable[Mapping[str, Any]], nodes: Iterable[NodeView], pods: Iterable[PodView]
    ) -> None:
        """Take whole lists (tests, a resync from the indexes): only the differences count."""
        self.set_pools(pools)
        seen = set()
        for view in nodes:
            seen.add(view.name)
            if self.nodes.get(view.name) != view or (
                self.nodes[view.name].resource_version != view.resource_version
            ):
                self.observe_node(view)
        for name in set(self.nodes) - seen:
            self.forget_node(name)
        keys = set()
        for pod in pods:
            keys.add(pod_key(pod))
            self.observe_pod(pod)
        for key in set(self._pod_node) - keys:
            self.forget_pod(key)

    # --- observe: plans --------------------------------------------------------------------------

    def _live(self) -> set[str]:
        return set(self._pools.raw)

    def _invalid(self) -> dict[str, str]:
        # Nodes of an invalid pool stay as they are, unless it is being deleted: then they are
        # restored like those of a vanished pool (default rollout and device plugin).
        return {k: v for k, v in self._pools.invalid.items() if k not in self._pools.deleting}

    def _pods_of(self, names: Iterable[str]) -> list[PodView]:
        return [pod for n in names for pod in self.pods.get(n, {}).values()]

    def _plan_nodes(
        self, views: Sequence[NodeView], now: datetime, pods: Iterable[PodView] | None = None
    ) -> ClusterPlan:
        pools = self._pools
        return plan(
            pools.models,
            views,
            self._pods_of(v.name for v in views) if pods is None else pods,
            now=now,
            deleting=pools.deleting,
            invalid=self._invalid(),
        )

    def _set_plan(self, p: NodePlan, live: set[str], *, but: str | None) -> None:
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
        if old != p:
            for pool in old_rel | new_rel:
                self._wake(pool, but=but)

    def _drop_plan(self, name: str, *, but: str | None) -> None:
        self.plans.pop(name, None)
        for pool in self._related.pop(name, frozenset()):
            self.members.get(pool, set()).discard(name)
            self._wake(pool, but=but)

    def _replan(self, now: datetime, *, but: str | None) -> int:
        """Plan the dirty nodes (every node after a pool change or resync); returns how many."""
        if self._plan_all:
            names = set(self.nodes) | set(self.plans) | set(self._fresh)
            self._plan_all = False
            self.dirty = set()
            self.members = {}
            self._related = {}
        else:
            names, self.dirty = self.dirty, set()
        if not names:
            self._planned_with = (now, frozenset())
            return 0
        views = [v for v in (self._view(n) for n in names) if v is not None]
        cp = self._plan_nodes(views, now)
        self._planned_with = (now, frozenset(v.name for v in views))
        self._invalid_pools = cp.invalid_pools
        live = self._live()
        for p in cp.nodes:
            self._set_plan(p, live, but=but)
        for name in names - {v.name for v in views}:
            self._drop_plan(name, but=but)
        metrics.PLANNED_NODES.inc(len(views))
        return len(views)

    def _pool_plans(self, name: str, *, orphans: bool) -> list[NodePlan]:
        names = set(self.members.get(name, ()))
        if orphans:
            names |= self.members.get(ORPHANS, set())
        return [self.plans[n] for n in names if n in self.plans]

    def _remember(self, obj: Mapping[str, Any] | None, now: datetime, *, but: str) -> None:
        """Believe our own write (the returned node) until the watch shows it; plan it again."""
        if not obj:
            return
        view = NodeView.project(obj)
        seen = self.nodes.get(view.name)
        if seen is not None and _rv(seen.resource_version) >= _rv(view.resource_version):
            return  # the watch was faster
        self._fresh[view.name] = view
        self.dirty.discard(view.name)
        live = self._live()
        for p in self._plan_nodes([view], now).nodes:
            self._set_plan(p, live, but=but)

    # --- the pass --------------------------------------------------------------------------------

    async def reconcile(
        self,
        name: str,
        *,
        pools: Iterable[Mapping[str, Any]],
        nodes: Iterable[NodeView],
        pods: Iterable[PodView],
    ) -> PassResult:
        """One pass from whole lists (as the indexes hold them); only the differences are planned."""
        self._sync(pools, nodes, pods)
        return await self.run_pass(name)

    async def run_pass(self, name: str, *, resync: bool = False) -> PassResult:
        """One pass of pool ``name`` over what the watches delivered (``resync``: plan every node)."""
        started = time.monotonic()
        result_label = "ok"
        if resync:
            self._plan_all = True
        try:
            return await self._pass(name)
        except Exception:
            result_label = "error"
            raise
        finally:
            metrics.RECONCILE_SECONDS.labels(pool=name, result=result_label).observe(
                time.monotonic() - started
            )

    async def _pass(self, name: str) -> PassResult:
        now = self.clock()
        bound = log.bind(pool=name)
        raw = self._bodies.get(name)
        if raw is None:
            return PassResult(name, summary="pool is gone")
        self._replan(now, but=name)
        pools = self._pools
        live = self._live()
        invalid = self._invalid()
        if name in invalid:
            await self._report_invalid(name, raw, invalid[name], now)
            return PassResult(name, requeue=RESYNC, summary="invalid spec")

        model = next((p for p in pools.models if p.name == name), None)
        uid = str((raw.get("metadata") or {}).get("uid") or "")
        orphans = name == min(live)
        result = PassResult(name)

        # decide
        decision = decide(
            name,
            self._pool_plans(name, orphans=orphans),
            rollouts={m.name: m.spec.rollout for m in pools.models},
            live=live,
            orphans=orphans,
            busy=self._claimed,
        )
        patches = await self._confirm(decision.patches, now)

        # apply
        await self._apply(name, uid, model.spec.mode if model else "", patches, now, result, bound)
        await self._evict(name, decision.evictions, result, bound)
        # Plugin restarts owed by this pool (or by vanished pools, for the first pool), as the
        # nodes are after this pass's writes (never act on a record we just replaced).
        records = []
        for p in self._pool_plans(name, orphans=orphans):
            if p.changed:  # not written yet: the record on the node is what counts
                view = self._view(p.node)
                raw_record = view.annotations.get(c.ANNOTATION_PLUGIN_RESTART) if view else None
                records.append((p.node, RestartRecord.parse(raw_record)))
            else:
                records.append((p.node, p.plugin_restart))
        owed = restarts_owed(name, records, live, orphans=orphans)
        restarting = await self._advance_restarts(name, pools, owed, now, result, bound)

        # report
        after = self._pool_plans(name, orphans=False)
        settled = settle(
            name,
            after,
            waiting=decision.waiting,
            restarting=restarting,
            failed_writes=bool(result.errors or result.conflicts),
        )
        if model is not None:
            delay = await self._report(
                name, model, raw, after, now, result, deleting=name in pools.deleting, moving=not settled.done
            )
            if delay is not None:
                settled = type(settled)(
                    settled.done, min(settled.requeue, delay), settled.leftover, settled.pending
                )
        result.done = settled.done
        result.requeue = settled.requeue
        result.summary = (
            f"{result.patched} node(s) patched, {decision.waiting} waiting for rollout budget, "
            f"{settled.leftover} leaving or held, restarts pending: {settled.pending}"
        )
        return result

    # --- steps -----------------------------------------------------------------------------------

    async def _confirm(self, patches: Sequence[NodePlan], now: datetime) -> list[NodePlan]:
        """Plan the batch again with this pass's clock; confirm a few mode switches with the API.

        The GPU-pod index may lag a pod that was just bound. For up to ``PER_NODE_LISTS`` nodes
        about to switch mode this pass, their pods are listed (``spec.nodeName``) and the nodes
        planned with those; for more, the index is trusted (no cluster-wide pod list).
        """
        if not patches:
            return []
        views = [v for v in (self._view(p.node) for p in patches) if v is not None]
        # Nodes this pass's _replan planned with this clock (nothing awaited since) keep that plan:
        # after a pool change that is every node, planned once before the first write, not twice.
        clock, planned = self._planned_with
        current = planned if clock == now else frozenset()
        again = {v.name: self.plans[v.name] for v in views if v.name in current and v.name in self.plans}
        stale = [v for v in views if v.name not in again]
        if stale:
            again.update(self._plan_nodes(stale, now).by_node())
        check = [
            p
            for p in again.values()
            if p.mode_switch and p.action in (Action.APPLY, Action.RESTORE) and not p.force
        ]
        if 0 < len(check) <= PER_NODE_LISTS:
            try:
                lists = await asyncio.gather(*(self.cluster.pods_on_node(p.node) for p in check))
            except (ApiException, ApiUnavailable) as exc:
                log.warning("Listing pods failed; mode switches wait for the next pass", error=str(exc))
                for p in check:
                    again.pop(p.node, None)
                    self.dirty.add(p.node)
            else:
                listed = [pod for found in lists for pod in found]
                checked = [v for v in views if v.name in {p.node for p in check}]
                again.update(self._plan_nodes(checked, now, listed).by_node())
        out = []
        for p in patches:
            q = again.get(p.node)
            if q is not None and q.changed and q.pool == p.pool:
                out.append(q)
            else:
                self.dirty.add(p.node)
        return out

    def _semaphore(self, pool: str) -> asyncio.Semaphore:
        """The bound on the pool's writes in flight (per pool: pools never queue behind each other)."""
        if pool not in self._sems:
            self._sems[pool] = asyncio.Semaphore(WRITE_CONCURRENCY)
        return self._sems[pool]

    async def _apply(
        self,
        name: str,
        uid: str,
        mode: str,
        batch: Sequence[NodePlan],
        now: datetime,
        result: PassResult,
        bound: structlog.stdlib.BoundLogger,
    ) -> None:
        sem = self._semaphore(name)
        live = self._live()

        def replan(view: NodeView) -> NodePlan:
            return self._plan_nodes([view], now).nodes[0]

        async def one(p: NodePlan) -> NodePlan | None:
            seen = self._view(p.node)
            obj: dict[str, Any] | None = None
            async with sem:
                for _ in range(PATCH_ATTEMPTS):
                    patch = p.node_patch()
                    if seen is not None and seen.resource_version:
                        # Only onto the version this plan was made from: a stale view (index
                        # lagging behind someone else's write) must not yield a wrong patch or prior.
                        patch.setdefault("metadata", {})["resourceVersion"] = seen.resource_version
                    try:
                        obj = await self.cluster.patch_node(p.node, patch)
                        break
                    except ApiException as exc:
                        if exc.status != 409:
                            reason = f"HTTP {exc.status} {exc.reason}"
                            result.errors[p.node] = f"patching the node failed: {reason}"
                            bound.error("Patching Node failed", node=p.node, error=reason)
                            self.dirty.add(p.node)
                            return None
                    except ApiUnavailable as exc:
                        result.errors[p.node] = f"patching the node failed: {exc}"
                        bound.error("Patching Node failed", node=p.node, error=str(exc))
                        self.dirty.add(p.node)
                        return None
                    # 409: the node changed since it was planned. Read it and plan it again; go on
                    # only with an equivalent change (same pool and action, no new disruption).
                    try:
                        current = await self.cluster.read_node(p.node)
                    except (ApiException, ApiUnavailable):
                        current = None
                    self.dirty.add(p.node)
                    if current is None:
                        return None
                    self._remember(current, now, but=name)
                    seen = NodeView.project(current)
                    again = replan(seen)
                    same = again.pool == p.pool and again.action is p.action
                    if not again.changed or not same or (disrupts(again) and not disrupts(p)):
                        result.conflicts += 1
                        return None
                    p = again
                else:
                    result.conflicts += 1
                    bound.info("Node kept changing while being patched; planning again", node=p.node)
                    return None
            if obj is None:  # 404: the node is gone (a watch that missed the deletion)
                self.forget_node(p.node)
                return None
            self._remember(obj, now, but=name)
            if p.label_patch:
                metrics.LABEL_PATCHES.labels(pool=name, action=p.action.value).inc()
            bound.debug(
                "Patched Node",
                node=p.node,
                action=p.action.value,
                reason=p.reason,
                labels=dict(p.label_patch),
                restart_plugin=p.restart_plugin,
                cordon=p.cordon,
                uncordon=p.uncordon,
            )
            return p

        async def claimed(p: NodePlan) -> NodePlan | None:
            if p.node in self._claimed:
                return None
            self._claimed.add(p.node)
            try:
                return await one(p)
            finally:
                self._claimed.discard(p.node)

        if not batch:
            return
        finished: list[tuple[int, NodePlan]] = []

        async def write(item: tuple[int, NodePlan]) -> None:
            if (out := await claimed(item[1])) is not None:
                finished.append((item[0], out))

        await for_each(list(enumerate(batch)), write)
        done = [p for _, p in sorted(finished, key=lambda item: item[0])]
        del live
        result.patched = len(done)
        if done:
            actions: dict[str, int] = {}
            for p in done:
                actions[p.action.value] = actions.get(p.action.value, 0) + 1
            bound.info(
                "Patched Nodes",
                count=len(done),
                actions=actions,
                restarts=sum(1 for p in done if p.restart_plugin),
                cordoned=sum(1 for p in done if p.cordon),
                uncordoned=sum(1 for p in done if p.uncordon),
                failed=len(result.errors),
                conflicts=result.conflicts,
                nodes=_names([p.node for p in done]),
            )
        labelled = [p.node for p in done if p.label_patch and p.action is Action.APPLY and not p.drift]
        restored = [p.node for p in done if p.action in (Action.RESTORE, Action.RETAIN)]
        ref = pool_ref(name, uid)
        if labelled:
            await self._event(
                ref,
                "LabelsApplied",
                f"Applied {mode} labels to {len(labelled)} node(s): {_names(labelled)}",
            )
        if restored:
            await self._event(
                ref, "LabelsRestored", f"Restored the labels of {len(restored)} node(s): {_names(restored)}"
            )
        drift = [p for p in done if p.drift]
        if drift:
            detail = "; ".join(f"{p.node}: {dict(p.label_patch)}" for p in drift[:_LIST_MAX])
            more = f" and {len(drift) - _LIST_MAX} more" if len(drift) > _LIST_MAX else ""
            msg = f"Put back managed labels edited by hand on {len(drift)} node(s): {detail}{more}"
            await self._event(ref, "DriftCorrected", msg, "Warning")
            if len(drift) == 1:
                await self._event(node_ref(drift[0].node), "DriftCorrected", msg, "Warning")
        forced = [p for p in done if p.force]
        if forced:
            msg = (
                f"Forced {c.LABEL_SCHEDULE} switch on {len(forced)} node(s) with GPU pods running: "
                + "; ".join(f"{p.node}: {p.message}" for p in forced[:3])
            )
            await self._event(ref, "ModeSwitchForced", msg, "Warning")
        for verb, picked in (
            ("Cordoned", [p.node for p in done if p.cordon]),
            ("Uncordoned", [p.node for p in done if p.uncordon]),
        ):
            if not picked:
                continue
            why = " for a GPU mode switch" if verb == "Cordoned" else ""
            if len(picked) == 1:
                await self._event(node_ref(picked[0]), verb, f"{verb} by GPUSharePool {name}{why}")
            await self._event(ref, verb, f"{verb} {len(picked)} node(s){why}: {_names(picked)}")

    async def _evict(
        self, name: str, holds: Sequence[NodePlan], result: PassResult, bound: structlog.stdlib.BoundLogger
    ) -> None:
        for p in holds:
            node = self._view(p.node)
            if node is None or not node.unschedulable:
                continue  # cordon first (this pass or the next one)
            for pod in p.blocking_pods:
                try:
                    outcome = await self.cluster.evict_pod(pod.namespace, pod.name)
                except (ApiException, ApiUnavailable) as exc:
                    result.errors[p.node] = f"evicting {pod.ref} failed: {exc}"
                    continue
                metrics.EVICTIONS.labels(pool=name, result=outcome).inc()
                bound.info(
                    "Evicted Pod" if outcome == "evicted" else "Eviction not done",
                    node=p.node,
                    pod=pod.ref,
                    outcome=outcome,
                )

    async def _advance_restarts(
        self,
        name: str,
        pools: Pools,
        owed: Sequence[tuple[str, RestartRecord]],
        now: datetime,
        result: PassResult,
        bound: structlog.stdlib.BoundLogger,
    ) -> bool:
        """Move owed restarts on: delete old plugin pods, mark Done/Failed. True if any still runs."""
        if self._restarts_since is None:
            self._restarts_since = now
        sem = self._semaphore(name)
        still: list[str] = []
        restarted: list[str] = []
        failed: list[str] = []
        if not owed:
            return False

        def plugin_of(record: RestartRecord) -> DevicePlugin:
            owner = next((m for m in pools.models if m.name == record.pool), None)
            return owner.spec.device_plugin if owner else DevicePlugin()

        # The default plugin's pods are watched (the pod index): no list at all. Others: many
        # nodes, one list per (namespace, selector) instead of one per node.
        listed: dict[tuple[str, str], dict[str, list[PluginPod]]] = {}
        groups: dict[tuple[str, str], int] = {}
        indexed: set[tuple[str, str]] = set()
        for node, record in owed:
            dp = plugin_of(record)
            key = (dp.namespace, dp.pod_selector.to_query())
            groups[key] = groups.get(key, 0) + 1
            if _watched(dp):
                indexed.add(key)
                listed.setdefault(key, {})[node] = self._plugin_pods(node, dp)
        for key, count in groups.items():
            if count > PER_NODE_LISTS and key not in indexed:
                try:
                    everywhere = await self.cluster.plugin_pods(*key)
                except (ApiException, ApiUnavailable) as exc:
                    log.warning("Listing device plugin pods failed", namespace=key[0], error=str(exc))
                    continue
                by_node: dict[str, list[PluginPod]] = {}
                for pod in everywhere:
                    by_node.setdefault(pod.node, []).append(pod)
                listed[key] = by_node

        async def one(node: str, record: RestartRecord) -> None:
            dp = plugin_of(record)
            key = (dp.namespace, dp.pod_selector.to_query())
            since = _parse_time(record.since) or now
            if key in listed:
                pods = listed[key].get(node, [])
            else:
                try:
                    pods = await self.cluster.plugin_pods(*key, node)
                except (ApiException, ApiUnavailable) as exc:
                    result.errors[node] = f"listing device plugin pods failed: {exc}"
                    return
            new_state, outcome = await self._restart_step(node, record, pods, since, now, dp, bound, name)
            if new_state is None:
                if record.pending:
                    still.append(node)
                return
            updated = RestartRecord(record.hash, record.since, new_state, record.pool, outcome)
            if node in self._claimed:
                still.append(node)
                return
            self._claimed.add(node)
            patch = restart_outcome_patch(self._view(node), updated)
            try:
                async with sem:
                    obj = await self.cluster.patch_node(node, patch)
            except (ApiException, ApiUnavailable) as exc:
                result.errors[node] = f"recording the plugin restart failed: {exc}"
                self.dirty.add(node)
                return
            finally:
                self._claimed.discard(node)
            if obj is None:
                self.forget_node(node)
                return
            self._remember(obj, now, but=name)
            self._deleted_plugin.pop(node, None)
            (restarted if new_state == "Done" else failed).append(node)
            bound.debug("Recorded device plugin restart", node=node, state=new_state, result=outcome)

        await for_each(owed, lambda item: one(*item))
        ref = pool_ref(name, str((pools.raw[name].get("metadata") or {}).get("uid") or ""))
        if restarted:
            bound.info(
                "Recorded device plugin restarts", count=len(restarted), nodes=_names(sorted(restarted))
            )
            await self._event(
                ref,
                "DevicePluginRestarted",
                f"Device plugin restarted on {len(restarted)} node(s): {_names(sorted(restarted))}",
            )
        if failed:
            bound.warning("Device plugin not Ready", count=len(failed), nodes=_names(sorted(failed)))
            await self._event(
                ref,
                reasons.NODE_PLUGIN_NOT_READY,
                f"No Ready device plugin pod on {_names(sorted(failed))}",
                "Warning",
            )
        return bool(still)

    async def _restart_step(
        self,
        node: str,
        record: RestartRecord,
        pods: Sequence[PluginPod],
        since: datetime,
        now: datetime,
        dp: DevicePlugin,
        bound: structlog.stdlib.BoundLogger,
        pool: str,
    ) -> tuple[RestartState | None, str]:
        """(new state or None to keep waiting, result text) for one node's owed restart."""
        old = [
            p
            for p in pods
            if p.created is not None
            and p.created < since
            and not p.deleting
            and p.uid not in self._deleted_uids
        ]
        fresh_ready = [
            p for p in pods if (p.created is None or p.created >= since) and p.ready and not p.deleting
        ]
        if fresh_ready:
            if record.state == "Pending":
                metrics.PLUGIN_RESTARTS.labels(pool=pool, result="ready").inc()
            for p in pods:
                self._deleted_uids.discard(p.uid)
            return "Done", "Restarted"
        if record.state == "Failed":
            return None, ""  # reported; becomes Done if a new plugin pod ever gets Ready
        if now < since:
            return None, ""  # see policy.planner.restart_since: delete only once `since` has passed
        for p in old:
            async with self._semaphore(pool):
                deleted = await self.cluster.delete_pod(p.namespace, p.name, p.uid)
            if deleted:
                self._deleted_plugin[node] = record.since
                self._deleted_uids.add(p.uid)
                metrics.PLUGIN_RESTARTS.labels(pool=pool, result="deleted").inc()
                bound.debug("Deleted device plugin Pod", node=node, pod=f"{p.namespace}/{p.name}", uid=p.uid)
        if not pods and self._deleted_plugin.get(node) != record.since:
            started = self._restarts_since or now
            if since < started and now - started < min(
                PLUGIN_RECREATE_GRACE, timedelta(seconds=dp.ready_timeout_seconds)
            ):
                # Owed before we took over: the replica before us may have deleted the pod.
                return None, ""
            # Nothing to restart (no plugin on this node): report it, do not wait for one.
            metrics.PLUGIN_RESTARTS.labels(pool=pool, result="no_plugin").inc()
            return "Done", reasons.NODE_NO_PLUGIN_POD
        if now - since > timedelta(seconds=dp.ready_timeout_seconds):
            metrics.PLUGIN_RESTARTS.labels(pool=pool, result="timeout").inc()
            return "Failed", (
                f"no Ready device plugin pod ({dp.namespace}, {dp.pod_selector.to_query()}) on {node} "
                f"{dp.ready_timeout_seconds}s after the labels changed"
            )
        return None, ""

    def _plugin_pods(self, node: str, dp: DevicePlugin) -> list[PluginPod]:
        """The device plugin pods on ``node`` as the pod watch shows them."""
        out = []
        for pod in self.pods.get(node, {}).values():
            if pod.namespace != dp.namespace or not dp.pod_selector.matches(dict(pod.labels)):
                continue
            out.append(
                PluginPod(
                    node=node,
                    namespace=pod.namespace,
                    name=pod.name,
                    uid=pod.uid,
                    created=_parse_time(pod.created) if pod.created else None,
                    ready=pod.ready and pod.phase == "Running",
                    deleting=pod.deletion,
                )
            )
        return out

    # --- report ----------------------------------------------------------------------------------

    async def _report(
        self,
        name: str,
        model: GPUSharePool,
        raw: Mapping[str, Any],
        plans: Sequence[NodePlan],
        now: datetime,
        result: PassResult,
        *,
        deleting: bool,
        moving: bool = False,
    ) -> float | None:
        """Write the status if it changed, at most every ``STATUS_INTERVAL`` while the pool is
        ``moving`` (a settled status goes out at once); returns when to look again for a change
        not yet written (None: nothing left to write)."""
        current = dict(raw.get("status") or {})
        base = self._last_status.get(name, current)
        try:
            based = model.model_copy(update={"status": GPUSharePoolStatus.model_validate(base)})
        except ValueError:
            based = model
        cp = ClusterPlan(nodes=tuple(plans), invalid_pools=self._invalid_pools)
        names = [p.node for p in plans]
        node_map = {n: v for n in names if (v := self._view(n)) is not None}
        status = pool_status(
            based, cp, node_map, self._pods_of(names), now=now, errors=result.errors, deleting=deleting
        )
        counts = status.get("nodes", {})
        metrics.set_pool_nodes(
            name,
            {
                "Ready": counts.get("ready", 0),
                "Pending": counts.get("pending", 0),
                "Held": counts.get("held", 0),
                "Conflict": counts.get("conflicting", 0),
                "Failed": counts.get("failed", 0),
            },
        )
        metrics.set_pool_status(
            name, status, ready_timeout_seconds=model.spec.device_plugin.ready_timeout_seconds
        )
        await self._transitions(name, pool_ref(name, model.metadata.uid), cp)
        delay = await self._write_status(name, status, base, current, moving=moving)
        if awaiting_plugin_mode(status):
            # A node waits for its device plugin to advertise the pool's mode: look again soon.
            delay = WAIT_REQUEUE if delay is None else min(delay, WAIT_REQUEUE)
        return delay

    async def _write_status(
        self,
        name: str,
        status: dict[str, Any],
        base: Mapping[str, Any],
        current: Mapping[str, Any],
        *,
        moving: bool = False,
    ) -> float | None:
        if status in (base, current):
            self._last_status[name] = status
            return None
        wait = self._status_at.get(name, -STATUS_INTERVAL) + STATUS_INTERVAL - time.monotonic()
        if moving and wait > 0:
            return wait
        self._status_at[name] = time.monotonic()
        try:
            ok = await self.cluster.patch_pool_status(name, status_merge_patch(status, current, base))
        except (ApiException, ApiUnavailable) as exc:
            log.error("Patching GPUSharePool status failed", pool=name, error=str(exc))
            return FAST_REQUEUE
        if ok:
            self._last_status[name] = status
        return None

    async def _transitions(self, name: str, ref: Mapping[str, str], cp: ClusterPlan) -> None:
        """Events for new holds and conflicts (once per change of the set, not every pass)."""
        held = {p.node: p for p in cp.nodes if p.pool == name and p.action is Action.HOLD}
        new_held = sorted(set(held) - self._reported.get((name, "held"), frozenset()))
        self._reported[(name, "held")] = frozenset(held)
        if new_held:
            detail = "; ".join(f"{n}: {held[n].message}" for n in new_held[:3])
            more = f" and {len(new_held) - 3} more" if len(new_held) > 3 else ""
            await self._event(ref, "NodeHeld", f"{len(new_held)} node(s) held: {detail}{more}", "Warning")
        conflicts = {p.node: p for p in cp.nodes if name in p.conflict_pools}
        new_conflicts = sorted(set(conflicts) - self._reported.get((name, "conflict"), frozenset()))
        self._reported[(name, "conflict")] = frozenset(conflicts)
        if new_conflicts:
            detail = "; ".join(
                f"{n} (also {', '.join(x for x in conflicts[n].conflict_pools if x != name)})"
                for n in new_conflicts[:_LIST_MAX]
            )
            await self._event(
                ref,
                "ConflictDetected",
                f"Nodes selected by more than one pool are left unchanged: {detail}",
                "Warning",
            )

    async def _report_invalid(self, name: str, raw: Mapping[str, Any], why: str, now: datetime) -> None:
        """An invalid pool's status through ``pool_status`` too: all four conditions current."""
        current = dict(raw.get("status") or {})
        base = self._last_status.get(name, current)
        model = _placeholder({**raw, "status": base})
        plans = self._pool_plans(name, orphans=False)
        invalid = {**self._invalid_pools, name: why}
        cp = ClusterPlan(nodes=tuple(plans), invalid_pools=invalid)
        names = [p.node for p in plans]
        node_map = {n: v for n in names if (v := self._view(n)) is not None}
        status = pool_status(model, cp, node_map, self._pods_of(names), now=now)
        status.pop("schedule", None)  # the spec does not say a valid one
        if "schedule" in current:
            status["schedule"] = current["schedule"]
        if status in (base, current):
            self._last_status[name] = status
            return
        if self._last_status.get(name, current).get("conditions") != status.get("conditions"):
            reported = self._reported.get((name, "invalid"))
            if reported != frozenset({why}):
                self._reported[(name, "invalid")] = frozenset({why})
                uid = str((raw.get("metadata") or {}).get("uid") or "")
                await self._event(pool_ref(name, uid), reasons.REASON_INVALID_SPEC, why, "Warning")
        await self._write_status(name, status, base, current)

    async def _event(self, ref: Mapping[str, str], reason: str, message: str, type_: str = "Normal") -> None:
        try:
            await self.cluster.event(ref, reason=reason, message=message, type_=type_)
        except (ApiException, ApiUnavailable) as exc:
            log.warning("Posting Event failed", object=dict(ref), reason=reason, error=str(exc))

    async def cleanup_done(self, name: str, uid: str | None) -> None:
        await self._event(pool_ref(name, uid), "CleanupDone", f"Nodes of GPUSharePool {name} cleaned up")
        self.forget(name)
