"""The operator's demand loop: ``status.demand``, its gauges, and opt-in lending.

It reads the operator's one model of the cluster (:class:`Model`, the reconciler's store and plan
cache): the nodes, the GPU-sharing pods bound to them and every node's plan, planned once for
the reconciler and this loop alike. It keeps only what is its own: the waiting pods
(``policy.demand.waiting_pod``, from the Pod watch it listens to), what it wrote, and a counter
of changes (the Node and Pod watches wake it). Each pool's ``demand`` daemon
(``gpushare.handlers.demand``, paused with the rest under peering) calls
:meth:`DemandTracker.run` when something it reads changed, and at least every ``RESYNC`` seconds:

1. computes every pool's demand once per change (the planner's membership, so loans count for the
   borrower), writes the pool's ``status.demand`` only when it changed (a merge patch of that key
   alone; the reconciler's status writes leave it alone), sets the gauges;
2. with lending configured, decides loans and returns (``policy.lending``, pure) and writes each as
   one annotation on the node, sent with the resourceVersion it was decided on (a node that changed
   meanwhile is decided again, never lent twice), then posts Events on both pools and the node.

Everything is on the nodes: a restarted operator finds the loans there (the reconciler moves the
node to the borrower, or keeps it there), and only the clock of ``returnAfterSeconds`` restarts.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Protocol

import structlog

from gpushare import constants as c
from gpushare import metrics
from gpushare.api.v1alpha1 import GPUSharePool, PoolValidationError, parse_pool
from gpushare.k8s import ApiError, Conflict
from gpushare.k8s.cluster import node_ref, pool_ref
from gpushare.k8s.watch import object_key
from gpushare.policy import ClusterPlan, NodeView, PodView
from gpushare.policy import lending as lend
from gpushare.policy.demand import PoolDemand, WaitingPod, busy_nodes, compute, waiting_pod

log = structlog.stdlib.get_logger("gpushare.demand")

#: Seconds between two looks at a quiet pool (only reads: nothing is written when nothing changed).
RESYNC = 60.0
#: After a change, wait this long so that a burst of pod events becomes one computation.
DEBOUNCE = 0.5
#: And at least this many times as long as the last computation took: the loop's share of a CPU
#: stays under about 1 / (1 + DUTY) while a rollout changes a node every few milliseconds.
DUTY = 9.0
#: While what the loop reads keeps changing (a rollout writes a node every few milliseconds), it
#: waits on for a quiet ``debounce``, but never longer than this many seconds after the wake-up:
#: a rollout's burst becomes one computation every ``SETTLE_MAX`` seconds, not one every debounce.
SETTLE_MAX = 5.0


class DemandAPI(Protocol):
    async def patch_node(self, name: str, patch: Mapping[str, Any]) -> dict[str, Any] | None: ...

    async def patch_pool_status(self, name: str, status: Mapping[str, Any]) -> bool: ...

    async def event(
        self, obj: Mapping[str, str], *, reason: str, message: str, type_: str = "Normal"
    ) -> None: ...


class Model(Protocol):
    """The operator's one model of the cluster, as this loop reads it (``reconcile.Reconciler``)."""

    def set_pools(self, bodies: Iterable[Mapping[str, Any]]) -> None: ...

    def node_views(self) -> Mapping[str, NodeView]: ...

    def view(self, name: str) -> NodeView | None: ...

    def generation(self) -> int: ...

    def gpu_pods(self) -> list[PodView]: ...

    def plans_now(self, now: datetime) -> ClusterPlan: ...

    def remember(self, obj: Mapping[str, Any] | None, now: datetime) -> None: ...


def _stored(body: Mapping[str, Any]) -> dict[str, Any] | None:
    demand = (body.get("status") or {}).get("demand")
    return dict(demand) if isinstance(demand, Mapping) else None


def _patch(new: Mapping[str, Any], old: Mapping[str, Any] | None) -> dict[str, Any]:
    """``status.demand`` as a merge patch over what is stored: keys it no longer has are nulled."""
    out: dict[str, Any] = dict(new)
    for key in old or {}:
        out.setdefault(key, None)
    return out


@dataclass(frozen=True)
class _Computed:
    pools: tuple[GPUSharePool, ...]
    demand: Mapping[str, PoolDemand]
    busy: frozenset[str]
    nodes: Mapping[str, NodeView]
    #: Some node carries a loan (loans are then decided even when no pool lends any more).
    lent: bool = False


