"""Prometheus metrics of the gpushare operator (and, later, the admission webhook).

Metric objects live in one private registry so tests and several operators in one process do
not collide with the global default registry. ``serve(port)`` exposes them over HTTP.
"""

from __future__ import annotations

import contextlib

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

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

PHASES = ("Ready", "Pending", "Restarting", "Held", "Conflict", "Failed", "Skipped", "Degraded")


def set_pool_nodes(pool: str, counts: dict[str, int]) -> None:
    for phase in PHASES:
        NODES.labels(pool=pool, phase=phase).set(counts.get(phase, 0))


def forget_pool(pool: str) -> None:
    for phase in PHASES:
        with contextlib.suppress(KeyError):
            NODES.remove(pool, phase)


def serve(port: int, addr: str = "127.0.0.1") -> None:
    """Serve ``/metrics`` on ``addr:port`` from a daemon thread (``port`` 0 = don't)."""
    if port:
        start_http_server(port, addr=addr, registry=REGISTRY)
