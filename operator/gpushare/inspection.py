"""``gpushare inspect``: per pool and per node, what is shared, what is used, what is waiting.

Pure module: :func:`build_report` takes Nodes, Pods and GPUSharePools as Kubernetes JSON
(live from the API or from files) and returns a :class:`Report`; :func:`render_text` and
:meth:`Report.to_dict` print it.

Numbers, as the node's backend reads them (``SharingBackend.usage``, ``pod_usage``; its pool's
backend, and outside pools the backend whose mode label the node carries, ACK's by default):

* **GPUs**: the node's GPU count (ACK: its allocatable ``gpu-count``, else the agent's ``gpu.count``).
* **gpu-mem allocated/total**: the sum of the GPU memory requested by pods bound to the node and
  not finished, over the node's allocatable (the device plugin's unit, GiB by default).
* **gpu-core allocated/total**: the same for the compute share (100 per GPU); ``-`` when the node
  has no such capacity.
* **devices used/total**: for a backend whose pods take devices whole (``SharingBackend.devices``,
  ``pod_devices``: a MIG pool's slices, per profile), per resource the devices held by pods bound
  to the node and not finished, over what the node advertises (``<resource>: 1/2 used``); shown,
  and in JSON (``devices``), only where there are any.
* **effective mode**: what the node's device plugin advertises (``SharingBackend.advertised``:
  ACK's ``core_mem``, ``cgpu|share``, ``default`` or ``none``; NVIDIA's GPU count); it lags the
  labels until the plugin rereads them.
* **isolation**: what the node agent found (``active``/``absent``/``unknown``), or ``no agent``.
* **phase**: the node's entry in the pool's ``status.nodeStatuses`` (``-`` when not listed).
* **pending**: pods that request GPU sharing, are **not yet scheduled to any node**, and whose
  node constraints (nodeSelector / required node affinity) can only be met inside the pool.
  Unlike ``kubectl inspect gpushare``'s PENDING column (memory of pods bound to a node whose
  allocation the plugin has not confirmed yet), these are pods waiting for room.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from gpushare import constants as c
from gpushare.admission.model import Context, node_info
from gpushare.admission.targeting import node_constraints, node_kind, resolve
from gpushare.api.v1alpha1 import GPUSharePool, PoolValidationError, parse_pool
from gpushare.backends import BACKENDS, SharingBackend, backend_for, backend_of_node
from gpushare.gpu.inventory import inventory_from_annotations, isolation_state
from gpushare.policy.demand import PoolDemand, snapshot
from gpushare.policy.views import NodeView, PodView

#: Per resource: (resource, held by pods, advertised by the node) (``NodeLine.devices``).
Devices = tuple[tuple[str, int, int], ...]

NO_AGENT = "no agent"
#: Every backend's modes, in words.
MODE_TEXT: dict[str, str] = {mode: words for b in BACKENDS.values() for mode, words in b.mode_words.items()}


@dataclass(frozen=True)
class PodLine:
    namespace: str
    name: str
    phase: str
    gpu_mem: int
    gpu_core: int
    node: str = ""
    gpu: str = ""
    #: for pending pods: the scheduler's reason (PodScheduled condition message), if any
    message: str = ""
    #: devices it holds or asks for, per resource (``SharingBackend.pod_devices``)
    devices: tuple[tuple[str, int], ...] = ()

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "namespace": self.namespace,
            "name": self.name,
            "phase": self.phase,
            "gpuMem": self.gpu_mem,
            "gpuCorePercentage": self.gpu_core,
        }
        if self.node:
            out["node"] = self.node
        if self.gpu:
            out["gpu"] = self.gpu
        if self.message:
            out["message"] = self.message
        if self.devices:
            out["devices"] = dict(self.devices)
        return out


@dataclass(frozen=True)
class NodeLine:
    name: str
    mode: str
    isolation: str
    gpus: int
    gpu_mem_allocated: int
    gpu_mem_total: int
    gpu_core_allocated: int
    gpu_core_total: int
    phase: str = "-"
    reason: str = ""
    gpu_product: str = ""
    gpu_memory_mib: tuple[int, ...] = ()
    pods: tuple[PodLine, ...] = ()
    #: what the device plugin advertises (``SharingBackend.advertised``)
    effective_mode: str = ""
    #: devices per resource, held / advertised (``SharingBackend.devices``)
    devices: Devices = ()

    def to_dict(self) -> dict[str, Any]:
        return _with_devices(
            self.devices,
            {
                "name": self.name,
                "mode": self.mode,
                "effectiveMode": self.effective_mode,
                "isolation": self.isolation,
                "gpus": self.gpus,
                "gpuProduct": self.gpu_product or None,
                "gpuMemoryMiB": list(self.gpu_memory_mib),
                "gpuMem": {"allocated": self.gpu_mem_allocated, "total": self.gpu_mem_total},
                "gpuCorePercentage": {"allocated": self.gpu_core_allocated, "total": self.gpu_core_total},
                "phase": self.phase,
                "reason": self.reason or None,
                "pods": [p.to_dict() for p in self.pods],
            },
        )


def _with_devices(devices: Devices, out: dict[str, Any]) -> dict[str, Any]:
    """``out`` with ``devices`` (resource -> allocated, total) where there are any."""
    if devices:
        out["devices"] = {r: {"allocated": used, "total": total} for r, used, total in devices}
    return out


def _sum_devices(rows: Iterable[Devices]) -> Devices:
    """Per resource, the devices held and advertised over ``rows``, summed."""
    used: dict[str, list[int]] = {}
    for row in rows:
        for resource, held, total in row:
            entry = used.setdefault(resource, [0, 0])
            entry[0] += held
            entry[1] += total
    return tuple((r, held, total) for r, (held, total) in sorted(used.items()))


@dataclass(frozen=True)
class Totals:
    nodes: int = 0
    gpus: int = 0
    gpu_mem_allocated: int = 0
    gpu_mem_total: int = 0
    gpu_core_allocated: int = 0
    gpu_core_total: int = 0
    devices: Devices = ()

    @classmethod
    def of(cls, nodes: Sequence[NodeLine]) -> Totals:
        return cls(
            nodes=len(nodes),
            gpus=sum(n.gpus for n in nodes),
            gpu_mem_allocated=sum(n.gpu_mem_allocated for n in nodes),
            gpu_mem_total=sum(n.gpu_mem_total for n in nodes),
            gpu_core_allocated=sum(n.gpu_core_allocated for n in nodes),
            gpu_core_total=sum(n.gpu_core_total for n in nodes),
            devices=_sum_devices(n.devices for n in nodes),
        )

    def to_dict(self) -> dict[str, Any]:
        return _with_devices(
            self.devices,
            {
                "nodes": self.nodes,
                "gpus": self.gpus,
                "gpuMem": {"allocated": self.gpu_mem_allocated, "total": self.gpu_mem_total},
                "gpuCorePercentage": {"allocated": self.gpu_core_allocated, "total": self.gpu_core_total},
            },
        )


@dataclass(frozen=True)
class PoolSection:
    """One pool, or (``name`` = None) the GPU nodes and pending pods outside every pool."""

    name: str | None
    mode: str = ""
    memory_isolation: bool | None = None
    ready: str = ""  # the Ready condition: "True (AllNodesReady)" etc.
    #: The unit of gpu-mem on the pool's nodes (spec.devicePlugin.memoryUnit); "" outside pools.
    memory_unit: str = ""
    nodes: tuple[NodeLine, ...] = ()
    pending: tuple[PodLine, ...] = ()
    warnings: tuple[str, ...] = ()
    #: ``status.demand`` as the operator computes it (policy.demand), None outside pools.
    demand: Mapping[str, Any] | None = None
    #: ``demand.requests`` in the pool's backend's words (``SharingBackend.describe_requests``).
    demand_words: str = ""

    @property
    def totals(self) -> Totals:
        return Totals.of(self.nodes)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "mode": self.mode or None,
            "memoryIsolation": self.memory_isolation,
            "ready": self.ready or None,
            "memoryUnit": self.memory_unit or None,
            "totals": self.totals.to_dict(),
            "nodes": [n.to_dict() for n in self.nodes],
            "pending": [p.to_dict() for p in self.pending],
            "demand": dict(self.demand) if self.demand is not None else None,
            "warnings": list(self.warnings),
        }


@dataclass(frozen=True)
class Report:
    pools: tuple[PoolSection, ...] = ()
    unpooled: PoolSection = field(default_factory=lambda: PoolSection(name=None))
    warnings: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "pools": [p.to_dict() for p in self.pools],
            "unpooled": self.unpooled.to_dict(),
            "totals": Totals.of([n for p in (*self.pools, self.unpooled) for n in p.nodes]).to_dict(),
            "warnings": list(self.warnings),
        }


# --- building -------------------------------------------------------------------------------


def _schedule_message(pod: Mapping[str, Any]) -> str:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            return str(cond.get("message") or cond.get("reason") or "")
    return ""


def _isolation(node: NodeView) -> str:
    if c.LABEL_CGPU_ISOLATION not in node.labels and c.ANNOTATION_INVENTORY not in node.annotations:
        return NO_AGENT
    return isolation_state(node.labels, node.annotations)


def _is_gpu_node(node: NodeView) -> bool:
    gpus, amount, _ = backend_of_node(node.labels).usage(node.allocatable, node.labels)
    return (
        gpus > 0
        or amount > 0
        or c.LABEL_GPU_COUNT in node.labels
        or c.ANNOTATION_INVENTORY in node.annotations
    )


def _advertises(backend: SharingBackend, mode: str, view: NodeView) -> bool:
    """Whether the node advertises ``mode``, read as the operator reads it (its records too)."""
    return backend.advertises(mode, view.allocatable, view.labels, view.annotations, view.label_times)


def _ready_text(pool: GPUSharePool) -> str:
    for cond in pool.status.conditions:
        if cond.type == "Ready":
            return f"{cond.status} ({cond.reason})"
    return "unknown (no status yet)"


def _node_line(
    node: NodeView,
    pods: Sequence[tuple[PodView, Mapping[str, Any]]],
    phases: Mapping[str, tuple[str, str]],
    backend: SharingBackend | None = None,
) -> NodeLine:
    """One node, as its pool's backend reads it (``backend``; outside pools: as its labels say)."""
    backend = backend or backend_of_node(node.labels)
    active = [
        (p, raw, held)
        for p, raw in pods
        if not p.terminated
        and ((held := backend.pod_usage(p.requests)) is not None or backend.pod_devices(p.requests))
    ]
    advertised = backend.devices(node.allocatable)
    held_devices: dict[str, int] = {}
    for p, _, _ in active:
        for resource, n in backend.pod_devices(p.requests).items():
            held_devices[resource] = held_devices.get(resource, 0) + n
    inventory = inventory_from_annotations(node.annotations)
    gpus, amount, compute = backend.usage(node.allocatable, node.labels)
    phase, reason = phases.get(node.name, ("-", ""))
    return NodeLine(
        name=node.name,
        mode=node_kind(node.labels) or node.labels.get(backend.mode_label, "") or "-",
        isolation=_isolation(node),
        gpus=gpus,
        gpu_mem_allocated=sum(held[0] for _, _, held in active if held is not None),
        gpu_mem_total=amount,
        gpu_core_allocated=sum(held[1] for _, _, held in active if held is not None),
        gpu_core_total=compute,
        phase=phase,
        reason=reason,
        gpu_product=node.labels.get(c.LABEL_GPU_PRODUCT, ""),
        gpu_memory_mib=tuple(g.memory_mib for g in inventory.gpus) if inventory else (),
        pods=tuple(
            PodLine(
                p.namespace,
                p.name,
                p.phase,
                *(held or (0, 0)),
                node=node.name,
                gpu=backend.pod_gpus(_annotations(raw)),
                devices=tuple(backend.pod_devices(p.requests).items()),
            )
            for p, raw, held in sorted(active, key=lambda item: item[0].ref)
        ),
        effective_mode=backend.advertised(node.allocatable),
        devices=tuple(
            (r, held_devices.get(r, 0), advertised.get(r, 0)) for r in sorted({*advertised, *held_devices})
        ),
    )


