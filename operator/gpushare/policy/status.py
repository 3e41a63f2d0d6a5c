"""Pool status from a plan and the observed nodes and pods (pure; the operator patches it)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from gpushare import constants as c
from gpushare.api.v1alpha1 import MAX_NODE_STATUSES, GPUSharePool, GPUSharePoolStatus, NodePhase
from gpushare.backends import DEFAULT, SharingBackend, backend_for
from gpushare.gpu.inventory import isolation_state
from gpushare.policy import conditions as cond
from gpushare.policy.planner import Action, ClusterPlan, NodePlan, RestartRecord
from gpushare.policy.views import NodeView, PodView

#: Phases of a node that belongs to the pool and is not yet (or no longer) as it should be.
_IN_POOL = (Action.APPLY, Action.NOOP, Action.HOLD)
_LIST_MAX = 10
ISOLATION_UNAVAILABLE = cond.NODE_ISOLATION_UNAVAILABLE
#: ``status.reason`` of a pod the kubelet refused at admission, e.g. a GPU pod bound to a node whose
#: device plugin was not registered ("no healthy devices present").
KUBELET_REFUSED = "UnexpectedAdmissionError"


@dataclass(frozen=True)
class NodeState:
    name: str
    phase: NodePhase
    reason: str
    message: str


def no_nodes_message(pool: GPUSharePool, conflicting: int = 0, skipped: int = 0) -> str:
    """Why a pool has no node, naming its selector (Ready's ``NoMatchingNodes`` message, and
    ``gpushare plan``'s line for such a pool)."""
    query = pool.spec.node_selector.to_query()
    if skipped and not conflicting:
        return (
            f"spec.nodeSelector {query} selects only nodes labelled {c.LABEL_SKIP}=true ({skipped}), "
            "which gpushare leaves alone"
        )
    if conflicting:
        return (
            f"spec.nodeSelector {query} selects no node that only this pool selects: {conflicting} "
            "node(s) are also selected by another pool (see condition Conflict)"
        )
    return (
        f"spec.nodeSelector {query} selects 0 nodes: no node has these labels "
        f"(kubectl get nodes -l '{query}'); label the pool's nodes or change the selector"
    )


def _names(items: Sequence[str]) -> str:
    shown = ", ".join(items[:_LIST_MAX])
    return shown + (f" and {len(items) - _LIST_MAX} more" if len(items) > _LIST_MAX else "")


def node_state(
    pool: str,
    node_plan: NodePlan,
    node: NodeView | None,
    errors: Mapping[str, str],
    *,
    memory_isolation: bool = False,
    mode: str | None = None,
    ready_timeout_s: int = 300,
    restart_never: bool = False,
    now: datetime | None = None,
    backend: SharingBackend = DEFAULT,
    held: Mapping[str, str] | None = None,
) -> NodeState | None:
    """The phase of one node as pool ``pool`` reports it, or None when the pool does not list it.

    ``memory_isolation``: the pool demands cGPU memory isolation, so a node whose agent reports
    it ``absent`` is Degraded (``IsolationUnavailable``) even with every label right.
    ``mode``: the pool's mode; a node with the right labels is Ready only once it advertises that
    mode's resources (``SharingBackend.advertises``), see :func:`plugin_mode_state`.
    """
    p = node_plan
    if p.node in errors and (p.pool == pool):
        return NodeState(p.node, "Failed", cond.NODE_APPLY_FAILED, errors[p.node])
    if p.action is Action.CONFLICT:
        others = [name for name in p.conflict_pools if name != pool]
        return NodeState(
            p.node, "Conflict", cond.NODE_MULTIPLE_POOLS, f"also selected by pool {', '.join(others)}"
        )
    if p.pool != pool:
        record = p.plugin_restart
        if record is not None and record.pool == pool and record.state == "Pending":
            return NodeState(
                p.node, "Restarting", cond.NODE_PLUGIN_RESTARTING, "restarting after leaving the pool"
            )
        if record is not None and record.pool == pool and record.state == "Failed":
            return NodeState(
                p.node, "Failed", cond.NODE_PLUGIN_NOT_READY, record.result or "device plugin not Ready"
            )
        return None
    if p.action is Action.SKIP:
        return NodeState(p.node, "Skipped", cond.NODE_SKIP_LABEL, p.message)
    if p.action is Action.HOLD:
        return NodeState(p.node, "Held", cond.NODE_MODE_SWITCH_BLOCKED, p.message)
    if p.action in (Action.RESTORE, Action.RETAIN):
        return NodeState(
            p.node,
            "Pending",
            cond.NODE_RESTORING if p.action is Action.RESTORE else cond.NODE_RELEASING,
            p.message,
        )
    if p.action is Action.APPLY:
        if held and p.node in held:
            return NodeState(p.node, "Pending", cond.NODE_CONFIG_PROPAGATING, held[p.node])
        return NodeState(p.node, "Pending", p.reason or cond.NODE_LABELS_CHANGED, p.message)
    if mode is not None and node is not None and now is not None:
        # A switch the backend follows itself (its record on the node): until confirmed, its words.
        switch = backend.switch_state(
            mode,
            node.allocatable,
            node.labels,
            node.annotations,
            now=now,
            timeout_s=ready_timeout_s,
            label_times=node.label_times,
        )
        if switch is not None:
            return NodeState(p.node, *switch)
    record = p.plugin_restart
    if record is not None and record.pool == pool:
        if record.state == "Pending":
            return NodeState(
                p.node,
                "Restarting",
                cond.NODE_PLUGIN_RESTARTING,
                f"waiting for a device plugin started after {record.since}",
            )
        if record.state == "Failed":
            return NodeState(
                p.node, "Failed", cond.NODE_PLUGIN_NOT_READY, record.result or "device plugin not Ready"
            )
    if p.action is Action.NOOP and p.reason == cond.NODE_POOL_INVALID:
        return NodeState(p.node, "Degraded", cond.NODE_POOL_INVALID, p.message)
    if node is not None and not node.ready:
        return NodeState(p.node, "Degraded", cond.NODE_NOT_READY, "the node's Ready condition is not True")
    if memory_isolation and node is not None and isolation_state(node.labels, node.annotations) == "absent":
        return NodeState(
            p.node,
            "Degraded",
            ISOLATION_UNAVAILABLE,
            f"the pool demands memory isolation but the node agent found no cGPU kernel module "
            f"({c.LABEL_CGPU_ISOLATION}=absent); pods here would share GPU memory without isolation",
        )
    if mode is not None and node is not None:
        stale = plugin_mode_state(
            p.node,
            mode,
            node.allocatable,
            record,
            ready_timeout_s=ready_timeout_s,
            restart_never=restart_never,
            now=now,
            capacity=node.capacity,
            labels=node.labels,
            backend=backend,
            annotations=node.annotations,
            label_times=node.label_times,
        )
        if stale is not None:
            return stale
    if record is not None and record.result == cond.NODE_NO_PLUGIN_POD:
        return NodeState(
            p.node, "Ready", cond.NODE_NO_PLUGIN_POD, "labels applied; no device plugin pod runs on the node"
        )
    return NodeState(p.node, "Ready", cond.NODE_LABELS_APPLIED, "")


def status_merge_patch(status: Mapping[str, Any], *previous: Mapping[str, Any]) -> dict[str, Any]:
    """``status`` as a JSON merge patch over the ``previous`` ones (stored, last written): a merge
    patch keeps map keys it does not name, so the resource names ``capacity``/``allocated`` no
    longer list (a pool that left core_mem, an older gpushare's ``gpuMemGiB``) are sent as null."""
    out = dict(status)
    for key in ("capacity", "allocated"):
        new: dict[str, Any] = dict(out.get(key) or {})
        for old in previous:
            names = old.get(key)
            if isinstance(names, Mapping):
                for name in names:
                    new.setdefault(str(name), None)
        if new != (out.get(key) or {}):
            out[key] = new
    return out


def _since(record: RestartRecord | None) -> datetime | None:
    if record is None or not record.since:
        return None
    try:
        return datetime.fromisoformat(record.since.replace("Z", "+00:00"))
    except ValueError:
        return None


def plugin_mode_state(
    node: str,
    mode: str,
    allocatable: Mapping[str, str],
    record: RestartRecord | None,
    *,
    ready_timeout_s: int,
    restart_never: bool,
    now: datetime | None,
    capacity: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    backend: SharingBackend = DEFAULT,
    annotations: Mapping[str, str] | None = None,
    label_times: Mapping[str, datetime] | None = None,
) -> NodeState | None:
    """None when the node advertises what ``mode`` implies (``backend.advertises``); else why it is
    not Ready yet.

    * within ``ready_timeout_s`` of the labels being written (the restart record's ``since``):
      Restarting ``PluginModePending`` (the pool stays Progressing), unless the restart is Never;
    * the plugin is not registered with the kubelet (its resources in ``capacity``, none
      allocatable; ``backend.plugin_unregistered``): Degraded
      ``PluginNotRegistered``, whatever the mode;
    * ``restart_never``: nobody will restart the plugin: Degraded ``PluginRestartNeeded`` at once.
    * later: Degraded ``PluginModeStale``.
    """
    labels = labels or {}
    if backend.advertises(mode, allocatable, labels, annotations, label_times):
        return None
    message = backend.stale_message(mode, allocatable, labels)
    since = _since(record)
    in_window = since is not None and now is not None and now - since <= timedelta(seconds=ready_timeout_s)
    if backend.plugin_unregistered(capacity or {}, allocatable) and not (in_window and not restart_never):
        return NodeState(
            node, "Degraded", cond.PLUGIN_NOT_REGISTERED, backend.unregistered_message(capacity or {})
        )
    if restart_never:
        return NodeState(
            node,
            "Degraded",
            cond.PLUGIN_RESTART_NEEDED,
            f"{message}: restart its device plugin pod (devicePlugin.restart is Never)",
        )
    if in_window:
        return NodeState(
            node,
            "Restarting",
            cond.PLUGIN_MODE_PENDING,
            backend.pending_message(mode, allocatable, labels),
        )
    return NodeState(node, "Degraded", cond.PLUGIN_MODE_STALE, message)


def awaiting_plugin_mode(status: Mapping[str, Any]) -> bool:
    """Whether a pool status lists a node still waiting for its plugin to advertise the pool's mode,
    or for a switch its backend follows (``SharingBackend.switch_state``: Restarting for a reason
    of the backend's own): the operator looks again before ``readyTimeoutSeconds`` runs out."""
    return any(
        s.get("reason") == cond.PLUGIN_MODE_PENDING
        or (s.get("phase") == "Restarting" and s.get("reason") != cond.NODE_PLUGIN_RESTARTING)
        for s in status.get("nodeStatuses") or []
    )


def _resource_names(
    backend: SharingBackend, nodes: Iterable[NodeView], pods: Iterable[PodView]
) -> tuple[str, ...]:
    """What ``status.capacity`` and ``status.allocated`` sum: the backend's resources, and the
    devices its nodes advertise or its pods hold, counted per resource (a MIG pool's profiles)."""
    devices = {r for n in nodes for r in backend.devices(n.allocatable)}
    devices |= {r for p in pods for r in backend.pod_devices(p.requests)}
    return (*backend.status_resources, *sorted(devices - set(backend.status_resources)))


def pool_status(
    pool: GPUSharePool,
    cluster_plan: ClusterPlan,
    nodes: Mapping[str, NodeView],
    pods: Iterable[PodView],
    *,
    now: datetime,
    errors: Mapping[str, str] | None = None,
    held: Mapping[str, str] | None = None,
    deleting: bool = False,
) -> dict[str, Any]:
    """The full ``status`` of ``pool`` (Kubernetes JSON) with conditions merged into the old ones.

    ``held``: node → why its change waits for something besides the rollout (an NVIDIA config
    still reaching the plugin pods); such a node is Pending, reason ``ConfigPropagating``.

    ``errors``: node → message for writes that failed in this pass (the node is reported Failed).
    """
    errors = errors or {}
    name = pool.name
    plans = cluster_plan.for_pool(name)
    backend = backend_for(pool.spec)
    mode = backend.pool_mode(pool.spec)
    isolation = pool.spec.isolates_memory
    plugin = pool.spec.device_plugin
    states = [
        s
        for s in (
            node_state(
                name,
                p,
                nodes.get(p.node),
                errors,
                held=held or {},
                memory_isolation=isolation,
                mode=mode,
                backend=backend,
                ready_timeout_s=plugin.ready_timeout_seconds,
                restart_never=plugin.restart == "Never",
                now=now,
            )
            for p in plans
        )
        if s is not None
    ]
    member = {p.node for p in plans if p.pool == name and p.action in _IN_POOL}

    def count(*phases: str, only_members: bool = True) -> int:
        return sum(1 for s in states if s.phase in phases and (s.name in member or not only_members))

    counts = {
        "matched": len(member),
        "ready": count("Ready"),
        "pending": count("Pending", "Restarting", only_members=False),
        "held": count("Held"),
        "conflicting": count("Conflict", only_members=False),
        "failed": count("Failed", only_members=False),
    }
    member_nodes = [nodes[n] for n in sorted(member) if n in nodes]
    pods = list(pods)
    live = [p for p in pods if p.node_name in member and not p.terminated]
    refused = sorted(
        f"{p.ref} on {p.node_name}"
        for p in pods
        if p.node_name in member and p.phase == "Failed" and p.reason == KUBELET_REFUSED
    )
    refused_note = (
        f"; GPU pods refused by the kubelet ({KUBELET_REFUSED}): {_names(refused)}" if refused else ""
    )
    names = _resource_names(backend, member_nodes, live)
    capacity = backend.resource_list(
        pool.spec, {r: sum(n.allocatable_int(r) for n in member_nodes) for r in names}
    )
    allocated = backend.resource_list(pool.spec, {r: sum(p.requests.get(r, 0) for p in live) for r in names})

    generation = pool.metadata.generation
    conditions: list[dict[str, Any]] = [dict(x.dump()) for x in pool.status.conditions]
    invalid = cluster_plan.invalid_pools.get(name)

    def put(ctype: str, status: cond.Status, reason: str, message: str) -> None:
        nonlocal conditions
        conditions = cond.set_condition(conditions, ctype, status, reason, message, generation, now)

    matched, ready = counts["matched"], counts["ready"]
    if invalid:
        put(cond.READY, "False", cond.REASON_INVALID_SPEC, invalid)
    elif deleting:
        put(
            cond.READY,
            "False",
            cond.REASON_DELETING,
            f"cleanup {pool.spec.cleanup} in progress on {counts['pending']} node(s)",
        )
    elif matched == 0:
        skipped = sum(1 for p in plans if p.pool == name and p.action is Action.SKIP)
        put(
            cond.READY,
            "False",
            cond.REASON_NO_MATCHING_NODES,
            no_nodes_message(pool, counts["conflicting"], skipped),
        )
    elif ready == matched:
        put(cond.READY, "True", cond.REASON_ALL_NODES_READY, f"{ready}/{matched} nodes ready{refused_note}")
    else:
        need = [s.name for s in states if s.reason == cond.PLUGIN_RESTART_NEEDED]
        unregistered = [s.name for s in states if s.reason == cond.PLUGIN_NOT_REGISTERED]
        put(
            cond.READY,
            "False",
            cond.REASON_NODES_NOT_READY,
            f"{ready}/{matched} nodes ready"
            + (f"; device plugin restart needed on {_names(need)}" if need else "")
            + (f"; device plugin not registered on {_names(unregistered)}" if unregistered else "")
            + refused_note,
        )

    held_nodes = [s for s in states if s.phase == "Held"]
    moving = [s for s in states if s.phase in ("Pending", "Restarting")]
    # Nodes whose plugin gpushare restarted and that still do not show the pool's mode (or whose
    # plugin never got Ready) keep using rollout.maxUnavailable (policy.rollout.in_flight): when
    # they use all of it, the nodes still waiting for their turn wait for them.
    awaiting = {p.node for p in plans if p.pool == name and p.awaiting_mode}
    stuck = [s for s in states if s.name in awaiting and s.phase in ("Degraded", "Failed")]
    waiting = [s for s in moving if s.phase == "Pending" and s.name in member]
    stalled = bool(waiting) and len(stuck) >= pool.spec.rollout.max_unavailable_for(max(matched, 1))
    if held_nodes:
        put(
            cond.PROGRESSING,
            "True",
            cond.REASON_NODES_HELD,
            f"{len(held_nodes)} node(s) held by running GPU pods: "
            + "; ".join(f"{s.name}: {s.message}" for s in held_nodes[:3]),
        )
    elif stalled and not deleting:
        put(
            cond.PROGRESSING,
            "True",
            cond.REASON_ROLLOUT_STALLED,
            f"{len(waiting)} node(s) wait for their turn: rollout.maxUnavailable is used up by "
            f"{_names([s.name for s in stuck])}, whose device plugin does not advertise "
            f"{mode} resources {plugin.ready_timeout_seconds}s "
            "(devicePlugin.readyTimeoutSeconds) after its restart. Fix or restart the device plugin "
            f"there, or label the node {c.LABEL_SKIP}=true to leave it out",
        )
    elif moving:
        propagating = [s for s in moving if s.reason == cond.NODE_CONFIG_PROPAGATING]
        put(
            cond.PROGRESSING,
            "True",
            cond.REASON_ROLLING_OUT,
            f"{len(moving)} node(s) changing: {_names([s.name for s in moving])}"
            + (f"; {len(propagating)} {propagating[0].message}" if propagating else ""),
        )
    else:
        put(cond.PROGRESSING, "False", cond.REASON_ROLLOUT_COMPLETE, "no node is changing")

    failed = [s for s in states if s.phase == "Failed"]
    unisolated = [s for s in states if s.reason == ISOLATION_UNAVAILABLE]
    stale = [s for s in states if s.reason in (cond.PLUGIN_MODE_STALE, cond.PLUGIN_RESTART_NEEDED)]
    unregistered_nodes = [s.name for s in states if s.reason == cond.PLUGIN_NOT_REGISTERED]
    if invalid:
        put(cond.DEGRADED, "True", cond.REASON_INVALID_SPEC, invalid)
    elif stale and not failed:
        if all(s.reason == cond.PLUGIN_RESTART_NEEDED for s in stale):
            put(
                cond.DEGRADED,
                "True",
                cond.PLUGIN_RESTART_NEEDED,
                f"{len(stale)} node(s) need a device plugin restart to advertise {mode} "
                f"resources (devicePlugin.restart is Never): {_names([s.name for s in stale])}",
            )
        else:
            put(
                cond.DEGRADED,
                "True",
                cond.PLUGIN_MODE_STALE,
                f"{len(stale)} node(s) do not advertise {mode} resources: "
                + "; ".join(f"{s.name}: {s.message}" for s in stale[:3]),
            )
    elif unregistered_nodes and not failed:
        put(
            cond.DEGRADED,
            "True",
            cond.PLUGIN_NOT_REGISTERED,
            f"{len(unregistered_nodes)} node(s) have no device plugin registered with the kubelet (GPU pods "
            f"are refused there): {_names(unregistered_nodes)}" + refused_note,
        )
    elif unisolated and not failed:
        put(
            cond.DEGRADED,
            "True",
            ISOLATION_UNAVAILABLE,
            f"cGPU memory isolation is not active on {len(unisolated)} node(s): "
            + _names([s.name for s in unisolated]),
        )
    elif failed:
        put(
            cond.DEGRADED,
            "True",
            failed[0].reason if len({s.reason for s in failed}) == 1 else cond.REASON_NODES_FAILED,
            f"{len(failed)} node(s) failed: " + "; ".join(f"{s.name}: {s.message}" for s in failed[:3]),
        )
    else:
        put(cond.DEGRADED, "False", cond.REASON_AS_EXPECTED, "no node failed")

    conflicts = [s for s in states if s.phase == "Conflict"]
    if conflicts:
        put(
            cond.CONFLICT,
            "True",
            cond.REASON_NODES_IN_MULTIPLE_POOLS,
            f"{len(conflicts)} node(s) selected by more than one pool, left unchanged: "
            + "; ".join(f"{s.name} ({s.message})" for s in conflicts[:_LIST_MAX]),
        )
    else:
        put(cond.CONFLICT, "False", cond.REASON_NO_CONFLICTS, "no node is selected by another pool")

    order = {
        "Failed": 0,
        "Conflict": 1,
        "Held": 2,
        "Degraded": 3,
        "Restarting": 4,
        "Pending": 5,
        "Skipped": 6,
    }
    listed = sorted(states, key=lambda s: (order.get(s.phase, 9), s.name))[:MAX_NODE_STATUSES]
    status = GPUSharePoolStatus.model_validate(
        {
            "observedGeneration": generation,
            "backend": backend.name,
            "schedule": mode,
            "conditions": conditions,
            "nodes": counts,
            "capacity": capacity,
            "allocated": allocated,
            "nodeStatuses": [
                {"name": s.name, "phase": s.phase, "reason": s.reason, "message": s.message or None}
                for s in listed
            ],
        }
    )
    return status.dump()
