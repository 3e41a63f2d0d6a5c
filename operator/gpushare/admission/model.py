"""Plain data of the admission rules engine: findings, the rule table, and the context (pools, nodes)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from functools import cached_property
from typing import Any, Literal

from gpushare import constants as c
from gpushare.api.quantity import integer_or_none
from gpushare.api.v1alpha1 import GPUSharePool
from gpushare.gpu.inventory import inventory_from_annotations

Verdict = Literal["deny", "warn"]


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
class Rule:
    id: str
    verdict: Verdict
    #: True when the target pool's ``spec.admission.mode`` decides deny / warn / skip.
    pool_mode: bool
    what: str
    fix: str


_RULE_LIST: tuple[Rule, ...] = (
    Rule(
        "GS001-core-percentage-step",
        "deny",
        False,
        f"`{c.RES_GPU_CORE}` is a whole number and a multiple of 5",
        "use the nearest multiple of 5 (e.g. 30 or 35 instead of 33)",
    ),
    Rule(
        "GS002-core-percentage-range",
        "deny",
        False,
        f"`{c.RES_GPU_CORE}` is from 5 to 100 (100 = one whole GPU)",
        "ask for 5..100; for more than one GPU use exclusive scheduling",
    ),
    Rule(
        "GS003-core-without-mem",
        "deny",
        False,
        f"a container asking for `{c.RES_GPU_CORE}` also asks for `{c.RES_GPU_MEM}`",
        f"add `{c.RES_GPU_MEM}` (GiB) to the same container's limits",
    ),
    Rule(
        "GS004-mem-positive-integer",
        "deny",
        False,
        f"`{c.RES_GPU_MEM}` is a positive whole number of the device plugin's memory unit (GiB, or MiB"
        " on pools with `devicePlugin.memoryUnit: MiB`), without a unit suffix",
        'write e.g. `aliyun.com/gpu-mem: 2` (not "2Gi", "1.5" or 0)',
    ),
    Rule(
        "GS005-mem-exceeds-gpu",
        "deny",
        True,
        f"`{c.RES_GPU_MEM}` of a container (and of the pod, or of each card with `{c.RES_GPU_COUNT}`)"
        " fits on one GPU of the target pool, in the pool's memory unit",
        "ask for at most the per-GPU memory of the pool, or target a pool with larger GPUs",
    ),
    Rule(
        "GS006-request-limit-mismatch",
        "deny",
        False,
        "requests and limits of the GPU-sharing resources are equal when both are given, and limits are set",
        "set only limits, or requests equal to limits",
    ),
    Rule(
        "GS007-pool-target-missing",
        "deny",
        True,
        "a pod asking for GPU sharing has a nodeSelector or required node affinity naming its pool",
        f"add `nodeSelector: {{{c.LABEL_POOL}: <pool>}}` (or the pool's ACK labels)",
    ),
    Rule(
        "GS008-pool-target-ambiguous",
        "deny",
        True,
        "the pod's node constraints confine it to pools of exactly one kind (cgpu, share or core_mem)",
        f"select one pool, e.g. `{c.LABEL_POOL}: <pool>` or `{c.LABEL_SCHEDULE}: <mode>`",
    ),
    Rule(
        "GS009-pool-kind-mismatch",
        "deny",
        True,
        "memory-only pods target pools without compute allocation; pods with "
        f"`{c.RES_GPU_CORE}` target pools with it (no mixing of job types on a node)",
        "target a pool of the matching kind, or add/remove the gpu-core.percentage request",
    ),
    Rule(
        "GS010-no-isolation-sizing",
        "warn",
        True,
        "a pod on a pool without memory isolation sees the whole GPU and must size itself",
        "read ALIYUN_COM_GPU_MEM_CONTAINER / ALIYUN_COM_GPU_MEM_DEV in the application",
    ),
    Rule(
        "GS011-pool-target-unknown",
        "deny",
        True,
        "the pod's node constraints match at least one known pool or GPU-sharing node",
        "fix the pool name or labels in the nodeSelector / node affinity",
    ),
    Rule(
        "GS012-unknown-gpu-resource",
        "deny",
        False,
        f"every `{c.GPU_RESOURCE_PREFIX}*` resource a container asks for is one a node can offer"
        f" ({', '.join(f'`{r}`' for r in c.KNOWN_GPU_RESOURCES)}); `{c.RES_GPU_COUNT}` and"
        " `aliyun.com/gpu` in a container are only warned about (they are not GPU-sharing requests)",
        "fix the resource name (the message suggests the closest one); no node offers a misspelled name",
    ),
    Rule(
        "GS013-gpu-count-split",
        "deny",
        False,
        f'a pod labelled `{c.RES_GPU_COUNT}: "M"` (ACK multi-GPU sharing) has M a whole number >= 1,'
        f" a total `{c.RES_GPU_MEM}` N with N/M whole, no `{c.RES_GPU_CORE}`, and targets a cgpu pool"
        " (memory isolation, shared compute)",
        "make N a multiple of M, drop gpu-core.percentage, and target a pool with memoryIsolation"
        " and no computeAllocation",
    ),
    Rule(
        "GS014-cgpu-disable-env",
        "warn",
        False,
        "a container does not set `CGPU_DISABLE` itself (the device plugin sets it on nodes with"
        f" `{c.LABEL_DISABLE_ISOLATION}=true`)",
        "remove CGPU_DISABLE from the env; choose isolation by the pool (memoryIsolation) instead",
    ),
    Rule(
        "GS015-workload-kind-unknown",
        "warn",
        False,
        f"an object whose containers ask for `{c.GPU_RESOURCE_PREFIX}*` is of a kind whose pod templates"
        " gpushare knows",
        "register the kind (a workload-kinds file: `gpushare check --kinds FILE`,"
        " `gpushare run --workload-kinds FILE`)",
    ),
    Rule(
        "GP001-pool-schema",
        "deny",
        False,
        "a GPUSharePool follows the API schema (field types, enums, ranges)",
        "correct the field named in the message (see `kubectl explain gsp.spec`)",
    ),
    Rule(
        "GP002-pool-compute-without-isolation",
        "deny",
        False,
        "`computeAllocation: true` requires `memoryIsolation: true`",
        "set memoryIsolation: true, or computeAllocation: false",
    ),
    Rule(
        "GP003-pool-empty-selector",
        "deny",
        False,
        "a pool's `nodeSelector` is not empty (an empty selector takes over every node)",
        "select the pool's nodes, e.g. by `alibabacloud.com/nodepool-id`",
    ),
    Rule(
        "GP004-pool-overlap",
        "deny",
        False,
        "a pool selects no node that currently belongs to another pool",
        "narrow one pool's nodeSelector so that each node is in at most one pool",
    ),
)

RULES: dict[str, Rule] = {rule.id: rule for rule in _RULE_LIST}


def rule_tag(rule_id: str) -> str:
    return f"(rule {rule_id})"


@dataclass(frozen=True)
class NodeInfo:
    """What the rules need to know about a Node."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    allocatable: Mapping[str, str] = field(default_factory=dict)
    #: Per-GPU memory in MiB from the agent's inventory annotation, when published.
    gpu_memory_mib: tuple[int, ...] = ()

    @property
    def per_gpu_gib(self) -> int | None:
        """Memory of the smallest GPU in whole GiB (floored, like the device plugin), if known."""
        return self.per_gpu("GiB")

    def per_gpu(self, unit: str = "GiB") -> int | None:
        """Memory of the smallest GPU in whole ``unit`` (GiB floored like the device plugin, or MiB).

        The node's allocatable ``aliyun.com/gpu-mem`` is counted in the unit of its device plugin,
        which is the unit of its pool (``spec.devicePlugin.memoryUnit``).
        """
        div = 1024 if unit == "GiB" else 1
        if self.gpu_memory_mib:
            return min(self.gpu_memory_mib) // div
        mem = _int_or_none(self.allocatable.get(c.RES_GPU_MEM))
        count = _int_or_none(self.allocatable.get(c.RES_GPU_COUNT))
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


