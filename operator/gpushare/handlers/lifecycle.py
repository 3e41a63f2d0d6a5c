"""Operator-wide handlers: settings, API client, Kopf's own login, liveness probe."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

import kopf
import structlog

from gpushare import constants as c
from gpushare import lazy_client, metrics
from gpushare.demand_loop import DemandTracker
from gpushare.handlers import watch
from gpushare.handlers.pools import PROGRESS
from gpushare.handlers.state import OperatorState, Started
from gpushare.k8s import ApiError
from gpushare.k8s.client import WATCH_READ_BUFSIZE, kopf_connection, load_configuration, new_api_client
from gpushare.k8s.cluster import Cluster
from gpushare.k8s.discovery import WHY_AND_FIX, Served, wait_served
from gpushare.reconcile import Reconciler
from gpushare.webhook.gate import NvidiaGate

log = structlog.stdlib.get_logger("gpushare.operator")
#: Kopf's cluster-wide peering resource (``--peering``)
PEERING_GROUP_VERSION, PEERING_PLURAL = "kopf.dev/v1", "clusterkopfpeerings"


def _say_waiting(left: list[Served], seconds: float) -> None:
    log.warning(
        "Waiting for the API server to serve what the operator watches",
        why=WHY_AND_FIX,
        missing=[f"{plural}.{gv}" for gv, plural in left],
        seconds=round(seconds, 1),
    )


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, memo: OperatorState, **_: Any) -> None:
    """Every Kopf setting in one place; the API client and reconciler go into the memo."""
    options = memo.options
    # Kopf's own bookkeeping lives under our domain, on GPUSharePools only.
    settings.persistence.finalizer = c.FINALIZER
    settings.persistence.progress_storage = PROGRESS
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=c.GROUP, key="last-handled-configuration"
    )
    # Events are posted by gpushare.k8s (LabelsApplied, NodeHeld, ...); Kopf adds only its
    # handler failures.
    settings.posting.enabled = True
    settings.posting.level = logging.WARNING
    settings.posting.loggers = False
    # Peering: with --peering NAME several replicas pause behind the highest priority (random
    # unless --priority); the ClusterKopfPeering object must exist (mandatory).
    settings.peering.mandatory = bool(options.peering)
    settings.peering.stealth = True
    # Restarting watches promptly after apiserver outages.
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.watching.reconnect_backoff = 1.0
    # Kopf lists (GPUSharePools, peering) in pages; Nodes and Pods are watched by gpushare itself
    # (handlers.watch), not by Kopf.
    settings.watching.chunk_size = 500
    settings.execution.max_workers = 4

    # "lazy" under `gpushare run`; "eager" (about 30 MiB more) when Kopf imported the client first.
    log.info("Kubernetes client models", **lazy_client.state())
    cfg = await load_configuration(options.kubeconfig, context=options.context)
    api = new_api_client(cfg)
    # Kopf resolves GPUSharePools (and its peering resource) once, after this handler: wait until
    # the apiserver serves them (one that is starting may not yet), or they are never served.
    wanted = [(f"{c.GROUP}/{c.VERSION}", c.PLURAL)]
    wanted += [(PEERING_GROUP_VERSION, PEERING_PLURAL)] if options.peering else []
    waited = await wait_served(api, wanted, say=_say_waiting)
    if waited >= 1:
        log.info("APIs served", seconds=round(waited, 1))
    cluster = Cluster(
        api, events_namespace=options.events_namespace, plugin_namespaces=options.plugin_namespaces
    )
    reconciler = Reconciler(cluster, config_retention=timedelta(seconds=options.nvidia_config_retention))
    memo.started = Started(api=api, cluster=cluster, reconciler=reconciler)
    # The demand loop (status.demand, lending) listens to the same watches (handlers.demand).
    memo.demand = DemandTracker(cluster, reconciler)
    # The webhook configuration's NVIDIA gate (handlers.gate): its own client, as the watches have.
    memo.gate = NvidiaGate(new_api_client(cfg), options.webhook_configuration, options.webhook_targets)
    memo.watches = watch.start(
        reconciler,
        new_api_client(cfg, read_bufsize=WATCH_READ_BUFSIZE),
        memo.node_listeners,
        [memo.demand],
        [*memo.view_listeners, memo.demand],
    )
    await _check_plugin_namespaces(cluster)
    metrics.serve(options.metrics_port, options.metrics_addr)


async def _check_plugin_namespaces(cluster: Cluster) -> None:
    """Say at startup where device plugins can be restarted, and where RBAC disagrees."""
    allowed = cluster.plugin_namespaces
    if allowed is None:
        log.info("Device plugin pods may be restarted in any namespace the operator's RBAC allows")
        return
    log.info("Device plugin pods are restarted only in these namespaces", namespaces=sorted(allowed))
    try:
        denied = await cluster.plugin_namespaces_denied()
    except ApiError as exc:
        log.warning("Could not check the operator's pod delete permission", error=str(exc))
        return
    if denied:
        log.error(
            "The operator may not delete pods in these device-plugin namespaces: grant it the Role "
            "of manifests/operator/device-plugin-rbac.yaml there, or drop them from --plugin-namespaces",
            namespaces=denied,
        )


@kopf.on.cleanup()
async def close(memo: OperatorState, **_: Any) -> None:
    if memo.watches is not None:
        await memo.watches.stop()
    if memo.gate is not None:
        await memo.gate.api.close()
    if memo.started is not None:
        await memo.started.api.close()


@kopf.on.login()
async def login(memo: OperatorState, **_: Any) -> kopf.ConnectionInfo:
    """Kopf's own watches use the same credentials as gpushare (``--kubeconfig`` or in-cluster)."""
    options = memo.options
    return await kopf_connection(options.kubeconfig, options.context, options.events_namespace)


@kopf.on.probe(id="pools")
def probe_pools(memo: OperatorState, **_: Any) -> int:
    """Liveness: the number of pools this replica reconciles (0 while paused by peering)."""
    return len(memo.started.reconciler.wakeups) if memo.started is not None else 0