def _annotations(pod: Mapping[str, Any]) -> Mapping[str, str]:
    found = (pod.get("metadata") or {}).get("annotations")
    return found if isinstance(found, Mapping) else {}


def _pending_usage(view: PodView) -> tuple[int, int] | None:
    """What a pending pod asks of the backend whose resources it names (None: no backend's)."""
    return next((u for b in BACKENDS.values() if (u := b.pod_usage(view.requests)) is not None), None)


def build_report(
    nodes: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
    pools: Iterable[Mapping[str, Any]],
) -> Report:
    """The inspect report. Invalid pools are reported as warnings and left out."""
    warnings: list[str] = []
    parsed: list[GPUSharePool] = []
    pools_raw = list(pools)
    for obj in pools_raw:
        try:
            parsed.append(parse_pool(dict(obj)))
        except PoolValidationError as exc:
            warnings.append(f"skipped invalid pool: {exc}")
    parsed.sort(key=lambda p: p.name)
    node_objs = list(nodes)
    node_views = [NodeView.from_obj(n) for n in node_objs]
    pod_objs = list(pods)
    pod_views = [(PodView.from_obj(p), p) for p in pod_objs]

    by_node: dict[str, list[tuple[PodView, Mapping[str, Any]]]] = {}
    for view, raw in pod_views:
        if view.node_name:
            by_node.setdefault(view.node_name, []).append((view, raw))

    members: dict[str, list[NodeView]] = {p.name: [] for p in parsed}
    pooled: set[str] = set()
    for node in node_views:
        owners = [p.name for p in parsed if p.spec.node_selector.matches(node.labels)]
        for owner in owners:
            members[owner].append(node)
        if owners:
            pooled.add(node.name)
        if len(owners) > 1:
            warnings.append(f"node {node.name} is selected by {len(owners)} pools: {', '.join(owners)}")

    # Pending GPU pods, and which pools their node constraints can reach.
    ctx = Context.build(parsed, [node_info(n) for n in node_objs])
    backends = {p.name: backend_for(p.spec) for p in parsed}
    pending_by_pool: dict[str | None, list[PodLine]] = {}
    for view, raw in pod_views:
        if view.node_name or view.deletion or view.phase != "Pending":
            continue
        usage = _pending_usage(view)
        # The devices it asks for, as each pool's backend counts them (a MIG pool's profiles).
        devices = {name: tuple(b.pod_devices(view.requests).items()) for name, b in backends.items()}
        if usage is None and not any(devices.values()):
            continue
        spec = raw.get("spec") or {}
        reached = sorted(resolve(node_constraints("spec", spec), ctx).pools) if parsed else []
        targets: list[str | None] = [*reached] if reached else [None]
        for target in targets:  # None: targets no pool
            held = devices.get(target, ()) if target is not None else ()
            if usage is None and not held:
                continue
            line = PodLine(
                view.namespace, view.name, view.phase, *(usage or (0, 0)),
                message=_schedule_message(raw), devices=held,
            )  # fmt: skip
            pending_by_pool.setdefault(target, []).append(line)

    # Demand as the operator computes it: waiting pods for want of GPU, idle nodes, loans.
    demand = snapshot(node_objs, pod_objs, pools_raw, now=datetime.now(UTC)).demand

    sections: list[PoolSection] = []
    for pool in parsed:
        phases = {s.name: (s.phase, s.reason) for s in pool.status.node_statuses}
        backend = backends[pool.name]
        lines = tuple(
            _node_line(n, by_node.get(n.name, []), phases, backend)
            for n in sorted(members[pool.name], key=lambda n: n.name)
        )
        pool_warnings = [
            f"node {n.name}: pool demands memory isolation but the agent reports cGPU isolation absent"
            for n in lines
            if pool.spec.isolates_memory and n.isolation == "absent"
        ]
        by_name = {n.name: n for n in members[pool.name]}
        # The backend's own mode label and value (ack.node.gpu.schedule=cgpu, or NVIDIA's
        # device-plugin.config=<config>): an NVIDIA pool's nodes carry no ACK schedule.
        mode = backend.pool_mode(pool.spec)
        pool_warnings += [
            f"node {n.name}: labelled {mode} but its device plugin advertises "
            f"{n.effective_mode}; it has not restarted since the labels changed"
            for n in lines
            if by_name[n.name].labels.get(backend.mode_label) == mode
            and not _advertises(backend, mode, by_name[n.name])
        ]
        sections.append(
            PoolSection(
                name=pool.name,
                mode=pool.spec.mode,
                memory_isolation=pool.spec.isolates_memory,
                ready=_ready_text(pool),
                memory_unit=pool.spec.device_plugin.memory_unit,
                nodes=lines,
                pending=tuple(sorted(pending_by_pool.get(pool.name, []), key=lambda p: p.ref)),
                warnings=tuple(pool_warnings),
                demand=demand[pool.name].status() if pool.name in demand else None,
                demand_words=_demand_words(backend, pool, demand.get(pool.name)),
            )
        )
    outside = tuple(
        _node_line(n, by_node.get(n.name, []), {})
        for n in sorted(node_views, key=lambda n: n.name)
        if n.name not in pooled and _is_gpu_node(n)
    )
    unpooled = PoolSection(
        name=None, nodes=outside, pending=tuple(sorted(pending_by_pool.get(None, []), key=lambda p: p.ref))
    )
    return Report(pools=tuple(sections), unpooled=unpooled, warnings=tuple(warnings))