def _inventory_mib(annotations: Mapping[str, Any]) -> tuple[int, ...]:
    """Per-GPU MiB from the agent's inventory annotation (``{"gpus": [{"memoryMiB": N}, ...]}``)."""
    try:
        inventory = inventory_from_annotations({k: str(v) for k, v in annotations.items()})
    except ValueError:
        return ()
    if inventory is None:
        return ()
    return tuple(g.memory_mib for g in inventory.gpus if g.memory_mib > 0)


def _map(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def node_info(obj: Mapping[str, Any]) -> NodeInfo:
    """A NodeInfo from a Node object (Kubernetes JSON); tolerant of missing parts."""
    meta = _map(obj.get("metadata"))
    labels = _map(meta.get("labels"))
    alloc = _map(_map(obj.get("status")).get("allocatable"))
    return NodeInfo(
        name=str(meta.get("name") or "<unnamed>"),
        labels={str(k): str(v) for k, v in labels.items()},
        allocatable={str(k): str(v) for k, v in alloc.items()},
        gpu_memory_mib=_inventory_mib(_map(meta.get("annotations"))),
    )


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
        borrower's ``gpushare.io/pool`` label (policy.lending; README "Demand and lending").
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

    @property
    def pool_per_gpu_gib(self) -> dict[str, int]:
        """Kept for callers of the GiB-only days: per-GPU memory in each pool's unit."""
        return self.pool_per_gpu

    def pool_unit(self, name: str) -> str:
        """The device plugin's memory unit on a pool's nodes (GiB when the pool is unknown)."""
        pool = self.pool(name)
        return pool.spec.device_plugin.memory_unit if pool is not None else "GiB"


EMPTY_CONTEXT = Context()
