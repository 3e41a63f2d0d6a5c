"""NVIDIA's backend object: its config label, plugin and evidence behind
:class:`gpushare.backends.base.SharingBackend` (the package's docstring says what NVIDIA's stack does)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Final

from gpushare import constants as c
from gpushare.api.quantity import quantity_int
from gpushare.api.v1alpha1 import GPUSharePoolSpec
from gpushare.backends.base import FollowsNoSwitch, GpuSize
from gpushare.backends.nvidia import config
from gpushare.backends.nvidia.config import ConfigName


def _gpus(labels: Mapping[str, str]) -> int | None:
    """The node's physical GPUs, as the node agent or GPU Feature Discovery labelled them."""
    for key in (c.LABEL_GPU_COUNT, c.LABEL_NVIDIA_GPU_COUNT):
        value = labels.get(key, "")
        if value.isdigit() and int(value) > 0:
            return int(value)
    return None


def _count(allocatable: Mapping[str, str], resource: str) -> int:
    return quantity_int(allocatable.get(resource)) or 0


def describe(allocatable: Mapping[str, str]) -> str:
    """What a node advertises of NVIDIA's GPUs, e.g. ``nvidia.com/gpu: 8``."""
    return _describe(allocatable)


def _describe(allocatable: Mapping[str, str]) -> str:
    shown = [
        f"{r}: {allocatable[r]}" for r in (c.RES_NVIDIA_GPU, c.RES_NVIDIA_GPU_SHARED) if r in allocatable
    ]
    return ", ".join(shown) if shown else f"no {c.RES_NVIDIA_GPU}"