class DemandTracker:
    """The loop's own state (waiting pods, what it wrote), its cache, and one step per pool; the
    nodes, bound pods and plans are the model's."""

    def __init__(self, cluster: DemandAPI, model: Model, *, clock: Any = None) -> None:
        self.cluster = cluster
        self.model = model
        self.clock = clock or (lambda: datetime.now(UTC))
        self.waiting: dict[str, WaitingPod] = {}
        self.version = 0
        self._seen = -1
        self.wakeups: dict[str, asyncio.Event] = {}
        self._cache: tuple[int, int, str, _Computed] | None = None
        self._written: dict[str, dict[str, Any]] = {}
        self._needed: dict[str, datetime] = {}
        #: A loan write of the last lending step met a 409 (the node changed since the decision).
        self._redecide = False
        self._lock = asyncio.Lock()
        #: Nodes and pool statuses written by this loop.
        self.writes = 0
        #: Seconds the last computation took (``debounce``).
        self.last_cost = 0.0

    # --- woken by the watches ------------------------------------------------------------------

    def _changed(self) -> None:
        self.version += 1
        self.wake_all()

    def debounce(self) -> float:
        """How long to wait after a wake-up before the next step (``DEBOUNCE``, longer after a
        costly computation)."""
        return max(DEBOUNCE, DUTY * self.last_cost)

    async def settle(
        self,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> int:
        """After a wake-up: wait ``debounce()``, and again while changes came in meanwhile, until a
        quiet one or ``SETTLE_MAX`` seconds; returns how many waits it took."""
        until = monotonic() + SETTLE_MAX
        waits = 0
        while True:
            seen = self.version
            left = until - monotonic()
            await sleep(min(self.debounce(), max(left, 0.0)))
            waits += 1
            if self.version == seen or monotonic() >= until:
                return waits

    def wake_all(self) -> None:
        for event in self.wakeups.values():
            event.set()

    def wakeup(self, pool: str) -> asyncio.Event:
        return self.wakeups.setdefault(pool, asyncio.Event())

    def forget(self, pool: str) -> None:
        self.wakeups.pop(pool, None)
        self._written.pop(pool, None)
        metrics.forget_pool_demand(pool)

    def _model_moved(self) -> None:
        """Look again if the model changed since the last event (it was fed first)."""
        generation = self.model.generation()
        if generation != self._seen:
            self._seen = generation
            self._changed()

    def node_view(self, type_: str, name: str, view: NodeView | None) -> None:
        """A Node watch event (the model has it already)."""
        self._model_moved()

    def nodes_listed(self, names: set[str]) -> None:
        self._model_moved()

    def pod_event(self, type_: str, obj: Mapping[str, Any]) -> None:
        """A Pod watch event: a waiting pod is this loop's own; a bound GPU pod is the model's
        (a change of either wakes the loop)."""
        key = object_key(obj)
        changed = False
        waiting = None if type_ == "DELETED" else waiting_pod(obj)
        old_wait = self.waiting.get(key)
        if waiting is None:
            changed |= self.waiting.pop(key, None) is not None
        elif old_wait is None or (old_wait.ref, old_wait.since) != (waiting.ref, waiting.since):
            self.waiting[key] = waiting
            changed = True
        if changed:
            self._changed()
        self._model_moved()  # a bound GPU pod is the model's

    def pods_listed(self, keys: set[str]) -> None:
        gone = set(self.waiting) - keys
        for key in gone:
            del self.waiting[key]
        if gone:
            self._changed()
        self._model_moved()

    # --- one step ------------------------------------------------------------------------------

    def _compute(self, bodies: Iterable[Mapping[str, Any]], now: datetime) -> _Computed:
        bodies = list(bodies)
        signature = json.dumps(
            sorted(
                (
                    str((b.get("metadata") or {}).get("name")),
                    bool((b.get("metadata") or {}).get("deletionTimestamp")),
                    b.get("spec"),
                )
                for b in bodies
            ),
            sort_keys=True,
            default=str,
        )
        key = (self.version, self.model.generation(), signature)
        if self._cache is not None and self._cache[:3] == key:
            # The model has not moved: its views are those the cached result was computed from.
            return replace(self._cache[3], nodes=self.model.node_views())
        pools: list[GPUSharePool] = []
        deleting: set[str] = set()
        for body in bodies:
            meta = body.get("metadata") or {}
            try:
                model = parse_pool(dict(body))
            except PoolValidationError:
                continue
            pools.append(model)
            if meta.get("deletionTimestamp"):
                deleting.add(model.name)
        started = time.monotonic()
        self.model.set_pools(bodies)
        cp = self.model.plans_now(now)  # the one plan cache: only what changed is planned
        bound = self.model.gpu_pods()
        nodes = self.model.node_views()
        live = [p for p in pools if p.name not in deleting]
        planned = cp.by_node()
        records = lend.loans_of(nodes)
        loans = {
            name: (record.lender, record.borrower)
            for name, record in records.items()
            if name in planned and planned[name].pool == record.borrower
        }
        demand = compute(live, cp, nodes, bound, self.waiting.values(), loans)
        result = _Computed(tuple(live), demand, frozenset(busy_nodes(bound)), nodes, bool(records))
        # Cached without the nodes: a snapshot of every view kept between steps held the old view
        # of each node the store replaced since (a second copy of the model's nodes: at 5000
        # nodes restored by a deleted pool, 4 MiB of the operator's peak).
        self._cache = (self.version, self.model.generation(), signature, replace(result, nodes={}))
        self.last_cost = time.monotonic() - started
        return result

    async def run(self, name: str, bodies: Iterable[Mapping[str, Any]]) -> float:
        """One step for pool ``name``; returns when to look again at the latest."""
        bodies = list(bodies)
        by_name = {str((b.get("metadata") or {}).get("name") or ""): b for b in bodies}
        now = self.clock()
        computed = self._compute(bodies, now)
        delay = RESYNC
        # Loans are decided while a pool lends or a node is still lent: lending removed from the
        # last pool that lent must still end its loans.
        if computed.lent or any(p.spec.lending for p in computed.pools):
            async with self._lock:
                due = await self._lending(computed, by_name, now)
            if due is not None:
                delay = min(delay, max(1.0, due))
            computed = self._compute(bodies, now)
        d = computed.demand.get(name)
        body = by_name.get(name)
        if d is None or body is None:
            return delay
        status = d.status()
        metrics.set_pool_demand(name, status, oldest=d.oldest)
        stored = _stored(body)
        if status != self._written.get(name, stored):
            try:
                ok = await self.cluster.patch_pool_status(name, {"demand": _patch(status, stored)})
            except ApiError as exc:
                log.warning("Writing status.demand failed", pool=name, error=str(exc))
                return 1.0
            if ok:
                self._written[name] = status
                self.writes += 1
                log.info("Wrote status.demand", pool=name, pending=status["pendingPods"],
                         idle=status["idleNodes"], loans=len(status.get("loans") or []))  # fmt: skip
        return delay

    async def _lending(
        self, computed: _Computed, bodies: Mapping[str, Mapping[str, Any]], now: datetime
    ) -> float | None:
        decision = lend.decide_loans(
            computed.pools, computed.demand, computed.nodes, set(computed.busy), now=now, needed=self._needed
        )
        self._needed = dict(decision.needed or {})
        self._redecide = False

        def uid(pool: str) -> str:
            return str(((bodies.get(pool) or {}).get("metadata") or {}).get("uid") or "")

        for item in decision.lend:
            pods = ", ".join(item.move.pods)
            message = (
                f"Lent node {item.node} of pool {item.record.lender} to pool {item.record.borrower} "
                f"for its waiting pod(s) {pods}"
            )
            if await self._write(computed.nodes.get(item.node), item.record.dump(), now):
                log.info("Lent node", node=item.node, lender=item.record.lender,
                         borrower=item.record.borrower, pods=pods)  # fmt: skip
                metrics.LOANS.labels(pool=item.record.lender, event="lent").inc()
                for pool in (item.record.lender, item.record.borrower):
                    await self._event(pool_ref(pool, uid(pool)), "NodeLent", message)
                await self._event(node_ref(item.node), "NodeLent", message)
        for ret in decision.returns:
            if await self._write(computed.nodes.get(ret.node), None, now):
                log.info("Loan ended", node=ret.node, lender=ret.record.lender,
                         borrower=ret.record.borrower, reason=ret.reason)  # fmt: skip
                metrics.LOANS.labels(pool=ret.record.lender, event="returned").inc()
                message = f"Node {ret.node} goes back to pool {ret.record.lender}: {ret.message}"
                for pool in (ret.record.lender, ret.record.borrower):
                    if pool in bodies:
                        await self._event(pool_ref(pool, uid(pool)), ret.reason, message)
                await self._event(node_ref(ret.node), ret.reason, message)
        if self._redecide:  # a 409: the newer version may come as a heartbeat that wakes no step
            return 1.0 if decision.next_due is None else min(1.0, decision.next_due)
        return decision.next_due

    async def _write(self, view: NodeView | None, loan: str | None, now: datetime) -> bool:
        """Write (or, with None, remove) the node's loan annotation onto the version decided on:
        a step that decided before another step's write gets a 409, not a second loan."""
        if view is None:
            return False
        node = view.name
        patch: dict[str, Any] = {"metadata": {"annotations": {c.ANNOTATION_LOAN: loan}}}
        if view.resource_version:
            patch["metadata"]["resourceVersion"] = view.resource_version
        try:
            obj = await self.cluster.patch_node(node, patch)
        except Conflict:
            self._redecide = True  # the node changed since: decided again with its new version
            return False
        except ApiError as exc:
            log.warning("Writing the loan failed", node=node, error=str(exc))
            return False
        self.writes += 1
        if obj:
            self.model.remember(obj, now)  # believed (and planned again) until the watch shows it
            self._changed()
        return obj is not None

    async def _event(self, ref: Mapping[str, str], reason: str, message: str) -> None:
        try:
            await self.cluster.event(ref, reason=reason, message=message)
        except ApiError as exc:
            log.warning("Posting Event failed", object=dict(ref), reason=reason, error=str(exc))
