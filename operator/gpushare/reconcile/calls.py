"""Every API call of a reconcile pass: node patches, evictions, plugin pod deletes, status, Events,
and the few reads a pass makes itself (a node after a conflict, the pods of a node to confirm).

Each call does one thing and returns what happened (the written node, gone, refused, the
error): the pass decides what follows. A node is written by one pass at a time (``claim``: the
only step shared between pools, there is no global lock).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import structlog

from gpushare import metrics
from gpushare.k8s import ApiError, ApiUnavailable, Conflict
from gpushare.k8s.cluster import node_ref
from gpushare.k8s.cluster_api import ClusterAPI
from gpushare.policy import NodeView
from gpushare.policy.events import Event
from gpushare.policy.views import PluginPod, PodView
from gpushare.reconcile.batch import WRITE_CONCURRENCY

log = structlog.stdlib.get_logger("gpushare.reconciler")


@dataclass(frozen=True)
class NodeWrite:
    """The outcome of one node patch."""

    #: The node as written (None with ``gone``, ``conflict`` or ``error``).
    obj: dict[str, Any] | None = None
    #: 404: the node is gone.
    gone: bool = False
    #: 409: the node changed since the version the patch was made from.
    conflict: bool = False
    error: ApiError | None = None


def describe(exc: ApiError) -> str:
    return f"HTTP {exc.status} {exc.reason}" if not isinstance(exc, ApiUnavailable) else str(exc)


class PassCalls:
    """The API calls of every pass, on one ``ClusterAPI``."""

    def __init__(self, cluster: ClusterAPI) -> None:
        self.cluster = cluster
        #: Nodes a pass is writing now (any pool's).
        self.claimed: set[str] = set()
        # The bound on a pool's writes in flight. Each pass already runs at most
        # WRITE_CONCURRENCY workers; this bound also holds while two passes of one pool overlap
        # (the daemon stopping while the deletion handler starts its cleanup).
        self._sems: dict[str, asyncio.Semaphore] = {}

    def bound(self, pool: str) -> asyncio.Semaphore:
        if pool not in self._sems:
            self._sems[pool] = asyncio.Semaphore(WRITE_CONCURRENCY)
        return self._sems[pool]

    def forget(self, pool: str) -> None:
        self._sems.pop(pool, None)

    @contextlib.contextmanager
    def claim(self, node: str) -> Iterator[bool]:
        """Claim ``node`` for this write (False: another pass is writing it; leave it)."""
        if node in self.claimed:
            yield False
            return
        self.claimed.add(node)
        try:
            yield True
        finally:
            self.claimed.discard(node)

    async def patch_node(
        self, pool: str, node: str, patch: dict[str, Any], seen: NodeView | None = None
    ) -> NodeWrite:
        """One JSON merge patch; with ``seen``, only onto the version it was planned from (a stale
        view, the index lagging behind someone else's write, must not yield a wrong patch)."""
        if seen is not None and seen.resource_version:
            patch.setdefault("metadata", {})["resourceVersion"] = seen.resource_version
        try:
            async with self.bound(pool):
                obj = await self.cluster.patch_node(node, patch)
        except Conflict:
            return NodeWrite(conflict=True)
        except ApiError as exc:
            return NodeWrite(error=exc)
        return NodeWrite(obj=obj) if obj is not None else NodeWrite(gone=True)

    async def read_node(self, node: str) -> dict[str, Any] | None:
        """The node as the apiserver has it now (None: gone, or the read failed)."""
        try:
            return await self.cluster.read_node(node)
        except ApiError:
            return None

    async def pods_on_node(self, node: str) -> list[PodView]:
        return await self.cluster.pods_on_node(node)

    async def evict(self, pool: str, node: str, pod: PodView) -> str | None:
        """Evict ``pod`` (blocking a mode switch of ``node``); the error text if that failed."""
        try:
            outcome = await self.cluster.evict_pod(pod.namespace, pod.name)
        except ApiError as exc:
            return f"evicting {pod.ref} failed: {exc}"
        metrics.EVICTIONS.labels(pool=pool, result=outcome).inc()
        log.info(
            "Evicted Pod" if outcome == "evicted" else "Eviction not done",
            pool=pool,
            node=node,
            pod=pod.ref,
            outcome=outcome,
        )
        return None

    async def delete_plugin_pods(self, pool: str, pods: Sequence[PluginPod]) -> list[PluginPod]:
        """Delete old device plugin pods (each only if still the same object); those deleted."""
        out = []
        for p in pods:
            async with self.bound(pool):
                deleted = await self.cluster.delete_pod(p.namespace, p.name, p.uid)
            if deleted:
                metrics.PLUGIN_RESTARTS.labels(pool=pool, result="deleted").inc()
                log.debug(
                    "Deleted device plugin Pod",
                    pool=pool,
                    node=p.node,
                    pod=f"{p.namespace}/{p.name}",
                    uid=p.uid,
                )
                out.append(p)
        return out

    async def patch_status(self, pool: str, patch: Mapping[str, Any]) -> bool | None:
        """Merge-patch the pool's status: True if written, False if the pool is gone, None on error."""
        try:
            return await self.cluster.patch_pool_status(pool, patch)
        except ApiError as exc:
            log.error("Patching GPUSharePool status failed", pool=pool, error=str(exc))
            return None

    async def post(self, ref: Mapping[str, str], events: Sequence[Event]) -> int:
        """Post ``events`` (about the pool ``ref``, or their node); returns how many went out."""
        posted = 0
        for e in events:
            target = node_ref(e.node) if e.node is not None else ref
            try:
                await self.cluster.event(target, reason=e.reason, message=e.message, type_=e.type)
            except ApiError as exc:
                log.warning("Posting Event failed", object=dict(target), reason=e.reason, error=str(exc))
            else:
                posted += 1
        return posted
