"""ACK's backend object: its labels, plugin restarts, evidence, fit model and admission face
behind :class:`gpushare.backends.base.SharingBackend` (the package's docstring says what ACK does)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Final

from gpushare import constants as c
from gpushare.api.quantity import quantity_int
from gpushare.api.v1alpha1 import GPUSharePoolSpec
from gpushare.backends.ack import evidence, fit
from gpushare.backends.base import FollowsNoSwitch, GpuSize


class AckBackend(FollowsNoSwitch):
    """ACK's labels, plugin and evidence behind :class:`gpushare.backends.base.SharingBackend`."""

    name: str = "ack"
    plugin_labels: tuple[str, ...] = (
        c.LABEL_CGPU,
        c.LABEL_DISABLE_ISOLATION,
        c.LABEL_SCHEDULE,
        c.LABEL_PLACEMENT,
    )
    owned_labels: tuple[str, ...] = plugin_labels
    #: The plugin reads its labels only when it starts: its pod is deleted.
    restarts_plugin: bool = True
    mode_label: str = c.LABEL_SCHEDULE
    shared_resource: str = c.RES_GPU_MEM
    #: ``aliyun.com/gpu*``, and the exclusive ``nvidia.com/gpu`` that tells a node whose plugin
    #: runs in the default mode.
    node_resources: tuple[str, ...] = (c.GPU_RESOURCE_PREFIX, c.RES_NVIDIA_GPU)
    #: ``aliyun.com/gpu*`` (gpu-mem, gpu-core.percentage, gpu-count).
    pod_resources: tuple[str, ...] = (c.GPU_RESOURCE_PREFIX,)
    default_plugin_namespace: str = c.DEFAULT_PLUGIN_NAMESPACE
    default_plugin_labels: Mapping[str, str] = c.DEFAULT_PLUGIN_LABELS

    pending_gauges: tuple[tuple[str, str, str], ...] = (
        (
            c.RES_GPU_MEM,
            "gpushare_pool_pending_gpu_mem",
            f"{c.RES_GPU_MEM} requested by the pool's waiting pods, summed (the pool's memory unit)",
        ),
        (
            c.RES_GPU_CORE,
            "gpushare_pool_pending_gpu_core",
            f"{c.RES_GPU_CORE} requested by the pool's waiting pods, summed",
        ),
    )
    status_resources: tuple[str, ...] = (c.RES_GPU_COUNT, c.RES_GPU_MEM, c.RES_GPU_CORE)

    def resource_list(self, spec: GPUSharePoolSpec, totals: Mapping[str, int]) -> dict[str, str]:
        """GPUs and gpu-mem; gpu-core.percentage only where it means something (core_mem pools, or
        nodes that still advertise it)."""
        out = {
            c.RES_GPU_COUNT: str(totals.get(c.RES_GPU_COUNT, 0)),
            c.RES_GPU_MEM: str(totals.get(c.RES_GPU_MEM, 0)),
        }
        core = totals.get(c.RES_GPU_CORE, 0)
        if spec.compute_allocation or core:
            out[c.RES_GPU_CORE] = str(core)
        return out

    def spec_problem(self, spec: GPUSharePoolSpec) -> str | None:
        return None

    def labels_for(self, spec: GPUSharePoolSpec) -> dict[str, str]:
        return {
            c.LABEL_CGPU: "true",
            c.LABEL_DISABLE_ISOLATION: "false" if spec.memory_isolation else "true",
            c.LABEL_SCHEDULE: spec.mode,
            c.LABEL_PLACEMENT: spec.placement,
        }

    def pool_mode(self, spec: GPUSharePoolSpec) -> str:
        return spec.mode

    def restored(self, prior: Mapping[str, str | None]) -> dict[str, str | None]:
        """Prior values; ``ack.node.gpu.schedule`` never absent (deleting it would not bring back
        exclusive mode): ``default`` when it had none."""
        out = {key: prior.get(key) for key in self.owned_labels}
        if out[c.LABEL_SCHEDULE] is None:
            out[c.LABEL_SCHEDULE] = c.SCHEDULE_DEFAULT
        return out

    def mode_of(self, labels: Mapping[str, str | None]) -> str:
        return labels.get(c.LABEL_SCHEDULE) or c.SCHEDULE_DEFAULT

    def disrupts(self, old_mode: str, new_mode: str) -> bool:
        """Any change of ``ack.node.gpu.schedule``: the plugin restarts into other resources."""
        return old_mode != new_mode

    def demand_resources(self, spec: GPUSharePoolSpec) -> tuple[str, ...]:
        return (c.RES_GPU_MEM, c.RES_GPU_CORE)

    def asks_for(self, requests: Mapping[str, int]) -> bool:
        return requests.get(c.RES_GPU_MEM, 0) > 0 or requests.get(c.RES_GPU_CORE, 0) > 0

    def sharing_only(self, requests: Mapping[str, int]) -> bool:
        """gpu-mem and gpu-core.percentage exist only on nodes in ACK's sharing modes."""
        return self.asks_for(requests)

    def spread(self, labels: Mapping[str, object], requests: Mapping[str, int]) -> int:
        """ACK's multi-GPU sharing: the pod label ``<gpu-count>: M`` spreads its gpu-mem over M GPUs
        (else a request of that resource)."""
        raw = labels.get(c.RES_GPU_COUNT)
        return quantity_int(raw) if raw is not None else requests.get(c.RES_GPU_COUNT, 0)

    def holds_shared_gpu(self, requests: Mapping[str, int]) -> bool:
        return requests.get(c.RES_GPU_MEM, 0) > 0

    def advertises(
        self,
        mode: str,
        allocatable: Mapping[str, str],
        labels: Mapping[str, str],
        annotations: Mapping[str, str] | None = None,
        label_times: Mapping[str, datetime] | None = None,
    ) -> bool:
        return evidence.advertises(mode, allocatable)

    def plugin_unregistered(self, capacity: Mapping[str, str], allocatable: Mapping[str, str]) -> bool:
        return evidence.plugin_unregistered(capacity, allocatable)

    def unregistered_message(self, capacity: Mapping[str, str]) -> str:
        return evidence.unregistered_message(capacity)

    def stale_message(self, mode: str, allocatable: Mapping[str, str], labels: Mapping[str, str]) -> str:
        return evidence.stale_message(mode, allocatable)

    def pending_message(self, mode: str, allocatable: Mapping[str, str], labels: Mapping[str, str]) -> str:
        return (
            f"waiting for the device plugin to advertise "
            f"{evidence.describe(evidence.expected_effective_mode(mode))}; "
            f"it advertises {evidence.describe(evidence.effective_mode(allocatable))}"
        )

    # --- the fit model (``gpushare.backends.ack.fit``) ---------------------------------------

    pool_words: str = "an ACK GPU-sharing pool"
    ask_words: str = f"ACK GPU sharing ({c.RES_GPU_MEM})"

    def counted_gpus(self, spec: GPUSharePoolSpec, allocatable: Mapping[str, str]) -> int:
        return fit.counted_gpus(allocatable)

    def size(self, spec: GPUSharePoolSpec, allocatable: Mapping[str, str], gpus: int) -> GpuSize:
        return fit.size(spec, allocatable, gpus)

    def room(
        self,
        borrower: GPUSharePoolSpec,
        lender: GPUSharePoolSpec,
        allocatable: Mapping[str, str],
        labels: Mapping[str, str],
        gpus: int,
        loan: GpuSize | None,
    ) -> list[tuple[int, int]]:
        return fit.room(borrower, lender, allocatable, labels, loan)

    def fit_problem(
        self, pool: str, spec: GPUSharePoolSpec, requests: Mapping[str, int], gpus: int
    ) -> str | None:
        return fit.fit_problem(pool, spec, requests, gpus)

    def take(
        self, spec: GPUSharePoolSpec, requests: Mapping[str, int], gpus: int
    ) -> tuple[int, tuple[int, int]]:
        return fit.take(requests, gpus)

    def entry_resources(self, spec: GPUSharePoolSpec) -> tuple[str, ...]:
        """None: the room's entries are GPUs."""
        return ()

    def take_on(
        self, spec: GPUSharePoolSpec, requests: Mapping[str, int]
    ) -> Mapping[int, tuple[int, int]] | None:
        return None

    # --- inspect and advise -------------------------------------------------------------------

    mode_words: Mapping[str, str] = {
        c.SCHEDULE_CGPU: "memory isolation",
        c.SCHEDULE_SHARE: "sharing, no isolation",
        c.SCHEDULE_CORE_MEM: "memory isolation + compute allocation",
    }

    def usage(self, allocatable: Mapping[str, str], labels: Mapping[str, str]) -> tuple[int, int, int]:
        """GPUs (``gpu-count``, else the agent's count label), gpu-mem and gpu-core.percentage."""
        gpus = fit.counted_gpus(allocatable) or quantity_int(labels.get(c.LABEL_GPU_COUNT, 0))
        return (
            gpus,
            quantity_int(allocatable.get(c.RES_GPU_MEM, 0)),
            quantity_int(allocatable.get(c.RES_GPU_CORE, 0)),
        )

    def pod_usage(self, requests: Mapping[str, int]) -> tuple[int, int] | None:
        mem, core = requests.get(c.RES_GPU_MEM, 0), requests.get(c.RES_GPU_CORE, 0)
        return (mem, core) if mem or core else None

    def pod_gpus(self, annotations: Mapping[str, str]) -> str:
        return evidence.allocated_gpus(annotations)

    def devices(self, allocatable: Mapping[str, str]) -> dict[str, int]:
        """None: ACK counts GPU memory and compute (:meth:`usage`)."""
        return {}

    def pod_devices(self, requests: Mapping[str, int]) -> dict[str, int]:
        return {}

    def advertised(self, allocatable: Mapping[str, str]) -> str:
        return evidence.effective_mode(allocatable)

    def describe_requests(self, spec: GPUSharePoolSpec, requests: Mapping[str, int]) -> str:
        """``gpu-mem M`` and, when any, ``gpu-core C%``."""
        core = requests.get(c.RES_GPU_CORE, 0)
        return f"gpu-mem {requests.get(c.RES_GPU_MEM, 0)}" + (f", gpu-core {core}%" if core else "")

    def describe_take(self, spec: GPUSharePoolSpec, entries: Mapping[int, tuple[int, int]]) -> str:
        """Per GPU: ``GPU i: gpu-mem M <unit>[, gpu-core C%]``."""
        unit = spec.device_plugin.memory_unit
        return ", ".join(
            f"GPU {i}: gpu-mem {mem} {unit}" + (f", gpu-core {core}%" if core else "")
            for i, (mem, core) in sorted(entries.items())
        )

    # --- admission (its rules: gpushare.backends.ack.admission) ------------------------------

    #: ``aliyun.com/gpu*``: only GPU-sharing pods ask for these.
    sharing_prefixes: tuple[str, ...] = (c.GPU_RESOURCE_PREFIX,)
    #: Multi-GPU sharing: the pod label ``aliyun.com/gpu-count: "M"`` (the node resource's name).
    pod_labels: tuple[str, ...] = (c.RES_GPU_COUNT,)

    def advertised_gpus(self, allocatable: Mapping[str, str]) -> tuple[int | None, int | None]:
        """``aliyun.com/gpu-count`` and ``aliyun.com/gpu-mem`` (whole numbers >= 0)."""
        return evidence.advertised_gpus(allocatable)


ACK: Final = AckBackend()
