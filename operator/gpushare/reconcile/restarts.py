"""The plugin-restart phase of a pass: list the plugin pods, take each node's step, record it.

The step itself is pure (``gpushare.policy.restart.restart_step``); this module reads the pods
it needs, does what the step says through the writes layer, and keeps the little the step needs
to remember between passes (``memory.RestartMemory``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from gpushare import metrics
from gpushare.api.v1alpha1 import DevicePlugin, LabelSelector
from gpushare.backends import BACKENDS, SharingBackend, backend_for
from gpushare.k8s import ApiError
from gpushare.policy import RestartRecord
from gpushare.policy.events import names
from gpushare.policy.planner import RestartState, restart_outcome_patch
from gpushare.policy.restart import RestartStep, reload_step, restart_step, watched
from gpushare.policy.views import PluginPod, plugin_pod
from gpushare.reconcile.apply import PER_NODE_LISTS, remember
from gpushare.reconcile.batch import for_each
from gpushare.reconcile.calls import PassCalls
from gpushare.reconcile.memory import RestartMemory
from gpushare.reconcile.plans import PlanCache
from gpushare.reconcile.scope import PassScope
from gpushare.reconcile.store import ClusterState

#: (namespace, label selector) of a device plugin: one list serves every node it runs on.
PluginKey = tuple[str, str]
#: What the restart phase reads and writes: the store, the plan cache, the writes layer, its memory.
_Parts = tuple[ClusterState, PlanCache, PassCalls, RestartMemory]


@dataclass(frozen=True)
class NodeRestart:
    """One node's step, as done: the state recorded (None: none), whether it still runs, the error."""

    node: str
    state: RestartState | None = None
    running: bool = False
    error: str | None = None


@dataclass
class Restarts:
    """The restart phase of a pass."""

    running: bool = False
    restarted: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)


def _backend(state: ClusterState, record: RestartRecord) -> SharingBackend:
    """The backend whose plugin the record is about (the record says; else its pool's)."""
    model = state.model(record.pool)
    return BACKENDS.get(record.backend) or backend_for(model.spec if model else None)


def _plugin(state: ClusterState, record: RestartRecord) -> DevicePlugin:
    """The record's pool's device plugin; for a pool that is gone, its backend's default one."""
    if state.model(record.pool) is not None:
        return state.plugin_of(record.pool)
    backend = _backend(state, record)
    return DevicePlugin(
        namespace=backend.default_plugin_namespace,
        pod_selector=LabelSelector(match_labels=dict(backend.default_plugin_labels)),
    )


def _key(state: ClusterState, record: RestartRecord) -> PluginKey:
    dp = _plugin(state, record)
    return (dp.namespace, dp.pod_selector.to_query())


async def _listed(
    s: PassScope, owed: Sequence[tuple[str, RestartRecord]], state: ClusterState, writes: PassCalls
) -> dict[PluginKey, dict[str, list[PluginPod]]]:
    """Plugin pods known without a per-node list: the default plugin's pods are watched (the pod
    index, no list at all); another plugin on more than ``PER_NODE_LISTS`` nodes is listed once
    per (namespace, selector). Plugins missing here are listed per node."""
    listed: dict[PluginKey, dict[str, list[PluginPod]]] = {}
    groups: dict[PluginKey, int] = {}
    for node, record in owed:
        key = _key(state, record)
        groups[key] = groups.get(key, 0) + 1
        dp = _plugin(state, record)
        if watched(dp):
            pods = state.pods.get(node, {}).values()
            mine = [
                plugin_pod(p)
                for p in pods
                if p.namespace == dp.namespace and dp.pod_selector.matches(dict(p.labels))
            ]
            listed.setdefault(key, {})[node] = mine
    for key, count in groups.items():
        if count <= PER_NODE_LISTS or key in listed:
            continue
        try:
            everywhere = await writes.cluster.plugin_pods(*key)
        except ApiError as exc:
            s.log.warning("Listing device plugin pods failed", namespace=key[0], error=str(exc))
            continue
        by_node: dict[str, list[PluginPod]] = {}
        for pod in everywhere:
            by_node.setdefault(pod.node, []).append(pod)
        listed[key] = by_node
    return listed


