"""The seam between the operator and a GPU-sharing stack (:class:`SharingBackend`).

Everything above it (the planner, the pool status, the restart step, the reconciler) asks the
backend of a pool what to do, and names none of the stack's labels or resources itself:

* **labels**: which node labels the backend owns, their values for a pool's spec, and which of
  them its device plugin reads only when it starts (a change needs the plugin made to reread);
* **the mode a node is in**, as its labels say, and which label changes disrupt running GPU pods
  (a mode switch, guarded by ``rollout.modeSwitch``), and which pods they disrupt;
* **evidence**: whether a node advertises what its labels ask for (its allocatable), and the words
  for what it advertises instead;
* **the device plugin**: where its pods live by default and the labels they carry;
* **the fit model** (``gpushare advise``, lending): what a node holds once in a pool of the
  backend, per GPU (or in slots, or in devices per kind: a MIG pool's profiles), and what a
  waiting pod takes of it; and the devices a node advertises and its pods hold, counted per
  resource (``inspect``, ``status.capacity``);
* **admission**: the resources and pod labels that ask for its GPU sharing (what the webhook's
  matchConditions and the rules' fast gate look for), and what a node's plugin advertises of its
  GPUs (the node model of the rules); and its **pod rules** (:class:`PodRules`: which pods they
  judge and the judging, whose records are ``gpushare.rulekit.records``), which
  ``gpushare.admission.rules`` drives for every pod of a workload
  (``gpushare.backends.ack.admission``, ``gpushare.backends.nvidia.admission``).

A backend is pure: no client, no clock. ``gpushare.backends.ack`` is the first (Alibaba ACK's
cGPU and GPU sharing), ``gpushare.backends.nvidia`` the second (NVIDIA's device plugin:
time-slicing and MPS) and the third (``gpushare.backends.nvidia.mig``: MIG pools, through NVIDIA's
MIG manager and device plugin).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, Protocol

from gpushare.api.v1alpha1 import GPUSharePoolSpec
from gpushare.rulekit.constraints import Constraints
from gpushare.rulekit.emit import Emitter
from gpushare.rulekit.kinds import KindTable
from gpushare.rulekit.model import Context, Finding
from gpushare.rulekit.podspecs import PodLike

#: The phases :meth:`SharingBackend.switch_state` may give a node (``status.nodeStatuses[].phase``).
NodePhaseName = Literal["Restarting", "Degraded", "Failed"]


@dataclass(frozen=True)
class GpuSize:
    """A node's GPUs as its pool's plugin advertises them: how many, each one's amount (memory for
    ACK, 0 where the backend counts slots) and the amount's unit. A loan records it."""

    gpus: int = 0
    per_gpu: int = 0
    unit: str = "GiB"


