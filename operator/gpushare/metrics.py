"""Prometheus metrics of the gpushare operator and its admission webhook.

Metric objects live in one private registry so tests and several operators in one process do
not collide with the global default registry. ``serve(port)`` exposes them over HTTP.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from gpushare.api.quantity import quantity_int
from gpushare.backends import BACKENDS

REGISTRY = CollectorRegistry(auto_describe=True)

RECONCILE_SECONDS = Histogram(
    "gpushare_reconcile_duration_seconds",
    "Time of one reconcile pass of a GPUSharePool (observe, plan, apply, status)",
    ["pool", "result"],
    registry=REGISTRY,
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
LABEL_PATCHES = Counter(
    "gpushare_label_patches_total",
    "Node patches that changed managed labels, by pool and kind of change",
    ["pool", "action"],
    registry=REGISTRY,
)
PLUGIN_RESTARTS = Counter(
    "gpushare_plugin_restarts_total",
    "Device plugin restarts by result (deleted, ready, timeout, no_plugin)",
    ["pool", "result"],
    registry=REGISTRY,
)
NODES = Gauge(
    "gpushare_pool_nodes",
    "Nodes of a pool by phase, as last reported in the pool's status",
    ["pool", "phase"],
    registry=REGISTRY,
)
API_WRITES = Counter(
    "gpushare_api_writes_total",
    "Write requests the operator sent to the Kubernetes API, by verb and resource",
    ["verb", "resource"],
    registry=REGISTRY,
)
API_ERRORS = Counter(
    "gpushare_api_errors_total",
    "Failed Kubernetes API requests (each attempt), by verb, resource and HTTP status (0 = connection)",
    ["verb", "resource", "code"],
    registry=REGISTRY,
)
PLANNED_NODES = Counter(
    "gpushare_planned_nodes_total",
    "Nodes the planner was run on (only changed nodes are planned; every node on a pool change or resync)",
    registry=REGISTRY,
)
EVICTIONS = Counter(
    "gpushare_evictions_total",
    "Pod evictions for mode switches, by result (evicted, blocked_by_pdb, gone)",
    ["pool", "result"],
    registry=REGISTRY,
)

ADMISSION_REQUESTS = Counter(
    "gpushare_admission_requests_total",
    "Admission requests answered by the webhook, by resource kind, decision (allowed, warned, denied,"
    " error) and rule id ('none' when no rule fired; one count per distinct rule)",
    ["kind", "decision", "rule"],
    registry=REGISTRY,
)
ADMISSION_SECONDS = Histogram(
    "gpushare_admission_duration_seconds",
    "Time the webhook spent deciding one admission request, by resource kind and decision",
    ["kind", "decision"],
    registry=REGISTRY,
    buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1),
)

POOL_INFO = Gauge(
    "gpushare_pool_info",
    "1 for each pool, labelled with its sharing backend (ack, nvidia) and the mode it puts on its "
    "nodes (the backend's mode label: ACK's schedule cgpu, share or core_mem; NVIDIA's config name)",
    ["pool", "backend", "mode"],
    registry=REGISTRY,
)
POOL_CONDITION = Gauge(
    "gpushare_pool_condition",
    "1 when the pool's condition (Ready, Progressing, Degraded, Conflict) is True, else 0",
    ["pool", "condition"],
    registry=REGISTRY,
)
POOL_MATCHED = Gauge(
    "gpushare_pool_matched_nodes",
    "Nodes that belong to the pool (selected, not skipped, not in conflict), as in status.nodes.matched",
    ["pool"],
    registry=REGISTRY,
)
POOL_READY_TIMEOUT = Gauge(
    "gpushare_pool_ready_timeout_seconds",
    "The pool's spec.devicePlugin.readyTimeoutSeconds: how long one node's device plugin restart may take",
    ["pool"],
    registry=REGISTRY,
)
POOL_LAST_PROGRESS = Gauge(
    "gpushare_pool_last_progress_timestamp_seconds",
    "Unix time the pool's node counts last changed (or the operator first saw the pool); "
    "a rollout that stays Progressing long after it is stuck",
    ["pool"],
    registry=REGISTRY,
)

POOL_FAILED_NODES = Gauge(
    "gpushare_pool_failed_nodes",
    "Nodes of the pool whose status.nodeStatuses entry is Failed, by its reason (e.g. MigConfigFailed, "
    "MigConfigStuck, MigOperandsPaused: a MIG switch failed, stuck or left operands paused)",
    ["pool", "reason"],
    registry=REGISTRY,
)
POOL_PENDING_PODS = Gauge(
    "gpushare_pool_pending_pods",
    "GPU-sharing pods that target the pool and wait for want of GPU resources (status.demand.pendingPods)",
    ["pool"],
    registry=REGISTRY,
)
#: Resource → the gauge of what the pool's waiting pods request of it, summed
#: (``status.demand.requests``), for the resources the backends name (``SharingBackend.pending_gauges``).
POOL_PENDING_REQUESTS: dict[str, Gauge] = {
    resource: Gauge(name, description, ["pool"], registry=REGISTRY)
    for backend in BACKENDS.values()
    for resource, name, description in backend.pending_gauges
}
#: Per resource (a label): what the pool's waiting pods request (``status.demand.requests``: ACK's
#: memory and compute share, NVIDIA's slots, a MIG pool's devices per profile), what its nodes
#: advertise (``status.capacity``) and what its pods hold (``status.allocated``). One series per
#: resource a pool names: a few per pool (a MIG pool: one per profile of its geometry).
POOL_PENDING_RESOURCE = Gauge(
    "gpushare_pool_pending_requests",
    "What the pool's waiting pods request of each resource, summed (status.demand.requests: ACK's "
    "gpu-mem and gpu-core.percentage, NVIDIA's slots, a MIG pool's devices per profile)",
    ["pool", "resource"],
    registry=REGISTRY,
)
POOL_CAPACITY = Gauge(
    "gpushare_pool_capacity",
    "What the pool's nodes advertise of each resource, summed (status.capacity; a MIG pool: its "
    "devices per profile)",
    ["pool", "resource"],
    registry=REGISTRY,
)
POOL_ALLOCATED = Gauge(
    "gpushare_pool_allocated",
    "What the unfinished pods on the pool's nodes request of each resource, summed (status.allocated)",
    ["pool", "resource"],
    registry=REGISTRY,
)
POOL_OLDEST_PENDING = Gauge(
    "gpushare_pool_oldest_pending_timestamp_seconds",
    "Unix time since which the pool's oldest waiting pod waits (absent when none waits)",
    ["pool"],
    registry=REGISTRY,
)
POOL_IDLE_NODES = Gauge(
    "gpushare_pool_idle_nodes",
    "The pool's idle nodes: Ready, not cordoned or held, advertising the pool's mode, no GPU pod",
    ["pool"],
    registry=REGISTRY,
)
POOL_LENT_NODES = Gauge(
    "gpushare_pool_lent_nodes",
    "Nodes of the pool lent to other pools (spec.lending), as in status.demand.loans",
    ["pool"],
    registry=REGISTRY,
)
LOANS = Counter(
    "gpushare_loans_total",
    "Loans of idle nodes by the lending pool, by event (lent, returned)",
    ["pool", "event"],
    registry=REGISTRY,
)

PHASES = ("Ready", "Pending", "Restarting", "Held", "Conflict", "Failed", "Skipped", "Degraded")
CONDITIONS = ("Ready", "Progressing", "Degraded", "Conflict")
#: The (backend, mode) each pool's ``gpushare_pool_info`` series carries now (NVIDIA's modes are
#: config names, not a fixed set: the old series is removed by what was set, not by a list).
_last_info: dict[str, tuple[str, str]] = {}
#: The last node counts seen per pool, to tell progress from standing still.
_last_counts: dict[str, tuple[tuple[str, int], ...]] = {}
#: The reasons ``POOL_FAILED_NODES`` has a series for, per pool (a reason gone is set to 0).
_last_failed: dict[str, set[str]] = {}
#: The resources each per-resource gauge carries now, per pool (a resource that goes, e.g. a profile
#: of an edited geometry, has its series removed).
_last_resources: dict[tuple[int, str], set[str]] = {}


def _set_resources(gauge: Gauge, pool: str, values: Any) -> None:
    """One series per resource of ``values`` (resource -> quantity); the pool's others removed."""
    values = values if isinstance(values, Mapping) else {}
    now = {str(r): quantity_int(v) or 0 for r, v in values.items()}
    key = (id(gauge), pool)
    for gone in _last_resources.get(key, set()) - set(now):
        with contextlib.suppress(KeyError):
            gauge.remove(pool, gone)
    for resource, value in now.items():
        gauge.labels(pool=pool, resource=resource).set(value)
    _last_resources[key] = set(now)