class NvidiaBackend(FollowsNoSwitch):
    """NVIDIA's config label, plugin and evidence behind :class:`gpushare.backends.base.SharingBackend`."""

    name: str = "nvidia"
    plugin_labels: tuple[str, ...] = (c.LABEL_NVIDIA_CONFIG,)
    owned_labels: tuple[str, ...] = plugin_labels
    #: config-manager reloads the plugin itself when the label changes.
    restarts_plugin: bool = False
    mode_label: str = c.LABEL_NVIDIA_CONFIG
    shared_resource: str = c.RES_NVIDIA_GPU
    node_resources: tuple[str, ...] = (c.RES_NVIDIA_GPU,)
    #: ``nvidia.com/gpu`` and ``nvidia.com/gpu.shared`` (a prefix of both).
    pod_resources: tuple[str, ...] = (c.RES_NVIDIA_GPU,)
    default_plugin_namespace: str = c.NVIDIA_PLUGIN_NAMESPACE
    default_plugin_labels: Mapping[str, str] = c.NVIDIA_PLUGIN_LABELS

    #: None yet: ``gpushare_pool_pending_pods`` and ``status.demand.requests`` say it.
    pending_gauges: tuple[tuple[str, str, str], ...] = ()
    status_resources: tuple[str, ...] = (c.RES_NVIDIA_GPU, c.RES_NVIDIA_GPU_SHARED)

    def resource_list(self, spec: GPUSharePoolSpec, totals: Mapping[str, int]) -> dict[str, str]:
        """The pool's slots: ``nvidia.com/gpu`` (or ``.shared`` with renameByDefault), replicas x
        GPUs summed over its nodes."""
        resource = spec.nvidia.resource if spec.nvidia is not None else c.RES_NVIDIA_GPU
        return {resource: str(totals.get(resource, 0))}

    def spec_problem(self, spec: GPUSharePoolSpec) -> str | None:
        return None

    def labels_for(self, spec: GPUSharePoolSpec) -> dict[str, str]:
        return {c.LABEL_NVIDIA_CONFIG: self.pool_mode(spec)}

    def pool_mode(self, spec: GPUSharePoolSpec) -> str:
        if spec.nvidia is None:
            raise ValueError("not an NVIDIA pool: spec.nvidia is absent")
        return config.name_of(spec.nvidia)

    def restored(self, prior: Mapping[str, str | None]) -> dict[str, str | None]:
        return {key: prior.get(key) for key in self.owned_labels}

    def mode_of(self, labels: Mapping[str, str | None]) -> str:
        return labels.get(c.LABEL_NVIDIA_CONFIG) or ""

    def disrupts(self, old_mode: str, new_mode: str) -> bool:
        """Another strategy or resource name, or fewer replicas: pods running on replicas that go
        away (or on a GPU now shared differently) would oversubscribe it. More replicas of the
        same sharing add slots and disrupt nothing. A name gpushare did not write (or none: the
        plugin's default config) is read as a switch."""
        old, new = ConfigName.parse(old_mode), ConfigName.parse(new_mode)
        if old is None or new is None:
            return old_mode != new_mode
        return (old.strategy, old.renamed) != (new.strategy, new.renamed) or new.replicas < old.replicas

    def holds_shared_gpu(self, requests: Mapping[str, int]) -> bool:
        return requests.get(c.RES_NVIDIA_GPU, 0) > 0 or requests.get(c.RES_NVIDIA_GPU_SHARED, 0) > 0

    def demand_resources(self, spec: GPUSharePoolSpec) -> tuple[str, ...]:
        """The pool's slots: ``nvidia.com/gpu`` (``.shared`` with renameByDefault)."""
        return (spec.nvidia.resource if spec.nvidia is not None else c.RES_NVIDIA_GPU,)

    def asks_for(self, requests: Mapping[str, int]) -> bool:
        """A pod asking for NVIDIA's GPUs (either name): slots of an NVIDIA pool it is aimed at."""
        return self.holds_shared_gpu(requests)

    def sharing_only(self, requests: Mapping[str, int]) -> bool:
        """``nvidia.com/gpu`` also means whole GPUs (a node outside every pool gives them)."""
        return False

    def spread(self, labels: Mapping[str, object], requests: Mapping[str, int]) -> int:
        """A pod's slots are whole replicas: nothing to spread."""
        return 1

    # --- sizing in slots (``gpushare advise``, lending) --------------------------------------

    def slots(self, spec: GPUSharePoolSpec, gpus: int) -> int:
        """What a node with ``gpus`` physical GPUs advertises in a pool with ``spec``: replicas x GPUs
        of the pool's resource."""
        replicas = spec.nvidia.replicas if spec.nvidia is not None else 1
        return max(0, gpus) * replicas

    def pod_slots(self, spec: GPUSharePoolSpec, requests: Mapping[str, int]) -> int:
        """The slots a pod takes on a node of the pool: its request of the pool's resource."""
        (resource,) = self.demand_resources(spec)
        return requests.get(resource, 0)

    def slot_problem(self, spec: GPUSharePoolSpec, requests: Mapping[str, int]) -> str | None:
        """Why a pod asking for NVIDIA's GPUs can never use the pool's slots (None: it can)."""
        (resource,) = self.demand_resources(spec)
        other = c.RES_NVIDIA_GPU_SHARED if resource == c.RES_NVIDIA_GPU else c.RES_NVIDIA_GPU
        if requests.get(resource, 0) <= 0 and requests.get(other, 0) > 0:
            return f"requests {other}, and the pool's nodes advertise {resource}"
        if requests.get(resource, 0) <= 0:
            return f"requests no {resource}"
        return None

    pool_words: str = f"an NVIDIA device-plugin pool ({c.RES_NVIDIA_GPU})"
    ask_words: str = f"NVIDIA's GPUs ({c.RES_NVIDIA_GPU})"

    def counted_gpus(self, spec: GPUSharePoolSpec, allocatable: Mapping[str, str]) -> int:
        """What a node of an NVIDIA pool advertises, over the pool's replicas."""
        if spec.nvidia is None:
            return 0
        (resource,) = self.demand_resources(spec)
        return _count(allocatable, resource) // self.slots(spec, 1)

    def size(self, spec: GPUSharePoolSpec, allocatable: Mapping[str, str], gpus: int) -> GpuSize:
        """The node's physical GPUs (its slots follow from the borrower's replicas)."""
        return GpuSize(gpus, 0, spec.device_plugin.memory_unit)

    def room(
        self,
        borrower: GPUSharePoolSpec,
        lender: GPUSharePoolSpec,
        allocatable: Mapping[str, str],
        labels: Mapping[str, str],
        gpus: int,
        loan: GpuSize | None,
    ) -> list[tuple[int, int]]:
        """One entry: the node's slots in the borrower, replicas x GPUs (a lent node: its loan's GPUs)."""
        count = loan.gpus if loan is not None and loan.gpus > 0 else gpus
        slots = self.slots(borrower, count)
        return [(slots, 0)] if slots > 0 else []

    def fit_problem(
        self, pool: str, spec: GPUSharePoolSpec, requests: Mapping[str, int], gpus: int
    ) -> str | None:
        return self.slot_problem(spec, requests)

    def take(
        self, spec: GPUSharePoolSpec, requests: Mapping[str, int], gpus: int
    ) -> tuple[int, tuple[int, int]]:
        """Its request of the pool's resource, in slots, on the node's one entry."""
        return 1, (self.pod_slots(spec, requests), 0)

    def entry_resources(self, spec: GPUSharePoolSpec) -> tuple[str, ...]:
        """The one entry counts the pool's slots."""
        return self.demand_resources(spec)

    def take_on(
        self, spec: GPUSharePoolSpec, requests: Mapping[str, int]
    ) -> Mapping[int, tuple[int, int]] | None:
        return None

    def expected(self, mode: str, labels: Mapping[str, str]) -> tuple[str, int | None] | None:
        """The resource and count a node labelled ``mode`` advertises (count None: GPUs unknown);
        None for a config gpushare did not name."""
        name = ConfigName.parse(mode)
        if name is None:
            return None
        gpus = _gpus(labels)
        return name.resource, None if gpus is None else gpus * name.replicas

    def advertises(
        self,
        mode: str,
        allocatable: Mapping[str, str],
        labels: Mapping[str, str],
        annotations: Mapping[str, str] | None = None,
        label_times: Mapping[str, datetime] | None = None,
    ) -> bool:
        """``replicas x GPUs`` of the config's resource. GPUs come from ``gpushare.io/gpu.count``
        (the node agent) or ``nvidia.com/gpu.count`` (GPU Feature Discovery); without either, any
        positive multiple of ``replicas``. A config gpushare did not name: any GPU advertised."""
        name = ConfigName.parse(mode)
        if name is None:
            return _count(allocatable, c.RES_NVIDIA_GPU) + _count(allocatable, c.RES_NVIDIA_GPU_SHARED) > 0
        count = _count(allocatable, name.resource)
        gpus = _gpus(labels)
        if gpus is not None:
            return count == gpus * name.replicas
        return count > 0 and count % name.replicas == 0

    def plugin_unregistered(self, capacity: Mapping[str, str], allocatable: Mapping[str, str]) -> bool:
        known = [r for r in (c.RES_NVIDIA_GPU, c.RES_NVIDIA_GPU_SHARED) if r in capacity]
        return bool(known) and all(_count(allocatable, r) == 0 for r in known)

    def unregistered_message(self, capacity: Mapping[str, str]) -> str:
        return (
            f"the kubelet knows {c.RES_NVIDIA_GPU} but none is allocatable: NVIDIA's device plugin is "
            "not registered (not running, or its config-manager sidecar failed)"
        )

    def _wants(self, mode: str, labels: Mapping[str, str]) -> str:
        want = self.expected(mode, labels)
        if want is None:
            return f"config {mode or '<the plugin default>'}"
        resource, count = want
        return f"{resource}: {count}" if count is not None else f"a multiple of its replicas of {resource}"

    def stale_message(self, mode: str, allocatable: Mapping[str, str], labels: Mapping[str, str]) -> str:
        return (
            f"labelled {c.LABEL_NVIDIA_CONFIG}={mode}, which means {self._wants(mode, labels)}, but the node "
            f"advertises {_describe(allocatable)}: the config-manager sidecar did not switch the plugin "
            "(config missing from its ConfigMap, sidecar not running or crash-looping)"
        )

    def pending_message(self, mode: str, allocatable: Mapping[str, str], labels: Mapping[str, str]) -> str:
        return (
            f"waiting for NVIDIA's device plugin to advertise {self._wants(mode, labels)} "
            f"(config {mode}); it advertises {_describe(allocatable)}"
        )

    # --- inspect and advise -------------------------------------------------------------------

    mode_words: Mapping[str, str] = {c.POOL_KIND_NVIDIA: "NVIDIA's device plugin"}

    def usage(self, allocatable: Mapping[str, str], labels: Mapping[str, str]) -> tuple[int, int, int]:
        """GPUs as the node agent or GPU Feature Discovery labelled them; no memory or compute
        share (a pod's slots are whole replicas)."""
        return _gpus(labels) or 0, 0, 0

    def pod_usage(self, requests: Mapping[str, int]) -> tuple[int, int] | None:
        return None

    def pod_gpus(self, annotations: Mapping[str, str]) -> str:
        return ""

    def devices(self, allocatable: Mapping[str, str]) -> dict[str, int]:
        """None: a time-slicing or MPS pool's slots are shown as the plugin advertises them."""
        return {}

    def pod_devices(self, requests: Mapping[str, int]) -> dict[str, int]:
        return {}

    def advertised(self, allocatable: Mapping[str, str]) -> str:
        return _describe(allocatable)

    def describe_requests(self, spec: GPUSharePoolSpec, requests: Mapping[str, int]) -> str:
        """``N <resource> slot(s)``."""
        (resource,) = self.demand_resources(spec)
        return f"{requests.get(resource, 0)} {resource} slot(s)"

    def describe_take(self, spec: GPUSharePoolSpec, entries: Mapping[int, tuple[int, int]]) -> str:
        (resource,) = self.demand_resources(spec)
        return f"{sum(slots for slots, _ in entries.values())} {resource} slot(s)"

    # --- admission ---------------------------------------------------------------------------

    #: None: ``nvidia.com/gpu`` also means whole GPUs, and the NVIDIA gate decides which of its
    #: pods the webhook is sent (``gpushare.admission.gate``).
    sharing_prefixes: tuple[str, ...] = ()
    pod_labels: tuple[str, ...] = ()

    def advertised_gpus(self, allocatable: Mapping[str, str]) -> tuple[int | None, int | None]:
        """Nothing: ``nvidia.com/gpu`` counts replicas x GPUs, not GPUs, and no memory."""
        return None, None


def physical_gpus(labels: Mapping[str, str]) -> int | None:
    """A node's physical GPUs, as the node agent or GPU Feature Discovery labelled them."""
    return _gpus(labels)


NVIDIA: Final = NvidiaBackend()
