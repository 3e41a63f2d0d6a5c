"""The observed state: nodes, GPU/plugin pods and pools as the watches show them (no I/O).

Synchronous and free of side effects beyond itself: each ``observe_*``/``forget_*`` returns the
nodes it marked *dirty* (to be planned again), and the caller decides whom to wake. The
operator's own writes are believed (``fresh``: the returned node) until the watch shows them;
the watch's echo of its own write is recognised and marks nothing.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from gpushare.api.v1alpha1 import (
    DevicePlugin,
    GPUSharePool,
    GPUSharePoolSpec,
    GPUSharePoolStatus,
    ObjectMeta,
    PoolValidationError,
    parse_pool,
)
from gpushare.policy import ClusterPlan, NodeView, PodView, plan
from gpushare.policy.planner import PlanMemo


def rv(value: str) -> int:
    """A resourceVersion as a number (-1 if it is not one)."""
    try:
        return int(value)
    except ValueError:
        return -1


def pod_key(pod: PodView) -> str:
    """How the reconciler keys a pod (uid, or namespace/name without one)."""
    return pod.uid or f"{pod.namespace}/{pod.name}"


@dataclass
class Pools:
    """The pools, parsed: models of the valid ones, bodies of all, why the others are invalid."""

    models: list[GPUSharePool]
    raw: dict[str, Mapping[str, Any]]
    invalid: dict[str, str]
    deleting: set[str]


def parse_pools(raw_pools: Iterable[Mapping[str, Any]]) -> Pools:
    models: list[GPUSharePool] = []
    raw: dict[str, Mapping[str, Any]] = {}
    invalid: dict[str, str] = {}
    deleting: set[str] = set()
    for body in raw_pools:
        meta = body.get("metadata") or {}
        name = str(meta.get("name", ""))
        if not name:
            continue
        raw[name] = body
        if meta.get("deletionTimestamp"):
            deleting.add(name)
        try:
            models.append(parse_pool(dict(body)))
        except PoolValidationError as exc:
            invalid[name] = "; ".join(exc.problems)
    return Pools(models, raw, invalid, deleting)


def _pool_signature(body: Mapping[str, Any]) -> tuple[Any, ...]:
    """What of a pool changes plans (its status, our own write, does not)."""
    meta = body.get("metadata") or {}
    return (
        meta.get("uid"),
        meta.get("generation"),
        bool(meta.get("deletionTimestamp")),
        json.dumps(body.get("spec"), sort_keys=True, default=str),
    )


def placeholder(raw: Mapping[str, Any]) -> GPUSharePool:
    """A model of a pool whose spec does not parse, for ``pool_status`` (conditions, nodes)."""
    meta = raw.get("metadata") or {}
    try:
        status = GPUSharePoolStatus.model_validate(raw.get("status") or {})
    except ValueError:
        status = GPUSharePoolStatus()
    return GPUSharePool.model_construct(
        metadata=ObjectMeta.model_validate(
            {"name": meta.get("name"), "generation": meta.get("generation"), "uid": meta.get("uid")}
        ),
        spec=GPUSharePoolSpec.model_construct(),  # type: ignore[call-arg]
        status=status,
    )


class ClusterState:
    """Nodes, pods and pools as last seen, our own newer writes, and the nodes to plan again.

    Everything here may be lost on a restart: it is rebuilt from the watches.
    """

    def __init__(self) -> None:
        self.nodes: dict[str, NodeView] = {}
        self.pods: dict[str, dict[str, PodView]] = {}
        self._pod_node: dict[str, str] = {}
        self.fresh: dict[str, NodeView] = {}
        self.bodies: dict[str, Mapping[str, Any]] = {}
        self._signatures: dict[str, tuple[Any, ...]] = {}
        self.pools = parse_pools([])
        self.dirty: set[str] = set()
        #: Plan every node in the next pass (after a pool change, at start, on a resync).
        self.plan_all = True
        #: Plans of nodes alike but for their name (the nodes of a rollout: planned once a kind).
        self.memo = PlanMemo()
        #: Counts the changes of what is kept here (a reader tells "nothing changed" by it).
        self.generation = 0
        #: Node -> (its annotations then, the annotations to write): a switch under way the watch
        #: showed (``SharingBackend.switch_seen``), kept until written, as a pass may not see it.
        self.switches_seen: dict[str, tuple[dict[str, str | None], dict[str, str]]] = {}

    # --- nodes -----------------------------------------------------------------------------------

    def view(self, name: str) -> NodeView | None:
        """The node as last seen, or our own newer write until the watch has it."""
        fresh = self.fresh.get(name)
        return fresh if fresh is not None else self.nodes.get(name)

    def echo(self, name: str, resource_version: str | None) -> NodeView | None:
        """Our own written node if ``resource_version`` is exactly its version, else None."""
        fresh = self.fresh.get(name)
        if fresh is not None and resource_version and fresh.resource_version == resource_version:
            return fresh
        return None

    def observe_node(self, view: NodeView) -> bool:
        """A node as the watch shows it (added or modified); True if it is now dirty."""
        old = self.nodes.get(view.name)
        self.nodes[view.name] = view
        fresh = self.fresh.get(view.name)
        if fresh is not None:
            if rv(view.resource_version) < rv(fresh.resource_version):
                return False  # older than our own write: our write's plan stands
            del self.fresh[view.name]
            if view == fresh:
                return False  # the echo of our own write: already planned from it
        elif old is not None and old == view:
            return False  # only the resourceVersion (status heartbeat, ...) moved
        self.dirty.add(view.name)
        self.generation += 1
        return True

    def note_switch(self, view: NodeView, patch: Mapping[str, str]) -> None:
        """The watch showed ``view`` with a switch under way: ``patch`` records it (written by the
        pool's pass, :meth:`switch_seen`)."""
        self.switches_seen[view.name] = ({k: view.annotations.get(k) for k in patch}, dict(patch))

    def switch_seen(self, view: NodeView) -> dict[str, str] | None:
        """The record of a switch the watch saw under way on the node, while the annotations it
        replaces are still as they were then (None: none, or the record moved on)."""
        found = self.switches_seen.get(view.name)
        if found is None:
            return None
        before, patch = found
        if any(view.annotations.get(k) != v for k, v in before.items()):
            del self.switches_seen[view.name]
            return None
        return patch

    def forget_node(self, name: str) -> NodeView | None:
        """The node is gone (marked dirty); returns how it was last seen."""
        view = self.view(name)
        self.nodes.pop(name, None)
        self.fresh.pop(name, None)
        self.switches_seen.pop(name, None)
        self.dirty.add(name)
        self.generation += 1
        return view

    def missing_nodes(self, names: Collection[str]) -> list[str]:
        """Known nodes not in a complete list of ``names`` (a new list after a watch expired)."""
        return [name for name in self.nodes if name not in names]

    def believe(self, obj: Mapping[str, Any] | None) -> NodeView | None:
        """Our own write (the returned node), believed until the watch shows it; None if the watch
        already has it (or something newer)."""
        if not obj:
            return None
        view = NodeView.project(obj)
        seen = self.nodes.get(view.name)
        if seen is not None and rv(seen.resource_version) >= rv(view.resource_version):
            return None  # the watch was faster
        self.fresh[view.name] = view
        self.dirty.discard(view.name)
        self.generation += 1
        return view

    # --- pods ------------------------------------------------------------------------------------

    def observe_pod(self, pod: PodView) -> list[str]:
        """A GPU or device plugin pod as the watch shows it; returns the nodes now dirty."""
        key = pod_key(pod)
        marked = []
        before = self._pod_node.get(key)
        if before is not None and before != pod.node_name:
            marked += self.forget_pod(key)
        if not pod.node_name:
            return marked
        on_node = self.pods.setdefault(pod.node_name, {})
        if on_node.get(key) == pod:
            return marked
        on_node[key] = pod
        self._pod_node[key] = pod.node_name
        self.dirty.add(pod.node_name)
        self.generation += 1
        return [*marked, pod.node_name]

    def forget_pod(self, key: str) -> list[str]:
        """The pod is gone (or no longer kept); returns the node now dirty, if it was known."""
        node = self._pod_node.pop(key, None)
        if node is None:
            return []
        on_node = self.pods.get(node, {})
        on_node.pop(key, None)
        if not on_node:
            self.pods.pop(node, None)
        self.dirty.add(node)
        self.generation += 1
        return [node]

    def missing_pods(self, keys: Collection[str]) -> list[str]:
        """Keys of known pods not in a complete list of ``keys``."""
        return [key for key in self._pod_node if key not in keys]

    def pods_of(self, names: Iterable[str]) -> list[PodView]:
        return [pod for n in names for pod in self.pods.get(n, {}).values()]

    # --- pools -----------------------------------------------------------------------------------

    def set_pools(self, bodies: Iterable[Mapping[str, Any]]) -> bool:
        """The pools as the watch shows them; True if a spec or deletion changed (plan all again)."""
        raw = {str((b.get("metadata") or {}).get("name") or ""): b for b in bodies}
        raw.pop("", None)
        self.bodies = raw
        signatures = {name: _pool_signature(body) for name, body in raw.items()}
        if signatures == self._signatures:
            return False
        self._signatures = signatures
        self.pools = parse_pools(raw.values())
        self.plan_all = True
        self.generation += 1
        return True

    def live(self) -> set[str]:
        return set(self.pools.raw)

    def invalid(self) -> dict[str, str]:
        """Invalid pools, but those being deleted: their nodes are restored like a vanished pool's
        (default rollout and device plugin); an invalid pool's nodes otherwise stay as they are."""
        return {k: v for k, v in self.pools.invalid.items() if k not in self.pools.deleting}

    def model(self, name: str) -> GPUSharePool | None:
        return next((m for m in self.pools.models if m.name == name), None)

    def plugin_of(self, pool: str) -> DevicePlugin:
        """The device plugin of ``pool`` (the default one for a pool that is gone or invalid)."""
        owner = self.model(pool)
        return owner.spec.device_plugin if owner else DevicePlugin()

    # --- planning --------------------------------------------------------------------------------

    def plan_nodes(
        self, views: Iterable[NodeView], now: datetime, pods: Iterable[PodView] | None = None
    ) -> ClusterPlan:
        """The pure planner over ``views`` (with their watched pods, or ``pods``)."""
        views = list(views)
        pools = self.pools
        return plan(
            pools.models,
            views,
            self.pods_of(v.name for v in views) if pods is None else pods,
            now=now,
            deleting=pools.deleting,
            invalid=self.invalid(),
            memo=self.memo,
        )