def _forget_resources(*gauges: Gauge, pool: str) -> None:
    for gauge in gauges:
        for resource in _last_resources.pop((id(gauge), pool), set()):
            with contextlib.suppress(KeyError):
                gauge.remove(pool, resource)


def set_pool_nodes(pool: str, counts: dict[str, int]) -> None:
    for phase in PHASES:
        NODES.labels(pool=pool, phase=phase).set(counts.get(phase, 0))


def set_pool_status(
    pool: str, status: Mapping[str, Any], *, ready_timeout_seconds: float, now: float | None = None
) -> None:
    """Export what the pool's status says: mode (``status.schedule``, the metric's ``mode`` label),
    conditions, matched nodes, and when it last moved.

    ``status`` is the status JSON the operator computed (camelCase keys). Cheap: a handful of
    gauge sets per reconcile pass.
    """
    info = (str(status.get("backend") or "ack"), str(status.get("schedule") or ""))
    before = _last_info.get(pool)
    if before is not None and before != info:
        with contextlib.suppress(KeyError):
            POOL_INFO.remove(pool, *before)
        del _last_info[pool]
    if info[1]:
        POOL_INFO.labels(pool=pool, backend=info[0], mode=info[1]).set(1)
        _last_info[pool] = info
    by_type = {str(cond.get("type")): cond for cond in status.get("conditions") or []}
    for ctype in CONDITIONS:
        value = 1 if (by_type.get(ctype) or {}).get("status") == "True" else 0
        POOL_CONDITION.labels(pool=pool, condition=ctype).set(value)
    nodes = dict(status.get("nodes") or {})
    POOL_MATCHED.labels(pool=pool).set(int(nodes.get("matched", 0)))
    _set_resources(POOL_CAPACITY, pool, status.get("capacity"))
    _set_resources(POOL_ALLOCATED, pool, status.get("allocated"))
    POOL_READY_TIMEOUT.labels(pool=pool).set(ready_timeout_seconds)
    failed: dict[str, int] = {}
    for entry in status.get("nodeStatuses") or []:
        if entry.get("phase") == "Failed":
            reason = str(entry.get("reason") or "")
            failed[reason] = failed.get(reason, 0) + 1
    seen = _last_failed.setdefault(pool, set())
    for reason in seen | set(failed):
        POOL_FAILED_NODES.labels(pool=pool, reason=reason).set(failed.get(reason, 0))
    seen.update(failed)
    counts = tuple(sorted((str(k), int(v)) for k, v in nodes.items()))
    if _last_counts.get(pool) != counts:
        _last_counts[pool] = counts
        POOL_LAST_PROGRESS.labels(pool=pool).set(time.time() if now is None else now)