class SharingBackend(Protocol):
    """One GPU-sharing stack, as the operator drives it (see the module docstring)."""

    #: The backend's name: the ``backend`` label of the metrics, the pool status' wording.
    name: str
    #: Node labels the backend owns: written on a pool's nodes, their prior values restored.
    owned_labels: tuple[str, ...]
    #: Those its device plugin reads: changing one owes a plugin restart (or reload).
    plugin_labels: tuple[str, ...]
    #: Whether the operator restarts the plugin (deletes its pod) after such a change; False: the
    #: plugin reloads itself, and the operator only waits for the node to advertise the new mode.
    restarts_plugin: bool
    #: The label that names a node's mode (in messages: "<label> a -> b is blocked by ...").
    mode_label: str
    #: The resource a mode switch disrupts (in messages: "... pod(s) using <resource>").
    shared_resource: str
    #: Allocatable and capacity kept on node views (prefixes): what the evidence reads.
    node_resources: tuple[str, ...]
    #: The extended resources its pods request (prefixes): what pod views keep of a pod's requests.
    pod_resources: tuple[str, ...]
    #: Where the device plugin runs unless a pool says otherwise, and its pods' labels.
    default_plugin_namespace: str
    default_plugin_labels: Mapping[str, str]

    #: The gauges of a pool's waiting requests the backend exports: (resource, metric name, help).
    pending_gauges: tuple[tuple[str, str, str], ...]
    #: The resources a pool's ``status.capacity`` and ``status.allocated`` sum up.
    status_resources: tuple[str, ...]

    def demand_resources(self, spec: GPUSharePoolSpec) -> tuple[str, ...]:
        """The resources a pool's ``status.demand.requests`` sums over its waiting pods."""
        ...

    def asks_for(self, requests: Mapping[str, int]) -> bool:
        """Whether a waiting pod with these (effective) requests is demand for this backend's pools."""
        ...

    def sharing_only(self, requests: Mapping[str, int]) -> bool:
        """Whether these requests exist only as this backend's GPU sharing (no other backend's pool,
        nor a node outside every pool, could give them): a waiting pod asking for them is demand in
        every pool it targets, and ``advise`` says why another backend's pool cannot take it."""
        ...

    def spread(self, labels: Mapping[str, object], requests: Mapping[str, int]) -> int:
        """Over how many GPUs of one node a pod with these labels and requests asks to spread its
        share (0 or 1: one GPU)."""
        ...

    def resource_list(self, spec: GPUSharePoolSpec, totals: Mapping[str, int]) -> dict[str, str]:
        """``status.capacity`` / ``status.allocated`` from the totals of ``status_resources``: a
        resource list (name → quantity), as a node's ``status.allocatable``."""
        ...

    def spec_problem(self, spec: GPUSharePoolSpec) -> str | None:
        """Why the backend cannot apply a pool with this (valid) spec, naming the field (None: it
        can): the planner leaves such a pool's nodes as they are, and its status says why."""
        ...

    def labels_for(self, spec: GPUSharePoolSpec) -> dict[str, str]:
        """The owned labels' values on a node of a pool with this spec (every owned label)."""
        ...

    def pool_mode(self, spec: GPUSharePoolSpec) -> str:
        """The mode a node of a pool with this spec is in (``mode_of(labels_for(spec))``)."""
        ...

    def restored(self, prior: Mapping[str, str | None]) -> dict[str, str | None]:
        """The owned labels once a node leaves its pool, from their values before it joined
        (None: absent)."""
        ...

    def mode_of(self, labels: Mapping[str, str | None]) -> str:
        """The mode a node with these labels is in (or will be once its plugin rereads them)."""
        ...

    def disrupts(self, old_mode: str, new_mode: str) -> bool:
        """Whether moving a node from ``old_mode`` to ``new_mode`` disrupts its running GPU pods."""
        ...

    def holds_shared_gpu(self, requests: Mapping[str, int]) -> bool:
        """Whether a pod with these requests holds what a mode switch takes away."""
        ...

    def advertises(
        self,
        mode: str,
        allocatable: Mapping[str, str],
        labels: Mapping[str, str],
        annotations: Mapping[str, str] | None = None,
        label_times: Mapping[str, datetime] | None = None,
    ) -> bool:
        """Whether a node with this allocatable (and labels) advertises what ``mode`` implies.
        ``annotations``: the node's gpushare annotations, where the backend keeps its record of a
        switch it made (:meth:`switch_annotations`): a report from before that switch is not taken;
        ``label_times``: when another field manager than gpushare's last wrote each of
        :attr:`timed_labels` (the node's managedFields), a report written after the record is."""
        ...

    # --- a switch the backend follows itself (beyond the device plugin's evidence) ------------

    #: Node labels whose latest write by a field manager other than gpushare's the node views keep
    #: (``NodeView.label_times``, from the node's ``metadata.managedFields``): what the backend's
    #: ``label_times`` arguments hold (empty: none).
    timed_labels: tuple[str, ...]

    #: The node reasons of :meth:`switch_state` that name a failed switch: each one a Warning
    #: Event, and the ``gpushare_pool_failed_nodes`` metric's ``reason`` (empty: none).
    switch_reasons: tuple[str, ...]

    def switch_annotations(
        self,
        labels: Mapping[str, str],
        annotations: Mapping[str, str],
        label_patch: Mapping[str, str | None],
        now: str,
        *,
        staying: bool,
    ) -> dict[str, str | None]:
        """The annotations to write in the same patch as ``label_patch`` on a node with these
        labels and annotations (``now``: the patch's time, ISO; ``staying``: the node stays in a
        pool of this backend, else it leaves and the backend's records go): {} for none."""
        ...

    def switch_seen(
        self,
        labels: Mapping[str, str],
        annotations: Mapping[str, str],
        label_times: Mapping[str, datetime] | None = None,
    ) -> dict[str, str] | None:
        """The annotations to write because the node shows the switch under way, or that it was
        (``label_times``, :meth:`advertises`): what its record must remember across passes and
        restarts; None: nothing to write."""
        ...

    def switch_state(
        self,
        mode: str,
        allocatable: Mapping[str, str],
        labels: Mapping[str, str],
        annotations: Mapping[str, str],
        *,
        now: datetime,
        timeout_s: int,
        label_times: Mapping[str, datetime] | None = None,
    ) -> tuple[NodePhaseName, str, str] | None:
        """Where the node's switch to ``mode`` stands, when the backend follows it itself (its
        record in ``annotations``): (phase, reason, message) until it is confirmed; None: the device
        plugin's evidence (:meth:`advertises`) says. ``timeout_s``: the pool's readyTimeoutSeconds."""
        ...

    def plugin_unregistered(self, capacity: Mapping[str, str], allocatable: Mapping[str, str]) -> bool:
        """Whether the kubelet knows the plugin's resources but none is allocatable (unregistered)."""
        ...

    def unregistered_message(self, capacity: Mapping[str, str]) -> str: ...

    def stale_message(self, mode: str, allocatable: Mapping[str, str], labels: Mapping[str, str]) -> str:
        """Why a node labelled for ``mode`` does not advertise it (for the pool's node status)."""
        ...

    def pending_message(self, mode: str, allocatable: Mapping[str, str], labels: Mapping[str, str]) -> str:
        """What a node whose plugin was restarted waits for (for the pool's node status)."""
        ...

    # --- the fit model (``gpushare advise``, lending) ----------------------------------------

    #: The backend's pools and asks in messages: "an ACK GPU-sharing pool", "ACK GPU sharing (...)".
    pool_words: str
    ask_words: str

    def counted_gpus(self, spec: GPUSharePoolSpec, allocatable: Mapping[str, str]) -> int:
        """A node's physical GPUs as its allocatable says, in a pool with ``spec`` (0: it does not
        say, or the node's pool is another backend's)."""
        ...

    def size(self, spec: GPUSharePoolSpec, allocatable: Mapping[str, str], gpus: int) -> GpuSize:
        """What a node of a pool with ``spec`` holds now (``gpus``: its physical GPUs, 0: unknown)."""
        ...

    def room(
        self,
        borrower: GPUSharePoolSpec,
        lender: GPUSharePoolSpec,
        allocatable: Mapping[str, str],
        labels: Mapping[str, str],
        gpus: int,
        loan: GpuSize | None,
    ) -> list[tuple[int, int]]:
        """A node's room once it is in a pool with ``borrower`` (it is in ``lender``'s now, or was
        when ``loan`` recorded its size): per GPU, (amount, compute %), in the borrower's units; one
        entry of slots for a backend that counts slots; empty: unknown. ``gpus``: its physical
        GPUs (0: unknown)."""
        ...

    def fit_problem(
        self, pool: str, spec: GPUSharePoolSpec, requests: Mapping[str, int], gpus: int
    ) -> str | None:
        """Why a pod with these requests (spread over ``gpus``) can never run on the nodes of pool
        ``pool`` (None: it can, room permitting)."""
        ...

    def take(
        self, spec: GPUSharePoolSpec, requests: Mapping[str, int], gpus: int
    ) -> tuple[int, tuple[int, int]]:
        """What such a pod takes on a node of the pool: on how many of ``room``'s entries, and
        (amount, compute %) on each."""
        ...

    def entry_resources(self, spec: GPUSharePoolSpec) -> tuple[str, ...]:
        """The resource each of ``room``'s entries counts, in order, where the entries are counts of
        resources (NVIDIA's slots; a MIG pool's devices per profile); empty: they are GPUs."""
        ...

    def take_on(
        self, spec: GPUSharePoolSpec, requests: Mapping[str, int]
    ) -> Mapping[int, tuple[int, int]] | None:
        """Which of ``room``'s entries such a pod takes, and (amount, compute %) on each, where the
        backend names them (a MIG pod: the entries of the profiles it asks for); None: any entries
        that fit, as many as :meth:`take` says, as the pool's placement picks them."""
        ...

    # --- what ``gpushare inspect`` and ``gpushare advise`` print ------------------------------

    #: Its modes, in words (``gpushare inspect``'s pool line).
    mode_words: Mapping[str, str]

    def usage(self, allocatable: Mapping[str, str], labels: Mapping[str, str]) -> tuple[int, int, int]:
        """A node's GPUs, and the amount and compute share it advertises in all (0: none)."""
        ...

    def pod_usage(self, requests: Mapping[str, int]) -> tuple[int, int] | None:
        """The amount and compute share a pod with these requests holds (None: none of them)."""
        ...

    def devices(self, allocatable: Mapping[str, str]) -> dict[str, int]:
        """The devices a node advertises that pods take whole, counted per resource (a MIG node:
        each profile's slices), positive counts only; empty: the backend counts an amount
        (:meth:`usage`) or slots of one resource."""
        ...

    def pod_devices(self, requests: Mapping[str, int]) -> dict[str, int]:
        """What a pod with these requests holds of :meth:`devices`' resources (empty: none)."""
        ...

    def pod_gpus(self, annotations: Mapping[str, str]) -> str:
        """The GPU index(es) the plugin gave a pod, from its annotations ("" unknown)."""
        ...

    def advertised(self, allocatable: Mapping[str, str]) -> str:
        """What the node's plugin advertises, in a few words (the node's effective mode)."""
        ...

    def describe_requests(self, spec: GPUSharePoolSpec, requests: Mapping[str, int]) -> str:
        """A pool's waiting requests (``demand_resources`` → sum), in a few words."""
        ...

    def describe_take(self, spec: GPUSharePoolSpec, entries: Mapping[int, tuple[int, int]]) -> str:
        """What one pod takes on a node's room (:meth:`take`, placed), in a few words."""

    # --- admission ---------------------------------------------------------------------------

    #: Prefixes of the resources that only pods using this backend's GPU sharing request (the
    #: webhook is always sent a pod asking for one); empty when its resources also mean whole GPUs.
    sharing_prefixes: tuple[str, ...]
    #: Pod labels that ask for this backend's GPU sharing without any resource.
    pod_labels: tuple[str, ...]

    def advertised_gpus(self, allocatable: Mapping[str, str]) -> tuple[int | None, int | None]:
        """What a node's device plugin advertises of its GPUs, read from its allocatable: how many
        physical GPUs, and their memory together in the plugin's unit (None: not advertised)."""
        ...


