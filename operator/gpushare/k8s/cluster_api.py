"""``ClusterAPI``: the Kubernetes calls the reconciler makes, as a Protocol.

``gpushare.k8s.cluster.Cluster`` implements it over ``gpushare.k8s.rest`` (raw JSON); the unit tests'
in-memory stand-in (``FakeCluster`` in tests/unit/test_reconciler.py) implements it over a dict
of nodes. ``Reconciler`` takes a ``ClusterAPI``, so mypy checks both against this one surface
(``make lint`` runs mypy over ``tests/`` too).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from gpushare.policy import PodView
from gpushare.policy.views import PluginPod


class ClusterAPI(Protocol):
    """Reads and writes of one reconcile pass (see ``Cluster`` for what each call does)."""

    async def read_node(self, name: str) -> dict[str, Any] | None:
        """The node as the apiserver has it now; None if it is gone."""
        ...

    async def patch_node(self, name: str, patch: Mapping[str, Any]) -> dict[str, Any] | None:
        """One JSON merge patch of the node; None if it is gone (409 on a stale resourceVersion)."""
        ...

    async def pods_on_node(self, node: str) -> list[PodView]:
        """Pods bound to ``node`` that have not terminated."""
        ...

    async def plugin_pods(
        self, namespace: str, label_selector: str, node: str | None = None
    ) -> list[PluginPod]:
        """Device-plugin pods on ``node``, or on every node when ``node`` is None."""
        ...

    async def delete_pod(self, namespace: str, name: str, uid: str) -> bool:
        """Delete one pod if it is still the same object; False if already gone."""
        ...

    async def evict_pod(self, namespace: str, name: str) -> str:
        """Evict through the Eviction API: "evicted", "gone" or "blocked"."""
        ...

    async def read_configmap(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The ConfigMap; None if it does not exist."""
        ...

    async def patch_configmap(
        self, namespace: str, name: str, patch: Mapping[str, Any]
    ) -> dict[str, Any] | None:
        """One JSON merge patch of the ConfigMap (409 on a stale resourceVersion); None if it is gone."""
        ...

    async def patch_pool_status(self, name: str, status: Mapping[str, Any]) -> bool:
        """Merge-patch the pool's status subresource; False if the pool is gone."""
        ...

    async def event(
        self,
        obj: Mapping[str, str],
        *,
        reason: str,
        message: str,
        type_: str = "Normal",
    ) -> None:
        """Post a core/v1 Event about ``obj`` ({apiVersion, kind, name, uid})."""
        ...
