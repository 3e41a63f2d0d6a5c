"""The admission rules' live context (pools from Kopf's index, nodes from a watch), cached between
reviews.

``ContextCache.context`` builds the rules' ``Context`` from a pools index (Kopf's: a mapping of
stores) and a nodes index (``name -> [NodeInfo]``, fed by the webhook's own paged Node
list-watch through ``node_event``/``nodes_listed``, not a Kopf index: Kopf's per-object machinery
made the first listing of thousands of Nodes cost minutes and held every other handler until it
was done). It rebuilds the context only when a pool or node changed in a way that matters (an
equal NodeInfo is replaced by the stored object, so node heartbeats do not invalidate it). The
indexes may be empty during the first seconds after start: the rules then resolve pools from the
ACK labels alone (kopf-notes.md §1.6).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from gpushare.admission import EMPTY_CONTEXT, Context, NodeInfo
from gpushare.admission.model import node_info, node_of
from gpushare.api.v1alpha1 import GPUSharePool, PoolValidationError, parse_pool
from gpushare.policy import NodeView

T = TypeVar("T")


class ContextCache:
    """The live context, rebuilt only when an indexed pool or node changes in a way that matters."""

    def __init__(self) -> None:
        self._nodes: dict[str, NodeInfo] = {}
        self._pools: dict[str, GPUSharePool] = {}
        #: name -> (resourceVersion, the parsed pool or None): pool bodies parsed once per version
        #: (an index of raw bodies: ``gpushare run --webhook`` reads the operator's own index).
        self._bodies: dict[str, tuple[str, GPUSharePool | None]] = {}
        self._key: tuple[int, ...] | None = None
        self._context: Context = EMPTY_CONTEXT
        #: Kopf's live pools index (handed over by the startup handler) and the nodes index (the
        #: watch's ``fed``, handed over when the watch starts) for the direct path.
        self.pools_index: Any = None
        self.nodes_index: Any = None
        #: name -> [NodeInfo], kept by ``node_event``/``nodes_listed`` (the Node watch's callbacks).
        self.fed: dict[str, list[NodeInfo]] = {}
        #: Bumped whenever ``fed`` changes in a way that matters, so that a review reads one
        #: number instead of scanning every node (at 1000 nodes that scan cost more than the rules).
        self.fed_version = 0

    def node_event(self, type_: str, obj: Mapping[str, Any]) -> None:
        """A Node watch event (``gpushare.k8s.watch.OnEvent``)."""
        name = str((obj.get("metadata") or {}).get("name") or "")
        self._feed(name, None if type_ == "DELETED" else node_info(obj))

    def _feed(self, name: str, info: NodeInfo | None) -> None:
        """Keep ``fed[name]`` (None: the node is gone); bump ``fed_version`` when it changed."""
        if info is None:
            if self.fed.pop(name, None) is not None:
                self.fed_version += 1
            return
        stored = self.node(info)
        old = self.fed.get(name)
        if old is None or len(old) != 1 or old[0] is not stored:
            self.fed[name] = [stored]
            self.fed_version += 1

    def node_view(self, type_: str, name: str, view: NodeView | None) -> None:
        """A Node watch event as the operator's projection (``handlers.watch.NodeViewListener``:
        in ``gpushare run --webhook`` the operator's Node watch feeds this cache)."""
        if type_ == "DELETED" or view is None:
            self._feed(name, None)
        else:
            self._feed(name, node_of(view.name, view.labels, view.allocatable, view.annotations))

    def nodes_listed(self, names: set[str]) -> None:
        """After a complete list (``gpushare.k8s.watch.OnListed``): forget the nodes not in it."""
        for name in set(self.fed) - names:
            self._feed(name, None)

    def node(self, info: NodeInfo) -> NodeInfo:
        """The stored NodeInfo when equal (so heartbeats do not invalidate the context)."""
        old = self._nodes.get(info.name)
        if old == info and old is not None:
            return old
        self._nodes[info.name] = info
        return info

    def pool(self, pool: GPUSharePool) -> GPUSharePool:
        old = self._pools.get(pool.name)
        if old == pool and old is not None:
            return old
        self._pools[pool.name] = pool
        return pool

    @property
    def ready(self) -> bool:
        """True once the startup handler has handed over the indexes."""
        return self.pools_index is not None and self.nodes_index is not None

    def live(self) -> Context:
        """The context from the handed-over indexes."""
        return self.context(self.pools_index, self.nodes_index)

    def parsed(self, body: Mapping[str, Any]) -> GPUSharePool | None:
        """A pool body as the rules read it (None: not a valid pool), parsed once per version."""
        meta = body.get("metadata") or {}
        name, version = str(meta.get("name") or ""), str(meta.get("resourceVersion") or "")
        known = self._bodies.get(name)
        if known is not None and known[0] == version and version:
            return known[1]
        try:
            pool: GPUSharePool | None = self.pool(parse_pool(dict(body)))
        except PoolValidationError:
            pool = None
        self._bodies[name] = (version, pool)
        return pool

    def _pool_values(self, index: Any) -> list[GPUSharePool]:
        """The pools of an index of parsed pools or of raw pool bodies (a handful)."""
        if not isinstance(index, Mapping):
            return []
        out: list[GPUSharePool] = []
        names: set[str] = set()
        for store in index.values():
            for value in store:
                if isinstance(value, Mapping):
                    names.add(str((value.get("metadata") or {}).get("name") or ""))
                    value = self.parsed(value)
                if isinstance(value, GPUSharePool):
                    out.append(value)
        if len(self._bodies) > len(names):  # a pool deleted: forget its parsed body
            self._bodies = {k: v for k, v in self._bodies.items() if k in names}
        return out

    def context(self, pools_index: Any, nodes_index: Any) -> Context:
        pools = self._pool_values(pools_index)  # a handful: scanned on every review
        if nodes_index is self.fed:  # ours: its version says whether anything changed
            key: tuple[int, ...] = (len(pools), *map(id, pools), -1, self.fed_version)
            if key == self._key:
                return self._context
        nodes = _values(nodes_index, NodeInfo)
        if nodes_index is not self.fed:
            key = (len(pools), *map(id, pools), *map(id, nodes))
        if key != self._key:
            self._context = Context.build(sorted(pools, key=lambda p: p.name), nodes)
            self._key = key
            if len(self._nodes) > len(nodes):  # forget deleted nodes
                alive = {n.name for n in nodes}
                self._nodes = {k: v for k, v in self._nodes.items() if k in alive}
        return self._context


def _values(index: Any, kind: type[T]) -> list[T]:
    if not isinstance(index, Mapping):
        return []
    out: list[T] = []
    for store in index.values():
        out.extend(v for v in store if isinstance(v, kind))
    return out