async def _record(s: PassScope, node: str, updated: RestartRecord, parts: _Parts) -> NodeRestart:
    """Write the new state of ``node``'s restart record."""
    state, cache, writes, memory = parts
    with writes.claim(node) as mine:
        if not mine:
            return NodeRestart(node, running=True)
        patch = restart_outcome_patch(state.view(node), updated)
        out = await writes.patch_node(s.name, node, patch)
    if out.error is not None or out.conflict:
        s.effects.dirty.add(node)
        why = str(out.error) if out.error is not None else "HTTP 409 Conflict"
        return NodeRestart(node, error=f"recording the plugin restart failed: {why}")
    if out.gone:
        s.effects.gone.add(node)
        return NodeRestart(node)
    remember(s, state, cache, out.obj)
    memory.deleted_since.pop(node, None)
    s.log.debug("Recorded device plugin restart", node=node, state=updated.state, result=updated.result)
    return NodeRestart(node, state=updated.state)


def _take_step(
    s: PassScope,
    node: str,
    record: RestartRecord,
    pods: Sequence[PluginPod],
    state: ClusterState,
    memory: RestartMemory,
) -> RestartStep:
    """The pure step for the node's backend: a restart (its pods deleted), or a reload its plugin
    does itself (waited for until the node advertises the mode of its labels)."""
    backend = _backend(state, record)
    plugin = _plugin(state, record)
    if not backend.restarts_plugin:
        view = state.view(node)
        labels = view.labels if view else {}
        allocatable = view.allocatable if view else {}
        mode = backend.mode_of(labels)
        return reload_step(
            node,
            record,
            pods,
            now=s.now,
            plugin=plugin,
            advertised=backend.advertises(
                mode, allocatable, labels, view.annotations if view else {}, view.label_times if view else {}
            ),
            stale=backend.stale_message(mode, allocatable, labels),
        )
    return restart_step(
        node,
        record,
        pods,
        now=s.now,
        plugin=plugin,
        deleted_uids=memory.deleted_uids,
        deleted_since=memory.deleted_since.get(node),
        took_over_at=memory.took_over_at,
    )


async def _step(
    s: PassScope,
    node: str,
    record: RestartRecord,
    listed: dict[PluginKey, dict[str, list[PluginPod]]],
    parts: _Parts,
) -> NodeRestart:
    """One node's owed restart: its plugin pods, the pure step, its deletes and record."""
    state, _cache, writes, memory = parts
    key = _key(state, record)
    if key in listed:
        pods = listed[key].get(node, [])
    else:
        try:
            pods = await writes.cluster.plugin_pods(*key, node)
        except ApiError as exc:
            return NodeRestart(node, error=f"listing device plugin pods failed: {exc}")
    step = _take_step(s, node, record, pods, state, memory)
    memory.deleted_uids.difference_update(step.forget)
    for pod in await writes.delete_plugin_pods(s.name, step.delete):
        memory.deleted_since[node] = record.since
        memory.deleted_uids.add(pod.uid)
    if step.metric is not None:
        metrics.PLUGIN_RESTARTS.labels(pool=s.name, result=step.metric).inc()
    if step.state is None:
        return NodeRestart(node, running=record.pending)
    updated = RestartRecord(record.hash, record.since, step.state, record.pool, step.outcome, record.backend)
    return await _record(s, node, updated, parts)


async def move_restarts(
    s: PassScope,
    owed: Sequence[tuple[str, RestartRecord]],
    state: ClusterState,
    cache: PlanCache,
    writes: PassCalls,
    memory: RestartMemory,
) -> Restarts:
    """Move the owed restarts on: delete old plugin pods, record Done/Failed."""
    if memory.took_over_at is None:
        memory.took_over_at = s.now
    out = Restarts()
    if not owed:
        return out
    listed = await _listed(s, owed, state, writes)
    parts = (state, cache, writes, memory)
    for r in await for_each(owed, lambda item: _step(s, *item, listed, parts)):
        out.running |= r.running
        if r.error is not None:
            out.errors[r.node] = r.error
        if r.state == "Done":
            out.restarted.append(r.node)
        elif r.state is not None:
            out.failed.append(r.node)
    if out.restarted:
        s.log.info(
            "Recorded device plugin restarts", count=len(out.restarted), nodes=names(sorted(out.restarted))
        )
    if out.failed:
        s.log.warning("Device plugin not Ready", count=len(out.failed), nodes=names(sorted(out.failed)))
    return out
