"""Node and GPU/device-plugin Pod watches feeding the reconciler.

Two list-then-watch loops (``gpushare.k8s.watch.ListWatch``, raw JSON, lists in pages of 500) run
from the operator's startup to its cleanup, outside Kopf: Kopf's per-event machinery (a worker and
a memory per object, diff-base, loggers) made a backlog of node events at 3000 nodes cost minutes.
Each Node event becomes a slim projection (``NodeView.project``: every label, gpushare's
annotations, GPU allocatable) and each GPU or default device-plugin Pod event a ``PodView``
(labels kept only for plugin pods), handed to ``Reconciler.observe_node``/``observe_pod``, which
marks the node dirty and wakes only the pools it concerns; the raw object is dropped at once.

The echo of the operator's own write (a MODIFIED Node event at exactly the version the write
returned) is recognised from the event's first bytes and not parsed (``Feeds.known``): the
reconciler and the view listeners get the projection already made from the write's answer.

Pool passes wait for the first complete list of both (``wait_listed``), as Kopf's indexes made them
wait before; after that, never. The watches keep running in a replica paused by peering (its
indexes stay current for a takeover). Nothing is written to Nodes or Pods by the watches.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any, Protocol

import structlog

from gpushare.k8s.client import ApiClient
from gpushare.k8s.watch import ListWatch, object_key, run_all
from gpushare.policy import NodeView, PodView
from gpushare.policy.restart import is_plugin_pod
from gpushare.policy.views import pod_requests
from gpushare.reconcile import Reconciler

log = structlog.stdlib.get_logger("gpushare.watch")

#: Objects per page when a watch lists: the memory peak of a list is about one page of raw objects.
#: Measured at 3000 nodes + 3000 pods (peak RSS after the first list): 500 → 164 MiB, 200 → 129,
#: 100 → 122, 50 → 117.
PAGE = 100
#: The apiserver ends each watch after this long (then it is resumed from the last version).
SERVER_TIMEOUT = 300


def is_gpu_pod(spec: Mapping[str, Any]) -> bool:
    return bool(pod_requests(spec))


def relevant(obj: Mapping[str, Any]) -> bool:
    """A default device-plugin pod or a pod asking for GPU sharing (the pods the operator keeps)."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return is_plugin_pod(labels) or is_gpu_pod(obj.get("spec") or {})


#: The labels of every kept pod but a device plugin's: one shared empty mapping.
NO_LABELS: Mapping[str, str] = MappingProxyType({})


def pod_view(obj: Mapping[str, Any]) -> PodView:
    """The pod's projection; labels only for device plugin pods (matched by pod selectors)."""
    pod = PodView.from_obj(obj)
    return pod if is_plugin_pod(pod.labels) else replace(pod, labels=NO_LABELS)


class NodeListener(Protocol):
    """Another consumer of the same Node watch (the webhook's ``ContextCache``): one Node list and
    watch per process, not one per consumer."""

    def node_event(self, type_: str, obj: Mapping[str, Any]) -> None: ...

    def nodes_listed(self, names: set[str]) -> None: ...


class NodeViewListener(Protocol):
    """A consumer of the Node watch that reads the reconciler's projection (``NodeView``, made
    once per event for all of them; None for a deleted node) and ``nodes_listed``."""

    def node_view(self, type_: str, name: str, view: NodeView | None) -> None: ...

    def nodes_listed(self, names: set[str]) -> None: ...


class PodListener(Protocol):
    """Another consumer of the Pod watch (the demand loop, ``gpushare.demand_loop``)."""

    def pod_event(self, type_: str, obj: Mapping[str, Any]) -> None: ...

    def pods_listed(self, keys: set[str]) -> None: ...