# --- text -------------------------------------------------------------------------------------


def _ratio(allocated: int, total: int) -> str:
    return f"{allocated}/{total}" if total else ("-" if not allocated else f"{allocated}/?")


def _table(rows: list[list[str]], indent: str = "  ") -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return [
        indent + "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]


def devices_text(devices: Devices) -> str:
    """``<resource>: 1/2 used, ...`` per resource ("-" when none)."""
    return ", ".join(f"{r}: {used}/{total} used" for r, used, total in devices) or "-"


def _asked_text(devices: Sequence[tuple[str, int]]) -> str:
    return ", ".join(f"{r}: {n}" for r, n in devices) or "-"


def _section_text(section: PoolSection, details: bool) -> list[str]:
    out: list[str] = []
    # Devices taken whole (a MIG pool's slices per profile): a column only where there are any.
    shows_devices = any(n.devices for n in section.nodes)
    if section.name is not None:
        t = section.totals
        out.append(
            f"POOL {section.name}  mode={section.mode} ({MODE_TEXT.get(section.mode, section.mode)})  "
            f"ready={section.ready}  nodes={t.nodes}"
            + (f"  gpu-mem in {section.memory_unit}" if section.memory_unit == "MiB" else "")
        )
    else:
        out.append("NO POOL  (GPU nodes and pending GPU pods outside every GPUSharePool)")
    if section.nodes:
        rows = [
            [
                "NODE",
                "MODE(node)",
                "MODE(plugin)",
                "ISOLATION",
                "GPUS",
                "GPU-MEM(alloc/total)",
                "GPU-CORE%(alloc/total)",
                *(["DEVICES(used/total)"] if shows_devices else []),
                "PHASE",
            ]
        ]
        for n in section.nodes:
            phase = f"{n.phase} ({n.reason})" if n.reason else n.phase
            rows.append(
                [
                    n.name,
                    n.mode,
                    n.effective_mode,
                    n.isolation,
                    str(n.gpus),
                    _ratio(n.gpu_mem_allocated, n.gpu_mem_total),
                    _ratio(n.gpu_core_allocated, n.gpu_core_total),
                    *([devices_text(n.devices)] if shows_devices else []),
                    phase if section.name is not None else "-",
                ]
            )
        t = section.totals
        rows.append(
            [
                "TOTAL",
                "",
                "",
                "",
                str(t.gpus),
                _ratio(t.gpu_mem_allocated, t.gpu_mem_total),
                _ratio(t.gpu_core_allocated, t.gpu_core_total),
                *([devices_text(t.devices)] if shows_devices else []),
                "",
            ]
        )
        table = _table(rows)
        if details:
            # interleave each node's pods below its row
            out.append(table[0])
            for n, row in zip(section.nodes, table[1:-1], strict=True):
                out.append(row)
                if n.pods:
                    prow = [
                        [
                            "POD",
                            "PHASE",
                            "GPU-MEM",
                            "GPU-CORE%",
                            "GPU",
                            *(["DEVICES"] if shows_devices else []),
                        ]
                    ]
                    prow += [
                        [p.ref, p.phase, str(p.gpu_mem), str(p.gpu_core) if p.gpu_core else "-", p.gpu or "-"]
                        + ([_asked_text(p.devices)] if shows_devices else [])
                        for p in n.pods
                    ]
                    out.extend(_table(prow, indent="      "))
                else:
                    out.append("      (no GPU pods)")
            out.append(table[-1])
        else:
            out.extend(table)
    elif section.name is not None:
        out.append("  (no nodes match the pool's nodeSelector)")
    if section.pending:
        if section.name is not None:
            out.append(
                f"  PENDING: {len(section.pending)} GPU pod(s) not yet scheduled "
                "whose node selector targets this pool"
            )
        else:
            out.append(f"  PENDING: {len(section.pending)} GPU pod(s) not yet scheduled that target no pool")
        asks = any(p.devices for p in section.pending)
        rows = [
            ["POD", "GPU-MEM", "GPU-CORE%", *(["DEVICES"] if asks else []), *(["WHY"] if details else [])]
        ]
        for p in section.pending:
            rows.append(
                [
                    p.ref,
                    str(p.gpu_mem),
                    str(p.gpu_core) if p.gpu_core else "-",
                    *([_asked_text(p.devices)] if asks else []),
                    *([p.message or "-"] if details else []),
                ]
            )
        out.extend(_table(rows, indent="    "))
    elif section.name is not None:
        out.append("  PENDING: none")
    out.extend(_demand_text(section.demand, section.demand_words))
    out.extend(f"  warning: {w}" for w in section.warnings)
    return out


def _demand_words(backend: SharingBackend, pool: GPUSharePool, demand: PoolDemand | None) -> str:
    if demand is None:
        return ""
    return backend.describe_requests(pool.spec, {r: demand.requested(r) for r in demand.resources})


def _demand_text(demand: Mapping[str, Any] | None, words: str) -> list[str]:
    if not demand or not (demand.get("pendingPods") or demand.get("idleNodes") or demand.get("loans")):
        return []
    idle = int(demand.get("idleNodes", 0))
    names = ", ".join(demand.get("idleNodeNames") or [])
    line = f"  DEMAND: {demand.get('pendingPods', 0)} pod(s) wait for GPU resources"
    if demand.get("pendingPods"):
        since = demand.get("oldestPendingSince", "?")
        line += f" ({words}, waiting since {since})"
    line += f"; idle nodes: {idle}" + (f" ({names})" if names else "")
    out = [line]
    for loan in demand.get("loans") or []:
        if loan.get("to"):
            out.append(f"  LENT: {loan['node']} to pool {loan['to']}")
        else:
            out.append(f"  BORROWED: {loan['node']} from pool {loan.get('from')}")
    if demand.get("pendingPods"):
        out.append("  (gpushare advise: which idle nodes of other pools would serve them)")
    return out


def render_text(report: Report, details: bool = False) -> str:
    lines: list[str] = []
    for section in report.pools:
        lines.extend(_section_text(section, details))
        lines.append("")
    if report.unpooled.nodes or report.unpooled.pending:
        lines.extend(_section_text(report.unpooled, details))
        lines.append("")
    if not report.pools and not report.unpooled.nodes and not report.unpooled.pending:
        lines.append("No GPUSharePools, GPU nodes or pending GPU pods found.")
        lines.append("")
    all_nodes = [n for s in (*report.pools, report.unpooled) for n in s.nodes]
    t = Totals.of(all_nodes)
    core = _ratio(t.gpu_core_allocated, t.gpu_core_total)
    units = {s.memory_unit or "GiB" for s in report.pools}
    if report.unpooled.nodes:
        units.add("GiB")
    unit = "plugin unit, GiB by default" if units <= {"GiB"} else ("MiB" if units == {"MiB"} else "")
    mem = (
        f"gpu-mem {_ratio(t.gpu_mem_allocated, t.gpu_mem_total)} allocated ({unit})"
        if unit
        else "gpu-mem in GiB and MiB pools (see each pool)"
    )
    lines.append(
        f"Total: {t.nodes} GPU node(s), {t.gpus} GPU(s), {mem}, gpu-core {core + '%' if core != '-' else '-'}"
        + (f"; devices {devices_text(t.devices)}" if t.devices else "")
    )
    lines.extend(f"warning: {w}" for w in report.warnings)
    return "\n".join(lines)
