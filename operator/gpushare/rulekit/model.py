"""Plain data of the admission rules: findings and the context (pools, nodes) they judge against.

What a node's device plugin advertises of its GPUs is read by its backend
(``SharingBackend.advertised_gpus``): :meth:`NodeInfo.of` takes that reader, and
``gpushare.admission.model.node_info`` passes the backends'. The rule table is
``gpushare.admission.catalog``."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from functools import cached_property
from typing import Any

from gpushare import constants as c
from gpushare.api.loan import LoanRecord
from gpushare.api.quantity import integer_or_none
from gpushare.api.v1alpha1 import GPUSharePool
from gpushare.gpu.inventory import Inventory, inventory_from_annotations
from gpushare.rulekit.records import Verdict

#: Reads what a node's device plugin advertises of its GPUs from its allocatable: how many GPUs,
#: and their memory together in the plugin's unit (None: not advertised).
GpuReader = Callable[[Mapping[str, str]], tuple[int | None, int | None]]


def _nothing_advertised(allocatable: Mapping[str, str]) -> tuple[int | None, int | None]:
    return None, None


@dataclass(frozen=True)
class Finding:
    """One problem with one object. ``message`` is complete on its own (object, field, value, rule, fix)."""

    rule_id: str
    verdict: Verdict
    object: str
    container: str | None
    field: str
    value: str | None
    message: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class NodeInfo:
    """What the rules need to know about a Node."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    allocatable: Mapping[str, str] = field(default_factory=dict)
    #: Per-GPU memory in MiB from the agent's inventory annotation, when published.
    gpu_memory_mib: tuple[int, ...] = ()
    #: GPUs in the agent's inventory annotation (0 when none is published).
    inventory_gpus: int = 0
    #: GPUs the device plugin advertises, as its backend reads the allocatable (None: unknown).
    plugin_gpus: int | None = None
    #: GPU memory the device plugin advertises (all GPUs, in its unit), as its backend reads it.
    plugin_memory: int | None = None
    #: The pool that lent the node to the one its ``gpushare.io/pool`` label names (its
    #: ``gpushare.io/loan`` annotation); None when it is not lent.
    lender: str | None = None

    @classmethod
    def of(
        cls,
        name: str,
        labels: Mapping[str, Any],
        allocatable: Mapping[str, Any],
        annotations: Mapping[str, Any],
        advertised: GpuReader = _nothing_advertised,
    ) -> NodeInfo:
        """From a Node's parts (its object, or the operator's projection of it); ``advertised``
        reads what its device plugin advertises (the backends' reading:
        ``gpushare.admission.model.node_of``)."""
        inventory = _inventory(annotations)
        gpus = inventory.gpus if inventory else []
        alloc = {str(k): str(v) for k, v in allocatable.items()}
        plugin_gpus, plugin_memory = advertised(alloc)
        return cls(
            name=str(name or "<unnamed>"),
            labels={str(k): str(v) for k, v in labels.items()},
            allocatable=alloc,
            gpu_memory_mib=tuple(g.memory_mib for g in gpus if g.memory_mib > 0),
            inventory_gpus=len(gpus),
            plugin_gpus=plugin_gpus,
            plugin_memory=plugin_memory,
            lender=loan.lender if (loan := LoanRecord.parse(annotations.get(c.ANNOTATION_LOAN))) else None,
        )

    @property
    def gpu_count(self) -> int | None:
        """The node's GPUs, if known: the agent's inventory, else what the device plugin
        advertises, else the agent's count label (0 or unreadable: unknown)."""
        if self.inventory_gpus:
            return self.inventory_gpus
        for count in (self.plugin_gpus, _int_or_none(self.labels.get(c.LABEL_GPU_COUNT))):
            if count:
                return count
        return None

    @property
    def per_gpu_gib(self) -> int | None:
        """Memory of the smallest GPU in whole GiB (floored, like the device plugin), if known."""
        return self.per_gpu("GiB")

    def per_gpu(self, unit: str = "GiB") -> int | None:
        """Memory of the smallest GPU in whole ``unit`` (GiB floored like the device plugin, or MiB).

        The memory the device plugin advertises is counted in its unit, which is the unit of its
        pool (``spec.devicePlugin.memoryUnit``).
        """
        div = 1024 if unit == "GiB" else 1
        if self.gpu_memory_mib:
            return min(self.gpu_memory_mib) // div
        mem, count = self.plugin_memory, self.plugin_gpus
        if mem is not None and count:
            return mem // count
        mib = _int_or_none(self.labels.get(c.LABEL_GPU_MEMORY_MIB))
        if mib is not None:
            return mib // div
        return None


