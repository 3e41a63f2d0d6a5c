"""GPUSharePool handlers: one reconcile loop per pool, spec updates, deletion with our finalizer."""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any, TypeVar

import kopf
import structlog

from gpushare import constants as c
from gpushare.backends import DEFAULT
from gpushare.handlers.state import OperatorState
from gpushare.k8s import ApiError
from gpushare.k8s.cluster import plugin_namespace_problem, pool_ref
from gpushare.reconcile.loop import pool_loop

log = structlog.stdlib.get_logger("gpushare.handlers")
#: Kopf's progress storage as configured (handlers.lifecycle); its touch-dummy annotation wakes a pool.
PROGRESS = kopf.AnnotationsProgressStorage(prefix=c.GROUP)
T = TypeVar("T")
#: What ``gpushare_pools`` indexes: each pool's body by name (Kopf passes it as that kwarg).
PoolIndex = kopf.Index[str, dict[str, Any]]


#: The id of the one index of GPUSharePools (Kopf passes it to handlers as the kwarg of that
#: name); with ``--webhook`` the admission handlers read it too.
POOL_INDEX = "gpushare_pools"


@kopf.index(c.GROUP, c.VERSION, c.PLURAL, id=POOL_INDEX)
async def gpushare_pools(name: str, body: kopf.Body, **_: Any) -> dict[str, dict[str, Any]]:
    return {name: copy.deepcopy(dict(body))}


def _values(index: Mapping[Any, Iterable[T]]) -> list[T]:
    return [value for store in index.values() for value in store]


# Kopf passes each index as a kwarg named after it; its callback protocols cannot declare such a
# kwarg (kopf's TODO: ParamSpec), so mypy rejects a handler that names one: hence the ignores.
@kopf.daemon(c.GROUP, c.VERSION, c.PLURAL, id="reconcile", cancellation_timeout=5.0)  # type: ignore[arg-type]
async def reconcile_loop(
    name: str, memo: OperatorState, stopped: kopf.DaemonStopped, gpushare_pools: PoolIndex, **_: Any
) -> None:
    """A pass now, then again when woken (a node, pod or pool it concerns changed) or requeued;
    every ``RESYNC`` seconds of quiet a pass plans every node again. Stopped, the replica gives
    the pool up unless it is being deleted (``gives_up_pool``)."""
    listed = memo.watches.wait_listed if memo.watches is not None else None
    try:
        await pool_loop(
            name, memo.reconciler, lambda: _values(gpushare_pools), listed=listed, stopped=stopped
        )
    finally:
        if gives_up_pool(stopped.reason):
            memo.reconciler.forget(name)


def gives_up_pool(reason: kopf.DaemonStoppingReason | None) -> bool:
    """Whether a replica whose reconcile daemon of a pool stopped for ``reason`` forgets the pool
    (its gauges, wake-up, status and Event memory; ``Reconciler.forget``), as a replica that never
    reconciled it.

    Paused by peering (another replica now reconciles), exiting, or cancelled: yes, or the standby
    would go on exporting the pool's last ``gpushare_pool_*`` values next to the leader's, stale,
    and a sum or an alert over the replicas would count them (a resumed replica starts again from
    the pool's stored status). Being deleted: no, the cleanup handler runs the pool's passes on in
    this replica and forgets the pool when its cleanup is done. Not stopped (None): no.
    """
    if reason is None:
        return False
    return not reason & kopf.DaemonStoppingReason.RESOURCE_DELETED


@kopf.on.update(c.GROUP, c.VERSION, c.PLURAL, field="spec")
async def spec_changed(name: str, memo: OperatorState, **_: Any) -> None:
    memo.reconciler.wakeup(name).set()


@kopf.on.delete(c.GROUP, c.VERSION, c.PLURAL, id="cleanup")  # type: ignore[arg-type]
async def cleanup(
    name: str, meta: kopf.Meta, memo: OperatorState, gpushare_pools: PoolIndex, **_: Any
) -> None:
    """Restore (or retain) the pool's nodes; the finalizer goes only when nothing is left.

    The handler keeps running passes (woken like the daemon) until the cleanup is done, rather
    than failing temporarily, so Kopf posts no Event per retry. If the operator stops meanwhile,
    the finalizer stays and the next operator resumes the cleanup.
    """
    listed = memo.watches.wait_listed if memo.watches is not None else None
    await pool_loop(name, memo.reconciler, lambda: _values(gpushare_pools), listed=listed, until_done=True)
    await memo.reconciler.cleanup_done(name, meta.get("uid"))


@kopf.on.event(c.GROUP, c.VERSION, c.PLURAL, id="deletion-touch")
async def deletion_touch(body: kopf.Body, patch: kopf.Patch, **_: Any) -> None:
    """Make sure a terminating pool gets the cycle that runs its cleanup (issue 58).

    Kopf 1.45.2 keeps a finalizer JSON-patch that lost a race (422) as the pool's pending patch
    until the next event. A replica paused by peering before that event keeps it; after the
    resume the re-listed, terminating pool is processed with it: Kopf skips the on.delete
    handler for a cycle with a pending patch, and the patch writes nothing (the other replica
    added the finalizer), so no event ever brings the next cycle. On.event handlers run before
    that gate with the same patch: a touch of Kopf's own dummy annotation (removed by Kopf on
    the next write) makes the write, whose event runs the cleanup.
    """
    if stale_patch_blocks_cleanup(body, pending=bool(patch)):
        PROGRESS.touch(body=body, patch=patch, value=datetime.now(UTC).isoformat())


def stale_patch_blocks_cleanup(body: Mapping[str, Any], *, pending: bool) -> bool:
    """Whether Kopf would skip the cleanup of this pool in this cycle for a patch left pending
    from an earlier one: the pool is terminating, our finalizer still holds it, a patch pends."""
    meta = body.get("metadata") or {}
    return pending and bool(meta.get("deletionTimestamp")) and c.FINALIZER in (meta.get("finalizers") or [])


@kopf.on.event(c.GROUP, c.VERSION, c.PLURAL)
async def plugin_namespace_check(
    name: str,
    uid: str,
    body: kopf.Body,
    type: str | None,  # noqa: A002
    memo: OperatorState,
    **_: Any,
) -> None:
    """A pool whose device plugin lives outside ``--plugin-namespaces`` gets one Warning Event.

    (Its restarts then fail with the same message in the pool's status; nothing is deleted.)
    """
    reports = memo.plugin_namespace_reports
    if type == "DELETED":
        reports.pop(uid, None)
        return
    plugin = dict((body.get("spec") or {}).get("devicePlugin") or {})
    namespace = str(plugin.get("namespace") or DEFAULT.default_plugin_namespace)
    problem = None
    if plugin.get("restart", "Rolling") != "Never":
        problem = plugin_namespace_problem(namespace, memo.cluster.plugin_namespaces)
    if problem is None:
        reports.pop(uid, None)
        return
    if reports.get(uid) == namespace:
        return
    reports[uid] = namespace
    log.error("Device plugin namespace not allowed", pool=name, namespace=namespace, problem=problem)
    try:
        await memo.cluster.event(
            pool_ref(name, uid),
            reason="DevicePluginNamespaceNotAllowed",
            message=f"GPUSharePool {name}: {problem}",
            type_="Warning",
        )
    except ApiError as exc:
        log.warning("Posting Event failed", pool=name, error=str(exc))