def set_pool_demand(pool: str, demand: Mapping[str, Any], *, oldest: Any = None) -> None:
    """Export ``status.demand`` (``oldest``: the oldest wait as a datetime, None when none waits)."""
    POOL_PENDING_PODS.labels(pool=pool).set(int(demand.get("pendingPods", 0)))
    requests = demand.get("requests") or {}
    for resource, gauge in POOL_PENDING_REQUESTS.items():
        gauge.labels(pool=pool).set(int(requests.get(resource, 0)))
    _set_resources(POOL_PENDING_RESOURCE, pool, requests)
    POOL_IDLE_NODES.labels(pool=pool).set(int(demand.get("idleNodes", 0)))
    POOL_LENT_NODES.labels(pool=pool).set(sum(1 for loan in demand.get("loans") or [] if loan.get("to")))
    if oldest is None:
        with contextlib.suppress(KeyError):
            POOL_OLDEST_PENDING.remove(pool)
    else:
        POOL_OLDEST_PENDING.labels(pool=pool).set(oldest.timestamp())


def forget_pool_demand(pool: str) -> None:
    for gauge in (
        POOL_PENDING_PODS,
        *POOL_PENDING_REQUESTS.values(),
        POOL_OLDEST_PENDING,
        POOL_IDLE_NODES,
        POOL_LENT_NODES,
    ):
        with contextlib.suppress(KeyError):
            gauge.remove(pool)
    _forget_resources(POOL_PENDING_RESOURCE, pool=pool)


def forget_pool(pool: str) -> None:
    for phase in PHASES:
        with contextlib.suppress(KeyError):
            NODES.remove(pool, phase)
    info = _last_info.pop(pool, None)
    if info is not None:
        with contextlib.suppress(KeyError):
            POOL_INFO.remove(pool, *info)
    for ctype in CONDITIONS:
        with contextlib.suppress(KeyError):
            POOL_CONDITION.remove(pool, ctype)
    for gauge in (POOL_MATCHED, POOL_READY_TIMEOUT, POOL_LAST_PROGRESS):
        with contextlib.suppress(KeyError):
            gauge.remove(pool)
    _last_counts.pop(pool, None)
    for reason in _last_failed.pop(pool, set()):
        with contextlib.suppress(KeyError):
            POOL_FAILED_NODES.remove(pool, reason)
    _forget_resources(POOL_CAPACITY, POOL_ALLOCATED, pool=pool)


def serve(port: int, addr: str = "127.0.0.1") -> None:
    """Serve ``/metrics`` on ``addr:port`` from a daemon thread (``port`` 0 = don't)."""
    if port:
        start_http_server(port, addr=addr, registry=REGISTRY)
