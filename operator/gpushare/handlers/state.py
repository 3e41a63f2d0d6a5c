"""``OperatorState``: what the operator's handlers share, carried in Kopf's ``memo``.

``gpushare run`` passes one ``OperatorState`` as ``kopf.operator(memo=...)``; Kopf hands every
handler a shallow copy of it (one per watched object), so the handlers annotate ``memo`` with this
class. ``started`` is set once by the startup handler (``lifecycle.configure``), before any watch
begins, and the copies share it and the ``plugin_namespace_reports`` dict.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gpushare.demand_loop import DemandTracker
from gpushare.handlers.options import RunOptions
from gpushare.k8s.client import ApiClient
from gpushare.k8s.cluster import Cluster
from gpushare.reconcile import Reconciler
from gpushare.webhook.gate import NvidiaGate

if TYPE_CHECKING:
    from gpushare.handlers.watch import NodeListener, NodeViewListener, Watches


@dataclass(frozen=True)
class Started:
    """What the startup handler builds from the kubeconfig."""

    api: ApiClient
    cluster: Cluster
    reconciler: Reconciler


@dataclass
class OperatorState:
    options: RunOptions = field(default_factory=RunOptions)
    #: None until the startup handler has run (and in a replica that never started).
    started: Started | None = None
    #: gpushare's own Node and Pod watches (set by the startup handler with ``started``).
    watches: Watches | None = None
    #: Pool UID -> the device-plugin namespace already reported as not allowed (one Event each).
    plugin_namespace_reports: dict[str, str] = field(default_factory=dict)
    #: Fed by the operator's Node watch too: with the raw objects, or with its projections (the
    #: webhook's context cache with ``--webhook``).
    node_listeners: list[NodeListener] = field(default_factory=list)
    view_listeners: list[NodeViewListener] = field(default_factory=list)
    #: The demand loop (status.demand, lending; set by the startup handler with ``started``).
    demand: DemandTracker | None = None
    #: The webhook configuration's NVIDIA gate (set by the startup handler with ``started``).
    gate: NvidiaGate | None = None

    def _started(self) -> Started:
        if self.started is None:
            raise RuntimeError("the operator's startup handler has not run: no API client yet")
        return self.started

    @property
    def cluster(self) -> Cluster:
        return self._started().cluster

    @property
    def reconciler(self) -> Reconciler:
        return self._started().reconciler