def _int_or_none(value: object) -> int | None:
    """A count the node reports (allocatable, a label): a whole number >= 0, else unknown (None)."""
    number = integer_or_none(value)
    return number if number is not None and number >= 0 else None


def _inventory(annotations: Mapping[str, Any]) -> Inventory | None:
    """The agent's inventory annotation (``{"gpus": [{"memoryMiB": N}, ...]}``), if readable."""
    try:
        return inventory_from_annotations({k: str(v) for k, v in annotations.items()})
    except ValueError:
        return None


@dataclass(frozen=True)
class Context:
    """Live or offline knowledge the pool rules use. Empty tuples mean "unknown"."""

    pools: tuple[GPUSharePool, ...] = ()
    nodes: tuple[NodeInfo, ...] = ()
    #: Derived data computed once per context (the webhook reuses a context until pools/nodes change).
    cache: dict[str, Any] = field(default_factory=dict, compare=False, hash=False, repr=False)

    @classmethod
    def build(cls, pools: Sequence[GPUSharePool] = (), nodes: Sequence[NodeInfo] = ()) -> Context:
        return cls(tuple(pools), tuple(nodes))

    def pool(self, name: str) -> GPUSharePool | None:
        return self.pools_by_name.get(name)

    @cached_property
    def pools_by_name(self) -> dict[str, GPUSharePool]:
        return {p.name: p for p in self.pools}

    @cached_property
    def node_pool(self) -> dict[str, str]:
        """node name -> the one pool that selects it (nodes selected by two or more pools are left out).

        A node lent by its pool (``spec.lending``) belongs to the borrower once it carries the
        borrower's ``gpushare.io/pool`` label (policy.lending; docs/concepts/demand-lending.md).
        """
        out: dict[str, str] = {}
        for node in self.nodes:
            owners = [p.name for p in self.pools if p.spec.node_selector.matches(node.labels)]
            if len(owners) == 1:
                out[node.name] = owners[0]
                lender = self.pool(owners[0])
                label = node.labels.get(c.LABEL_POOL)
                lending = lender.spec.lending if lender is not None else None
                if lending is not None and label is not None and label in lending.to and self.pool(label):
                    out[node.name] = label
        return out

    @cached_property
    def pool_per_gpu(self) -> dict[str, int]:
        """pool name -> the largest per-GPU memory among its nodes (in the pool's memory unit)."""
        out: dict[str, int] = {}
        for node in self.nodes:
            pool = self.node_pool.get(node.name)
            if pool is None:
                continue
            size = node.per_gpu(self.pool_unit(pool))
            if size is None:
                continue
            out[pool] = max(out.get(pool, 0), size)
        return out

    @cached_property
    def pool_gpus(self) -> dict[str, int]:
        """pool name -> the most GPUs any of its nodes has (nodes whose count is unknown left out)."""
        out: dict[str, int] = {}
        for node in self.nodes:
            pool = self.node_pool.get(node.name)
            count = node.gpu_count
            if pool is not None and count is not None:
                out[pool] = max(out.get(pool, 0), count)
        return out

    @property
    def pool_per_gpu_gib(self) -> dict[str, int]:
        """Kept for callers of the GiB-only days: per-GPU memory in each pool's unit."""
        return self.pool_per_gpu

    def pool_unit(self, name: str) -> str:
        """The device plugin's memory unit on a pool's nodes (GiB when the pool is unknown)."""
        pool = self.pool(name)
        return pool.spec.device_plugin.memory_unit if pool is not None else "GiB"


EMPTY_CONTEXT = Context()