class Feeds:
    """The callbacks of the two watches into one ``Reconciler`` (and the other node listeners)."""

    def __init__(
        self,
        reconciler: Reconciler,
        node_listeners: Sequence[NodeListener] = (),
        pod_listeners: Sequence[PodListener] = (),
        view_listeners: Sequence[NodeViewListener] = (),
    ) -> None:
        self.reconciler = reconciler
        self.node_listeners = tuple(node_listeners)
        self.pod_listeners = tuple(pod_listeners)
        self.view_listeners = tuple(view_listeners)

    def node(self, type_: str, obj: Mapping[str, Any]) -> None:
        view = None
        name = object_key(obj)
        if type_ == "DELETED":
            self.reconciler.forget_node(name)
        else:
            # The echo of the operator's own write is the object it already projected.
            rv = (obj.get("metadata") or {}).get("resourceVersion")
            view = self.reconciler.echo(name, rv) or NodeView.project(obj)
        for listener in self.node_listeners:
            listener.node_event(type_, obj)
        self._viewed(type_, name, view)

    def _viewed(self, type_: str, name: str, view: NodeView | None) -> None:
        """Hand a node's projection (None: deleted) to the reconciler and the view listeners."""
        if view is not None:
            self.reconciler.observe_node(view)
        for viewer in self.view_listeners:
            viewer.node_view(type_, name, view)

    def known(self, name: str, resource_version: str) -> bool:
        """The watch's echo of the operator's own write (``ListWatch``'s ``known``): delivered as
        the projection already made, without parsing the event; only when no listener needs the
        raw object."""
        if self.node_listeners:
            return False
        view = self.reconciler.echo(name, resource_version)
        if view is None:
            return False
        self._viewed("MODIFIED", name, view)
        return True

    def nodes_listed(self, names: set[str]) -> None:
        self.reconciler.nodes_listed(names)
        for listener in self.node_listeners:
            listener.nodes_listed(names)
        for viewer in self.view_listeners:
            viewer.nodes_listed(names)

    def pod(self, type_: str, obj: Mapping[str, Any]) -> None:
        if type_ != "DELETED" and relevant(obj):
            self.reconciler.observe_pod(pod_view(obj))
        else:  # gone, or no longer one the operator keeps (a no-op for pods it never kept)
            self.reconciler.forget_pod(object_key(obj))
        for listener in self.pod_listeners:  # the demand loop: pending GPU pods too
            listener.pod_event(type_, obj)

    def pods_listed(self, keys: set[str]) -> None:
        self.reconciler.pods_listed(keys)
        for listener in self.pod_listeners:
            listener.pods_listed(keys)


@dataclass
class Watches:
    """The running Node and Pod watches, their own API client, and the task running them."""

    api: ApiClient
    watches: list[ListWatch]
    task: asyncio.Task[None]

    async def wait_listed(self) -> None:
        """Until both watches have delivered their first complete list (at once afterwards)."""
        await asyncio.gather(*(w.listed.wait() for w in self.watches))

    async def stop(self) -> None:
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task
        await self.api.close()


def start(
    reconciler: Reconciler,
    api: ApiClient,
    node_listeners: Sequence[NodeListener] = (),
    pod_listeners: Sequence[PodListener] = (),
    view_listeners: Sequence[NodeViewListener] = (),
) -> Watches:
    """Start the Node and Pod watches on ``api`` (their own client: a long write burst never delays
    an event), feeding ``reconciler``, ``node_listeners``, ``pod_listeners`` and ``view_listeners``."""
    feeds = Feeds(reconciler, node_listeners, pod_listeners, view_listeners)
    watches = [
        ListWatch(
            api,
            "nodes",
            feeds.node,
            feeds.nodes_listed,
            page=PAGE,
            server_timeout=SERVER_TIMEOUT,
            known=feeds.known,
        ),
        ListWatch(api, "pods", feeds.pod, feeds.pods_listed, page=PAGE, server_timeout=SERVER_TIMEOUT),
    ]
    task = asyncio.create_task(_run(watches), name="gpushare node and pod watches")
    return Watches(api, watches, task)


async def _run(watches: list[ListWatch]) -> None:
    loop = asyncio.get_running_loop()
    started = loop.time()
    task = asyncio.create_task(run_all(watches))
    try:
        await asyncio.gather(*(w.listed.wait() for w in watches))
        log.info("Listed Nodes and Pods", seconds=round(loop.time() - started, 2))
        await task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