class FollowsNoSwitch:
    """The default of a backend whose switches the device plugin's evidence alone confirms: no
    record of its own (``SharingBackend.switch_*``)."""

    switch_reasons: tuple[str, ...] = ()
    timed_labels: tuple[str, ...] = ()

    def switch_annotations(
        self,
        labels: Mapping[str, str],
        annotations: Mapping[str, str],
        label_patch: Mapping[str, str | None],
        now: str,
        *,
        staying: bool,
    ) -> dict[str, str | None]:
        return {}

    def switch_seen(
        self,
        labels: Mapping[str, str],
        annotations: Mapping[str, str],
        label_times: Mapping[str, datetime] | None = None,
    ) -> dict[str, str] | None:
        return None

    def switch_state(
        self,
        mode: str,
        allocatable: Mapping[str, str],
        labels: Mapping[str, str],
        annotations: Mapping[str, str],
        *,
        now: datetime,
        timeout_s: int,
        label_times: Mapping[str, datetime] | None = None,
    ) -> tuple[NodePhaseName, str, str] | None:
        return None


def _nothing(obj: Mapping[str, Any], table: KindTable) -> list[Finding]:
    return []


@dataclass(frozen=True)
class PodRules:
    """A backend's admission rules for pods, as ``gpushare.admission.rules`` drives them: for each
    pod of a workload, the first backend whose ``judges`` claims it judges it (``evaluate``), adding
    its findings to the pod's :class:`~gpushare.rulekit.emit.Emitter`; an object of a kind whose pod
    templates are unknown goes to every backend's ``unknown_kind``."""

    #: The backend's name (``SharingBackend.name``).
    name: str
    #: Whether its rules judge this pod (a container asks for one of its resources).
    judges: Callable[[PodLike], bool]
    #: The judging: the pod, its node constraints, the live context (pools, nodes).
    evaluate: Callable[[Emitter, PodLike, Constraints, Context], None]
    #: Findings for an object whose kind gpushare cannot read pod templates from.
    unknown_kind: Callable[[Mapping[str, Any], KindTable], list[Finding]] = _nothing
    #: Kubernetes' own rules for the backend's resources, which hold for every pod whichever
    #: backend judges it (the apiserver refuses such a Pod before any admission): run first.
    kubernetes: Callable[[Emitter, PodLike], None] | None = None
