"""One level-based reconcile pass for a GPUSharePool: observe → plan (pure) → apply → status.

The Kopf handlers (``gpushare.handlers``) feed this with what the indexes hold (pools, nodes,
GPU pods) and call :meth:`Reconciler.reconcile`; every API write goes through
``gpushare.k8s.cluster.Cluster``. The result depends only on the current objects, so a restarted
operator picks up where the last one stopped: owed plugin restarts are on the nodes
(``gpushare.io/plugin-restart``), cordons it made carry ``gpushare.io/cordoned-by``.

All passes (of every pool) run under one lock: two pools never patch the same node at once, and
each pass sees the writes of the previous one (patched nodes are kept in an overlay until the
node index catches up, so a stale index never makes the operator repeat a change).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import structlog
from kubernetes_asyncio.client.exceptions import ApiException

from gpushare import constants as c
from gpushare import metrics
from gpushare.api.v1alpha1 import (
    DevicePlugin,
    GPUSharePool,
    GPUSharePoolStatus,
    PoolValidationError,
    Rollout,
    parse_pool,
)
from gpushare.k8s.cluster import Cluster, PluginPod, node_ref, pool_ref
from gpushare.k8s.retry import ApiUnavailable
from gpushare.policy import Action, ClusterPlan, NodePlan, NodeView, PodView, RestartRecord, plan
from gpushare.policy import conditions as cond
from gpushare.policy.planner import RestartState
from gpushare.policy.rollout import disrupts, select_batch
from gpushare.policy.status import awaiting_plugin_mode, pool_status

log = structlog.get_logger("gpushare.reconciler")

#: Seconds between passes while something is moving, while waiting, and when all is quiet.
FAST_REQUEUE = 1.0
WAIT_REQUEUE = 5.0
RESYNC = 60.0
#: At most this many node writes / plugin checks in flight per pass.
CONCURRENCY = 32
#: Above this many nodes to check before a mode switch, list all pods once instead of per node.
PER_NODE_LISTS = 8
#: A node patch refused with 409 (the node changed) is read, planned and sent again this often.
PATCH_ATTEMPTS = 3
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


class Reconciler:
    """Runs passes; keeps only caches that a restart may lose (overlay, event dedup)."""

    def __init__(
        self, cluster: Cluster, *, clock: Callable[[], datetime] = lambda: datetime.now(UTC)
    ) -> None:
        self.cluster = cluster
        self.clock = clock
        self.lock = asyncio.Lock()
        self._fresh: dict[str, NodeView] = {}
        self._last_status: dict[str, dict[str, Any]] = {}
        self._reported: dict[tuple[str, str], frozenset[str]] = {}
        self._deleted_plugin: dict[str, str] = {}  # node -> `since` of the restart we deleted pods for
        self.wakeups: dict[str, asyncio.Event] = {}

    # --- wake-ups (set by node/pod events, awaited by the pool daemons) ------------------------

    def wakeup(self, pool: str) -> asyncio.Event:
        return self.wakeups.setdefault(pool, asyncio.Event())

    def wake_all(self) -> None:
        for event in self.wakeups.values():
            event.set()

    def forget(self, pool: str) -> None:
        self.wakeups.pop(pool, None)
        self._last_status.pop(pool, None)
        for key in [k for k in self._reported if k[0] == pool]:
            del self._reported[key]
        metrics.forget_pool(pool)

    # --- observe -------------------------------------------------------------------------------

    def _nodes(self, indexed: Iterable[NodeView]) -> dict[str, NodeView]:
        """The index's nodes, with our own newer writes laid over until the index has them."""
        out = {n.name: n for n in indexed}
        for name in list(self._fresh):
            fresh = self._fresh[name]
            seen = out.get(name)
            if seen is None or _rv(seen.resource_version) >= _rv(fresh.resource_version):
                del self._fresh[name]
            else:
                out[name] = fresh
        return out

    def _remember(self, obj: dict[str, Any] | None) -> None:
        if obj:
            view = NodeView.from_obj(obj)
            self._fresh[view.name] = view

    # --- the pass ------------------------------------------------------------------------------

    async def reconcile(
        self,
        name: str,
        *,
        pools: Iterable[Mapping[str, Any]],
        nodes: Iterable[NodeView],
        pods: Iterable[PodView],
    ) -> PassResult:
        started = time.monotonic()
        result_label = "ok"
        async with self.lock:
            try:
                return await self._reconcile(name, parse_pools(pools), nodes, list(pods))
            except Exception:
                result_label = "error"
                raise
            finally:
                metrics.RECONCILE_SECONDS.labels(pool=name, result=result_label).observe(
                    time.monotonic() - started
                )

    async def _reconcile(
        self, name: str, pools: Pools, indexed: Iterable[NodeView], pods: list[PodView]
    ) -> PassResult:
        now = self.clock()
        bound = log.bind(pool=name)
        raw = pools.raw.get(name)
        if raw is None:
            return PassResult(name, summary="pool is gone")
        node_map = self._nodes(indexed)
        # Nodes of an invalid pool stay as they are, unless it is being deleted: then they are
        # restored like those of a vanished pool (default rollout and device plugin).
        invalid = {k: v for k, v in pools.invalid.items() if k not in pools.deleting}
        cp = plan(pools.models, node_map.values(), pods, now=now, deleting=pools.deleting, invalid=invalid)
        if name in invalid:
            await self._write_invalid_status(name, raw, invalid[name], now)
            return PassResult(name, requeue=RESYNC, summary="invalid spec")

        model = next((p for p in pools.models if p.name == name), None)
        uid = str((raw.get("metadata") or {}).get("uid") or "")
        live = sorted(pools.raw)
        orphans = name == live[0]  # the first pool also restores nodes of pools that vanished
        mine = [
            p
            for p in cp.nodes
            if p.pool == name or (orphans and p.pool is not None and p.pool not in pools.raw)
        ]
        result = PassResult(name)

        # Confirm mode switches against the API (the pod index may lag), then pick the batch.
        mine = await self._confirm_mode_switches(
            pools, node_map, mine, now, deleting=pools.deleting, invalid=invalid
        )
        batches: list[NodePlan] = []
        taken = {p.node for p in mine}
        context = [*mine, *(p for p in cp.nodes if p.node not in taken)]  # for restarts still in flight
        for owner in sorted({p.pool for p in mine if p.pool is not None}):
            owner_model = next((m for m in pools.models if m.name == owner), None)
            rollout = owner_model.spec.rollout if owner_model else Rollout()
            batches.extend(select_batch(owner, rollout, context))
        waiting = sum(1 for p in mine if p.changed) - len(batches)

        def replan(view: NodeView) -> NodePlan:
            return plan(pools.models, [view], pods, now=now, deleting=pools.deleting, invalid=invalid).nodes[
                0
            ]

        await self._apply(
            name, uid, model.spec.mode if model else "", batches, node_map, replan, result, bound
        )
        await self._evict(name, mine, node_map, result, bound)

        # Plugin restarts owed by this pool (or by vanished pools, for the first pool), as the
        # nodes are after this pass's writes (never act on a record we just replaced).
        node_map = {**node_map, **self._fresh}
        owed = []
        for n in node_map.values():
            record = RestartRecord.parse(n.annotations.get(c.ANNOTATION_PLUGIN_RESTART))
            if record is None or record.state not in ("Pending", "Failed"):
                continue
            if record.pool == name or (orphans and record.pool not in pools.raw):
                owed.append((n, record))
        restarting = await self._advance_restarts(name, pools, owed, now, result, bound)

        # Status from a fresh plan over what the nodes are now.
        # (Merge, not `_nodes()`: that would take our own writes for the index having caught up.)
        node_map = {**node_map, **self._fresh}
        after = plan(pools.models, node_map.values(), pods, now=now, deleting=pools.deleting, invalid=invalid)
        mode_pending = False
        if model is not None:
            status = await self._report(
                name, model, raw, after, node_map, pods, now, result, deleting=name in pools.deleting
            )
            mode_pending = awaiting_plugin_mode(status)

        leftover = [
            p
            for p in after.nodes
            if p.pool == name and p.action in (Action.RESTORE, Action.RETAIN, Action.HOLD)
        ]
        pending = restarting or any(
            p.plugin_restart_pending and p.plugin_restart is not None and p.plugin_restart.pool == name
            for p in after.nodes
        )
        held = any(p.action is Action.HOLD for p in leftover)
        result.done = not leftover and not pending and not result.errors and not result.conflicts
        if pending or waiting > 0 or result.errors or result.conflicts:
            result.requeue = FAST_REQUEUE
        elif held or mode_pending or any(p.changed for p in after.for_pool(name)):
            result.requeue = WAIT_REQUEUE
        result.summary = (
            f"{result.patched} node(s) patched, {waiting} waiting for rollout budget, "
            f"{len(leftover)} leaving or held, restarts pending: {bool(pending)}"
        )
        return result

    # --- steps ---------------------------------------------------------------------------------

    async def _confirm_mode_switches(
        self,
        pools: Pools,
        node_map: Mapping[str, NodeView],
        mine: list[NodePlan],
        now: datetime,
        *,
        deleting: set[str],
        invalid: Mapping[str, str],
    ) -> list[NodePlan]:
        check = [
            p for p in mine if p.mode_switch and p.action in (Action.APPLY, Action.RESTORE) and not p.force
        ]
        if not check:
            return mine
        try:
            if len(check) > PER_NODE_LISTS:
                wanted = {p.node for p in check}
                pods = [pod for pod in await self.cluster.running_pods() if pod.node_name in wanted]
            else:
                lists = await asyncio.gather(*(self.cluster.pods_on_node(p.node) for p in check))
                pods = [pod for found in lists for pod in found]
        except (ApiException, ApiUnavailable) as exc:
            log.warning("Listing pods failed; mode switches wait for the next pass", error=str(exc))
            unknown = {p.node for p in check}
            return [p for p in mine if p.node not in unknown]
        replanned = plan(
            pools.models, [node_map[p.node] for p in check], pods, now=now, deleting=deleting, invalid=invalid
        ).by_node()
        return [replanned.get(p.node, p) for p in mine]

    async def _apply(
        self,
        name: str,
        uid: str,
        mode: str,
        batch: Sequence[NodePlan],
        node_map: Mapping[str, NodeView],
        replan: Callable[[NodeView], NodePlan],
        result: PassResult,
        bound: Any,
    ) -> None:
        sem = asyncio.Semaphore(CONCURRENCY)

        async def one(p: NodePlan) -> NodePlan | None:
            seen = node_map.get(p.node)
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
                            return None
                    except ApiUnavailable as exc:
                        result.errors[p.node] = f"patching the node failed: {exc}"
                        bound.error("Patching Node failed", node=p.node, error=str(exc))
                        return None
                    # 409: the node changed since it was planned. Read it and plan it again; go on
                    # only with an equivalent change (same pool and action, no new disruption).
                    try:
                        current = await self.cluster.read_node(p.node)
                    except (ApiException, ApiUnavailable):
                        current = None
                    self._remember(current)
                    if current is None:
                        return None
                    seen = NodeView.from_obj(current)
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
            self._remember(obj)
            if obj is None:
                return None
            if p.label_patch:
                metrics.LABEL_PATCHES.labels(pool=name, action=p.action.value).inc()
            bound.info(
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

        done = [p for p in await asyncio.gather(*(one(p) for p in batch)) if p is not None]
        result.patched = len(done)
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
        for p in done:
            if p.drift:
                msg = f"Put back managed labels edited by hand on node {p.node}: {dict(p.label_patch)}"
                await self._event(ref, "DriftCorrected", msg, "Warning")
                await self._event(node_ref(p.node), "DriftCorrected", msg, "Warning")
            if p.force:
                msg = f"Forced {c.LABEL_SCHEDULE} switch on {p.node} with GPU pods running: {p.message}"
                await self._event(ref, "ModeSwitchForced", msg, "Warning")
            if p.cordon:
                await self._event(
                    node_ref(p.node), "Cordoned", f"Cordoned by GPUSharePool {name} for a GPU mode switch"
                )
            if p.uncordon:
                await self._event(node_ref(p.node), "Uncordoned", f"Uncordoned by GPUSharePool {name}")

    async def _evict(
        self,
        name: str,
        mine: Sequence[NodePlan],
        node_map: Mapping[str, NodeView],
        result: PassResult,
        bound: Any,
    ) -> None:
        for p in mine:
            if p.hold != "Evict" or not p.blocking_pods:
                continue
            node = self._fresh.get(p.node) or node_map.get(p.node)
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
        owed: Sequence[tuple[NodeView, RestartRecord]],
        now: datetime,
        result: PassResult,
        bound: Any,
    ) -> bool:
        """Move owed restarts on: delete old plugin pods, mark Done/Failed. True if any still runs."""
        sem = asyncio.Semaphore(CONCURRENCY)
        still: list[str] = []
        restarted: list[str] = []
        failed: list[str] = []

        def plugin_of(record: RestartRecord) -> DevicePlugin:
            owner = next((m for m in pools.models if m.name == record.pool), None)
            return owner.spec.device_plugin if owner else DevicePlugin()

        # Many nodes: one list per (namespace, selector) instead of one per node.
        listed: dict[tuple[str, str], dict[str, list[PluginPod]]] = {}
        groups: dict[tuple[str, str], int] = {}
        for _, record in owed:
            dp = plugin_of(record)
            key = (dp.namespace, dp.pod_selector.to_query())
            groups[key] = groups.get(key, 0) + 1
        for key, count in groups.items():
            if count > PER_NODE_LISTS:
                try:
                    everywhere = await self.cluster.plugin_pods(*key)
                except (ApiException, ApiUnavailable) as exc:
                    log.warning("Listing device plugin pods failed", namespace=key[0], error=str(exc))
                    continue
                by_node: dict[str, list[PluginPod]] = {}
                for pod in everywhere:
                    by_node.setdefault(pod.node, []).append(pod)
                listed[key] = by_node

        async def one(node: NodeView, record: RestartRecord) -> None:
            dp = plugin_of(record)
            key = (dp.namespace, dp.pod_selector.to_query())
            since = _parse_time(record.since) or now
            async with sem:
                if key in listed:
                    pods = listed[key].get(node.name, [])
                else:
                    try:
                        pods = await self.cluster.plugin_pods(*key, node.name)
                    except (ApiException, ApiUnavailable) as exc:
                        result.errors[node.name] = f"listing device plugin pods failed: {exc}"
                        return
                new_state, outcome = await self._restart_step(
                    node.name, record, pods, since, now, dp, bound, name
                )
            if new_state is None:
                if record.pending:
                    still.append(node.name)
                return
            updated = RestartRecord(record.hash, record.since, new_state, record.pool, outcome)
            try:
                obj = await self.cluster.patch_node(
                    node.name, {"metadata": {"annotations": {c.ANNOTATION_PLUGIN_RESTART: updated.dump()}}}
                )
            except (ApiException, ApiUnavailable) as exc:
                result.errors[node.name] = f"recording the plugin restart failed: {exc}"
                return
            self._remember(obj)
            self._deleted_plugin.pop(node.name, None)
            (restarted if new_state == "Done" else failed).append(node.name)
            bound.info("Recorded device plugin restart", node=node.name, state=new_state, result=outcome)

        await asyncio.gather(*(one(n, r) for n, r in owed))
        ref = pool_ref(name, str((pools.raw[name].get("metadata") or {}).get("uid") or ""))
        if restarted:
            await self._event(
                ref,
                "DevicePluginRestarted",
                f"Device plugin restarted on {len(restarted)} node(s): {_names(sorted(restarted))}",
            )
        if failed:
            await self._event(
                ref,
                "DevicePluginNotReady",
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
        bound: Any,
        pool: str,
    ) -> tuple[RestartState | None, str]:
        """(new state or None to keep waiting, result text) for one node's owed restart."""
        old = [p for p in pods if p.created is not None and p.created < since and not p.deleting]
        fresh_ready = [
            p for p in pods if (p.created is None or p.created >= since) and p.ready and not p.deleting
        ]
        if fresh_ready:
            if record.state == "Pending":
                metrics.PLUGIN_RESTARTS.labels(pool=pool, result="ready").inc()
            return "Done", "Restarted"
        if record.state == "Failed":
            return None, ""  # reported; becomes Done if a new plugin pod ever gets Ready
        if now < since:
            return None, ""  # see policy.planner.restart_since: delete only once `since` has passed
        for p in old:
            deleted = await self.cluster.delete_pod(p.namespace, p.name, p.uid)
            if deleted:
                self._deleted_plugin[node] = record.since
                metrics.PLUGIN_RESTARTS.labels(pool=pool, result="deleted").inc()
                bound.info("Deleted device plugin Pod", node=node, pod=f"{p.namespace}/{p.name}", uid=p.uid)
        if not pods and self._deleted_plugin.get(node) != record.since:
            # Nothing to restart (no plugin on this node): report it, do not wait for one.
            metrics.PLUGIN_RESTARTS.labels(pool=pool, result="no_plugin").inc()
            return "Done", "NoDevicePluginPod"
        if now - since > timedelta(seconds=dp.ready_timeout_seconds):
            metrics.PLUGIN_RESTARTS.labels(pool=pool, result="timeout").inc()
            return "Failed", (
                f"no Ready device plugin pod ({dp.namespace}, {dp.pod_selector.to_query()}) on {node} "
                f"{dp.ready_timeout_seconds}s after the labels changed"
            )
        return None, ""

    # --- status and events ---------------------------------------------------------------------

    async def _report(
        self,
        name: str,
        model: GPUSharePool,
        raw: Mapping[str, Any],
        cp: ClusterPlan,
        node_map: Mapping[str, NodeView],
        pods: Sequence[PodView],
        now: datetime,
        result: PassResult,
        *,
        deleting: bool,
    ) -> dict[str, Any]:
        current = dict(raw.get("status") or {})
        base = self._last_status.get(name, current)
        try:
            based = model.model_copy(update={"status": GPUSharePoolStatus.model_validate(base)})
        except ValueError:
            based = model
        status = pool_status(based, cp, node_map, pods, now=now, errors=result.errors, deleting=deleting)
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
        ref = pool_ref(name, model.metadata.uid)
        await self._transitions(name, ref, cp)
        if status in (base, current):
            self._last_status[name] = status
            return status
        try:
            ok = await self.cluster.patch_pool_status(name, status)
        except (ApiException, ApiUnavailable) as exc:
            log.error("Patching GPUSharePool status failed", pool=name, error=str(exc))
            return status
        if ok:
            self._last_status[name] = status
        return status

    async def _transitions(self, name: str, ref: Mapping[str, str], cp: ClusterPlan) -> None:
        """Events for new holds and conflicts (once per change of the set, not every pass)."""
        held = {p.node: p for p in cp.nodes if p.pool == name and p.action is Action.HOLD}
        new_held = sorted(set(held) - self._reported.get((name, "held"), frozenset()))
        self._reported[(name, "held")] = frozenset(held)
        for node in new_held:
            await self._event(ref, "NodeHeld", f"Node {node}: {held[node].message}", "Warning")
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

    async def _write_invalid_status(self, name: str, raw: Mapping[str, Any], why: str, now: datetime) -> None:
        current = dict(raw.get("status") or {})
        generation = (raw.get("metadata") or {}).get("generation")
        conditions: list[dict[str, Any]] = list(current.get("conditions") or [])
        conditions = cond.set_condition(conditions, cond.READY, "False", "InvalidSpec", why, generation, now)
        conditions = cond.set_condition(
            conditions, cond.DEGRADED, "True", "InvalidSpec", why, generation, now
        )
        status = {**current, "observedGeneration": generation, "conditions": conditions}
        if status != current and status != self._last_status.get(name):
            uid = str((raw.get("metadata") or {}).get("uid") or "")
            await self._event(pool_ref(name, uid), "InvalidSpec", why, "Warning")
            try:
                await self.cluster.patch_pool_status(name, status)
            except (ApiException, ApiUnavailable) as exc:
                log.error("Patching GPUSharePool status failed", pool=name, error=str(exc))
                return
            self._last_status[name] = status

    async def _event(self, ref: Mapping[str, str], reason: str, message: str, type_: str = "Normal") -> None:
        try:
            await self.cluster.event(ref, reason=reason, message=message, type_=type_)
        except (ApiException, ApiUnavailable) as exc:
            log.warning("Posting Event failed", object=dict(ref), reason=reason, error=str(exc))

    async def cleanup_done(self, name: str, uid: str | None) -> None:
        await self._event(pool_ref(name, uid), "CleanupDone", f"Nodes of GPUSharePool {name} cleaned up")
        self.forget(name)
