"""The admission rules' live context (pools and nodes from Kopf's indexes), cached between reviews.

Kopf hands the indexes to handlers as mappings of stores; ``ContextCache.context`` builds the
rules' ``Context`` from them and rebuilds it only when an indexed pool or node changed in a way
that matters (the index functions return the stored, equal object otherwise, so node heartbeats
do not invalidate it). Indexes may be empty during the first seconds after start: the rules then
resolve pools from the ACK labels alone (kopf-notes.md §1.6).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from gpushare.admission import EMPTY_CONTEXT, Context, NodeInfo
from gpushare.api.v1alpha1 import GPUSharePool

T = TypeVar("T")


class ContextCache:
    """The live context, rebuilt only when an indexed pool or node changes in a way that matters."""

    def __init__(self) -> None:
        self._nodes: dict[str, NodeInfo] = {}
        self._pools: dict[str, GPUSharePool] = {}
        self._key: tuple[int, ...] | None = None
        self._context: Context = EMPTY_CONTEXT
        #: Kopf's live index objects (handed over by the startup handler) for the direct path.
        self.pools_index: Any = None
        self.nodes_index: Any = None

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

    def context(self, pools_index: Any, nodes_index: Any) -> Context:
        pools = _values(pools_index, GPUSharePool)
        nodes = _values(nodes_index, NodeInfo)
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
